"""The Hermes Agent plugin's logic, outside Hermes (its end-to-end test with Hermes: test_hermes_e2e.py).

Message selection and assembly are checked on hand-made lists; the engine
talks to ``launch --emulate`` through a recording proxy, and to a closed
port, a slow proxy and a failing one for the failure modes.
"""

import copy
import json
from dataclasses import replace
import re
import time
import urllib.request

import pytest


from speccompact_hermes import client, engine as eng, hermes_body, messages as msgs, prune
from speccompact_hermes.settings import Settings, from_sources

from tests.support.hermes_fakes import ServiceProxy
from tests.support.procs import READY_S
from tests.support.summary_checks import assert_summary_clean
from tests.support.hermes import closed_port_url, make_engine, reads, tool_pairs
from tests.support.hermes import call

M = msgs.Markers("[SUMMARY PREFIX]", "[END]", "[PRIOR]", "[DELIM]")


def history(n_rounds=6, big=400):
    """user, then rounds of assistant tool call + tool result + assistant text, then a last user request."""
    out = [{"role": "user", "content": "Fix the failing test in tests/test_io.py"}]
    for i in range(n_rounds):
        out += [{"role": "assistant", "content": "", "tool_calls": [call(f"c{i}")]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": f"output {i} " + "x" * big},
                {"role": "assistant", "content": f"step {i} done"}]
    out.append({"role": "user", "content": "Now also update the README"})
    return out


# ---------------------------------------------------------------- selection and assembly


def test_split_keeps_head_tail_latest_user_and_tool_groups():
    ms = history()
    cut = msgs.split(ms, protect_first_n=3, protect_last_n=20, tail_budget_tokens=300, markers=M)
    assert cut.start == 3 and ms[cut.start]["role"] != "tool"
    assert cut.end < len(ms) and ms[cut.end]["role"] != "tool"  # never starts the tail inside a group
    assert ms[-1] in ms[cut.end:]  # the latest user request is kept verbatim
    assert any(m["role"] == "assistant" and m["content"] for m in ms[cut.end:])  # and the latest reply
    assert cut.previous_summary is None and cut.summarize_from == cut.start


def test_split_with_a_system_prompt_and_a_huge_tool_result_keeps_the_pair_together():
    ms = [{"role": "system", "content": "sys"}] + history(n_rounds=4, big=200)
    ms[-3]["content"] = "y" * 50_000  # the last tool result alone is far over the budget
    cut = msgs.split(ms, protect_first_n=3, protect_last_n=20, tail_budget_tokens=200, markers=M)
    tail = ms[cut.end:]
    ids = {tc["id"] for m in tail for tc in m.get("tool_calls") or []}
    assert all(m["tool_call_id"] in ids for m in tail if m["role"] == "tool")
    assert cut.start == 4 and ms[-1] in tail


def test_assemble_frames_the_summary_and_alternates_roles():
    ms = history()
    cut = msgs.split(ms, protect_first_n=3, protect_last_n=20, tail_budget_tokens=300, markers=M)
    out = msgs.assemble(ms, cut, "## Goal\nfix it", M)
    summary = out[cut.start]
    assert summary["content"].startswith("[SUMMARY PREFIX]\n## Goal\nfix it") and summary["content"].endswith("[END]")
    assert summary[msgs.SUMMARY_KEY] is True
    assert out[:cut.start] == ms[:cut.start] and out[cut.start + 1:] == ms[cut.end:]
    assert out[cut.start - 1]["role"] != summary["role"] != out[cut.start + 1]["role"]  # roles alternate around it
    assert ms == history()  # the input is never changed


def test_summary_merges_into_the_tail_when_no_role_alternates():
    ms = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
          {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}, {"role": "user", "content": "e"}]
    assert msgs.summary_role(ms, 2, 4) is None  # the head ends with assistant, the tail starts with user
    out = msgs.assemble(ms, msgs.Split(2, 4, None, 2), "S", M)
    assert len(out) == 3 and out[2]["content"].startswith("[PRIOR]\ne\n\n[DELIM]\n\n[SUMMARY PREFIX]\nS")
    assert out[2][msgs.SUMMARY_KEY]


