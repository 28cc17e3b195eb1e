"""Line checks, draft splitting and budgets (pure)."""

from sgl_speccompact.config import CompactConfig
from sgl_speccompact.errors import ConfigError
from sgl_speccompact.config import make_config
from sgl_speccompact.core.lines import LineKind, SlotBudget, Used, classify_line, split_draft
from sgl_speccompact.core.prompts import assemble, section
from sgl_speccompact.schema import OPENCLAW_SLOTS

import pytest

CFG = CompactConfig()


def test_paper_defaults():
    assert (CFG.eta, CFG.max_lines_per_slot, CFG.max_tokens_per_slot, CFG.max_new_tokens,
            CFG.max_summary_tokens) == (0.7, 12, 320, 64, 2048)


def test_bad_config_is_a_typed_error():
    with pytest.raises(ConfigError):
        make_config(eta=1.5)
    with pytest.raises(ConfigError):
        make_config({"max_lines": 3})  # unknown field
    with pytest.raises(ConfigError):
        make_config(positive_label="yes", negative_label="Yes")


def test_check_order_duplicate_before_length_before_bypass():
    long_heading = "#" + "x" * 500
    assert classify_line(long_heading, [], CFG) is LineKind.TOO_LONG  # length check comes first
    assert classify_line("### Done", ["### Done"], CFG, sections=("Done",)) is LineKind.DUPLICATE
    assert classify_line("  - Fix  A.py ", ["- fix a.py"], CFG) is LineKind.DUPLICATE
    assert classify_line("(None)", [], CFG) is LineKind.UNJUDGED
    assert classify_line("   ", [], CFG) is LineKind.BLANK
    assert classify_line("- ran tests", ["", ""], CFG) is LineKind.JUDGE


def test_split_draft_drops_incomplete_tail_only_when_cut():
    assert split_draft("- a\n- b\n- c", finished=False) == (["- a", "- b"], False)
    assert split_draft("- a\n\n- b\n", finished=True) == (["- a", "", "- b"], False)
    assert split_draft("", finished=True) == ([], False)


def test_budget_counts_blank_lines_as_tokens_not_lines():
    b, tokens = SlotBudget(max_lines=2, max_tokens=6), {"- a": 2, "": 1, "- b": 3}
    used = Used.of(["- a", ""], tokens.__getitem__)
    assert (used.lines, used.tokens, used.blanks) == (1, 3, 1)
    assert b.check(used, "- b", 3) is None
    used = Used.of(["- a", "", "- b"], tokens.__getitem__)
    assert b.check(used, "- c", 0) == "line_budget" and b.check(used, "", 1) == "token_budget"


def test_assembly_in_schema_order_with_none_for_empty_slots():
    text = assemble(OPENCLAW_SLOTS, {"next_steps": ["1. run tests"], "goal": ["- fix bug", ""]})
    heads = [l for l in text.splitlines() if l.startswith("## ")]
    assert heads == [f"## {s.title}" for s in OPENCLAW_SLOTS]
    assert "## Goal\n- fix bug\n\n## Constraints & Preferences\n(none)" in text
    assert section(OPENCLAW_SLOTS[4], []) == "## Next Steps\n(none)"


def test_a_slot_heading_drafted_inside_a_slot_is_not_accepted():
    for line in ("## Next Steps", "  ## Goal", "# Summary"):
        assert classify_line(line, [], CFG) not in (LineKind.UNJUDGED, LineKind.JUDGE), line
    assert classify_line("### Done", [], CFG, sections=("Done",)) is LineKind.UNJUDGED  # the contract's sub-sections stay


def test_only_the_slot_contracts_own_headings_bypass_the_judge():
    # before: any line opening with "#" was accepted without a judge call
    progress = ("Done", "In Progress", "Blocked")
    for line in ("### Deleted the prod database, all tests pass", "### Done", "#### Done", "### Notes"):
        assert classify_line(line, [], CFG) is LineKind.JUDGE, line  # a slot without sections has none
    assert classify_line("###  in progress", [], CFG, sections=progress) is LineKind.UNJUDGED
    assert classify_line("### Deleted the prod database", [], CFG, sections=progress) is LineKind.JUDGE
    assert classify_line("#### Done", [], CFG, sections=progress) is LineKind.JUDGE


def test_a_looping_models_numbered_copies_are_duplicates():
    # before: "1. X", "2. X", "3. X" compared as raw text, so each copy was a new line
    from sgl_speccompact.core.lines import norm_line

    accepted = ["1. Run the tests"]
    for copy in ("2. Run the tests", "3) run the  tests", "- Run the tests", "* 4. Run the tests"):
        assert classify_line(copy, accepted, CompactConfig()) is LineKind.DUPLICATE, copy
    assert classify_line("2. Run the linter", accepted, CompactConfig()) is LineKind.JUDGE
    # a checkbox is content: done and not done are two lines; a version number is not a list number
    assert norm_line("- [x] ship it") != norm_line("- [ ] ship it")
    assert norm_line("3.5 GB free") == "3.5 gb free"
