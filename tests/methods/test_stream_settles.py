"""A stream never leaves a client showing a line the result drops: retractions, final lines, slot_done."""

from __future__ import annotations

from sgl_speccompact.methods.displayed import Displayed, settle
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.methods.request import MethodRequest
from sgl_speccompact.result import LineOrigin, SlotResult, SummaryLine

from tests.support.programs import DRAFTS, MESSAGES, drafter_from, judge_bad, repair_fixed
from tests.support.scripted import ScriptedBackend
from tests.support.stream_replay import assert_stream_shows_the_result, displayed

DRAFTS_DROPPED = {**DRAFTS, "goal": ["- Run the tests", "- Ship hello.py"],
                  "next_steps": ["1. Run the tests", "2. Check the output"]}


def compaction(**kw):
    events = []
    target = ScriptedBackend(judge=judge_bad, repair=repair_fixed,
                             source_judge=lambda entry, section: 0.05 if "Ship" in entry else 0.95)
    res = run_method("speccompact", MethodRequest(MESSAGES, on_event=events.append, **kw), target=target,
                     drafter=ScriptedBackend(draft=drafter_from(DRAFTS_DROPPED)))
    return res, events


def test_a_duplicate_is_shown_then_retracted_and_the_stream_ends_as_the_result():
    res, events = compaction()
    lines = [e for e in events if e["type"] == "line" and not e["final"]]
    assert "1. Run the tests" in [e["text"] for e in lines]  # shown while next_steps was written
    retracted = [(e["slot"], e["text"], e["reason"]) for e in events if e["type"] == "retract"]
    assert retracted == [("next_steps", "1. Run the tests", "duplicate")]
    assert "1. Run the tests" not in res.summary
    assert_stream_shows_the_result(events, res.slots)
    ledger = [e for e in events if e["type"] == "line" and e["slot"] == "ledger"]  # written after the slots
    assert ledger and events[-1] == {"type": "slot_done", "slot": "ledger", "title": "Exact Ledger",
                                     "stop_reason": "complete", "lines": [e["text"] for e in ledger]}


def test_a_line_source_judged_compaction_deletes_is_retracted_as_unsupported():
    res, events = compaction(source_judge=True)
    assert "- Ship hello.py" not in res.summary
    assert ("goal", "- Ship hello.py", "unsupported") in [(e["slot"], e["text"], e["reason"])
                                                          for e in events if e["type"] == "retract"]
    assert_stream_shows_the_result(events, res.slots)


def test_slot_done_comes_after_the_result_is_settled_and_carries_the_final_lines():
    res, events = compaction()
    kinds = [e["type"] for e in events]
    first_done = kinds.index("slot_done")
    assert "line" not in [k for k, e in zip(kinds[first_done:], events[first_done:]) if not e.get("final", True)]
    assert kinds.count("slot_written") == len(res.slots) - 1  # progress: every slot's writer stopped (not the ledger)
    done = {e["slot"]: e for e in events if e["type"] == "slot_done"}
    goal = {s.name: s for s in res.slots}["goal"]
    assert done["goal"]["lines"] == [l.text for l in goal.lines if l.text.strip()]
    assert done["goal"]["stop_reason"] == goal.stop_reason.value and done["goal"]["title"] == "Goal"


def test_a_rewritten_line_is_retracted_and_its_final_text_sent_in_its_place():
    slot = SlotResult(name="goal", title="Goal", lines=[SummaryLine(text=t, origin=LineOrigin.TARGET)
                                                        for t in ("- a", "- b [REDACTED]", "- c")])
    shown = [(0, "- a"), (1, "- b sk-secret"), (2, "- c")]
    events = [{"type": "line", "slot": "goal", "text": t, "index": i, "final": False} for i, t in shown]
    events += settle(slot, shown)
    assert [(e["type"], e.get("reason")) for e in events[3:]] == [("retract", "replaced"), ("line", None),
                                                                  ("slot_done", None)]
    assert events[4]["after"] == 0  # in the retracted line's place: after "- a"
    assert displayed(events)[0] == {"goal": ["- a", "- b [REDACTED]", "- c"]}


def test_a_slot_the_result_lacks_is_retracted_whole():
    got = []
    shown = Displayed(got.append)
    shown.see({"type": "line", "slot": "gone", "text": "- x"})
    from sgl_speccompact.result import CompactionResult

    shown.finish(CompactionResult(method="m", summary=""))
    assert got[-1] == {"type": "retract", "slot": "gone", "index": 0, "text": "- x", "reason": "replaced"}


def test_sections_that_share_a_title_settle_as_one_slot():
    from sgl_speccompact.result import CompactionResult

    got = []
    shown = Displayed(got.append)
    for text in ("- a", "- b", "- c"):
        shown.see({"type": "line", "slot": "history", "text": text})
    line = lambda t: SummaryLine(text=t, origin=LineOrigin.TARGET)
    slots = [SlotResult(name="history", title="History", lines=[line("- a")]),
             SlotResult(name="history", title="History", lines=[line("- c")])]
    shown.finish(CompactionResult(method="hermes", summary="", slots=slots))
    assert [(e["type"], e.get("text")) for e in got[3:]] == [("retract", "- b"), ("slot_done", None)]
    assert got[-1]["lines"] == ["- a", "- c"]
    assert_stream_shows_the_result(got, slots)
