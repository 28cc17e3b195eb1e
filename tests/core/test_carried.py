"""Carried lines: in an incremental compaction, the previous summary's lines are each slot's
first proposals, kept when the target judges they still hold (origin ``carried``)."""

import doctest

import pytest

from sgl_speccompact.core import carried
from sgl_speccompact.core.carried import previous_lines
from sgl_speccompact.methods.speccompact import compact
from sgl_speccompact.result import LineOrigin
from sgl_speccompact.schema import OPENCLAW_SLOTS

from tests.support.programs import DRAFTS, MESSAGES
from tests.support.scripted import BatchJudgeBackend, ScriptedBackend, accepted_of, slot_of

PREVIOUS = ("## Goal\n- KEEP create /workspace/hello.py\n- STALE deploy to staging\n\n"
            "## Progress\n### Done\n- KEEP wrote /workspace/hello.py\n### In Progress\n- STALE waiting on CI\n\n"
            "## Key Decisions\n- KEEP use the write tool\n\n## Next Steps\n(none)\n\n## Not A Slot\n- KEEP orphan")


def judge(slot, line):
    return 0.05 if "STALE" in line or "BAD" in line else 0.95


def repair(slot, accepted):
    return f"- REPAIRED {slot} line {len(accepted)}\n"


def new_lines_drafter():
    """Drafts ``DRAFTS[slot]`` lines that are not yet in the slot (continuing after carried lines)."""
    def draft(slot, accepted, text):
        section = accepted[0] if accepted and accepted[0].startswith("### ") else None
        lines = DRAFTS[slot]
        if section is not None:
            if section not in lines:
                return "", "stop"
            i = lines.index(section)
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("### ")), len(lines))
            lines = lines[i + 1:end]
        rest = [l for l in lines if l not in accepted]
        return "\n".join(rest[:1]), "stop"
    return draft


def run(previous, **config):
    config = {"evidence_check": False, **config}  # the previous summaries here have no ledger, and their paths are not in the new turns: no evidence check
    target = ScriptedBackend(judge=judge, repair=repair)
    drafter = ScriptedBackend(draft=new_lines_drafter())
    res = compact(MESSAGES, target=target, drafter=drafter, previous_summary=previous, config=config or None)
    return res, target, drafter


def test_doctests():
    failed, attempted = doctest.testmod(carried)
    assert failed == 0 and attempted > 0


NO_EVIDENCE = {"evidence_check": False}  # MANY's paths are not in MESSAGES: every carried line would be dropped unjudged
MANY = ("## Critical Context\n" + "\n".join(f"- KEEP /repo/f{i}.py" for i in range(8))
        + "\n- STALE /repo/old.py\n- STALE /repo/gone.py\n\n## Goal\n- KEEP create /workspace/hello.py")


def carried_batches(target):
    """The judge batches that asked whether carried lines still hold (the criterion before the line)."""
    batches = [texts for kind, texts in target.requests if kind == "verify_batch"]
    return [b for b in batches if "still holds" in b[0].rsplit("<|im_start|>user", 1)[-1]]


def test_one_slots_carried_lines_cost_one_batch_after_their_shared_prefix():
    target = BatchJudgeBackend(judge=judge, repair=repair)
    drafter = ScriptedBackend(draft=new_lines_drafter())
    res = compact(MESSAGES, target=target, drafter=drafter, previous_summary=MANY, config=NO_EVIDENCE)
    by_slot = {}
    for b in carried_batches(target):
        by_slot.setdefault(slot_of(b[0]), []).append(len(b))
    assert by_slot == {"critical_context": [10], "goal": [1]}  # one request per slot, every carried line in it
    # criterion first, for SpecCompact too: a batch of two or more shares everything but its lines,
    # prefilled once before it
    (warm,) = target.kinds("prefill")[1:]  # after the fork's prefill of the shared prefix
    assert slot_of(warm) == "critical_context" and "still holds" in warm.rsplit("<|im_start|>user", 1)[-1]
    assert all(t.startswith(warm) and t[len(warm):].startswith("<line>\n") for b in carried_batches(target)
               for t in b if slot_of(t) == "critical_context")
    context = [l.text for l in {s.name: s for s in res.slots}["critical_context"].lines
               if l.origin is LineOrigin.CARRIED]
    assert context == [f"- KEEP /repo/f{i}.py" for i in range(8)] and "STALE" not in res.summary
    assert res.stats.requests["target"]["verify_carried"].requests == 3  # the prefill, then one batch per slot
    assert res.stats.carried_proposed == 11 and res.stats.carried_lines == 9


