"""The drafter's side of a slot stream: its drafts, prefetched while the target judges.

:class:`Drafting` is the part of
:class:`~sgl_speccompact.programs.slot_stream.SlotStream` that sends the
drafter's drafts: the draft continuing the accepted prefix (with
``pipelined_drafting``, sent while the target judges the line before it,
and dropped if that line is rejected).  The repair candidates are
:mod:`~sgl_speccompact.programs.repairing`'s.
"""

from __future__ import annotations

from concurrent.futures import Future

from ..core.lines import DraftBuffer
from .steps import Draft, draft

def is_content(line: str) -> bool:
    """A line that is content: neither blank nor a heading.

    >>> is_content("- a"), is_content("### Done"), is_content(" ")
    (True, False, False)
    """
    return bool(line.strip()) and not line.strip().startswith("#")


class Drafting:
    """Drafter requests of a slot stream (the stream provides ``ctx``, ``slot``, ``buffer``, ``cut``,
    ``capped``, ``carried``, ``budget``, ``tokens``, ``pending``, ``dropped``, ``pool``, ``count``, ``first_line``,
    ``timed``, ``sent`` and ``room``)."""

    def refill(self, prefix: tuple[str, ...]) -> str | None:
        """Fill the draft buffer with the lines continuing ``prefix``; a stop reason when the
        drafter has nothing more to write (``complete``; while the branch has no content, the target
        decides: ``first_line``) or no tokens are left (``token_budget``)."""
        if self.buffer.done(prefix):
            return "complete"
        if self.room() <= 0:
            return "token_budget"
        d = self.next_draft(prefix)
        lines = list(d.lines)
        while not any(a.strip() for a in prefix) and lines and not lines[0].strip():
            lines.pop(0)  # a slot does not open with blank lines
        if not lines:
            return "complete" if any(is_content(a) for a in prefix) else self.first_line()  # the target decides
        self.buffer = DraftBuffer(prefix, lines, d.ended)
        self.cut, self.capped = (lines[-1] if d.truncated else None), d.capped
        self.count(lines)
        return None

    def next_draft(self, prefix: tuple[str, ...]) -> Draft:
        """The draft continuing ``prefix``: the prefetched one if it matches, else a new call."""
        pending, self.pending = self.pending, None
        if pending is not None and pending[0] == prefix:
            d = self.timed("draft_wait", pending[1].result)
        else:
            if pending is not None:
                self.drop(pending[1])
            d = self.sent("draft", draft, self.slot, prefix, self.ctx, self.room())
        self.ctx.recorder.request("drafter", "draft", d.meta)
        return d

    def prefetch(self, prefix: tuple[str, ...], line: str) -> None:
        """Draft what follows ``line`` while the target judges it (pipelined drafting)."""
        buf = self.buffer
        if not self.ctx.cfg.pipelined_drafting or self.pending is not None or buf.lines or buf.exhausted \
                or self.carried:  # the next proposal is a carried line, not a draft
            return
        room = self.room(self.tokens[line])
        if room <= 0 or self.budget.lines + 1 >= self.budget.max_lines:
            return  # accepting the line fills the slot: nothing to draft
        nxt = prefix + (line,)
        self.pending = (nxt, self.pool.submit(draft, self.slot, nxt, self.ctx, room))

    def drop(self, fut: Future) -> None:
        """Drop a prefetched draft whose line was rejected (counted once answered, in ``settle``)."""
        if not fut.cancel():  # already sent
            self.dropped.append(fut)

    def settle(self) -> None:
        """Wait for dropped drafts still in flight and count them, so no request outlives the slot."""
        for fut in self.dropped:
            exc = fut.exception()  # waits; a failed speculative draft decides nothing
            self.ctx.recorder.dropped()
            self.ctx.recorder.request("drafter", "draft_dropped", fut.result().meta if exc is None else {})
