"""What is wrong with a summary's lines: bare judge labels and rejected drafts that got in.

A judge label is the target's one-word verdict (``positive`` / ``negative``);
it must never become a line of a summary, which is what happens when a
generation request is answered as if it were a judgement.  A draft the judge
rejected must not be in the summary either, unless a line with the same text
got in on its own merits: judged positive at another place, or written by the
target itself.  Tests (``tests/support/summary_checks.py``) and the benchmarks read
every summary through :func:`summary_defects`.
"""

from __future__ import annotations

import re

LABELS = ("positive", "negative")  # CompactConfig's default label words
# origins of a line that vouch for its text: judged to hold, or written by the target itself
VOUCHED = ("drafted_accepted", "drafted_candidate", "carried", "repaired", "target_written")
_MARKER = re.compile(r"^(?:[-*+]|\d+[.)]|#+)\s+(?:\[[ xX]\]\s+)?")  # list item, numbered item, heading, checkbox
_EDGES = " \t\"'`*_.,:;!?()[]"  # quoting and punctuation around a bare word


def bare_label(line: str, labels=LABELS) -> bool:
    """Whether ``line`` is nothing but a label word (any case, spacing, list marker or punctuation).

    >>> [bare_label(x) for x in ("positive", " Negative.", "- POSITIVE", "1. **negative**", "- positive test")]
    [True, True, True, True, False]
    """
    word = _MARKER.sub("", line.strip()).strip(_EDGES).casefold()
    return bool(word) and word in {label.strip().casefold() for label in labels}


def summary_parts(result_or_text) -> tuple[str, list[dict]]:
    """The summary text and its slots' lines (as dicts) of a result, its JSON form, or a text."""
    if isinstance(result_or_text, str):
        return result_or_text, []
    if isinstance(result_or_text, dict):
        data = result_or_text
    elif hasattr(result_or_text, "model_dump"):  # CompactionResult
        data = result_or_text.model_dump(mode="json")
    else:
        raise TypeError(f"expected a summary text, a CompactionResult or its JSON, got {type(result_or_text)}")
    if not isinstance(data.get("summary"), str):
        raise TypeError("the result has no summary text")
    lines = [ln for slot in data.get("slots") or [] for ln in slot.get("lines") or []]
    return data["summary"], lines


def summary_defects(result_or_text, labels=LABELS) -> list[str]:
    """Every defect of a summary's lines, as one sentence each ([] when clean).

    Parameters
    ----------
    result_or_text
        A :class:`~sgl_speccompact.result.CompactionResult`, its JSON form
        (a dict with ``summary`` and optionally ``slots``), or a summary text.
    labels
        The judge's label words.

    Returns
    -------
    list of str
        A line that is a bare label word (in the text or in a slot), and,
        for a result with slots, a rejected draft found as a summary line
        that no vouched line (:data:`VOUCHED`) accounts for.

    Examples
    --------
    >>> summary_defects("## Goal\\n- fix a.py\\npositive")
    ["summary line 3 is a bare label word: 'positive'"]
    >>> summary_defects({"summary": "- a\\n- b", "slots": [{"lines": [
    ...     {"text": "- a", "origin": "repaired", "rejected_draft": "- b"},
    ...     {"text": "- b", "origin": "accepted_without_judge"}]}]})
    ["rejected draft '- b' is in the summary"]
    """
    text, lines = summary_parts(result_or_text)
    out = [f"summary line {i} is a bare label word: {ln!r}"
           for i, ln in enumerate(text.splitlines(), 1) if bare_label(ln, labels)]
    out += [f"slot line is a bare label word: {ln['text']!r} ({ln.get('origin')})"
            for ln in lines if bare_label(ln.get("text") or "", labels)]
    held = {ln.get("text") for ln in lines if ln.get("origin") in VOUCHED}
    present = {ln.strip() for ln in text.splitlines()}
    for ln in lines:
        draft = ln.get("rejected_draft")
        if draft and draft.strip() and draft.strip() in present and draft not in held:
            out.append(f"rejected draft {draft!r} is in the summary")
    return out
