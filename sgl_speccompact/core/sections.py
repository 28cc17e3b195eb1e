"""Sub-slot branches: one slot's budget and duplicate check across its branches (pure).

With ``sub_slot_branches`` on, a slot with ``sections`` (Progress: Done /
In Progress / Blocked) runs one branch per sub-section, concurrently.  Two
rules keep it equal to the one-branch slot in what it keeps:

- **One budget, in order.**  The slot's 12 lines and 320 tokens are shared:
  :func:`join_parts` walks the branches in schema order and keeps lines
  while they fit, exactly as one branch writing the sections in order
  would.  A branch never gets an even share; its own cap
  (:func:`branch_lines`) only stops it drafting lines that cannot be kept.
- **One duplicate check.**  :class:`SlotLines` holds the judged lines every
  branch of the slot has accepted; a branch proposing one of them sends it
  to repair, and a line is claimed atomically on acceptance, so the same
  line drafted under two sub-sections is accepted once.  Which branch keeps
  it depends on which accepts it first.
"""

from __future__ import annotations

import threading
from typing import Callable

from .lines import SlotBudget, norm_line
from ..result import LineOrigin, SlotResult, StopReason, SummaryLine


def branch_lines(max_lines: int, index: int) -> int:
    """Lines branch ``index`` may write: the slot's, less one heading per earlier sub-section.

    >>> [branch_lines(12, i) for i in range(3)]
    [12, 11, 10]
    """
    return max(1, max_lines - index)


class SlotLines:
    """The judged lines accepted by any branch of one slot (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[str] = set()  # normalized lines accepted so far

    def has(self, line: str) -> bool:
        """Whether a branch already accepted ``line`` (whitespace and case ignored).

        >>> lines = SlotLines(); lines.claim("- Fix  bug"), lines.has("- fix bug")
        (True, True)
        """
        with self._lock:
            return norm_line(line) in self._seen

    def claim(self, line: str) -> bool:
        """Record ``line`` as accepted; False if a branch already had it.

        >>> lines = SlotLines(); lines.claim("- a"), lines.claim("- A")
        (True, False)
        """
        key = norm_line(line)
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True


def join_parts(name: str, title: str, parts: list[SlotResult], count: Callable[[str], int],
               budget: SlotBudget) -> SlotResult:
    """One slot from its branches, in order, a blank line between sub-sections.

    Lines are kept while they fit ``budget`` (the whole slot's); the first
    that does not ends the slot with that limit as its stop reason.  A
    branch that stopped for any other reason than ``complete`` (a truncated
    or empty repair, the target ending) ends the slot after its lines, as it
    would have ended one branch writing every sub-section; a
    slot filled to its last line stops with ``line_budget`` as one branch does.
    ``count`` gives a line's target tokens (with its newline).

    >>> a = SlotResult(name="p", title="P", stop_reason="complete",
    ...                lines=[SummaryLine(text=t, origin=LineOrigin.UNJUDGED) for t in ("### A", "- 1", "- 2")])
    >>> b = SlotResult(name="p", title="P", stop_reason="complete",
    ...                lines=[SummaryLine(text=t, origin=LineOrigin.UNJUDGED) for t in ("### B", "- 3")])
    >>> out = join_parts("p", "P", [a, b], lambda t: 1, SlotBudget(max_lines=4, max_tokens=99))
    >>> [l.text for l in out.lines], out.stop_reason.value, out.tokens
    (['### A', '- 1', '- 2', '', '### B'], 'line_budget', 5)
    """
    out = SlotResult(name=name, title=title, stop_reason=StopReason.COMPLETE)
    for i, part in enumerate(parts):
        lines = ([SummaryLine(text="", origin=LineOrigin.UNJUDGED)] if i and part.lines else []) + part.lines
        for line in lines:
            n = count(line.text)
            over = budget.check(line.text, n) if line.text.strip() else (
                StopReason.TOKEN_BUDGET if budget.tokens + n > budget.max_tokens else None)  # separators: tokens only
            if over:
                while out.lines and not out.lines[-1].text.strip():
                    budget.tokens -= count(out.lines.pop().text)
                out.stop_reason, out.tokens = over, budget.tokens
                return out
            budget.add(line.text, n)
            out.lines.append(line)
        if part.stop_reason != StopReason.COMPLETE:
            out.stop_reason = part.stop_reason  # one branch would have stopped here too
            break
    out.tokens = budget.tokens
    if out.stop_reason == StopReason.COMPLETE and budget.lines >= budget.max_lines:
        out.stop_reason = StopReason.LINE_BUDGET  # one branch stops here too, before asking for more
    return out
