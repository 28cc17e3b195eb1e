"""The Hermes plugin when the service gives no summary, and prepares as the history grows (outside Hermes).

``compression.abort_on_summary_failure`` (False by default) decides what the
agent continues with: the pruned list with the middle replaced by a local
hand-off, or (True) the messages unchanged.  The cooldown holds back
requests to the service, never a call over the window.  Pruning keeps a
prepared prefix byte-identical as the history grows; prepares roll forward.
The same failures inside the real Hermes: test_hermes_failures.py.
"""

import copy
import json
import time

import pytest


from speccompact_hermes import client, engine as eng, fallback, messages as msgs, policy

from tests.support.hermes_fakes import ServiceProxy
from tests.support.procs import READY_S
from tests.support.hermes import closed_port_url, make_engine, reads, tool_pairs

WINDOW = 200_000  # make_engine's window (tokens); its trigger is 150,000


def session(n=12, size=4000):
    """A request, a read loop, a closing question: what a long Hermes tool loop looks like."""
    return [{"role": "user", "content": "Read the modules and fix the parser"}] + reads(n, size) + [
        {"role": "assistant", "content": "Read them all."}, {"role": "user", "content": "Now fix the tokenizer"}]


def rough(ms):
    return sum(msgs.rough_tokens(m) for m in ms)


def handed_off(out, ms):
    """The checks every hand-off passes: shorter, one summary framed as Hermes's, pairs whole, latest ask kept."""
    summaries = [m for m in out if m.get(msgs.SUMMARY_KEY)]
    assert len(summaries) == 1 and msgs.is_summary(summaries[0], eng.hermes_markers())  # framed (or merged) as Hermes's
    assert "deterministic fallback" in summaries[0]["content"]
    assert rough(out) < 0.8 * rough(ms) and tool_pairs(out) and out[-1] == ms[-1]
    return summaries[0]["content"]


@pytest.mark.parametrize("mode", ["down", "kill", "slow", "auth401", "error500"])
def test_by_default_a_failure_drops_the_middle_for_a_local_hand_off(mode):
    with ServiceProxy("http://127.0.0.1:9", slow_s=2.0) as proxy:
        proxy.mode = mode
        # only the slow proxy (it answers after 2 s) is meant to time out; the others answer at once,
        # however loaded the machine
        e = make_engine(closed_port_url() if mode == "down" else proxy.url, timeout_s=0.5 if mode == "slow" else 60)
        ms = session()
        before = copy.deepcopy(ms)
        out = e.compress(ms, current_tokens=160_000)
        assert ms == before  # the caller's list is never changed
        text = handed_off(out, ms)
        assert e._last_summary_fallback_used and e._last_compression_made_progress and not e._last_compress_aborted
        assert e.compression_count == 1 and e.last["fallback"] and e.last["cooldown_s"] > 0
        kind = {"down": "unreachable", "kill": "unreachable", "slow": "timeout", "auth401": "auth"}.get(mode, "http")
        assert kind in e._last_summary_error and kind in text  # the reason reaches the model and the logs
        deadline = time.monotonic() + READY_S  # a hang guard: a slow proxy logs its body late
        while mode != "down" and not proxy.bodies and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(proxy.bodies) == (0 if mode == "down" else 1)


def test_in_the_cooldown_automatic_calls_hand_off_without_asking_the_service():
    with ServiceProxy("http://127.0.0.1:9") as proxy:
        proxy.mode = "auth401"
        e = make_engine(proxy.url)
        e.compress(session(), current_tokens=160_000)
        assert e.last["cooldown_s"] == client.AUTH_COOLDOWN and e.should_compress(160_000)  # compaction goes on
        grown = session(16)
        handed_off(e.compress(grown, current_tokens=160_000), grown)
        assert len(proxy.bodies) == 1  # the pause held the request back, not the compaction


