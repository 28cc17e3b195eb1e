"""One admission order for every proposed line: checks, budget, judge, claim, accept."""

import doctest

import pytest

from sgl_speccompact.core import admission
from sgl_speccompact.core.admission import Source, Step, admit
from sgl_speccompact.core.lines import LineKind


def test_doctests():
    failed, attempted = doctest.testmod(admission)
    assert failed == 0 and attempted > 0


def steps(source, kind, verdict=True, claim=True, over="", reliable=True):
    """The steps one line takes, answering each question as given."""
    known, seen = {}, []
    while True:
        a = admit(source, kind, known.get("over"), known.get("judged"), known.get("claimed"), reliable)
        seen.append(a.step.value if a.reason is None else f"{a.step.value}:{a.reason}")
        if a.step is Step.MEASURE:
            known["over"] = over
        elif a.step is Step.JUDGE:
            known["judged"] = verdict
        elif a.step is Step.CLAIM:
            known["claimed"] = claim
        else:
            return seen


@pytest.mark.parametrize("source", [Source.DRAFT, Source.CARRIED])
def test_a_judged_line_is_measured_then_judged_then_claimed(source):
    assert steps(source, LineKind.JUDGE) == ["measure", "judge", "claim", "accept"]


def test_what_a_refusal_means_depends_on_the_source():
    assert steps(Source.DRAFT, LineKind.JUDGE, verdict=False)[-1] == "repair"
    assert steps(Source.CARRIED, LineKind.JUDGE, claim=False)[-1] == "stale"
    assert steps(Source.CARRIED, LineKind.JUDGE, verdict=False)[-1] == "stale"
    assert steps(Source.REPAIR, LineKind.JUDGE, claim=False) == ["measure", "claim", "stop:repair_failed"]
    assert steps(Source.DRAFT, LineKind.DUPLICATE) == ["repair"]
    assert steps(Source.HEADING, LineKind.JUDGE) == ["drop"]
    # Target-delta's own lines: never judged; a failed check or a line another branch has is skipped
    assert steps(Source.TARGET, LineKind.JUDGE) == ["measure", "claim", "accept"]
    assert steps(Source.TARGET, LineKind.JUDGE, claim=False) == ["measure", "claim", "drop"]
    assert steps(Source.TARGET, LineKind.DUPLICATE) == ["drop"]
    assert steps(Source.TARGET, LineKind.JUDGE, over="token_budget") == ["measure", "stop:token_budget"]


def test_the_budget_comes_before_the_judge_and_the_claim():
    assert steps(Source.DRAFT, LineKind.JUDGE, over="line_budget") == ["measure", "stop:line_budget"]
    assert steps(Source.REPAIR, LineKind.JUDGE, over="token_budget") == ["measure", "stop:token_budget"]
    assert steps(Source.CARRIED, LineKind.JUDGE, over="token_budget") == ["measure", "drop"]
    assert steps(Source.DRAFT, LineKind.BLANK) == ["measure", "accept"]  # unjudged, never claimed


def test_an_unreliable_verdict_keeps_and_marks_nothing():
    # a carried line is dropped, not remembered as stale: too little label mass says nothing either way
    assert steps(Source.CARRIED, LineKind.JUDGE, verdict=False, reliable=False) == ["measure", "judge", "drop"]
    assert steps(Source.DRAFT, LineKind.JUDGE, verdict=False, reliable=False)[-1] == "repair"
