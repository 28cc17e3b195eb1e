"""De-duplication sees through list markers and numbering: in a slot, across a slot's branches and across slots."""

import pytest

from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.methods.speccompact import compact
from sgl_speccompact.result import LineOrigin

from tests.support.programs import DRAFTS, MESSAGES, backends
from tests.support.scripted import ScriptedBackend, slot_of

LOOP = ["1. Run the tests", "2. Run the tests", "3. Run the tests", "4. Run the tests"]  # a looping model


def lines(res, name):
    return [l.text for l in {s.name: s for s in res.slots}[name].lines]


def test_speccompact_repairs_a_renumbered_copy_instead_of_keeping_it():
    target, drafter = backends(drafts={**DRAFTS, "next_steps": LOOP}, repair=lambda s, acc: "")
    res = compact(MESSAGES, target=target, drafter=drafter)
    assert lines(res, "next_steps") == ["1. Run the tests"]  # before: all four, one per number
    judged = [t for t in target.kinds("verify") if slot_of(t) == "next_steps"]
    assert len(judged) == 1  # a copy costs no judgement: it goes straight to repair


@pytest.mark.parametrize("method", ["target_self", "target_delta"])
def test_the_target_writers_renumbered_copies_are_skipped(method):
    def complete(text, sampling):
        return "\n".join(LOOP + ["5. Open a pull request"]) + "\n" if slot_of(text) == "next_steps" else "(none)\n"
    res = run_method(method, MESSAGES, target=ScriptedBackend(complete=complete))
    assert lines(res, "next_steps") == ["1. Run the tests", "5. Open a pull request"]
    assert all(l.origin is LineOrigin.TARGET for l in {s.name: s for s in res.slots}["next_steps"].lines)


def test_a_line_in_two_slots_is_kept_once_whatever_its_marker():
    drafts = {**DRAFTS, "goal": ["- Run the tests"], "next_steps": ["1. Run the tests", "2. Ship it"]}
    target, drafter = backends(drafts=drafts)
    res = compact(MESSAGES, target=target, drafter=drafter)
    assert lines(res, "goal") == ["- Run the tests"]
    nxt = {s.name: s for s in res.slots}["next_steps"]
    assert "1. Run the tests" in nxt.removed_duplicates and "1. Run the tests" not in res.summary
