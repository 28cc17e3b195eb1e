"""One admission order for every proposed line: checks, budget, judge, verdict; and a writer's continuation."""

import doctest

import pytest

from sgl_speccompact.core import admission
from sgl_speccompact.core.admission import (Continuation, Proposal, Source, Step, admit, fit, needs_verdict, refuse,
                                            screen)
from sgl_speccompact.core.lines import LineKind
from sgl_speccompact.result import LineOrigin, StopReason, Verdict

YES, NO = Verdict(0.9, 0.1, 0.9, True), Verdict(0.1, 0.9, 0.1, False)
FAINT = Verdict(0.001, 0.004, 0.2, False, reliable=False)  # too little label mass to act on


def test_doctests():
    failed, attempted = doctest.testmod(admission)
    assert failed == 0 and attempted > 0


def steps(source, kind, verdict=YES, over=None, text="- a"):
    """The stages one line passes, answered as given: the stage that decided it and what it decided."""
    p = Proposal(text, source)
    done = screen(p, kind)
    if done is not None:
        return "screen", done
    done = fit(p, over)
    if done is not None:
        return "fit", done
    return "admit", admit(p, kind, verdict if needs_verdict(p, kind) else None)


def outcome(*args, **kw):
    _, a = steps(*args, **kw)
    return a.step.value if a.reason is None else f"{a.step.value}:{a.reason.value}"


@pytest.mark.parametrize("source", [Source.DRAFT, Source.CARRIED])
def test_a_judged_line_is_decided_by_its_verdict(source):
    stage, a = steps(source, LineKind.JUDGE)
    assert stage == "admit" and a.step is Step.ACCEPT and a.verdict is YES


def test_what_a_refusal_means_depends_on_the_source():
    assert outcome(Source.DRAFT, LineKind.JUDGE, verdict=NO) == "repair"
    assert outcome(Source.CARRIED, LineKind.JUDGE, verdict=NO) == "stale"
    assert outcome(Source.DRAFT, LineKind.DUPLICATE) == "repair"
    assert outcome(Source.REPAIR, LineKind.DUPLICATE) == "stop:repair_failed"
    assert outcome(Source.HEADING, LineKind.JUDGE) == "drop"
    assert outcome(Source.CARRIED, LineKind.JUDGE, text="### Forged heading") == "drop"
    # the target's own lines: never judged; a failed check is skipped
    assert steps(Source.TARGET, LineKind.JUDGE)[1].origin is LineOrigin.TARGET
    assert outcome(Source.TARGET, LineKind.DUPLICATE) == "drop"


def test_a_refusal_before_the_judge_says_why_and_carries_no_verdict():
    stage, a = steps(Source.DRAFT, LineKind.TOO_LONG)
    assert stage == "screen" and a.refused == "too_long" and a.verdict is None
    # another stage before the judge refuses the same way: a draft repaired, a carried line dropped
    assert refuse(Proposal("- a", Source.DRAFT), "names /etc/x").refused == "names /etc/x"
    assert refuse(Proposal("- a", Source.CARRIED), "names /etc/x").step is Step.DROP


def test_the_budget_comes_before_the_judge():
    assert outcome(Source.DRAFT, LineKind.JUDGE, over=StopReason.LINE_BUDGET) == "stop:line_budget"
    assert outcome(Source.REPAIR, LineKind.JUDGE, over=StopReason.TOKEN_BUDGET) == "stop:token_budget"
    assert outcome(Source.CARRIED, LineKind.JUDGE, over=StopReason.TOKEN_BUDGET) == "drop"
    assert steps(Source.DRAFT, LineKind.BLANK)[1].origin is LineOrigin.UNJUDGED  # unjudged


def test_an_unreliable_verdict_keeps_and_marks_nothing():
    # a carried line is dropped, not remembered as stale: too little label mass says nothing either way
    assert outcome(Source.CARRIED, LineKind.JUDGE, verdict=FAINT) == "drop"
    assert outcome(Source.DRAFT, LineKind.JUDGE, verdict=FAINT) == "repair"


def test_a_line_that_needs_a_verdict_is_not_admitted_without_one():
    with pytest.raises(ValueError):
        admit(Proposal("- a", Source.DRAFT), LineKind.JUDGE, None)


def test_a_continuation_is_proposed_only_while_it_continues_the_branch():
    c = Continuation(Source.DRAFT, ("- x",), ["- a", "- b"], end=StopReason.COMPLETE)
    assert c.next(()) is None  # written after another prefix
    assert c.next(("- x",)).text == "- a"
    assert c.next(("- x", "- repaired")) is None  # a repair changed the prefix
    c = Continuation(Source.TARGET, (), ["- a", "- dup", "- b"], end=StopReason.TOKEN_BUDGET, cut=True, capped=True)
    assert c.next(()).text == "- a" and c.next(("- a",)).text == "- dup"
    last = c.next(("- a",))  # the duplicate was skipped: the rest still continues the branch
    assert last.text == "- b" and last.cut and last.capped
    assert c.next(("- a", "- b")) is StopReason.TOKEN_BUDGET
