"""The exact ledger through the pipeline: every method, SJC, incremental compactions, chunks and budgets.

The scripted backends make each test a few requests; the trajectory tests run
every method on the emulators, whose summaries echo history lines (so the
numbers say what the ledger adds, not how good a method is).
"""

from __future__ import annotations

import json

import pytest

from bench.evaluation.recall import history_text, retention, source_text
from sgl_speccompact.core.ledger import HEADING, NOTE, READ_SET_LABEL, TITLE, split_ledger, strip_ledger
from sgl_speccompact.history.identifiers import extract
from sgl_speccompact.history.tool_groups import group_start
from sgl_speccompact.methods.registry import METHODS, run_method
from sgl_speccompact.methods.request import MethodRequest
from sgl_speccompact.result import LineOrigin
from tests.support.methods import baseline_target, pair, tool_loop
from tests.support.paths import TRAJECTORIES
from tests.support.programs import MESSAGES


def run(method, messages, **kw):
    target, drafter = pair(kw.pop("source_judge_score", None)) if method == "speccompact" else (
        baseline_target(kw.pop("source_judge_score", None)), None)
    return run_method(method, messages, target=target, drafter=drafter, **kw), target, drafter


def ledger_lines(summary: str) -> list[str]:
    return summary[summary.index(HEADING):].split("\n")


@pytest.mark.parametrize("method", METHODS + ("auto",))
def test_every_method_ends_with_the_ledger(method):
    res, _, _ = run(method, MESSAGES)
    led = res.slots[-1]
    assert led.name == "ledger" and led.title == TITLE and res.summary.rstrip().endswith(led.lines[-1].text)
    assert all(line.origin is LineOrigin.LEDGER for line in led.lines) and led.lines[0].text == NOTE
    assert [line.text for line in led.lines[1:]] == ["- m1 path `hello.py`",  # named again by its result: x2
                                                     "- m2 x2 wrote `/workspace/hello.py` via `write` done",
                                                     READ_SET_LABEL, "- `/workspace/hello.py` changed m2, not read"]
    assert [(f.path, f.last_read, f.changed_at) for f in res.ledger.read_set] == [("/workspace/hello.py", None, 2)]
    assert res.ledger.entries and res.ledger.tokens == led.tokens
    assert res.summary_tokens <= 2048 and res.ledger.tokens <= 1024


@pytest.mark.parametrize("method", ["speccompact", "openclaw"])
def test_sjc_never_judges_or_deletes_a_ledger_line(method):
    drop_all = lambda entry, section: 0.01  # every entry it is asked about has no source
    res, _, _ = run(method, MESSAGES, source_judge=True, source_judge_score=drop_all)
    judged = res.source_judge["entries"]
    assert judged and all(e["section"] != TITLE and not e["kept"] for e in judged)
    assert "- m2 x2 wrote `/workspace/hello.py` via `write` done" in res.summary  # still there, unjudged
    assert res.slots[-1].name == "ledger" and res.slots[-1].lines


PREVIOUS = "\n".join(["## Goal", "- ship the parser", "", HEADING, NOTE,
                      "- m7 x2 hash `abc1234f`", "- m8 ran `pytest -x` exit `1`",
                      "- m9 did `deploy_service` with `{\"env\": \"staging\"}` done", "- +4 more paths under `src/p`"])


