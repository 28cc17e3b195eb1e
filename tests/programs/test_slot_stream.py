"""The slot loop on sglang's real interpreter: a draft continues one prefix, and the repair path's
edge cases."""

import hashlib

import pytest

from sgl_speccompact.methods.speccompact import compact
from sgl_speccompact.result import LineOrigin

from tests.support.scripted import ScriptedBackend, accepted_of, slot_of
from tests.support.programs import DRAFTS, MESSAGES, backends, judge_bad



def slot(res, name):
    return {s.name: s for s in res.slots}[name]


def texts(res, name):
    return [l.text for l in slot(res, name).lines]


def decisions(res):
    return [(s.name, s.stop_reason, [(l.text, l.origin, l.rejected_draft) for l in s.lines]) for s in res.slots]


# ---------------------------------------------------------------- a draft continues one prefix


def digest(*parts) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:8]


def line_after(slot_name: str, lines: list[str]) -> str:
    """The line a hashing drafter writes after ``lines``: it hashes the exact prefix it continues.

    A line used after its prefix changed (a stale draft) therefore differs
    from every line a fresh draft would write.  A hash divisible by 3 marks
    the line BAD (the judge rejects it).
    """
    h = digest(slot_name, *lines)
    return f"- {h}" + (" BAD" if int(h, 16) % 3 == 0 else "")


def hashing_drafter(n_lines: int = 6):
    """A drafter that writes every remaining line of the slot at once (as one that ignores the stop does)."""
    def draft(slot_name, accepted, text):
        out = []
        while len(accepted) + len(out) < n_lines:
            out.append(line_after(slot_name, list(accepted) + out))
        return "\n".join(out), "stop"
    return draft


def test_a_draft_is_used_only_while_it_continues_the_branch():
    target = ScriptedBackend(judge=judge_bad, repair=lambda s, acc: f"- fix {digest(s, *acc)}\n")
    # the hashes the drafter writes have no source: without the evidence check they reach the judge
    res = compact(MESSAGES, target=target, drafter=IgnoresStop(draft=hashing_drafter()),
                  config={"evidence_check": False})
    repaired = 0
    for s in res.slots[:-1]:  # the six slots (the exact ledger comes last)
        lines = [l.text for l in s.lines]
        for i, line in enumerate(s.lines):
            if line.origin is LineOrigin.DRAFTED:  # drafted for exactly the lines before it
                assert line.text == line_after(s.name, lines[:i]), (s.name, i)
            repaired += line.origin is LineOrigin.REPAIRED
    assert repaired  # a repair changed a prefix that a draft's later lines continued: the case under test


# ---------------------------------------------------------------- repair path


def test_a_truncated_repair_is_never_accepted_nor_built_upon():
    drafts = {**DRAFTS, "goal": ["- a", "- BAD b", "- c"]}
    target, drafter = backends(drafts=drafts, repair=lambda s, acc: ("- a repair cut off by the li", "length"))
    res = compact(MESSAGES, target=target, drafter=drafter)
    goal = slot(res, "goal")
    assert [l.text for l in goal.lines] == ["- a"] and goal.stop_reason == "repair_truncated"
    assert "cut off" not in res.summary
    assert all("cut off" not in t for t in drafter.kinds("draft") + target.kinds("verify"))


def test_without_line_aware_stopping_a_long_repair_keeps_its_complete_first_line():
    drafts = {**DRAFTS, "goal": ["- a", "- BAD b"]}
    target, drafter = backends(drafts=drafts, repair=lambda s, acc: ("- fixed\n- more text cut o", "length"))
    res = compact(MESSAGES, target=target, drafter=drafter, config={"line_aware_stopping": False})
    assert texts(res, "goal") == ["- a", "- fixed"]


def test_a_blank_repaired_line_does_not_end_the_slot():
    drafts = {**DRAFTS, "goal": ["- a", "- BAD b", "- c"]}
    # the target's next line is blank: it stops at the newline with no text
    target, drafter = backends(drafts=drafts, repair=lambda s, acc: "\n- would come next")
    res = compact(MESSAGES, target=target, drafter=drafter)
    goal = slot(res, "goal")
    assert [l.text for l in goal.lines] == ["- a", "", "- c"] and goal.stop_reason == "complete"
    assert goal.lines[1].origin is LineOrigin.REPAIRED


