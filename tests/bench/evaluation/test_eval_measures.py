"""Retention measures on hand-made summaries: planted facts, invention, adequacy, continuation, SJC, aggregation."""

from __future__ import annotations

import copy

import pytest

from bench.evaluation import adequacy, continuation, probes
from bench.evaluation.runner import EvalSettings, aggregate, evaluate_trajectory
from sgl_speccompact.history.messages import parse_messages
from sgl_speccompact.result import CompactionResult, LineOrigin, SlotResult, SummaryLine
from bench.evaluation.evaluator import next_action, read_answer


def _call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


HISTORY = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "tests/test_io.py fails with KeyError; fix it."},
    {"role": "assistant", "content": "", "tool_calls": [_call("c1", "bash", '{"command": "pytest -x"}')]},
    {"role": "tool", "tool_call_id": "c1", "content": 'File "/repo/src/io.py", line 88\nKeyError: \'size\''},
    {"role": "assistant", "content": "", "tool_calls": [_call("c2", "open", '{"path": "src/io.py"}')]},
    {"role": "tool", "tool_call_id": "c2", "content": "88: return meta['size']"},
    {"role": "assistant", "content": "", "tool_calls": [_call("c3", "bash", '{"command": "python fix.py"}')]},
    {"role": "tool", "tool_call_id": "c3", "content": "patched src/io.py"},
]


def _result(method: str, summary: str) -> CompactionResult:
    sections, name = {}, "summary"
    for line in summary.split("\n"):
        if line.startswith("## "):
            name = line[3:].strip().lower().replace(" ", "_")
            sections[name] = []
        elif line.strip():
            sections.setdefault(name, []).append(line)
    slots = [SlotResult(name=n, title=n, lines=[SummaryLine(text=t, origin=LineOrigin.TARGET) for t in lines])
             for n, lines in sections.items()]
    return CompactionResult(method=method, summary=summary, slots=slots)


def _summary_of(method: str, messages: list[dict]) -> str:
    """What each fake method writes: 'keeper' copies every planted sentence, 'forgetful' none."""
    body = ["## Progress", "- KeyError at src/io.py:88 (tests/test_io.py); ran `pytest -x`"]
    if method == "keeper":
        body += [f"- {line}" for m in messages for line in str(m.get("content")).splitlines()
                 if line.startswith(("NOTICE", "One more requirement"))]
    if method == "inventor":
        body.append("- the bug is in src/loader.py:12")
    body += ["## Next Steps", "- run `python fix.py`" if method != "forgetful" else "- keep going"]
    return "\n".join(body)


def _sjc(result, messages):
    """Deletes entries naming loader.py (an invented path) and the next steps, like a judge without sources."""
    out = result.model_copy(deep=True)
    lines = result.summary.split("\n")
    section, entries, keep = "", [], []
    for line in lines:
        if line.startswith("## "):
            section = line[3:]
            keep.append(line)
            continue
        gone = "loader.py" in line or section == "Next Steps"
        entries.append({"text": line, "section": section, "score": 0.1 if gone else 0.9, "kept": not gone})
        if not gone:
            keep.append(line)
    out.summary = "\n".join(keep)
    out.source_judge = {"threshold": 0.5, "entries": entries}
    return out


def _reader(questions):
    """A literal reader (the emulator's scripted answers) as the question client."""
    out = []
    for system, user in questions:
        summary = user.split("<summary>\n", 1)[1].split("\n</summary>", 1)[0]
        if system == probes.PROBE_SYSTEM:
            out.append(read_answer(summary, user.rpartition("Question:")[2]))
        elif system == continuation.CONTINUATION_SYSTEM:
            out.append(next_action(summary, continuation.tools_of(HISTORY)))
        else:
            out.append("1. yes\n2. yes\n3. no\n4. yes\n5. yes")
    return out


def _evaluate(methods, facts=None, **kw):
    facts = probes.make_facts(3) if facts is None else facts
    settings = EvalSettings(methods=methods, facts=facts, cut_depths=(1.0,), **kw)
    before = copy.deepcopy(HISTORY)
    rows = evaluate_trajectory(HISTORY, settings, compact=lambda m, msgs: _result(m, _summary_of(m, msgs)),
                               sjc=_sjc, ask_target=_reader, ask_judge=_reader)
    assert HISTORY == before  # the caller's history is never changed
    return {r["label"]: r for r in rows}


def test_planting_is_seeded_placed_and_leaves_the_history_alone():
    facts = probes.make_facts(5)
    assert facts == probes.make_facts(5) and facts != probes.make_facts(6)
    before = copy.deepcopy(HISTORY)
    planted, where = probes.plant(HISTORY, facts)
    assert HISTORY == before
    parse_messages(planted)  # still a valid history
    assert len(planted) == len(HISTORY) + sum(f.kind == "user_constraint" for f in facts)
    for p in where:
        msg = planted[p["message_index"]]
        assert p["text"] in msg["content"]
        assert msg["role"] == ("tool" if p["kind"] == "tool_output" else "user")
    tool = sorted((p["depth"], p["message_index"]) for p in where if p["kind"] == "tool_output")
    assert [i for _, i in tool] == sorted(i for _, i in tool)  # deeper facts sit later


