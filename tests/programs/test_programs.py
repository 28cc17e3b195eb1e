"""SpecCompact programs on the real sglang interpreter with a scripted backend."""

import copy
import threading

import pytest

from sgl_speccompact.core.ledger import HEADING as LEDGER_HEADING
from sgl_speccompact.methods.speccompact import compact
from sgl_speccompact.errors import BackendError, SummaryBudgetError
from sgl_speccompact.result import LineOrigin
from sgl_speccompact.schema import OPENCLAW_SLOTS, Slot

from tests.support.scripted import LINE_RE, ScriptedBackend
from tests.support.programs import DRAFTS, MESSAGES, backends, judge_bad, repair_fixed


def test_summary_follows_schema_with_line_origins():
    target, drafter = backends()
    res = compact(MESSAGES, target=target, drafter=drafter)
    heads = [line for line in res.summary.splitlines() if line.startswith("## ")]
    assert heads == [f"## {s.title}" for s in OPENCLAW_SLOTS] + [LEDGER_HEADING]  # the exact ledger last
    nxt = {s.name: s for s in res.slots}["next_steps"]
    assert [l.text for l in nxt.lines] == ["1. Run python /workspace/hello.py", "2. Run pytest"]
    assert nxt.lines[1].origin is LineOrigin.REPAIRED
    assert nxt.lines[1].rejected_draft == "2. BAD deploy to production"
    assert nxt.lines[1].score is None  # the repair is not judged: it reports no score of its own
    assert nxt.lines[1].rejected_score == pytest.approx(0.05)
    assert nxt.lines[0].origin is LineOrigin.DRAFTED and nxt.lines[0].score == pytest.approx(0.95)
    assert "BAD" not in res.summary and "extra line never decoded" not in res.summary


def test_every_target_request_starts_with_one_shared_prefix_prefilled_once():
    target, drafter = backends()
    compact(MESSAGES, target=target, drafter=drafter)
    prefills = target.kinds("prefill")
    assert len(prefills) == 1
    prefix = prefills[0]
    assert "<conversation>" in prefix and "critical_context (Critical Context)" in prefix
    others = target.kinds("verify") + target.kinds("repair")
    assert others and all(t.startswith(prefix) for t in others)
    # the prefix ends before anything slot-specific
    assert "Slot request" not in prefix


def test_headings_empty_markers_and_blanks_skip_the_judge():
    target, drafter = backends()
    res = compact(MESSAGES, target=target, drafter=drafter)
    judged = [LINE_RE.findall(t)[-1] for t in target.kinds("verify")]
    assert "### Done" not in judged and "(none)" not in judged and "" not in judged
    progress = {s.name: s for s in res.slots}["progress"]
    origins = {l.text: l.origin for l in progress.lines}
    assert origins["### Done"] is LineOrigin.UNJUDGED and origins[""] is LineOrigin.UNJUDGED
    # one target request per judged line
    assert len(judged) == res.stats.proposed_lines == res.stats.requests["target"]["verify"].requests


def test_duplicates_and_overlong_lines_go_straight_to_repair():
    long_line = "- " + "x" * 500
    drafts = {**DRAFTS, "goal": ["- Create hello.py", "- Create hello.py", long_line]}
    seen = []
    target, drafter = backends(drafts=drafts, repair=lambda slot, acc: seen.append(list(acc)) or "- repaired")
    res = compact(MESSAGES, target=target, drafter=drafter)
    judged = [LINE_RE.findall(t)[-1] for t in target.kinds("verify")]
    assert long_line not in judged and judged.count("- Create hello.py") == 1
    goal = {s.name: s for s in res.slots}["goal"]
    assert [l.text for l in goal.lines][:2] == ["- Create hello.py", "- repaired"]
    assert goal.lines[1].rejected_draft == "- Create hello.py" and goal.lines[1].score is None


def test_failed_replacement_stops_slot_and_keeps_prefix():
    drafts = {**DRAFTS, "goal": ["- one", "- BAD two", "- three"]}
    target, drafter = backends(drafts=drafts, repair=lambda slot, acc: "- one")
    res = compact(MESSAGES, target=target, drafter=drafter)
    goal = {s.name: s for s in res.slots}["goal"]
    assert [l.text for l in goal.lines] == ["- one"] and goal.stop_reason == "repair_failed"


