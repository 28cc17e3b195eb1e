"""The slot loop on sglang's real interpreter: pipelined drafting, sub-slot
branches, and the repair path's edge cases."""

import hashlib
import threading

import pytest

from sgl_speccompact.methods.speccompact import compact
from sgl_speccompact.result import LineOrigin

from tests.support.scripted import ScriptedBackend, accepted_of, slot_of
from tests.support.programs import DRAFTS, MESSAGES, backends, drafter_from, judge_bad, repair_fixed

WAIT_S = 20  # a held verdict gives up after this long and fails the compaction


def slot(res, name):
    return {s.name: s for s in res.slots}[name]


def texts(res, name):
    return [l.text for l in slot(res, name).lines]


def decisions(res):
    return [(s.name, s.stop_reason, [(l.text, l.origin, l.rejected_draft) for l in s.lines]) for s in res.slots]


# ---------------------------------------------------------------- pipelined drafting


def ordering_backends(drafts, hold: bool):
    """Target whose verdict on goal line j waits until the drafter was asked for line j+1."""
    asked = {}  # (slot, last accepted line) -> Event set when a draft continuing it was requested
    lock = threading.Lock()
    seen = []  # (line, was the next draft requested before the verdict)

    def event(key):
        with lock:
            return asked.setdefault(key, threading.Event())

    inner = drafter_from(drafts)

    def draft(slot_name, accepted, text):
        if accepted:
            event((slot_name, accepted[-1])).set()
        return inner(slot_name, accepted, text)

    def judge(slot_name, line):
        if slot_name == "goal" and line != drafts["goal"][-1]:
            ev = event((slot_name, line))
            got = ev.wait(WAIT_S) if hold else ev.is_set()
            seen.append((line, got))
            if hold and not got:
                raise TimeoutError(f"no draft after {line!r} was requested while it was judged")
        return judge_bad(slot_name, line)

    return ScriptedBackend(judge=judge, repair=repair_fixed), ScriptedBackend(draft=draft), seen


def test_next_line_is_drafted_before_the_verdict_arrives():
    drafts = {**DRAFTS, "goal": ["- a", "- b", "- c"]}
    target, drafter, seen = ordering_backends(drafts, hold=True)
    res = compact(MESSAGES, target=target, drafter=drafter)
    assert seen == [("- a", True), ("- b", True)]
    assert texts(res, "goal") == ["- a", "- b", "- c"]
    assert res.stats.dropped_drafts == 0


def test_without_pipelining_the_next_draft_waits_for_the_verdict():
    drafts = {**DRAFTS, "goal": ["- a", "- b", "- c"]}
    target, drafter, seen = ordering_backends(drafts, hold=False)
    compact(MESSAGES, target=target, drafter=drafter, config={"pipelined_drafting": False})
    assert seen == [("- a", False), ("- b", False)]


def test_a_rejection_drops_the_speculative_draft():
    drafts = {**DRAFTS, "goal": ["- a", "- BAD b", "- c"]}
    inner, drafted_past_bad = drafter_from(drafts), threading.Event()

    def draft(slot_name, accepted, text):
        if slot_name == "goal" and accepted and accepted[-1] == "- BAD b":
            drafted_past_bad.set()
        return inner(slot_name, accepted, text)

    def judge(slot_name, line):
        # the verdict on BAD b waits for the speculative draft, so the drop is not left to thread timing
        if slot_name == "goal" and line == "- BAD b" and not drafted_past_bad.wait(WAIT_S):
            raise TimeoutError("no draft after '- BAD b' was requested while it was judged")
        return judge_bad(slot_name, line)

    target = ScriptedBackend(judge=judge, repair=lambda s, acc: "- fixed\n")
    drafter = ScriptedBackend(draft=draft)
    res = compact(MESSAGES, target=target, drafter=drafter)
    calls = [accepted_of(t) for t in drafter.kinds("draft") if "Generate only the goal" in t]
    # the draft after BAD b was sent while BAD b was judged, then dropped; drafting resumed after the repair
    assert ["- a", "- BAD b"] in calls and ["- a", "- fixed"] in calls
    assert calls.index(["- a", "- BAD b"]) < calls.index(["- a", "- fixed"])
    assert texts(res, "goal") == ["- a", "- fixed", "- c"]
    assert res.stats.dropped_drafts == res.stats.requests["drafter"]["draft_dropped"].requests == 1
    # every request the drafter received is counted once
    assert len(drafter.kinds("draft")) == res.stats.requests["drafter"]["draft"].requests + 1