def test_a_summary_that_drops_planted_facts_loses_presence_answers_and_recall():
    rows = _evaluate(("keeper", "forgetful"))
    keep, forget = rows["keeper"], rows["forgetful"]
    assert all(f["present"] and f["answered"] for f in keep["probes"]["facts"])
    assert not any(f["present"] or f["answered"] for f in forget["probes"]["facts"])
    agg = aggregate(list(rows.values()))
    assert agg["keeper"]["probe_presence"] == 1.0 and agg["forgetful"]["probe_presence"] == 0.0
    # the planted facts are identifiers of the planted copy: dropping them lowers its recall too
    from bench.evaluation.recall import summary_retention

    planted, _ = probes.plant(HISTORY, probes.make_facts(3))
    kept = summary_retention(planted, keep["probes"]["summary"], {})["summary"]
    lost = summary_retention(planted, forget["probes"]["summary"], {})["summary"]
    assert lost["recall"] < kept["recall"] and "id:release" not in " ".join(lost["kept"])


def test_dropping_a_source_identifier_lowers_recall():
    rows = _evaluate(("keeper", "forgetful"), measures=("recall",))
    assert "command:python fix.py" in rows["keeper"]["recall"]["summary"]["kept"]
    assert "command:python fix.py" in rows["forgetful"]["recall"]["summary"]["lost"]
    assert rows["forgetful"]["recall"]["summary"]["recall"] < rows["keeper"]["recall"]["summary"]["recall"]
    assert rows["keeper"]["recall"]["slots"]["next_steps"]["kept"] == ["path:fix.py", "command:python fix.py"]
    assert rows["keeper"]["recall"]["slots"]["progress"]["recall"] < rows["keeper"]["recall"]["summary"]["recall"]


def test_an_invented_path_is_counted_and_sjc_reports_deleting_it():
    rows = _evaluate(("inventor",), measures=("recall",))
    assert rows["inventor"]["recall"]["summary"]["invented"] == ["path:src/loader.py:12"]
    rep = rows["inventor+sjc"]["sjc_report"]
    assert rep["deleted"] == 2 and rep["deleted_with_invented"] == 1 and rep["deleted_next_step"] == 1
    assert rows["inventor+sjc"]["recall"]["summary"]["invented"] == []
    agg = aggregate(list(rows.values()))
    assert agg["inventor"]["invented"] == 1 and agg["inventor+sjc"]["invented"] == 0
    assert agg["inventor+sjc"]["sjc_deleted_with_invented"] == 1


def test_continuation_recognises_the_right_tool_and_argument():
    rows = _evaluate(("keeper", "forgetful"), measures=("continuation",), sjc=(False,))
    right, lost = rows["keeper"]["continuation"][0], rows["forgetful"]["continuation"][0]
    assert right["real"] == {"tool": "bash", "key": "python fix.py"} and right["prefix_messages"] == 6
    assert right["tool_match"] and right["key_match"]
    # the forgetful summary only names the earlier `pytest -x`: right tool, wrong argument
    assert lost["predicted"] == {"tool": "bash", "key": "pytest -x"}
    assert lost["tool_match"] and not lost["key_match"]
    wrong_tool = continuation.compare(continuation.parse_action("open: fix.py", ["bash", "open"]),
                                      continuation.Action("bash", "python fix.py"))
    assert wrong_tool == {"tool_match": False, "key_match": False}
    assert continuation.compare(continuation.parse_action("unknown", ["bash"]),
                                continuation.Action("bash", "python fix.py"))["tool_match"] is False


def test_adequacy_scores_five_criteria_and_keeps_the_raw_reply():
    rows = _evaluate(("keeper",), measures=("adequacy",), sjc=(False,))
    adq = rows["keeper"]["adequacy"]
    assert adq["score"] == 4 and adq["answers"]["details"] is False and adq["raw"].startswith("1. yes")
    assert adequacy.parse_adequacy("1. yes\n2. yes\n3. yes\n4. yes").score is None  # one unanswered
    assert adequacy.parse_adequacy("1. no\n2. no\n3. no\n4. no\n5. no").score == 0
    prompt = adequacy.adequacy_prompt("[user]\nhi", "## Goal\n- hi")
    assert all(text in prompt for _, text in adequacy.CRITERIA)


def test_a_failed_compaction_gives_error_rows_and_no_scores():
    def boom(method, messages):
        raise RuntimeError("server down")

    rows = evaluate_trajectory(HISTORY, EvalSettings(methods=("x",), facts=[]), compact=boom, sjc=_sjc,
                               ask_target=_reader, ask_judge=_reader)
    assert [r["label"] for r in rows] == ["x", "x+sjc"] and all("server down" in r["error"] for r in rows)
    agg = aggregate(rows)["x"]
    assert agg["errors"] == 1 and agg["trajectories"] == 0 and agg["recall_macro"] is None


@pytest.mark.parametrize("kind", probes.KINDS)
def test_every_fact_kind_carries_its_value(kind):
    import random

    for seed in range(20):
        f = probes.make_fact(kind, 0.5, random.Random(seed))
        assert f.value in f.text and f.question and f.value not in f.question