def test_a_previous_summary_in_the_list_is_found_and_not_resent():
    ms = history()
    ms.insert(1, {"role": "assistant", "content": "[SUMMARY PREFIX]\n## Goal\nold goal\n\n[END]",
                  msgs.SUMMARY_KEY: True})
    cut = msgs.split(ms, protect_first_n=0, protect_last_n=20, tail_budget_tokens=300, markers=M)
    assert cut.previous_summary == "## Goal\nold goal" and cut.summarize_from == 2


def test_pair_tools_drops_orphans():
    ms = [{"role": "assistant", "content": "", "tool_calls": [call("a"), call("b")]},
          {"role": "tool", "tool_call_id": "a", "content": "ok"}, {"role": "tool", "tool_call_id": "z", "content": "?"}]
    out = msgs.pair_tools(copy.deepcopy(ms))
    assert [tc["id"] for tc in out[0]["tool_calls"]] == ["a"] and len(out) == 2


def test_wire_messages_keep_known_fields_and_redact():
    ms = [{"role": "user", "content": "key sk-abcdefghijklmnopqrstuvwx", "_compressed_summary": True, "reasoning": "r"},
          {"role": "assistant", "content": None, "tool_calls": [call("c1", args='{"token": "ghp_' + "a" * 30 + '"}')]},
          {"role": "tool", "tool_call_id": "c1", "content": "ok"}, {"role": "tool", "tool_call_id": "gone", "content": "x"}]
    out = client.wire_messages(ms, eng.redact)
    assert out[0] == {"role": "user", "content": "key [REDACTED]"}
    assert "ghp_" not in out[1]["tool_calls"][0]["function"]["arguments"] and len(out) == 3


def test_settings_from_file_then_environment():
    s = from_sources({"method": "hermes", "source_judge": "true", "url": "http://file:1", "bogus": 1},
                     {"SPECCOMPACT_URL": "http://env:2", "SGL_SPECCOMPACT_API_KEY": "k"})
    assert (s.url, s.method, s.source_judge, s.api_key) == ("http://env:2", "hermes", True, "k")
    assert from_sources({"timeout_s": "not a number"}, {}).timeout_s == Settings().timeout_s


# ---------------------------------------------------------------- the engine against the service


