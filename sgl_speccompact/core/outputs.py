"""What a compaction returns is the models' text in the caller's bytes, with no secret in it.

Prompts carry the history neutralised (:func:`~sgl_speccompact.history.untrusted.neutralise` puts
an invisible U+2060 inside every control string, tag and turn header), so a
model that copies a line such as ``[user] name = Ada`` (a gitconfig line)
or ``<summary>`` copies the joiners too.  Every string a compaction returns
-- in any field of the result, today's or a later one's, and in any
streamed event -- goes through one walk (:func:`clean_value`), which for each
string:

1. gives back the caller's own bytes (:func:`~sgl_speccompact.history.untrusted.restore`:
   a joiner the caller wrote stays one joiner);
2. removes what would make a line display as something else: control
   characters other than tab and newline (NUL, BEL, ESC, CR, ...) and the
   bidirectional embeddings, overrides, isolates and marks (U+202E, ...),
   which a model copies from the history as they are (:func:`tidy`);
3. replaces any secret a model wrote (:func:`~sgl_speccompact.history.redaction.redact`;
   the models never saw the history's secrets, but they can invent or
   complete one).

Secrets removed here are counted in the result's ``redactions`` as
``output:<kind>``, apart from the history's.

Redaction reads whole texts, not single strings: a private key a model
writes spans lines that match nothing one by one.  The walk reads a list of
strings as one text, and a list of records (models or dicts) column by
column: the same field of every item as one text
(:func:`~sgl_speccompact.history.redaction.redact_lines`).  A field marked
:class:`~sgl_speccompact.result.ReadsInPlaceOf` (a rejected draft) is read in
the place of the field it names, so a draft is redacted among the lines
around it.  A streamed ``line`` event is redacted together with the lines
its slot streamed before it (:class:`EventCleaner`).

>>> clean_text("- [\\u2060user] name = Ada\\u202e; key sk-proj-abcdefghijklmnopqrstuvwx1234", redact_secrets=True)
('- [user] name = Ada; key [REDACTED:openai_key]', {'openai_key': 1})
"""

from __future__ import annotations

import dataclasses
import re
import threading
from enum import Enum
from typing import Any, Callable

from pydantic import BaseModel

from ..history.redaction import add_counts, redact, redact_lines
from ..history.untrusted import restore
from ..result import CompactionResult, ReadsInPlaceOf

OUTPUT_PREFIX = "output:"  # prefix of the redaction counts of returned text
STREAM_CONTEXT_LINES = 256  # earlier lines of a slot a streamed line is redacted with (a 4096-bit key is ~50)
# bidirectional formatting characters: marks (ALM, LRM, RLM), embeddings and overrides (U+202A-E), isolates
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# removed from every returned string: C0 and C1 controls but tab and newline, DEL, and the bidi controls
_HIDDEN = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI_CONTROLS}]")


def tidy(text: str) -> str:
    """``text`` in the caller's bytes, without controls (but tab and newline) or bidi controls.

    >>> tidy("<\\u2060summary> a\\x00b\\x07 \\u202egnp.exe\\r")
    '<summary> ab gnp.exe'
    """
    return _HIDDEN.sub("", restore(text))


def clean_text(text: str, *, redact_secrets: bool) -> tuple[str, dict[str, int]]:
    """``text`` tidied (:func:`tidy`) and (``redact_secrets``) with secrets replaced, and the counts.

    >>> clean_text("<\\u2060summary> x", redact_secrets=False)
    ('<summary> x', {})
    """
    text = tidy(text)
    return redact(text) if redact_secrets else (text, {})


def clean_lines(texts: list[str], *, redact_secrets: bool, counted: list[bool] | None = None
                ) -> tuple[list[str], dict[str, int]]:
    """:func:`clean_text` over lines read as one text (see :func:`~sgl_speccompact.history.redaction.redact_lines`).

    >>> clean_lines(["<\u2060s> key:", "-----BEGIN PRIVATE KEY-----", "QUJDREVGR0hJSktMTU5P"], redact_secrets=True)[0]
    ['<s> key:', '[REDACTED:private_key]', '[REDACTED:private_key]']
    """
    texts = [tidy(t) for t in texts]
    return redact_lines(texts, counted) if redact_secrets else (texts, {})


