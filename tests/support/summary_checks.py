"""The summary-line check every end-to-end test runs on what a compaction returned.

``assert_summary_clean(result_or_text, labels=...)`` fails when a summary
line is a bare judge label (``positive``, `` Negative.``, ``- POSITIVE``...)
or when a draft the judge rejected is in the summary without a line that
vouches for it (judged positive elsewhere, or written by the target).  It
takes a ``CompactionResult``, its JSON form (the service's answer), or a
summary text (a Hermes or OpenClaw transcript's summary message), and
returns the summary's non-blank lines so a test can go on reading them.
The rules themselves are
:func:`bench.harness.summary_lines.summary_defects`, which
the benchmarks record too.
"""

from __future__ import annotations

from bench.harness.summary_lines import LABELS, summary_parts, summary_defects


def assert_summary_clean(result_or_text, labels=LABELS) -> list[str]:
    """Assert no summary line is a bare label word and no rejected draft got in; return the lines.

    Parameters
    ----------
    result_or_text
        A ``CompactionResult``, its JSON dict (``summary`` and optionally
        ``slots``), or the summary text.
    labels
        The judge's label words (default ``("positive", "negative")``).

    Returns
    -------
    list of str
        The summary's non-blank lines (at least one: an empty summary fails).
    """
    text, _ = summary_parts(result_or_text)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines, "the summary is empty"
    defects = summary_defects(result_or_text, labels)
    assert not defects, "summary lines are wrong:\n" + "\n".join(defects) + "\n--- summary ---\n" + text
    return lines