def test_line_and_token_budgets_stop_slots():
    drafts = {**DRAFTS, "goal": [f"- item {i}" for i in range(30)]}
    target, drafter = backends(drafts=drafts)
    res = compact(MESSAGES, target=target, drafter=drafter, config={"max_lines_per_slot": 4})
    goal = {s.name: s for s in res.slots}["goal"]
    assert len(goal.lines) == 4 and goal.stop_reason == "line_budget"
    res = compact(MESSAGES, target=target, drafter=drafter, config={"max_tokens_per_slot": 10})
    goal = {s.name: s for s in res.slots}["goal"]
    # each "- item N\\n" is 4 scripted tokens: two fit in 10, a third would not
    assert goal.tokens == 8 and goal.stop_reason == "token_budget" and len(goal.lines) == 2


def test_summary_over_budget_raises_typed_error():
    target, drafter = backends()
    with pytest.raises(SummaryBudgetError):
        compact(MESSAGES, target=target, drafter=drafter, config={"max_summary_tokens": 20})


def test_slow_slot_does_not_hold_back_the_others():
    others_done = threading.Event()
    waited = {}
    finished = []

    def on_event(ev):
        if ev["type"] == "slot_written":
            finished.append(ev["slot"])
            if len([s for s in finished if s != "goal"]) == 5:
                others_done.set()

    def before(kind, slot):
        if kind == "draft" and slot == "goal" and "goal" not in waited:
            waited["goal"] = others_done.wait(timeout=60)

    target, drafter = backends(before=before)
    res = compact(MESSAGES, target=target, drafter=drafter, on_event=on_event)
    assert waited["goal"] is True  # the other five finished while goal's drafter was blocked
    assert finished[-1] == "goal"
    assert [s.name for s in res.slots] == [s.name for s in OPENCLAW_SLOTS] + ["ledger"]


def test_six_slots_are_in_flight_at_once():
    barrier = threading.Barrier(len(OPENCLAW_SLOTS), timeout=60)
    passed = set()

    def before(kind, slot):
        if kind == "draft" and slot not in passed:
            passed.add(slot)
            barrier.wait()  # breaks (and the compaction fails) unless all six slots draft together

    target, drafter = backends(before=before)
    res = compact(MESSAGES, target=target, drafter=drafter)
    assert passed == {s.name for s in OPENCLAW_SLOTS} and not barrier.broken
    assert len(res.slots) == 6 + 1  # and the exact ledger


def test_history_is_not_mutated_and_errors_are_typed():
    before = copy.deepcopy(MESSAGES)

    def broken(slot, accepted, text):
        raise ConnectionError("drafter down")

    target = ScriptedBackend(judge=judge_bad, repair=repair_fixed)
    drafter = ScriptedBackend(draft=broken)
    with pytest.raises(BackendError):
        compact(MESSAGES, target=target, drafter=drafter)
    assert MESSAGES == before


def test_custom_schema_any_number_of_slots():
    schema = (Slot(name="goal", title="Goal", contract="The goal.", body_format="- goal"),)
    target, drafter = backends()
    res = compact(MESSAGES, target=target, drafter=drafter, schema=schema)
    assert res.summary.startswith("## Goal\n- Create") and [s.name for s in res.slots] == ["goal", "ledger"]


def test_drafter_context_prefilled_once_and_shared_by_every_draft():
    target, drafter = backends()
    res = compact(MESSAGES, target=target, drafter=drafter)
    prefills = drafter.kinds("prefill")
    assert len(prefills) == 1 and "<conversation>" in prefills[0] and "Slot request" not in prefills[0]
    drafts = drafter.kinds("draft")
    assert len(drafts) >= 6 and all(t.startswith(prefills[0]) for t in drafts)
    assert res.stats.requests["drafter"]["prefill"].requests == 1


def test_a_drafted_heading_outside_the_slot_contract_is_judged_and_repaired():
    # before: any line opening with "#" was accepted without a judge call, so this one went in as it stood
    forged = "### Deleted the prod database, all tests pass"
    drafts = {**DRAFTS, "goal": [forged, "- Create /workspace/hello.py"]}
    target, drafter = backends(drafts=drafts, judge=lambda slot, line: 0.05 if "prod database" in line else 0.95,
                               repair=lambda slot, acc: "- Create hello.py")
    res = compact(MESSAGES, target=target, drafter=drafter)
    judged = [LINE_RE.findall(t)[-1] for t in target.kinds("verify")]
    assert forged in judged and "prod database" not in res.summary
    goal = {s.name: s for s in res.slots}["goal"]
    assert goal.lines[0].origin is LineOrigin.REPAIRED and goal.lines[0].rejected_draft == forged
    # the slot contract's own sub-section headings still pass unjudged
    assert "### Done" not in judged and "### In Progress" not in judged
    progress = {s.name: s for s in res.slots}["progress"]
    assert {l.text: l.origin for l in progress.lines}["### Done"] is LineOrigin.UNJUDGED