# ------------------------------------------------------------------ the walk

def clean_value(value: Any, *, redact_secrets: bool) -> Any:
    """A copy of ``value`` with every string in it cleaned, at any depth: pydantic models, dataclasses,
    dicts (keys too), lists and tuples.  ``value`` itself is not changed.

    A list of strings is read as one text; a list of records column by
    column (see the module doc).  Enum members and other values are kept.

    >>> clean_value({"a": ["x:", "-----BEGIN PRIVATE KEY-----", "QUJDREVGR0hJSktMTU5P"], "n": 1}, redact_secrets=True)
    {'a': ['x:', '[REDACTED:private_key]', '[REDACTED:private_key]'], 'n': 1}
    """
    return _Walk(redact_secrets).value(value)


class _Walk:
    """One cleaning walk: every string is cleaned exactly once (restoring twice would drop a caller's joiner)."""

    def __init__(self, redact_secrets: bool):
        self.redact_secrets = redact_secrets  # replace secrets (else only tidy)

    def texts(self, texts: list[str]) -> list[str]:
        return clean_lines(texts, redact_secrets=self.redact_secrets)[0]

    def value(self, v: Any) -> Any:
        if isinstance(v, Enum):
            return v
        if isinstance(v, str):
            return self.texts([v])[0]
        if isinstance(v, BaseModel):
            return v.model_copy(update=self.fields(v, [n for n in type(v).model_fields]))
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            names = [f.name for f in dataclasses.fields(v) if f.init]
            return dataclasses.replace(v, **self.fields(v, names))
        if isinstance(v, dict):
            return {self.value(k): self.value(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(self.items(list(v)))
        return v

    def fields(self, record: Any, names: list[str]) -> dict[str, Any]:
        return {n: self.value(getattr(record, n)) for n in names}

    def items(self, items: list) -> list:
        """A list's items cleaned: strings as one text, records column by column, the rest one by one."""
        if items and all(isinstance(x, str) and not isinstance(x, Enum) for x in items):
            return self.texts(items)
        records = [_record(x) for x in items]
        if not items or any(r is None for r in records):
            return [self.value(x) for x in items]
        columns: dict[str, None] = {}
        for fields in records:
            columns.update(dict.fromkeys(k for k, v in fields.items() if _is_text(v)))
        cleaned = [{k: self.value(v) for k, v in fields.items() if k not in columns} for fields in records]
        for name in columns:
            self.column(name, items, records, cleaned)
        return [self.rebuild(x, new) for x, new in zip(items, cleaned)]

    def rebuild(self, x: Any, fields: dict) -> Any:
        if isinstance(x, BaseModel):
            return x.model_copy(update=fields)
        if isinstance(x, dict):
            return {self.value(k): fields[k] for k in x}
        return dataclasses.replace(x, **fields)

    def column(self, name: str, items: list, records: list[dict], cleaned: list[dict]) -> None:
        """One field of every record cleaned as one text; a field read in place of another is read there."""
        own = [isinstance(r.get(name), str) for r in records]
        other = _in_place_of(items[0], name)
        lines = [r[name] if mine else (r.get(other) if other and isinstance(r.get(other), str) else None)
                 for r, mine in zip(records, own)]
        at = [i for i, t in enumerate(lines) if t is not None]
        done = dict(zip(at, self.texts([lines[i] for i in at])))
        for i, (r, mine) in enumerate(zip(records, own)):
            if name in r:
                cleaned[i][name] = done[i] if mine else self.value(r[name])


def _is_text(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not isinstance(v, Enum))


def _record(x: Any) -> dict | None:
    """The fields of a model, dataclass or dict with string keys; None for anything else."""
    if isinstance(x, BaseModel):
        return {n: getattr(x, n) for n in type(x).model_fields}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: getattr(x, f.name) for f in dataclasses.fields(x) if f.init}
    if isinstance(x, dict) and all(isinstance(k, str) for k in x):
        return x
    return None


def _in_place_of(item: Any, name: str) -> str | None:
    """The field ``name`` is read in place of (:class:`~sgl_speccompact.result.ReadsInPlaceOf`), if any."""
    info = type(item).model_fields.get(name) if isinstance(item, BaseModel) else None
    marks = [m for m in (info.metadata if info is not None else ()) if isinstance(m, ReadsInPlaceOf)]
    return marks[0].field if marks else None


# ------------------------------------------------------------------ results and events

def output_counts(result: CompactionResult) -> dict[str, int]:
    """The secrets the models wrote into ``result``, counted once each, per kind.

    Counted in the summary, in rejected drafts (read in the place of the
    lines that replaced them) and in the entries SJC deleted; kept entries,
    slot lines and the lines assembly removed repeat the summary or are
    counted with the drafts.
    """
    found = clean_text(result.summary, redact_secrets=True)[1]
    for slot in result.slots:
        drafted = [ln.rejected_draft if ln.rejected_draft is not None else ln.text for ln in slot.lines]
        found = add_counts(found, clean_lines(drafted, redact_secrets=True,
                                              counted=[ln.rejected_draft is not None for ln in slot.lines])[1])
    entries = [e for e in (result.source_judge or {}).get("entries", []) if isinstance(e.get("text"), str)]
    return add_counts(found, clean_lines([e["text"] for e in entries], redact_secrets=True,
                                         counted=[not e.get("kept", True) for e in entries])[1])


def clean_result(result: CompactionResult, *, redact_secrets: bool,
                 count: Callable[[list[str]], list[int]] | None = None) -> CompactionResult:
    """A copy of ``result`` whose every string is cleaned (:func:`clean_value`), with ``output:<kind>`` counts added.

    ``count`` re-measures the summary when cleaning changed it.
    """
    found = output_counts(result) if redact_secrets else {}
    out = clean_value(result, redact_secrets=redact_secrets)
    if out.summary != result.summary and count is not None:
        out.summary_tokens = count([out.summary])[0]
    out.redactions = add_counts(out.redactions, {OUTPUT_PREFIX + k: n for k, n in found.items()})
    return out


def clean_event(event: dict, *, redact_secrets: bool) -> dict:
    """A copy of a progress event with every string in it cleaned, at any depth (:func:`clean_value`).

    >>> clean_event({"type": "line", "text": "<\\u2060s>\\x07", "score": 0.5}, redact_secrets=True)
    {'type': 'line', 'text': '<s>', 'score': 0.5}
    """
    return clean_value(event, redact_secrets=redact_secrets)


class EventCleaner:
    """Cleans progress events; a ``line`` event is redacted with the lines its slot streamed before it.

    Slots stream from several threads at once: the per-slot history is kept under a lock.
    """

    def __init__(self, on_event: Callable[[dict], None], *, redact_secrets: bool):
        self.on_event = on_event  # the caller's callback, given cleaned events
        self.redact_secrets = redact_secrets  # replace secrets (else only tidy)
        self.lines: dict[str, list[str]] = {}  # slot -> its streamed lines so far, tidied, not redacted
        self.lock = threading.Lock()  # guards lines

    def __call__(self, event: dict) -> None:
        cleaned = clean_event(event, redact_secrets=self.redact_secrets)
        if self.redact_secrets and event.get("type") == "line" and isinstance(event.get("text"), str):
            with self.lock:
                seen = self.lines.setdefault(str(event.get("slot")), [])
                seen.append(tidy(event["text"]))
                del seen[:-STREAM_CONTEXT_LINES]
                context = list(seen)
            cleaned["text"] = redact_lines(context)[0][-1]
        self.on_event(cleaned)


def cleaning_events(on_event: Callable[[dict], None] | None, *, redact_secrets: bool
                    ) -> Callable[[dict], None] | None:
    """``on_event`` that receives cleaned events (None stays None)."""
    if on_event is None:
        return None
    return EventCleaner(on_event, redact_secrets=redact_secrets)