@pytest.mark.parametrize("abort", [True, False])
def test_hermes_recovery_from_a_refused_prompt_is_never_held_back_by_the_cooldown(abort):
    """Hermes asks ``_automatic_compression_blocked`` before its recovery call: it must say no."""
    with ServiceProxy("http://127.0.0.1:9") as proxy:
        proxy.mode = "error500"
        e = make_engine(proxy.url, abort_on_summary_failure=abort)
        ms = session()
        out = e.compress(ms, current_tokens=160_000)
        assert (out is ms) == abort == e._last_compress_aborted  # the user's choice
        assert e.should_compress(160_000) != abort and not e._automatic_compression_blocked()
        proxy.mode, proxy.canned = "canned", {"summary": "## Goal\n- fix the parser", "method": "speccompact"}
        out = e.compress(ms, current_tokens=WINDOW + 4_000)  # Hermes's recovery after a refused prompt
        assert len(proxy.bodies) == 2 and out != ms and not e._last_summary_fallback_used
        assert "fix the parser" in json.dumps(out)


def test_with_abort_true_a_failure_keeps_the_messages():
    e = make_engine(closed_port_url(), abort_on_summary_failure=True)
    ms = session()
    assert e.compress(ms, current_tokens=160_000) is ms and e._last_compress_aborted
    assert not e._last_summary_fallback_used and e.compression_count == 0


def test_the_hand_off_carries_the_previous_summary_into_the_next_compaction():
    with ServiceProxy("http://127.0.0.1:9") as proxy:
        proxy.mode, proxy.canned = "canned", {"summary": "## Goal\n- parse tabs", "method": "speccompact"}
        e = make_engine(proxy.url)
        first = e.compress(session(), current_tokens=160_000)
        proxy.mode = "kill"
        grown = first + reads(10, start=50) + [{"role": "user", "content": "and the lexer"}]
        text = handed_off(e.compress(grown, force=True), grown)
        assert fallback.PREVIOUS_HEADING in text and "- parse tabs" in text


def test_settings_read_hermes_abort_key():
    from speccompact_hermes.settings import from_sources

    assert from_sources({}, {}, {"abort_on_summary_failure": True}).abort_on_summary_failure is True
    assert from_sources({}, {}, {}).abort_on_summary_failure is False


# ---------------------------------------------------------------- a prepared prefix stays the same as the history grows


def duplicate_of(first_read: list[dict], cid: str) -> list[dict]:
    call = copy.deepcopy(first_read[0])
    call["tool_calls"][0]["id"] = cid
    return [call, {**first_read[1], "tool_call_id": cid}]


def prepared_wire(e, history):
    p = e._plan(history)
    split = policy.prepared_split(p)
    return client.wire_messages(msgs.middle(p.pruned, split), eng.redact)


def test_a_later_duplicate_output_does_not_rewrite_a_prepared_prefix():
    """Fails when pruning back-references older copies outside the protected tail (as Hermes does)."""
    e = make_engine(closed_port_url())
    e.update_model("m", 100_000)  # trigger 75,000, tail 15,000
    early = session(14, size=16_000)
    wire = prepared_wire(e, early)
    assert len(wire) > 4 and wire[5]["tool_call_id"] == "r3"  # the re-read output is in the prepared prefix
    grown = early + duplicate_of(early[7:9], "again") + reads(6, 16_000, start=40)  # re-reads m3.py
    p = e._plan(grown)
    later = client.wire_messages(msgs.middle(p.pruned, p.cut), eng.redact)
    assert later[:len(wire)] == wire


def test_prepares_roll_forward_as_the_history_grows():
    with ServiceProxy("http://127.0.0.1:9") as proxy:
        proxy.mode, proxy.canned = "canned", {"session": "s1", "status": "preparing"}
        e = make_engine(proxy.url)
        e.update_model("m", 100_000)  # trigger 75,000
        history = session(4, size=16_000)[:-2]  # one request, then a read loop
        for step in range(30):
            history = history + reads(1, 4_000, start=100 + step)
            eng.remember_tools(session_id="s1", request={"body": {}}, conversation_history=history)
            e.update_from_response({"prompt_tokens": 38_000 + 1_200 * step})  # from half the trigger to near it
            if (t := eng.PREPARES.get("s1")) is not None:
                t.join(5)
        sent = [b["messages"] for b in proxy.bodies if b.get("mode") == "prepare"]
        assert len(sent) >= 3 and e.prepares_sent == len(sent)
        for a, b in zip(sent, sent[1:]):
            assert b[:len(a)] == a and len(b) > len(a)  # rolling: each prepare extends the last one
        # 30 reads of about 1,000 tokens: at most one prepare per 7,500 tokens (prepare_step 0.1 of the trigger),
        # not one per turn, each of which would cancel the one the service is running
        assert len(sent) <= 5