def repairs_per_slot(target):
    out = {}
    for t in target.kinds("repair"):
        out[slot_of(t)] = out.get(slot_of(t), 0) + 1
    return out


def test_a_target_that_always_answers_blank_costs_at_most_two_blank_repairs_per_slot():
    # before: each blank repair was accepted and the slot went on until its 320 tokens ran out
    # (one slot: 316 judgements, 316 repairs); now the second blank repair in a row ends it
    drafts = {name: [f"- BAD {i}" for i in range(60)] for name in DRAFTS}
    target, drafter = backends(drafts=drafts, repair=lambda s, acc: "\n")
    res = compact(MESSAGES, target=target, drafter=drafter)
    repairs = repairs_per_slot(target)
    assert set(repairs) == set(DRAFTS) and max(repairs.values()) == 2
    for s in res.slots[:-1]:  # the exact ledger last, copied from the history
        assert s.stop_reason == "empty_repair" and not s.lines  # blank lines at the ends are not content


def test_two_blank_repairs_in_a_row_count_only_since_the_last_real_line():
    # a real line accepted between two blank repairs makes the second a paragraph break too
    def alternating(name):  # each slot's own lines: a line in two slots is kept once at assembly
        return [f"- {name} good {i}" if i % 2 == 0 else f"- BAD {i}" for i in range(60)]
    drafts = {name: alternating(name) for name in DRAFTS}
    target, drafter = backends(drafts=drafts, repair=lambda s, acc: "\n")
    # slot names as lines ("- constraints_preferences good 0") name code words no history shows
    res = compact(MESSAGES, target=target, drafter=drafter, config={"max_blank_lines_per_slot": 3,
                                                                   "evidence_check": False})
    assert max(repairs_per_slot(target).values()) <= 3 + 1  # bounded by the blank budget
    for s in res.slots[:-1]:  # the exact ledger last, copied from the history
        kept = [l.text for l in s.lines]
        good = [f"- {s.name} good {i}" for i in (0, 2, 4, 6)]
        assert kept == [good[0], "", good[1], "", good[2], "", good[3]], s.name
        assert s.stop_reason == "blank_budget"


def test_a_first_blank_repair_is_a_paragraph_break_when_a_real_line_follows():
    answers = {}

    def repair(slot_name, accepted):  # blank first, a real line second, per slot
        answers[slot_name] = answers.get(slot_name, 0) + 1
        return "\n" if answers[slot_name] == 1 else "- fixed\n"
    target, drafter = backends(drafts={**DRAFTS, "goal": ["- BAD a", "- BAD b"]}, repair=repair)
    res = compact(MESSAGES, target=target, drafter=drafter)
    assert texts(res, "goal") == ["- fixed"] and slot(res, "goal").lines[0].origin is LineOrigin.REPAIRED
    assert answers["goal"] == 2


def test_a_blank_repair_after_a_blank_line_is_empty():
    target, drafter = backends(drafts={**DRAFTS, "goal": ["- a", "", "- BAD c"]}, repair=lambda s, acc: "\n")
    res = compact(MESSAGES, target=target, drafter=drafter)
    assert texts(res, "goal") == ["- a"] and slot(res, "goal").stop_reason == "empty_repair"


def test_a_replacement_opening_with_a_newline_keeps_its_text():
    # without line-aware stopping the target's answer runs on; a leading newline is not the line
    drafts = {**DRAFTS, "goal": ["- a", "- BAD b"]}
    target, drafter = backends(drafts=drafts, repair=lambda s, acc: ("\n- fixed\n- more", "length"))
    res = compact(MESSAGES, target=target, drafter=drafter, config={"line_aware_stopping": False})
    assert texts(res, "goal") == ["- a", "- fixed"]


def test_blank_lines_count_toward_a_small_per_slot_cap():
    spaced = [x for i in range(8) for x in (f"- item {i}", "")]
    target, drafter = backends(drafts={**DRAFTS, "goal": spaced})
    res = compact(MESSAGES, target=target, drafter=drafter, config={"max_blank_lines_per_slot": 2})
    assert texts(res, "goal") == ["- item 0", "", "- item 1", "", "- item 2"]
    assert slot(res, "goal").stop_reason == "blank_budget"


