"""Sub-slot branches (core/sections): one budget walked in order, one duplicate check across branches."""

from __future__ import annotations

import threading

from sgl_speccompact.core.lines import SlotBudget
from sgl_speccompact.core.sections import SlotLines, branch_lines, join_parts
from sgl_speccompact.result import LineOrigin, SlotResult, SummaryLine


def _part(stop, *texts):
    return SlotResult(name="progress", title="Progress", stop_reason=stop,
                      lines=[SummaryLine(text=t, origin=LineOrigin.DRAFTED) for t in texts])


def _join(parts, max_lines=12, max_tokens=320):
    return join_parts("progress", "Progress", parts, lambda t: 1, SlotBudget(max_lines=max_lines, max_tokens=max_tokens))


def test_a_branch_may_write_the_slots_lines_less_one_heading_per_earlier_section_and_at_least_one():
    assert [branch_lines(3, i) for i in range(5)] == [3, 2, 1, 1, 1]


def test_parts_join_in_order_with_one_blank_line_between_sections():
    out = _join([_part("complete", "### Done", "- a"), _part("complete", "### In Progress", "- b")])
    assert [line.text for line in out.lines] == ["### Done", "- a", "", "### In Progress", "- b"]
    assert out.stop_reason == "complete" and out.tokens == 5


def test_the_first_line_over_the_token_budget_ends_the_slot_without_a_trailing_blank():
    out = _join([_part("complete", "### Done", "- a"), _part("complete", "### Blocked", "- b")], max_tokens=3)
    assert [line.text for line in out.lines] == ["### Done", "- a"]
    assert out.stop_reason == "token_budget" and out.tokens == 2


def test_a_branch_that_stopped_early_ends_the_slot_after_its_lines():
    out = _join([_part("repair_failed", "### Done", "- a"), _part("complete", "### Blocked", "- b")])
    assert [line.text for line in out.lines] == ["### Done", "- a"] and out.stop_reason == "repair_failed"


def test_a_slot_filled_to_its_last_line_stops_on_the_line_budget():
    out = _join([_part("complete", "### Done", "- a"), _part("complete", "### Blocked", "- b")], max_lines=4)
    assert len([line for line in out.lines if line.text.strip()]) == 4 and out.stop_reason == "line_budget"


def test_an_empty_branch_adds_no_separator():
    out = _join([_part("complete", "### Done", "- a"), _part("complete")])
    assert [line.text for line in out.lines] == ["### Done", "- a"]


def test_a_line_is_claimed_once_across_branches_ignoring_case_and_spacing():
    lines = SlotLines()
    assert lines.claim("- Fix  the bug") and not lines.claim("- fix the bug") and lines.has("- FIX THE BUG")
    assert not lines.has("- another line")


def test_concurrent_claims_of_one_line_accept_it_exactly_once():
    lines, start, won = SlotLines(), threading.Barrier(8), []

    def claim():
        start.wait()
        won.append(lines.claim("- same line"))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * 7 + [True]