def test_the_carried_cap_follows_the_judged_share():
    # 8 of 10 hold: 12 * 0.8 = 9 lines may be carried, so all 8 are; a fixed half would keep 6
    res, _, _ = run(MANY)
    kept = [l for s in res.slots for l in s.lines if s.name == "critical_context" and l.origin is LineOrigin.CARRIED]
    assert len(kept) == 8
    capped, _, _ = run(MANY, max_carried_share=0.5)
    kept = [l for s in capped.slots for l in s.lines if s.name == "critical_context"
            and l.origin is LineOrigin.CARRIED]
    assert len(kept) == 6


def test_carried_lines_are_the_previous_lines_judged_to_still_hold():
    res, target, drafter = run(PREVIOUS)
    proposed = previous_lines(PREVIOUS, OPENCLAW_SLOTS, ("(none)",))
    judged = 0
    for s in res.slots[:-1]:  # the six slots (the exact ledger comes last)
        got = [l.text for l in s.lines if l.origin is LineOrigin.CARRIED]
        prev = [line for line in proposed.get(s.name, ()) if not line.startswith("#")]
        judged += len(prev)
        assert got == [line for line in prev if judge(s.name, line) >= 0.7], s.name
    assert judged == 5 and "orphan" not in res.summary  # a section the schema lacks carries nothing
    assert res.stats.carried_proposed == 5 and res.stats.carried_lines == 3
    # a carried line that no longer holds is dropped, not repaired
    assert not any(l.rejected_draft and "STALE" in l.rejected_draft for s in res.slots for l in s.lines)
    assert "STALE" not in res.summary


def test_an_accepted_carried_line_costs_no_drafter_decode():
    res, target, drafter = run(PREVIOUS)
    goal = [accepted_of(t) for t in drafter.kinds("draft") if slot_of(t) == "goal"]
    # every goal draft continues after the carried line: none was asked to write it
    assert goal and all(a[:1] == ["- KEEP create /workspace/hello.py"] for a in goal)
    verified = [t for t in target.kinds("verify") if "KEEP" in t.rsplit("<line>", 1)[-1]
                or "STALE" in t.rsplit("<line>", 1)[-1]]
    assert len(verified) == 5  # each carried line judged once (one select each: this target judges no batch)
    _, _, plain = run(PREVIOUS, carry_previous_lines=False)
    assert [accepted_of(t) for t in plain.kinds("draft") if slot_of(t) == "goal"][0] == []


@pytest.mark.parametrize("previous, config", [(None, {}), (PREVIOUS, {"carry_previous_lines": False})])
def test_nothing_is_carried_without_a_previous_summary_or_when_off(previous, config):
    res, _, _ = run(previous, **config)
    assert not any(l.origin is LineOrigin.CARRIED for s in res.slots for l in s.lines)
    assert res.stats.carried_proposed == 0


def test_events_name_the_carried_origin():
    events = []
    target = ScriptedBackend(judge=judge, repair=repair)
    drafter = ScriptedBackend(draft=new_lines_drafter())
    compact(MESSAGES, target=target, drafter=drafter, previous_summary=PREVIOUS, on_event=events.append)
    lines = [e for e in events if e["type"] == "line" and e["origin"] == "carried"]
    assert {e["text"] for e in lines} == {"- KEEP create /workspace/hello.py", "- KEEP wrote /workspace/hello.py",
                                          "- KEEP use the write tool"}
