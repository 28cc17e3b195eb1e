"""What a compaction returns is the models' text in the caller's bytes, with no secret in it.

Prompts carry the history neutralised (:func:`~.untrusted.neutralise` puts
an invisible U+2060 inside every control string, tag and turn header), so a
model that copies a line such as ``[user] name = Ada`` (a gitconfig line)
or ``<summary>`` copies the joiners too.  Every returned text -- the
summary, each slot line and rejected draft, SJC's entries and every
streamed event -- goes through :func:`clean_text`: :func:`~.untrusted.restore`
gives back the caller's own bytes (a joiner the caller wrote stays one
joiner), then :func:`~.redaction.redact` removes any secret the model wrote
(the models never saw the history's secrets, but they can invent or
complete one).  Secrets removed here are counted in the result's
``redactions`` as ``output:<kind>``, apart from the history's.

>>> clean_text("- [\\u2060user] name = Ada; key sk-proj-abcdefghijklmnopqrstuvwx1234", redact_secrets=True)
('- [user] name = Ada; key [REDACTED:openai_key]', {'openai_key': 1})
"""

from __future__ import annotations

from typing import Callable

from ..history.redaction import add_counts, redact
from ..result import CompactionResult
from ..history.untrusted import restore

OUTPUT_PREFIX = "output:"  # prefix of the redaction counts of returned text


def clean_text(text: str, *, redact_secrets: bool) -> tuple[str, dict[str, int]]:
    """``text`` with neutralisation undone and (``redact_secrets``) secrets replaced, and the counts.

    >>> clean_text("<\\u2060summary> x", redact_secrets=False)
    ('<summary> x', {})
    """
    text = restore(text)
    return redact(text) if redact_secrets else (text, {})


def clean_event(event: dict, *, redact_secrets: bool) -> dict:
    """A copy of a progress event with every string value cleaned.

    >>> clean_event({"type": "line", "text": "<\\u2060s>", "score": 0.5}, redact_secrets=True)
    {'type': 'line', 'text': '<s>', 'score': 0.5}
    """
    return {k: clean_text(v, redact_secrets=redact_secrets)[0] if isinstance(v, str) else v
            for k, v in event.items()}


def cleaning_events(on_event: Callable[[dict], None] | None, *, redact_secrets: bool
                    ) -> Callable[[dict], None] | None:
    """``on_event`` that receives cleaned events (None stays None)."""
    if on_event is None:
        return None
    return lambda event: on_event(clean_event(event, redact_secrets=redact_secrets))


def clean_result(result: CompactionResult, *, redact_secrets: bool,
                 count: Callable[[list[str]], list[int]] | None = None) -> CompactionResult:
    """A copy of ``result`` whose every text is cleaned, with ``output:<kind>`` counts added.

    Counted once per secret: in the summary, in rejected drafts and in the
    entries SJC deleted (kept entries and slot lines repeat the summary).
    ``count`` re-measures the summary when cleaning changed it.
    """
    out = result.model_copy(deep=True)
    found: dict[str, int] = {}

    def clean(text: str | None, counted: bool = False) -> str | None:
        nonlocal found
        if text is None:
            return None
        text, counts = clean_text(text, redact_secrets=redact_secrets)
        if counted:
            found = add_counts(found, counts)
        return text

    summary = clean(out.summary, counted=True)
    if summary != out.summary and count is not None:
        out.summary_tokens = count([summary])[0]
    out.summary = summary
    for slot in out.slots:
        slot.title = clean(slot.title)
        for line in slot.lines:
            line.text = clean(line.text)
            line.rejected_draft = clean(line.rejected_draft, counted=True)
    for entry in (out.source_judge or {}).get("entries", []):
        if isinstance(entry.get("text"), str):
            entry["text"] = clean(entry["text"], counted=not entry.get("kept", True))
        if isinstance(entry.get("section"), str):
            entry["section"] = clean(entry["section"])
    out.redactions = add_counts(out.redactions, {OUTPUT_PREFIX + k: n for k, n in found.items()})
    return out
