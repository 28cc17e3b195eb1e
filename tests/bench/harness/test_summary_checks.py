"""The summary-line check the end-to-end tests share (tests/support/summary_checks.py)."""

import pytest
from tests.support.summary_checks import assert_summary_clean

from sgl_speccompact.result import CompactionResult, LineOrigin, SlotResult, SummaryLine


def result(lines: list[SummaryLine]) -> CompactionResult:
    return CompactionResult(method="speccompact", summary="## Goal\n" + "\n".join(ln.text for ln in lines),
                            slots=[SlotResult(name="goal", title="Goal", lines=lines)])


@pytest.mark.parametrize("bad", ["positive", "Negative", "  POSITIVE ", "- negative", "1. positive.", "**Positive**"])
def test_a_bare_label_line_fails_in_every_form(bad):
    with pytest.raises(AssertionError, match="bare label word"):
        assert_summary_clean(f"## Goal\n- fix parser.py\n{bad}\n")
    with pytest.raises(AssertionError, match="bare label word"):
        assert_summary_clean(result([SummaryLine(text=bad, origin=LineOrigin.REPAIRED, rejected_draft="- x")]))


def test_other_label_words_are_checked():
    assert_summary_clean("- yes\n- fix it")
    with pytest.raises(AssertionError):
        assert_summary_clean("- yes\n- fix it", labels=("yes", "no"))


def test_a_rejected_draft_in_the_summary_fails_unless_a_line_vouches_for_it():
    rejected = SummaryLine(text="- the repair", origin=LineOrigin.REPAIRED, rejected_draft="- invented")
    leaked = SummaryLine(text="- invented", origin=LineOrigin.UNJUDGED)
    with pytest.raises(AssertionError, match="rejected draft '- invented'"):
        assert_summary_clean(result([rejected, leaked]))
    judged = SummaryLine(text="- invented", origin=LineOrigin.DRAFTED, score=0.9)  # accepted at another place
    assert assert_summary_clean(result([rejected, judged])) == ["## Goal", "- the repair", "- invented"]
    assert_summary_clean(result([rejected, judged]).to_json_dict())  # the service's JSON answer too


def test_an_empty_summary_fails():
    with pytest.raises(AssertionError, match="empty"):
        assert_summary_clean("\n  \n")
