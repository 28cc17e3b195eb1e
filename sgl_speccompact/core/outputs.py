"""What a compaction returns is the models' text in the caller's bytes, with no secret in it.

Prompts carry the history neutralised (:func:`~sgl_speccompact.history.untrusted.neutralise` puts
an invisible U+2060 inside every control string, tag and turn header), so a
model that copies a line such as ``[user] name = Ada`` (a gitconfig line)
or ``<summary>`` copies the joiners too.  Every returned text -- the
summary, each slot line and rejected draft, SJC's entries and every
streamed event -- goes through :func:`clean_text`: :func:`~sgl_speccompact.history.untrusted.restore`
gives back the caller's own bytes (a joiner the caller wrote stays one
joiner), then :func:`~sgl_speccompact.history.redaction.redact` removes any secret the model wrote
(the models never saw the history's secrets, but they can invent or
complete one).  Secrets removed here are counted in the result's
``redactions`` as ``output:<kind>``, apart from the history's.

Redaction reads whole texts, not single lines: a private key a model writes
spans lines that match nothing one by one.  A slot's lines, its drafted
lines (rejected drafts in place of the lines that replaced them) and SJC's
entries are each redacted as one text (:func:`~sgl_speccompact.history.redaction.redact_lines`),
and a streamed ``line`` event is redacted together with the lines its slot
streamed before it (:class:`EventCleaner`).

>>> clean_text("- [\\u2060user] name = Ada; key sk-proj-abcdefghijklmnopqrstuvwx1234", redact_secrets=True)
('- [user] name = Ada; key [REDACTED:openai_key]', {'openai_key': 1})
"""

from __future__ import annotations

import threading
from typing import Callable

from ..history.redaction import add_counts, redact, redact_lines
from ..result import CompactionResult
from ..history.untrusted import restore

OUTPUT_PREFIX = "output:"  # prefix of the redaction counts of returned text
STREAM_CONTEXT_LINES = 256  # earlier lines of a slot a streamed line is redacted with (a 4096-bit key is ~50)


def clean_text(text: str, *, redact_secrets: bool) -> tuple[str, dict[str, int]]:
    """``text`` with neutralisation undone and (``redact_secrets``) secrets replaced, and the counts.

    >>> clean_text("<\\u2060summary> x", redact_secrets=False)
    ('<summary> x', {})
    """
    text = restore(text)
    return redact(text) if redact_secrets else (text, {})


def clean_lines(texts: list[str], *, redact_secrets: bool, counted: list[bool] | None = None
                ) -> tuple[list[str], dict[str, int]]:
    """:func:`clean_text` over lines read as one text (see :func:`~sgl_speccompact.history.redaction.redact_lines`).

    >>> clean_lines(["<\u2060s> key:", "-----BEGIN PRIVATE KEY-----", "QUJDREVGR0hJSktMTU5P"], redact_secrets=True)[0]
    ['<s> key:', '[REDACTED:private_key]', '[REDACTED:private_key]']
    """
    texts = [restore(t) for t in texts]
    return redact_lines(texts, counted) if redact_secrets else (texts, {})


class EventCleaner:
    """Cleans progress events; a ``line`` event is redacted with the lines its slot streamed before it.

    Slots stream from several threads at once: the per-slot history is kept under a lock.
    """

    def __init__(self, on_event: Callable[[dict], None], *, redact_secrets: bool):
        self.on_event = on_event  # the caller's callback, given cleaned events
        self.redact_secrets = redact_secrets  # replace secrets (else only undo neutralisation)
        self.lines: dict[str, list[str]] = {}  # slot -> its streamed lines so far, restored, not redacted
        self.lock = threading.Lock()  # guards lines

    def __call__(self, event: dict) -> None:
        cleaned = clean_event(event, redact_secrets=self.redact_secrets)
        if self.redact_secrets and event.get("type") == "line" and isinstance(event.get("text"), str):
            with self.lock:
                seen = self.lines.setdefault(str(event.get("slot")), [])
                seen.append(restore(event["text"]))
                del seen[:-STREAM_CONTEXT_LINES]
                context = list(seen)
            cleaned["text"] = redact_lines(context)[0][-1]
        self.on_event(cleaned)


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
    return EventCleaner(on_event, redact_secrets=redact_secrets)


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

    def clean_all(texts: list[str], counted: list[bool] | None = None) -> list[str]:
        nonlocal found
        texts, counts = clean_lines(texts, redact_secrets=redact_secrets, counted=counted)
        if counted is not None:
            found = add_counts(found, counts)
        return texts

    summary = clean(out.summary, counted=True)
    if summary != out.summary and count is not None:
        out.summary_tokens = count([summary])[0]
    out.summary = summary
    for slot in out.slots:
        slot.title = clean(slot.title)
        lines = slot.lines
        kept = clean_all([ln.text for ln in lines])
        # what was drafted: each rejected draft in the place of the line that replaced it
        drafted = clean_all([ln.rejected_draft if ln.rejected_draft is not None else ln.text for ln in lines],
                            counted=[ln.rejected_draft is not None for ln in lines])
        for line, text, draft in zip(lines, kept, drafted):
            line.text = text
            if line.rejected_draft is not None:
                line.rejected_draft = draft
    entries = [e for e in (out.source_judge or {}).get("entries", []) if isinstance(e.get("text"), str)]
    texts = clean_all([e["text"] for e in entries], counted=[not e.get("kept", True) for e in entries])
    for entry, text in zip(entries, texts):
        entry["text"] = text
    for entry in (out.source_judge or {}).get("entries", []):
        if isinstance(entry.get("section"), str):
            entry["section"] = clean(entry["section"])
    out.redactions = add_counts(out.redactions, {OUTPUT_PREFIX + k: n for k, n in found.items()})
    return out