@pytest.mark.slow
def test_engine_compacts_on_the_emulated_service_incrementally(emulated_service):
    tools = [{"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}}]
    eng.remember_tools(session_id="s1", request={"body": {"tools": tools, "messages": []}})
    with ServiceProxy(emulated_service) as proxy:
        # the timeout is a hang guard here: the first compaction of a fresh service on a loaded machine is slow
        e = copy.deepcopy(make_engine(proxy.url, method="speccompact", timeout_s=READY_S))  # Hermes copies it
        ms = history()
        out = e.compress(ms, focus_topic="the README")
        assert out != ms and e.compression_count == 1 and e._last_compression_made_progress
        sent = proxy.bodies[0]
        assert sent["method"] == "speccompact" and sent["focus"] == "the README" and sent["tools"] == tools
        assert "previous_summary" not in sent and sent["config"] == {"agent_context_tokens": 200_000}
        assert sent["messages"][0]["role"] != "tool" and all("_compressed_summary" not in m for m in sent["messages"])
        summary = next(m for m in out if m.get(msgs.SUMMARY_KEY))
        assert summary["content"].startswith(eng.hermes_markers().prefix) and "## Goal" in summary["content"]
        assert_summary_clean(summary["content"])  # the summary message Hermes continues with
        assert_summary_clean(json.loads(proxy.replies[0][1]))  # and the service's answer, slot by slot
        assert out[-1] == ms[-1]
        status = e.get_status()["speccompact"]["last_compaction"]
        assert status["method"] == "speccompact" and 0 <= status["acceptance_rate"] <= 1
        assert status["target_cached_ratio"] > 0 and status["latency_s"] > 0

        longer = out + history(n_rounds=4)[1:]
        again = e.compress(longer)
        assert again != longer and proxy.bodies[1]["previous_summary"].startswith("## Goal")
        assert_summary_clean(proxy.bodies[1]["previous_summary"])  # what flows into the next compaction
        assert_summary_clean(next(m for m in again if m.get(msgs.SUMMARY_KEY))["content"])
        assert e.get_status()["speccompact"]["last_compaction"]["incremental"] is True


LEDGER_BODY = ("## Goal\n- g\n\n## Next Steps\n1. n\n\n## Exact Ledger\n"
               "Copied verbatim from the history, no model: mN = message N; done = already carried out, do not repeat.\n"
               "- m4 x2 ran `pytest -x` exit `1`\n- m5 hash `9fceb02`\n- +3 more paths under `src`")


def test_the_exact_ledger_keeps_its_heading_and_lines_both_ways():
    from sgl_speccompact.core.ledger import TITLE

    assert hermes_body.LEDGER == TITLE  # the plugin imports nothing of the package: the two must agree
    shown = hermes_body.to_hermes(LEDGER_BODY, None, None, [])
    heads = re.findall(r"^## (.+)$", shown, re.M)
    assert heads == [*hermes_body.HEADINGS, TITLE]  # after Hermes's sections, never inside Critical Context
    ledger = LEDGER_BODY[LEDGER_BODY.index("## Exact Ledger"):]
    assert shown.endswith(ledger)  # byte for byte
    back = hermes_body.to_slots(shown)  # a Hermes-shaped summary read back for the service
    assert back.endswith(ledger) and "## Goal\n- g" in back


READ_SET = [{"path": "src/io.py", "last_read": 5, "changed_after": False, "changed_at": None},
            {"path": "README.md", "last_read": 2, "changed_after": True, "changed_at": 7},
            {"path": "notes.md", "last_read": None, "changed_after": True, "changed_at": 3}]


def test_the_read_set_ends_relevant_files_and_never_goes_back_to_the_service():
    shown = hermes_body.to_hermes(LEDGER_BODY, None, None, ["src/io.py"], READ_SET)
    files = hermes_body.parse(shown)["Relevant Files"]
    assert files == ["- src/io.py", "Already read, unchanged since: `src/io.py` (m5)",
                     "Read, then changed (read again before relying on it): `README.md` (read m2, changed m7)"]
    back = hermes_body.to_slots(shown)
    assert "Already read" not in back and "Read, then changed" not in back and "- src/io.py" in back
    assert hermes_body.to_hermes(LEDGER_BODY, None, None, []) == hermes_body.to_hermes(LEDGER_BODY, None, None, [], [])


@pytest.mark.slow
def test_the_read_set_reaches_the_agent_after_a_compaction(emulated_service):
    """A file read, edited and read again, another read then changed by a command: after a compaction on
    the service, the messages Hermes continues with say which need no second read."""
    def step(cid, name, args, result):
        return [{"role": "assistant", "content": "", "tool_calls": [call(cid, name, json.dumps(args))]},
                {"role": "tool", "tool_call_id": cid, "content": result + " " + "x" * 400}]

    ms = [{"role": "user", "content": "Fix the failing test in tests/test_io.py"},
          *step("a", "read_file", {"path": "src/io.py"}, "def read(): ..."),
          *step("b", "edit_file", {"path": "src/io.py", "old": "a", "new": "b"}, "edited"),
          *step("c", "read_file", {"path": "src/io.py"}, "def read(): return 1"),
          *step("d", "read_file", {"path": "setup.cfg"}, "[metadata]"),
          *step("e", "terminal", {"command": "sed -i 's/a/b/' setup.cfg"}, "exit code 0"),
          *[m for i in range(6) for m in step(f"t{i}", "terminal", {"command": f"echo {i}"}, f"{i}")],
          {"role": "user", "content": "go on"}]
    with ServiceProxy(emulated_service) as proxy:
        e = make_engine(proxy.url, method="target_self", timeout_s=READY_S)
        out = e.compress(ms)
        assert e.compression_count == 1, e.last
        sent = proxy.bodies[0]["messages"]
        read_at = max(i for i, m in enumerate(sent) for tc in m.get("tool_calls") or []
                      if tc["function"]["name"] == "read_file" and "src/io.py" in tc["function"]["arguments"])
    summary = next(m for m in out if m.get(msgs.SUMMARY_KEY))["content"]
    assert f"Already read, unchanged since: `src/io.py` (m{read_at})" in summary
    assert re.search(r"Read, then changed \(read again before relying on it\): `setup.cfg` \(read m\d+, changed m\d+\)",
                     summary)
    assert "- `src/io.py` read m" in summary[summary.index("## Exact Ledger"):]  # and the ledger's own lines


@pytest.mark.slow
def test_an_identifier_of_the_first_compaction_is_in_the_context_after_the_fourth(emulated_service):
    """Four compactions of one session on the service: a commit hash and a build id of the first
    compaction's middle are still in the context Hermes continues with, in the exact ledger."""
    first = {"commit": "7c2d9e41ab3", "build": "BLD2024X17"}

    def rounds(start: int, n: int) -> list[dict]:
        out = []
        for i in range(start, start + n):
            text = (f"deployed build {first['build']} at commit {first['commit']}" if i == 1
                    else f"output {i}") + " " + "x" * 400
            out += [{"role": "assistant", "content": "", "tool_calls": [call(f"c{i}")]},
                    {"role": "tool", "tool_call_id": f"c{i}", "content": text},
                    {"role": "assistant", "content": f"step {i} done"}]
        return out

    with ServiceProxy(emulated_service) as proxy:
        e = make_engine(proxy.url, method="speccompact", timeout_s=READY_S)
        ms = [{"role": "user", "content": "Fix the failing test in tests/test_io.py"}] + rounds(0, 6) + \
            [{"role": "user", "content": "go on"}]
        assert first["commit"] in json.dumps(proxy_middle(e, ms))  # the first compaction summarizes it
        out = e.compress(ms)
        for k in range(1, 4):
            assert e.compression_count == k
            out = e.compress(out + rounds(10 * k, 6)[0:] + [{"role": "user", "content": f"round {k}"}])
        assert e.compression_count == 4 and len(proxy.bodies) == 4
        summary = next(m for m in out if m.get(msgs.SUMMARY_KEY))["content"]
        ledger = summary[summary.index("## Exact Ledger"):]
        assert first["commit"] in ledger and first["build"] in ledger
        assert sum(first["commit"] in json.dumps(m) for m in out) == 1  # only the summary holds it now
        assert all("## Exact Ledger" in b["previous_summary"] for b in proxy.bodies[1:])  # carried each time


def proxy_middle(e, ms) -> list[dict]:
    """The messages the engine's next compaction of ``ms`` would send."""
    p = e._plan(ms)
    return msgs.middle(p.pruned, p.cut)


def test_service_down_with_abort_keeps_messages_and_cools_down():
    e = make_engine(closed_port_url(), abort_on_summary_failure=True)
    ms = history()
    assert e.compress(ms) is ms and e._last_compress_aborted
    assert "unreachable" in e._last_summary_error and e.last["cooldown_s"] == 60
    assert not e.should_compress(190_000)  # in cooldown no automatic compaction comes
    assert not e._automatic_compression_blocked()  # but Hermes's recovery from a refused prompt gets through
    assert e.compress(ms) is ms and e._last_compress_aborted and e._failures_in_a_row == 2


def test_500_and_timeouts_follow_hermes_cooldowns():
    with ServiceProxy("http://127.0.0.1:9", slow_s=3.0) as proxy:
        e = make_engine(proxy.url, timeout_s=60, abort_on_summary_failure=True)  # the 500 comes at once
        proxy.mode = "error500"
        ms = history()
        assert e.compress(ms) is ms and e.last["cooldown_s"] == 60 and "HTTP 500" in e._last_summary_error
        proxy.mode = "slow"
        e.settings = replace(e.settings, timeout_s=0.5)  # the slow proxy answers after 3 s: always too late
        ladder = []
        for _ in range(4):
            assert e.compress(ms, force=True) is ms  # /compress bypasses the cooldown
            ladder.append(e.last["cooldown_s"])
        assert ladder == [60, 300, 900, 900]
        assert e.get_status()["speccompact"]["failures_in_a_row"] == 5


def test_a_cut_off_or_empty_summary_is_a_failure_never_a_summary():
    with ServiceProxy("http://127.0.0.1:9") as proxy:
        e = make_engine(proxy.url, abort_on_summary_failure=True)
        proxy.mode = "canned"
        ms = history()
        for canned, error in (({"summary": "## Goal\n- half", "truncated": True}, "truncated"),
                              ({"summary": "  "}, "bad_response"), ({"result": 1}, "bad_response")):
            proxy.canned = canned
            assert e.compress(ms, force=True) is ms and e._last_compress_aborted
            assert error in e._last_summary_error and e.compression_count == 0
        proxy.canned = {"summary": "## Goal\n- whole", "method": "hermes", "stats": {}}
        assert e.compress(ms, force=True) != ms and e.compression_count == 1


def test_automatic_compaction_stops_after_two_ineffective_ones():
    e = make_engine(closed_port_url())
    assert e.should_compress(160_000)  # threshold 150,000 (75% of 200,000)
    for _ in range(2):
        e.record_completed_compaction()
        e.update_from_response({"prompt_tokens": 170_000, "completion_tokens": 5})
    assert not e.should_compress(170_000) and not e._automatic_compression_blocked()  # recovery still passes
    e.update_from_response({"prompt_tokens": 90_000})  # the prompt fits again: the guard resets
    assert e.should_compress(160_000)


def test_short_history_is_a_no_op_counted_as_ineffective():
    e = make_engine(closed_port_url())
    ms = history(n_rounds=1)[:4]
    assert e.compress(ms) is ms and e._ineffective_compression_count == 1 and not e._last_compress_aborted
    assert not e.has_content_to_compress(ms)
    assert e.get_status()["speccompact"]["cooldown_remaining_s"] == 0


# ---------------------------------------------------------------- a long session: pruning, empty middles, shape


def test_trigger_and_tail_follow_hermes_settings():
    for window, trigger in ((64_000, 54_400), (80_000, 64_000), (1_000_000, 500_000)):
        e = eng.SpecCompactEngine(Settings())
        e.update_model("m", window)
        assert e.threshold_tokens == trigger
    e = eng.SpecCompactEngine(from_sources({}, {}, {"threshold": 0.9, "target_ratio": 0.3, "protect_last_n": 6}))
    e.update_model("m", 100_000)
    assert (e.threshold_tokens, e.tail_token_budget, e.protect_last_n) == (90_000, 27_000, 6)


def test_pruning_stubs_old_outputs_in_head_and_tail_and_keeps_pairs():
    ms = [{"role": "user", "content": "read all"}] + reads(12)
    out, n = prune.prune(ms, tail_tokens=1500, tail_count=4)
    assert out[2]["content"].startswith("[read_file] read m0.py") and n == 10  # the head's output too
    assert out[-1]["content"] == ms[-1]["content"]  # the newest outputs stay whole
    assert [m.get("tool_call_id") for m in out] == [m.get("tool_call_id") for m in ms]  # pairs untouched
    assert ms[2]["content"].startswith("0:")  # the input is never changed


def test_a_tool_loop_after_the_request_is_pruned_before_the_cut():
    """Fails without pruning: every output after the latest user request stays whole."""
    e = make_engine(closed_port_url())
    e.update_model("m", 100_000)  # trigger 75,000, tail 15,000
    ms = [{"role": "user", "content": "read all modules"}] + reads(30, size=16_000)
    p = e._plan(ms)
    kept_tokens = sum(prune.budget_tokens(m) for m in p.pruned)
    assert p.n_pruned >= 20 and kept_tokens < 75_000 < sum(prune.budget_tokens(m) for m in ms)


def test_an_empty_middle_is_a_silent_local_no_op():
    """Only the previous summary precedes the latest request: no request, no abort, no cooldown."""
    with ServiceProxy("http://127.0.0.1:9") as proxy:
        e = make_engine(proxy.url)
        e.compression_count = 1
        marker = eng.hermes_markers()
        summary = {"role": "assistant", "content": f"{marker.prefix}\n## Goal\n- g\n\n{marker.end}",
                   msgs.SUMMARY_KEY: True}
        ms = [summary, {"role": "user", "content": "go on"}] + reads(3, size=100)
        assert e.compress(ms) is ms and not e._last_compress_aborted and proxy.bodies == []
        assert e.last["messages_summarized"] == 0 and not e._automatic_compression_blocked()


def test_results_of_a_call_merged_into_the_summary_travel_with_the_call():
    """The 422 of the long session: the middle was one tool result whose call sits in the merged summary."""
    with ServiceProxy("http://127.0.0.1:9") as proxy:
        proxy.mode, proxy.canned = "canned", {"summary": "## Goal\n- g", "method": "speccompact", "stats": {}}
        e = make_engine(proxy.url)
        e.compression_count = 1
        marker = eng.hermes_markers()
        merged = {"role": "assistant", "content": f"{marker.merged_header}\n\n{marker.merged_delimiter}\n\n"
                  f"{marker.prefix}\n## Goal\n- g\n\n{marker.end}", msgs.SUMMARY_KEY: True,
                  "tool_calls": [call("r0", "read_file", '{"path": "m0.py"}')]}
        ms = [merged, {"role": "tool", "tool_call_id": "r0", "content": "z" * 50},
              {"role": "user", "content": "go on"}] + reads(3, size=100, start=1)
        out = e.compress(ms)
        assert out is not ms and not e._last_compress_aborted
        assert [m["role"] for m in proxy.bodies[0]["messages"]] == ["assistant", "tool"]  # the call travels along
        assert tool_pairs(out)


def test_summary_body_under_hermes_headings_and_markers_stripped():
    with ServiceProxy("http://127.0.0.1:9") as proxy:
        proxy.mode = "canned"
        proxy.canned = {"summary": "## Goal\n- read\n\n## Progress\n### Done\n- [x] read m0\n\n## Next Steps\n1. more",
                        "method": "speccompact", "stats": {}}
        e = make_engine(proxy.url)
        ms = [{"role": "user", "content": "start"}] + reads(2, size=300, start=20) + \
            [{"role": "user", "content": "Read the modules, please"}] + reads(6, size=300) + \
            [{"role": "user", "content": "now the tests"}] + reads(3, size=300, start=6)
        out = e.compress(ms)
        summary = next(m for m in out if m.get(msgs.SUMMARY_KEY))["content"]
        assert re.findall(r"^## (.+)$", summary, re.M) == list(hermes_body.HEADINGS)
        assert "'Read the modules, please'" in summary and "- [x] read m0" in summary and "1. more" in summary
        assert all("_db_persisted" not in m for m in out)
        assert proxy.bodies[0]["focus"] == "Recent user focus:\n- start\n- Read the modules, please\n- now the tests"


def test_prepare_refused_is_silent_and_accepted_names_the_session():
    ms = [{"role": "user", "content": "read"}] + reads(40, size=8000)
    for refuse, supported in ((True, False), (False, True)):
        with ServiceProxy("http://127.0.0.1:9") as proxy:
            proxy.mode, proxy.canned = "canned", {"summary": "## Goal\n- g", "method": "speccompact", "stats": {}}
            proxy.refuse_session = refuse
            e = make_engine(proxy.url, prepare_ratio=0.8)  # the soft threshold: 0.8 x 75,000 = 60,000
            e.update_model("m", 100_000)
            eng.AGENT_HISTORY["s1"] = ms
            e.update_from_response({"prompt_tokens": 50_000})  # under the soft threshold: nothing
            assert proxy.bodies == []
            e.update_from_response({"prompt_tokens": 65_000})  # 0.8 x 75,000 = 60,000 reached
            prepare = eng.PREPARES["s1"]
            prepare.join(READY_S)  # a hang guard: the prepare's answer must be in before the next step
            assert not prepare.is_alive()
            e.update_from_response({"prompt_tokens": 66_000})  # the same prefix: not sent again
            assert [b.get("mode") for b in proxy.bodies] == ["prepare"] and proxy.bodies[0]["session"] == "s1"
            assert e._prepare_supported is supported and proxy.bodies[0]["messages"]
            e.compress(ms)
            assert ("session" in proxy.bodies[-1]) is supported and "mode" not in proxy.bodies[-1]
            assert not e._last_compress_aborted and e.compression_count == 1
            # accepted: the prepared messages alone bring the prompt under 60,000, so the compaction asks for
            # exactly them (the service's stored summary) and keeps the later turns verbatim
            assert e.last["prepared_prefix_alone"] is supported
            assert (proxy.bodies[-1]["messages"] == proxy.bodies[0]["messages"]) is supported


def metric_value(url: str, name: str) -> float:
    """Counter ``name`` on the service's ``/metrics`` (0 before it is first counted)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    values = [float(v) for v in re.findall(rf"^{name} (\S+)$", text, re.M)]
    return values[0] if values else 0.0


def wait_for_metric(url: str, name: str, at_least: float) -> None:
    """Poll the service's ``/metrics`` until counter ``name`` reaches ``at_least``."""
    deadline = time.monotonic() + READY_S
    while metric_value(url, name) < at_least:
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} did not reach {at_least} within {READY_S} s")
        time.sleep(0.2)


def _compact_as(url: str, body: dict, api_key: str | None, session: str | None) -> dict:
    """The service's answer to ``body`` sent again under another key or session (``session`` None: dropped)."""
    body = {k: v for k, v in body.items() if k != "session"}
    if session is not None:
        body["session"] = session
    return client.compact(url, body, api_key=api_key, timeout_s=READY_S).result


@pytest.mark.slow
def test_prepare_on_the_emulated_service_is_reused_at_the_trigger_and_scoped(emulated_service):
    # the same session shape as the refused/accepted test above, but the service is the real one
    ms = [{"role": "user", "content": "read"}] + reads(40, size=8000)
    with ServiceProxy(emulated_service) as proxy:
        e = make_engine(proxy.url, api_key="k1", timeout_s=READY_S, prepare_timeout_s=READY_S)
        e.session_id = "s-aot"
        e.update_model("m", 100_000)
        eng.AGENT_HISTORY["s-aot"] = ms
        stored = metric_value(emulated_service, "speccompact_prepares_stored_total")
        e.update_from_response({"prompt_tokens": 65_000})  # 0.8 x 75,000 = 60,000 reached: a prepare
        eng.PREPARES["s-aot"].join(READY_S)
        status, raw = proxy.replies[0]
        accepted = json.loads(raw)
        assert status == 202 and accepted["session"] == "s-aot" and accepted["status"] == "preparing"
        assert accepted["messages"] == len(proxy.bodies[0]["messages"]) > 0 and e._prepare_supported is True

        out = e.compress(ms)  # at the trigger
        assert out != ms and not e._last_compress_aborted and e.compression_count == 1
        sent, (status, raw) = proxy.bodies[-1], proxy.replies[-1]
        answer = json.loads(raw)
        assert status == 200 and sent["session"] == "s-aot" and "mode" not in sent
        assert_summary_clean(answer)
        # the compaction asked for exactly the prepared messages, so the stored result is the answer
        # (waited for, if the prepare was still running)
        assert sent["messages"] == proxy.bodies[0]["messages"]
        assert answer["session"]["id"] == "s-aot" and answer["session"]["reused_messages"] == accepted["messages"]
        assert answer["session"]["prepare"] in (None, "waited")
        assert metric_value(emulated_service, "speccompact_prepares_stored_total") == stored + 1
        assert e.get_status()["speccompact"]["last_compaction"]["reused_messages"] == accepted["messages"]

        # it is still stored: the same key and session reuse it again; another key or session never sees it
        again = _compact_as(emulated_service, sent, "k1", "s-aot")
        assert again["session"]["reused_messages"] == accepted["messages"] and again["summary"] == answer["summary"]
        for key, session in (("k2", "s-aot"), (None, "s-aot"), ("k1", "s-other")):
            other = _compact_as(emulated_service, sent, key, session)
            assert other["session"] == {"id": session, "reused_messages": 0, "prepare": None}, (key, session)

        # large outputs arrived before the trigger: the prepared summary alone no longer brings the prompt
        # under the prepare threshold, so the whole middle is sent; the service reuses the prepared prefix and
        # compacts only the turns after it, on the stored summary
        e2 = make_engine(proxy.url, api_key="k1", timeout_s=READY_S, prepare_timeout_s=READY_S)
        e2.session_id = "s-inc"
        e2.update_model("m", 100_000)
        eng.AGENT_HISTORY["s-inc"] = ms
        stored = metric_value(emulated_service, "speccompact_prepares_stored_total")
        e2.update_from_response({"prompt_tokens": 65_000})
        eng.PREPARES["s-inc"].join(READY_S)
        # the agent's next turns give the prepare time to finish (compacting at once would cancel it: the
        # service's wait-or-cancel rule starts afresh when a prepare has barely begun)
        wait_for_metric(emulated_service, "speccompact_prepares_stored_total", stored + 1)
        prepared = json.loads(proxy.replies[-1][1])["messages"]
        longer = ms + reads(3, size=80_000, start=40)
        assert e2.compress(longer) != longer and e2.compression_count == 1
        sent, answer = proxy.bodies[-1], json.loads(proxy.replies[-1][1])
        assert sent["session"] == "s-inc" and len(sent["messages"]) > prepared
        assert sent["messages"][:prepared] == proxy.bodies[-2]["messages"]
        assert answer["session"] == {"id": "s-inc", "reused_messages": prepared, "prepare": None}
        assert e2.last["reused_messages"] == prepared and not e2.last["prepared_prefix_alone"]
