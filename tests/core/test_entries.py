"""Summary entries (core/entries): what is deletable, what is structure, and what deleting keeps."""

from __future__ import annotations

import pytest

from sgl_speccompact.core.entries import drop_entries, is_structure, prune_slots, split_entries
from sgl_speccompact.result import LineOrigin, SlotResult, SummaryLine

SUMMARY = "\n".join([
    "## Goal", "- fix a.py", "  in /repo", "",
    "## Progress", "Done:", "- ran tests", "```", "pytest -q", "```", "---", "> quoted", "> still quoted",
    "## Next Steps", "(none)", "1. run the linter",
])


@pytest.mark.parametrize("line", ["## Goal", "", "   ", "---", "* * *", "Done:", "**Blocked:**", "- (none)", "(None)"])
def test_headings_blank_lines_rules_labels_and_empty_markers_are_structure(line):
    assert is_structure(line, ["(none)"])


@pytest.mark.parametrize("line", ["- fix a.py", "1. run tests", "plain text under a heading", "Done: a.py fixed"])
def test_content_lines_are_not_structure(line):
    assert not is_structure(line, ["(none)"])


def test_items_own_their_continuations_code_blocks_and_quotes():
    entries = split_entries(SUMMARY, ["(none)"])
    assert [(e.text, e.section) for e in entries] == [
        ("- fix a.py\n  in /repo", "Goal"),
        ("- ran tests\n```\npytest -q\n```", "Progress"),
        ("> quoted\n> still quoted", "Progress"),
        ("1. run the linter", "Next Steps"),
    ]
    lines = SUMMARY.split("\n")
    assert all("\n".join(lines[e.start:e.end]) == e.text for e in entries)


def test_a_fence_not_under_an_item_is_an_entry_of_its_own():
    entries = split_entries("## Critical Context\n```\nerror: x\n```\n- after")
    assert [e.text for e in entries] == ["```\nerror: x\n```", "- after"]


def test_dropping_entries_keeps_every_other_line_verbatim():
    entries = split_entries(SUMMARY, ["(none)"])
    out = drop_entries(SUMMARY, entries, [True, False, True, False])
    assert out.split("\n") == [
        "## Goal", "- fix a.py", "  in /repo", "",
        "## Progress", "Done:", "---", "> quoted", "> still quoted",
        "## Next Steps", "(none)",
    ]
    assert drop_entries(SUMMARY, entries, [True] * len(entries)) == SUMMARY


def _slot(name, title, *texts):
    return SlotResult(name=name, title=title, stop_reason="complete", tokens=len(texts),
                      lines=[SummaryLine(text=t, origin=LineOrigin.DRAFTED) for t in texts])


def test_pruning_removes_the_matching_slot_lines_and_recounts_only_those_slots():
    slots = [_slot("goal", "Goal", "- a", "- b"), _slot("next_steps", "Next Steps", "- a", "- c")]
    lines = ["## Goal", "- a", "- b", "## Next Steps", "- a", "- c"]
    out = prune_slots(slots, lines, {4}, lambda texts: [10] * len(texts))  # the second "- a" only
    assert [line.text for line in out[0].lines] == ["- a", "- b"] and out[0].tokens == 2  # untouched
    assert [line.text for line in out[1].lines] == ["- c"] and out[1].tokens == 10
    assert [line.text for line in slots[1].lines] == ["- a", "- c"]  # the caller's slots are not mutated


def test_lines_before_any_heading_belong_to_the_summary_slot():
    slots = [_slot("summary", "Summary", "intro", "- x")]
    out = prune_slots(slots, ["intro", "- x"], {0}, lambda texts: [1] * len(texts))
    assert [line.text for line in out[0].lines] == ["- x"]

