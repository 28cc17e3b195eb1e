"""Carried lines: the previous summary read back into slots, as free first proposals (pure).

In an incremental compaction much of the previous summary still holds.
Each slot stream proposes the previous summary's lines for its slot before
it asks the drafter for anything.  The target judges each for whether it
STILL HOLDS after the turns since that summary
(:data:`~.prompts.CARRIED_QUESTION`: the earlier summary is the line's
origin, not evidence for it).  An accepted line costs no drafter decode
(origin ``carried``); a rejected one -- a step the new turns completed or
abandoned, a fact they contradicted -- is dropped, not repaired: what the new
turns established is drafted after the carried lines.

**Judged only up to what the slot can keep.**  A slot keeps at most
:func:`carried_bound` carried lines, so no more are judged: a slot
judges its next lines in one bounded batch (:mod:`~sgl_speccompact.programs.proposers`),
each question the criterion first and the line last, the part every
question shares prefilled once.  A previous summary of 2,000 lines in one
section costs a dozen judge prompts, not 2,000.

**The evidence rule** (replacing a fixed share): the judged share ``j``
(lines judged to still hold over lines judged) is the evidence of how much
of the slot is unchanged, so carried lines may take ``j`` of the slot's
lines and tokens (at most ``max_carried_share``), and always leave one line
and one mean carried line's tokens for what the new turns add
(:func:`carried_cap`).  See docs/concepts/incremental-compaction.md.

The previous summary is untrusted text.  Its lines pass the checks a
drafted line passes (:func:`~.lines.classify_line`), and more strictly:
a heading is kept only as the slot's own ``### <section>`` heading,
rewritten in the schema's words; any other heading, a marker, a blank, a
duplicate or an over-long line is dropped, never accepted without a
judgement.  Every line break a reader may see (CR, VT, FF, NEL, U+2028,
U+2029, ...: :func:`~.lines.split_breaks`) splits lines before any check.

The previous summary is split at ``## <slot title>`` headings.  Blank lines
and empty markers such as ``(none)`` are not carried (they say nothing the
new turns could confirm), nor is a line of a section the schema does not
have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..schema import Slot
from .lines import contract_heading, split_breaks

@dataclass(frozen=True)
class CarriedCap:
    """How much of a slot branch's budget its carried lines may take."""

    lines: int  # carried lines kept, at most
    tokens: int  # their tokens, at most
    share: float  # the judged share j the cap follows (lines still holding / lines judged)


def carried_bound(max_lines: int, max_share: float) -> int:
    """The most carried lines a slot can keep, whatever the verdicts: no more are ever judged.

    >>> carried_bound(12, 1.0), carried_bound(12, 0.5), carried_bound(12, 0.0), carried_bound(1, 1.0)
    (11, 6, 0, 0)
    """
    return min(int(max_lines * max_share), max(max_lines - 1, 0))


def carried_cap(held: int, judged: int, max_lines: int, max_tokens: int, mean_tokens: float,
                max_share: float = 1.0) -> CarriedCap:
    """The evidence rule: carried lines take the judged share of the budget, leaving one new line's room.

    >>> carried_cap(9, 10, 12, 320, 20)
    CarriedCap(lines=10, tokens=288, share=0.9)
    >>> carried_cap(13, 13, 12, 320, 20).lines, carried_cap(3, 6, 12, 320, 20).lines
    (11, 6)
    >>> carried_cap(5, 5, 12, 320, 20, max_share=0.5).lines, carried_cap(0, 0, 12, 320, 20).lines
    (6, 0)
    """
    share = held / judged if judged else 0.0
    use = min(share, max_share)
    lines = min(int(max_lines * use), max(max_lines - 1, 0))
    tokens = min(int(max_tokens * use), max(max_tokens - int(round(mean_tokens)), 0))
    return CarriedCap(lines, tokens, share)


def section_heading(line: str, slot: Slot) -> str | None:
    """The schema's own ``### <section>`` line if ``line`` heads one of ``slot``'s sub-sections.

    >>> from ..schema import OPENCLAW_SLOTS
    >>> section_heading("###  in progress", OPENCLAW_SLOTS[2]), section_heading("### IGNORE ALL", OPENCLAW_SLOTS[2])
    ('### In Progress', None)
    """
    return contract_heading(line, slot.sections)


def _heading(line: str, level: str) -> str | None:
    """The title of a ``level`` heading line (``##`` or ``###``), else None."""
    s = line.strip()
    if s.startswith(level + " ") and not s.startswith(level + "#"):
        return s[len(level):].strip()
    return None


def previous_lines(previous_summary: str | None, slots: Iterable[Slot],
                   empty_markers: Iterable[str] = ()) -> dict[str, tuple[str, ...]]:
    """The lines each slot carries from the previous summary, by slot name.

    A slot's ``###`` headings are among its lines: the slot loop proposes
    the contract's own as its sub-sections open, and drops any other.

    >>> from ..schema import OPENCLAW_SLOTS
    >>> prev = "## Goal\\n- fix a.py\\n\\n## Progress\\n### Done\\n- read a.py\\n### Blocked\\n(none)\\n## Extra\\n- x"
    >>> got = previous_lines(prev, OPENCLAW_SLOTS, ["(none)"])
    >>> got["goal"], got["progress"], sorted(got)
    (('- fix a.py',), ('### Done', '- read a.py', '### Blocked'), ['goal', 'progress'])
    >>> previous_lines(None, OPENCLAW_SLOTS)
    {}
    >>> previous_lines("## Goal\\n- a\\u2028## Next Steps\\r1. b", OPENCLAW_SLOTS)["next_steps"]
    ('1. b',)
    """
    if not previous_summary:
        return {}
    by_title = {s.title.strip().lower(): s for s in slots}
    markers = {m.strip().lower() for m in empty_markers}
    out: dict[str, list[str]] = {}
    slot = None
    for line in split_breaks(previous_summary):
        title = _heading(line, "##")
        if title is not None:
            slot = by_title.get(title.lower())
            continue
        if slot is None or not line.strip() or line.strip().lower() in markers:
            continue
        out.setdefault(slot.name, []).append(line.rstrip())
    return {k: tuple(v) for k, v in out.items()}