def digest(*parts) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:8]


def hashing_drafter(n_lines: int = 6, per_call=None):
    """A drafter whose every line hashes the exact prefix it continues (the slot's lines so far).

    A draft used after its prefix changed (a stale draft) therefore holds
    lines no fresh draft would: a counting drafter, whose lines depend only on
    their position, cannot tell them apart.  A hash divisible by 3 marks the
    line BAD (the judge rejects it).
    """
    def line_after(slot_name, lines):
        h = digest(slot_name, *lines)
        return f"- {h}" + (" BAD" if int(h, 16) % 3 == 0 else "")

    def draft(slot_name, accepted, text):
        out = []
        while len(accepted) + len(out) < n_lines and (per_call is None or len(out) < per_call):
            out.append(line_after(slot_name, list(accepted) + out))
        if len(accepted) + len(out) >= n_lines:
            return "\n".join(out), "stop"
        return "\n".join(out) + "\n- partial li", "length"
    return draft


def pipelining_runs(per_call):
    out = {}
    for pipelined in (True, False):
        target = ScriptedBackend(judge=judge_bad, repair=lambda s, acc: f"- fix {digest(s, *acc)}\n")
        drafter = ScriptedBackend(draft=hashing_drafter(per_call=per_call))
        res = compact(MESSAGES, target=target, drafter=drafter, config={"pipelined_drafting": pipelined})
        out[pipelined] = (decisions(res), res.stats.dropped_drafts)
    return out


@pytest.mark.parametrize("per_call", [None, 2])
def test_same_decisions_with_and_without_pipelining(per_call):
    # test_a_stale_draft_is_caught injects a stale-draft bug and watches this comparison fail
    out = pipelining_runs(per_call)
    assert out[True][0] == out[False][0]
    lines = [l for _, _, ls in out[True][0] for l in ls]
    assert any(o is LineOrigin.REPAIRED for _, o, _ in lines)
    assert out[True][1] > 0  # some drafts sent ahead were dropped: the case under test happened


def test_a_stale_draft_is_caught(monkeypatch):
    """Injected bug: a draft sent ahead is used whatever prefix it continues."""
    from sgl_speccompact.programs.proposers import Drafter

    def stale(self, branch, prefix):
        pending, self.pending = self.pending, None
        if pending is None:
            return real(self, branch, prefix)
        d = pending[1].result()
        branch.ctx.recorder.request("drafter", "draft", d.meta)
        return d

    real = Drafter.next_draft
    monkeypatch.setattr(Drafter, "next_draft", stale)
    out = pipelining_runs(None)
    assert out[True][0] != out[False][0]  # the hashing drafter exposes it
    # a drafter whose lines depend only on their position would not
    counted = {}
    for pipelined in (True, False):
        drafts = {**DRAFTS, "goal": ["- a", "- BAD b", "- c", "- d"]}
        target, drafter = backends(drafts=drafts, repair=lambda s, acc: f"- fix {len(acc)}\n")
        counted[pipelined] = decisions(compact(MESSAGES, target=target, drafter=drafter,
                                               config={"pipelined_drafting": pipelined}))
    assert counted[True] == counted[False]


# ---------------------------------------------------------------- sub-slot branches


PROGRESS = ["### Done", "- [x] created hello.py", "- [x] ran it", "", "### In Progress", "- [ ] verify output",
            "", "### Blocked", "- (none)"]
BRANCHES = {"sub_slot_branches": True}  # off by default until a real-model retention check


