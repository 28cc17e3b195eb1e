"""What a client that renders a compaction's events shows, kept equal to the result.

While slots are written, every ``line`` event is provisional: assembly may
still drop the line (a duplicate of an earlier slot, template text), Source-
Judged Compaction may delete it, redaction may rewrite it, and a chunked
history replaces each block's summary with the next one's.  So a ``line``
event says ``"final": false`` and carries its place in its slot
(``index``, counted from 0 over the compaction), and the loop's end of a slot
is ``slot_written`` (progress, not the result).

When the compaction has its result, :meth:`Displayed.finish` settles every
slot, in the result's order:

* ``retract`` ``{slot, index, text, reason}`` for each shown line the result
  does not have (``reason``: ``duplicate``, ``placeholder``, ``unsupported``
  (deleted by Source-Judged Compaction) or ``replaced``: cut, rewritten by
  redaction, or from an earlier block);
* ``line`` with ``"final": true`` for a result line no event showed (the
  ledger, a line redaction rewrote), with ``after``: the index it follows
  (None: first in its slot);
* ``slot_done`` ``{slot, title, stop_reason, lines}``: the slot's final
  content lines, in order (a one-shot summary's sections that share a
  title are one slot here, :func:`by_name`).

A client that applies these events shows exactly the result's lines; the
service's ``result`` event follows with the summary.  A compaction that
fails gets no ``slot_done``: what it showed stays marked provisional.
"""

from __future__ import annotations

import threading
from typing import Callable

from ..result import CompactionResult, SlotResult


class Displayed:
    """The lines a compaction's events have shown, per slot; settles them against the result."""

    def __init__(self, on_event: Callable[[dict], None]):
        self.on_event = on_event  # the caller's callback
        self.shown: dict[str, list[tuple[int, str]]] = {}  # slot -> (index, text) of every line event, in order
        self._lock = threading.Lock()  # line events arrive from the slot threads

    def see(self, event: dict) -> None:
        """Pass ``event`` on: a ``line`` numbered in its slot and marked provisional."""
        if event.get("type") == "line":
            with self._lock:
                lines = self.shown.setdefault(event["slot"], [])
                event = {**event, "index": len(lines), "final": False}
                lines.append((event["index"], event["text"]))
        self.on_event(event)

    def finish(self, result: CompactionResult) -> None:
        """Settle every slot against ``result``: retractions, the lines not shown, then ``slot_done``."""
        report = result.source_judge or {}
        deleted = {e["text"].strip() for e in report.get("entries", []) if not e["kept"]}
        with self._lock:
            shown, self.shown = self.shown, {}
        for slot in by_name(result.slots):
            for event in settle(slot, shown.pop(slot.name, []), deleted):
                self.on_event(event)
        for name, lines in shown.items():  # a slot the result does not have
            for index, text in lines:
                self.on_event({"type": "retract", "slot": name, "index": index, "text": text, "reason": "replaced"})


def by_name(slots: list[SlotResult]) -> list[SlotResult]:
    """``slots`` with the sections that share a name joined in order, at the first one's place: events name a
    slot, so the lines of a one-shot summary's repeated title are one slot to a client.

    >>> s = [SlotResult(name=n, title=n.title(), lines=[]) for n in ("history", "goal", "history")]
    >>> [x.name for x in by_name(s)]
    ['history', 'goal']
    """
    out: dict[str, SlotResult] = {}
    for slot in slots:
        if slot.name not in out:
            out[slot.name] = slot.model_copy(deep=True)
            continue
        joined = out[slot.name]
        joined.lines += slot.lines
        joined.removed_duplicates += slot.removed_duplicates
        joined.removed_placeholders += slot.removed_placeholders
        joined.stop_reason = slot.stop_reason  # the last section's: where the text ended
    return list(out.values())


def settle(slot: SlotResult, shown: list[tuple[int, str]], deleted: set[str] = frozenset()) -> list[dict]:
    """The events that turn ``shown`` (index, text) into ``slot``'s content lines.

    Shown lines are matched to the final ones in order, by text; the rest
    are retracted, and final lines left over are sent after the line they
    follow.

    >>> from sgl_speccompact.result import LineOrigin, SummaryLine
    >>> s = SlotResult(name="goal", title="Goal", removed_duplicates=["- b"],
    ...                lines=[SummaryLine(text=t, origin=LineOrigin.TARGET) for t in ("- a", "- c")])
    >>> [(e["type"], e.get("text"), e.get("reason", e.get("after"))) for e in settle(s, [(0, "- a"), (1, "- b")])]
    [('retract', '- b', 'duplicate'), ('line', '- c', 0), ('slot_done', None, None)]
    """
    final = [line for line in slot.lines if line.text.strip()]
    events, kept, at = [], {}, 0  # kept: final position -> the shown index that displays it
    for index, text in shown:
        hit = next((k for k in range(at, len(final)) if final[k].text == text), None)
        if hit is None:
            events.append({"type": "retract", "slot": slot.name, "index": index, "text": text,
                           "reason": why_dropped(text, slot, deleted)})
        else:
            kept[hit], at = index, hit + 1
    after, n = None, len(shown)
    for k, line in enumerate(final):
        if k in kept:
            after = kept[k]
            continue
        events.append({"type": "line", "slot": slot.name, "text": line.text, "origin": line.origin.value,
                       "score": line.score, "index": n, "after": after, "final": True})
        after, n = n, n + 1
    events.append({"type": "slot_done", "slot": slot.name, "title": slot.title,
                   "stop_reason": slot.stop_reason.value, "lines": [line.text for line in final]})
    return events


def why_dropped(text: str, slot: SlotResult, deleted: set[str]) -> str:
    """The ``reason`` of a retraction.

    >>> why_dropped("- x", SlotResult(name="a", title="A", removed_placeholders=["- x"]), set())
    'placeholder'
    """
    if text in slot.removed_duplicates:
        return "duplicate"
    if text in slot.removed_placeholders:
        return "placeholder"
    if text.strip() in deleted:
        return "unsupported"
    return "replaced"