def test_the_previous_ledger_is_carried_and_no_model_sees_it():
    msgs = MESSAGES + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "r", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pytest -x"}'}}]},
        {"role": "tool", "tool_call_id": "r", "content": "4 passed\nexit code 0"}]
    for method in ("speccompact", "openclaw", "target_self"):
        res, target, drafter = run(method, MethodRequest(msgs, previous_summary=PREVIOUS))
        lines = ledger_lines(res.summary)
        assert "- m7 x2 hash `abc1234f`" in lines  # kept as written, message index and references included
        assert "- m9 did `deploy_service` with `{\"env\": \"staging\"}` done" in lines
        assert "- m4 x2 ran `pytest -x` exit `0`" in lines and "- m8 ran `pytest -x` exit `1`" not in lines
        assert any(line.startswith("- +4 more paths") for line in lines)  # the previous counts add up
        assert res.ledger.carried == 2
        sent = [text for backend in (target, drafter) if backend for _, text in backend.requests]
        assert sent and not any("abc1234f" in t or TITLE in t or "deploy_service" in t for t in sent), method
        assert any("ship the parser" in t for t in sent)  # the rest of the previous summary is there


def test_with_the_ledger_off_there_is_none_and_the_previous_one_stays_hidden():
    res, target, _ = run("openclaw", MethodRequest(MESSAGES, previous_summary=PREVIOUS), config={"ledger": False})
    assert res.ledger is None and TITLE not in res.summary and res.slots[-1].name != "ledger"
    assert not any("abc1234f" in text for _, text in target.requests)


def test_the_ledger_takes_only_the_room_the_sections_left():
    msgs = tool_loop(12, lines=20)  # every tool output names 20 ids (CONST_3_7): far more than fit
    full, _, _ = run("openclaw", msgs)
    assert full.ledger.counted and full.ledger.tokens <= 1024 and full.summary_tokens <= 2048
    sections = split_ledger(full.summary)[0]
    cfg = {"max_summary_tokens": len(sections.split()) + sections.count("\n") + 40}  # the scripted token count
    small, _, _ = run("openclaw", msgs, config=cfg)
    assert small.summary_tokens <= cfg["max_summary_tokens"]
    assert strip_ledger(small.summary) == sections  # the sections keep their room
    assert small.ledger.tokens <= 40 and len(small.ledger.entries) < len(full.ledger.entries)
    capped, _, _ = run("openclaw", msgs, config={"max_ledger_tokens": 120})
    assert capped.ledger.tokens <= 120 and sum(capped.ledger.counted.values()) > 0
    assert any(line.startswith("- +") and "more ids" in line for line in ledger_lines(capped.summary))


def test_chunked_blocks_name_the_callers_messages_and_carry_the_ledger():
    msgs = tool_loop(18, lines=30)
    res, _, _ = run("openclaw", msgs, config={"target_context_tokens": 6000, "max_summary_tokens": 1024,
                                               "monolithic_max_tokens": 512, "max_ledger_tokens": 600})
    assert res.chunks >= 2
    reads = {line.split("`")[1]: int(line.split()[1][1:]) for line in ledger_lines(res.summary)
             if " read `" in line}
    assert reads  # the newest reads are listed, each with the index of its call in the caller's list
    for path, index in reads.items():
        calls = [c["function"]["arguments"] for c in msgs[index].get("tool_calls") or []]
        assert any(path in args for args in calls), (path, index)


# ---------------------------------------------------------------- on the emulator, every shared trajectory


def trajectories():
    if not TRAJECTORIES.is_dir():
        return []
    from sgl_speccompact.errors import HistoryFormatError
    from sgl_speccompact.history.formats import load_history

    out = []
    for path in sorted(TRAJECTORIES.iterdir()):
        try:
            out.append((path.name, load_history(path)))
        except HistoryFormatError:
            continue  # the task list is not a trajectory
    return out


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, EmulatedServer
    from sgl_speccompact.emulator.qwen3 import default_tokenizer

    tok = default_tokenizer()[0]
    with EmulatedServer(tok, policy=ControlledAcceptancePolicy(seed=1), model_path="Qwen/Qwen3-8B") as t, \
            EmulatedServer(tok, policy=ControlledAcceptancePolicy(seed=2), model_path="Qwen/Qwen3-0.6B",
                           lora_paths=["drafter"]) as d:
        yield SpecCompactEndpoint(t.url, timeout_s=120), SpecCompactEndpoint(d.url, lora_path="drafter", timeout_s=120)


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS + ("auto",))
def test_recall_on_every_shared_trajectory_at_the_default_budget(emulated, method):
    """Acceptance: identifier recall >= 0.95 with the ledger on, and the ledger invents nothing."""
    target, drafter = emulated
    cases = trajectories()
    if not cases:
        pytest.skip(f"shared trajectories not found at {TRAJECTORIES}")
    for name, messages in cases:
        res = run_method(method, messages, target=target, drafter=drafter)
        sources, history = extract(source_text(messages)), history_text(messages)
        got = retention(sources, extract(history), history, res.summary)
        assert got["recall"] is None or got["recall"] >= 0.95, (name, got["lost"])
        ledger = res.summary[res.summary.index(HEADING):]
        assert retention(sources, extract(history), history, ledger)["invented"] == [], name


