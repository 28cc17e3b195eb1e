"""Carried lines: the previous summary read back into slots, as free first proposals (pure).

In an incremental compaction most of the previous summary still holds.
Each slot stream proposes the previous summary's lines for its slot before
it asks the drafter for anything; the target judges each with the same
verdict as a drafted line.  An accepted line costs no drafter decode (origin
``carried``); a rejected one is repaired like a rejected draft.

The previous summary is split at ``## <slot title>`` headings; inside a slot
with sub-sections, at ``### <section>`` headings.  Blank lines and empty
markers such as ``(none)`` are not carried (they say nothing the new turns
could confirm), nor is a line of a section the schema does not have.
"""

from __future__ import annotations

from typing import Iterable

from ..schema import Slot

Key = tuple[str, "str | None"]  # (slot name, sub-section or None for the whole slot)


def _heading(line: str, level: str) -> str | None:
    """The title of a ``level`` heading line (``##`` or ``###``), else None."""
    s = line.strip()
    if s.startswith(level + " ") and not s.startswith(level + "#"):
        return s[len(level):].strip()
    return None


def previous_lines(previous_summary: str | None, slots: Iterable[Slot],
                   empty_markers: Iterable[str] = ()) -> dict[Key, tuple[str, ...]]:
    """The lines each slot (and each sub-section of a slot) carries from the previous summary.

    ``(slot, None)`` holds the slot's whole body (its ``###`` headings
    included, for a slot written as one branch); ``(slot, section)`` the
    lines under that sub-section's heading.

    >>> from ..schema import OPENCLAW_SLOTS
    >>> prev = "## Goal\\n- fix a.py\\n\\n## Progress\\n### Done\\n- read a.py\\n### Blocked\\n(none)\\n## Extra\\n- x"
    >>> got = previous_lines(prev, OPENCLAW_SLOTS, ["(none)"])
    >>> got[("goal", None)], got[("progress", "Done")], got[("progress", None)]
    (('- fix a.py',), ('- read a.py',), ('### Done', '- read a.py', '### Blocked'))
    >>> ("progress", "Blocked") in got, previous_lines(None, OPENCLAW_SLOTS)
    (False, {})
    """
    if not previous_summary:
        return {}
    by_title = {s.title.strip().lower(): s for s in slots}
    markers = {m.strip().lower() for m in empty_markers}
    out: dict[Key, list[str]] = {}
    slot, section = None, None
    for line in previous_summary.split("\n"):
        title = _heading(line, "##")
        if title is not None:
            slot, section = by_title.get(title.lower()), None
            continue
        if slot is None or not line.strip() or line.strip().lower() in markers:
            continue
        out.setdefault((slot.name, None), []).append(line.rstrip())
        sub = _heading(line, "###")
        if sub is not None:
            section = next((x for x in slot.sections if x.lower() == sub.lower()), None)
        elif section is not None:
            out.setdefault((slot.name, section), []).append(line.rstrip())
    return {k: tuple(v) for k, v in out.items()}