def test_the_end_of_the_answer_ends_the_slot():
    drafts = {**DRAFTS, "goal": ["- a", "- BAD b", "- c"]}
    target, drafter = backends(drafts=drafts, repair=lambda s, acc: "")  # EOS right away
    res = compact(MESSAGES, target=target, drafter=drafter)
    assert texts(res, "goal") == ["- a"] and slot(res, "goal").stop_reason == "target_ended"


def test_a_full_slot_makes_no_drafter_call_and_drafts_ask_for_the_remaining_tokens():
    drafts = {**DRAFTS, "goal": [f"- item {i}" for i in range(30)]}
    target, drafter = backends(drafts=drafts)
    res = compact(MESSAGES, target=target, drafter=drafter,
                  config={"max_lines_per_slot": 4, "max_tokens_per_slot": 40})
    calls = [accepted_of(t) for t in drafter.kinds("draft") if "Generate only the goal" in t]
    assert len(texts(res, "goal")) == 4 and slot(res, "goal").stop_reason == "line_budget"
    assert max(len(c) for c in calls) == 3  # no call once four lines are in
    # every "- item N\n" is 4 scripted tokens; each draft asks for at most what is left of 40
    caps = [n for kind, n in drafter.max_new_tokens if kind == "draft"]
    assert 40 - 4 * 3 in caps and all(n <= 40 for n in caps)


def test_stats_count_content_lines_only():
    events = []
    # a blank line inside a slot (it used to come from the sub-section joins, on by default then)
    target, drafter = backends(drafts={**DRAFTS, "goal": ["- a", "", "- b c d e f g h"],
                                       "critical_context": ["x", "", "y"]})
    res = compact(MESSAGES, target=target, drafter=drafter, on_event=events.append,
                  config={"max_tokens_per_slot": 6})
    goal = slot(res, "goal")
    # "- a\n" is 3 tokens, the blank 1; the third line does not fit; the trailing blank is trimmed
    assert [l.text for l in goal.lines] == ["- a"] and goal.tokens == 3
    assert goal.stop_reason == "token_budget"
    unjudged = sum(1 for s in res.slots for l in s.lines if l.origin is LineOrigin.UNJUDGED and l.text.strip())
    blanks = sum(1 for s in res.slots for l in s.lines if not l.text.strip())
    assert blanks and res.stats.unjudged_lines == unjudged
    written = {e["slot"]: e["lines"] for e in events if e["type"] == "slot_written"}
    assert written == {s.name: sum(1 for l in s.lines if l.text.strip()) for s in res.slots if s.name != "ledger"}
    done = {e["slot"]: e["lines"] for e in events if e["type"] == "slot_done"}  # settled: the final lines
    assert done == {s.name: [l.text for l in s.lines if l.text.strip()] for s in res.slots}


class IgnoresStop(ScriptedBackend):
    """A drafter backend that ignores ``stop``: its answer keeps every line it wrote."""

    def generate(self, s, sampling_params):
        if sampling_params.max_new_tokens == 0:  # the drafter's prefill
            return super().generate(s, sampling_params)
        self._record("draft", s.text_)
        out, _ = self.draft_fn(slot_of(s.text_), accepted_of(s.text_), s.text_)
        return out, {"prompt_tokens": 1, "cached_tokens": 0, "completion_tokens": 1,
                     "finish_reason": {"type": "stop", "matched": 151645}}


@pytest.mark.parametrize("brk", ["\n", "\r\n", "\u2028", "\x85"])
def test_a_backend_that_ignores_stop_still_gets_one_line_per_line(brk):
    def draft(slot_name, accepted, text):
        if slot_name != "goal":
            return "", "stop"
        return brk.join(["- goal line", "## Next Steps", "1. forged step"][len(accepted):]), "stop"
    target = ScriptedBackend(judge=judge_bad, repair=lambda s, acc: "")
    res = compact(MESSAGES, target=target, drafter=IgnoresStop(draft=draft))
    goal = texts(res, "goal")
    assert goal[0] == "- goal line" and not any("Next Steps" in t or brk in t for t in goal)
    assert "\n## Next Steps\n(none)" in res.summary  # the one Next Steps section is the slot's own
