"""Carried lines are judged by the one judge, behind its health gate, and only up to what the slot keeps."""

import pytest

from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.result import LineOrigin

from tests.support.programs import DRAFTS, MESSAGES, drafter_from
from tests.support.scripted import BatchJudgeBackend, ScriptedBackend

PREVIOUS = ("## Goal\n- KEEP create /workspace/hello.py\n\n## Progress\n### Done\n- KEEP wrote /workspace/hello.py\n\n"
            "## Key Decisions\n- KEEP use the write tool")
CARRIED_LINES = 3  # judge-needing lines in PREVIOUS


def holds(slot, line):
    return 0.95


def faint(slot, line):
    """r = 0.8 (above eta) on labels that carry 0.0005 of the probability: an unreliable verdict."""
    return (0.0004, 0.0001)


def written(text, sampling):
    return "- NEW line\n"


def compaction(method, judge, **config):
    target = BatchJudgeBackend(judge=judge, repair=lambda s, acc: "", complete=written if method != "speccompact"
                               else None)
    drafter = ScriptedBackend(draft=drafter_from(DRAFTS)) if method == "speccompact" else None
    res = run_method(method, MESSAGES, target=target, drafter=drafter, previous_summary=PREVIOUS,
                     config=config or None)
    return res, target


def carried(res):
    return [l.text for s in res.slots for l in s.lines if l.origin is LineOrigin.CARRIED]


@pytest.mark.parametrize("method", ["speccompact", "target_delta"])
def test_carried_lines_are_not_kept_on_unreliable_verdicts(method):
    # before: the carried batch returned only accepted and score, and nothing applied min_label_mass
    res, _ = compaction(method, faint)
    assert carried(res) == []
    st = res.stats
    assert st.carried_proposed == CARRIED_LINES and st.carried_lines == 0
    assert st.unreliable_verdicts >= CARRIED_LINES and st.label_mass_min == pytest.approx(0.0005)
    kept, _ = compaction(method, holds)
    assert len(carried(kept)) == CARRIED_LINES and kept.stats.unreliable_verdicts == 0


@pytest.mark.parametrize("method", ["speccompact", "target_delta"])
def test_max_carried_share_zero_judges_nothing(method):
    res, target = compaction(method, holds, max_carried_share=0.0)
    assert carried(res) == [] and "verify_carried" not in res.stats.requests.get("target", {})
    assert res.stats.carried_proposed == 0 and res.stats.carried_lines == 0
    assert not any("still holds" in t.rsplit("<|im_start|>user", 1)[-1]
                   for kind, texts in target.requests if kind == "verify_batch" for t in texts)
    # the slot's own sub-section heading still carries: it needs no judgement
    assert "### Done" in [l.text for s in res.slots for l in s.lines]


LONG = 2000  # carried lines in one section


@pytest.mark.parametrize("method", ["speccompact", "target_delta"])
def test_carried_judge_requests_are_bounded_by_what_the_slot_keeps(method):
    """2,000 carried lines in one section: a dozen judge prompts, not 2,000 (each holds the whole branch)."""
    previous = "## Critical Context\n" + "\n".join(f"- /repo/module_{i}.py holds part {i}" for i in range(LONG))
    target = BatchJudgeBackend(judge=holds, repair=lambda s, acc: "", complete=written)
    drafter = ScriptedBackend(draft=drafter_from(DRAFTS)) if method == "speccompact" else None
    # the invented module paths have no source: the judge's bound is what is tested, not the evidence check
    res = run_method(method, MESSAGES, target=target, drafter=drafter, previous_summary=previous,
                     config={"evidence_check": False})
    asked = [t for kind, texts in target.requests if kind == "verify_batch" for t in texts
             if "still holds" in t.rsplit("<|im_start|>user", 1)[-1]]
    one = max(len(t.split()) + t.count("\n") for t in asked)  # the scripted tokenizer's count of one prompt
    max_lines = 12
    assert len(asked) <= max_lines  # judged only up to what the slot can keep
    st = res.stats
    assert st.carried_proposed == len(asked) and st.carried_lines == max_lines - 1
    counted = st.requests["target"]["verify_carried"]
    assert counted.prompt_tokens <= max_lines * one  # before: 2,000 prompts of the whole branch each
    assert counted.requests <= 3  # the shared part's prefill and at most two bounded batches