def test_sub_slot_branches_assemble_in_order_like_one_branch():
    drafts = {**DRAFTS, "progress": PROGRESS}
    target, drafter = backends(drafts=drafts)
    split = compact(MESSAGES, target=target, drafter=drafter, config=BRANCHES)
    # three branches: each progress request's assistant turn opens with its own heading
    firsts = {accepted_of(t)[0] for t in drafter.kinds("draft") if "Generate only the progress" in t
              and accepted_of(t)}
    assert firsts == {"### Done", "### In Progress", "### Blocked"}
    target, drafter = backends(drafts=drafts)
    whole = compact(MESSAGES, target=target, drafter=drafter, config={"sub_slot_branches": False})
    assert texts(split, "progress") == texts(whole, "progress") == PROGRESS
    assert split.summary == whole.summary
    assert slot(split, "progress").tokens == slot(whole, "progress").tokens


def progress_both_ways(lines, repair=repair_fixed, **config):
    out = []
    for on in (True, False):
        target, drafter = backends(drafts={**DRAFTS, "progress": lines}, repair=repair)
        res = compact(MESSAGES, target=target, drafter=drafter, config={"sub_slot_branches": on, **config})
        out.append((texts(res, "progress"), slot(res, "progress").stop_reason, slot(res, "progress").tokens))
    return out


def test_sub_slot_branches_share_the_slot_budget_in_order():
    # before, 12 lines were split 4/4/4 with each heading charged to its share: Done kept 3 of 8 items
    eight = ["### Done"] + [f"- [x] task {i}" for i in range(8)] + ["", "### In Progress", "- [ ] now", "",
                                                                  "### Blocked"]  # 12 lines
    (split, why, tokens), whole = progress_both_ways(eight)
    assert split.count("### Done") == 1 and sum(t.startswith("- [x]") for t in split) == 8
    assert (split, why, tokens) == whole and split == eight


def test_sub_slot_branches_stop_where_one_branch_would():
    many = ["### Done"] + [f"- [x] task {i}" for i in range(10)] + ["", "### In Progress", "- [ ] now"]
    (split, why, tokens), whole = progress_both_ways(many)
    # 12 lines: the heading, ten tasks and the next heading; "- [ ] now" is the 13th
    assert split == many[:13] and why == "line_budget"
    assert (split, why, tokens) == whole
    (split, why, _), whole = progress_both_ways(many, max_tokens_per_slot=30)
    assert (split, why) == whole[:2] and why == "token_budget"


def test_a_sub_section_that_stops_early_ends_the_slot_as_one_branch_would():
    # Done's repair is cut off: one branch stops the slot there, so the later sub-sections go too
    lines = ["### Done", "- [x] a", "- BAD b", "", "### In Progress", "- [ ] c"]
    (split, why, tokens), whole = progress_both_ways(lines, repair=lambda s, acc: ("- a repair cut o", "length"))
    assert split == ["### Done", "- [x] a"] and why == "repair_truncated"
    assert (split, why, tokens) == whole


def test_the_same_line_under_two_sub_sections_is_accepted_once():
    twice = ["### Done", "- ran the tests", "", "### In Progress", "- ran the tests", "- [ ] fix the flake"]
    # the drafter leaves Blocked empty: the target is asked, and says (none)
    repair = lambda s, acc: "(none)\n" if acc == ["### Blocked"] else "- [ ] other work\n"
    target, drafter = backends(drafts={**DRAFTS, "progress": twice}, repair=repair)
    res = compact(MESSAGES, target=target, drafter=drafter, config=BRANCHES)
    lines = texts(res, "progress")
    assert lines.count("- ran the tests") == 1
    # the second copy went to repair, as with one branch
    repaired = [l for l in slot(res, "progress").lines if l.origin is LineOrigin.REPAIRED]
    assert [(l.text, l.rejected_draft) for l in repaired] == [("- [ ] other work", "- ran the tests"),
                                                              ("(none)", None)]
    target, drafter = backends(drafts={**DRAFTS, "progress": twice}, repair=lambda s, acc: "- [ ] other work\n")
    whole = compact(MESSAGES, target=target, drafter=drafter)
    assert texts(whole, "progress").count("- ran the tests") == 1


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
    res = compact(MESSAGES, target=target, drafter=drafter, config={"max_blank_lines_per_slot": 3})
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