SESSION_CUTS = 5  # compactions per replay: the history in five consecutive parts, each on the last summary


@pytest.mark.slow
@pytest.mark.parametrize("method", ["speccompact", "hermes"])
def test_a_session_of_five_compactions_keeps_the_first_parts_identifiers(emulated, method):
    """Acceptance: >= 0.9 of the identifiers first seen before the first compaction are still in the
    summary after the last one (each compaction gets only the messages since the one before)."""
    target, drafter = emulated
    cases = [(n, m) for n, m in trajectories() if len(m) >= 2 * SESSION_CUTS]
    if not cases:
        pytest.skip(f"shared trajectories not found at {TRAJECTORIES}")
    for name, messages in cases:
        bounds = [group_start(messages, round(len(messages) * k / SESSION_CUTS)) for k in range(SESSION_CUTS + 1)]
        parts = [messages[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]  # a call stays with its results
        assert len(parts) >= 4, name
        first = extract(source_text(parts[0]))
        summary = None
        for part in parts:
            part = _paired(part)
            summary = run_method(method, MethodRequest(part, previous_summary=summary), target=target,
                                 drafter=drafter).summary
        history = history_text(messages)
        kept = retention(first, extract(history), history, summary)
        assert not first or kept["recall"] >= 0.9, (name, kept["lost"])


def _paired(part: list[dict]) -> list[dict]:
    """``part`` without tool results whose call is in an earlier part, and never empty of users' text."""
    calls = {c["id"] for m in part for c in m.get("tool_calls") or []}
    kept = [m for m in part if m.get("role") != "tool" or m.get("tool_call_id") in calls]
    return kept or [{"role": "user", "content": json.dumps(part)[:200]}]


@pytest.mark.slow
def test_the_budget_holds_on_a_2mb_history():
    from bench.harness.ledger import TWO_MB, big_history, token_counter
    from sgl_speccompact.config import CompactConfig
    from sgl_speccompact.core.ledger import LedgerSection
    from sgl_speccompact.core.ledger_budget import fit, merge
    from sgl_speccompact.emulator.qwen3 import default_tokenizer
    from sgl_speccompact.history.ledger_entries import ledger_entries
    from sgl_speccompact.history.messages import parse_messages, render_history
    from sgl_speccompact.history.redaction import redact_turns

    cases = trajectories()
    if not cases:
        pytest.skip(f"shared trajectories not found at {TRAJECTORIES}")
    turns = parse_messages(big_history([m for _, m in cases]), max_messages=10**7, max_chars=2**31)
    turns = redact_turns(turns)[0]
    assert len(render_history(turns)) >= TWO_MB
    budget = CompactConfig().max_ledger_tokens
    count = token_counter(default_tokenizer()[0])
    out = fit(merge([], ledger_entries(turns)), LedgerSection(), budget, count)
    assert 0 < out.tokens <= budget and out.tokens == count([out.text])[0]
    assert len(out.shown) > 10 and sum(out.counted.values()) > 1000  # most of it is counted, nothing is lost
