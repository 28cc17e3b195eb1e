"""The drafter's side of a slot stream: its drafts, prefetched while the target judges, and its
repair candidates.

:class:`Drafting` is the part of
:class:`~sgl_speccompact.programs.slot_stream.SlotStream` that sends the
drafter's requests: the draft continuing the accepted prefix (with
``pipelined_drafting``, sent while the target judges the line before it,
and dropped if that line is rejected) and, with ``repair_candidates``, the
lines sampled in place of a rejected one and judged in one batch.
"""

from __future__ import annotations

from concurrent.futures import Future

from ..core.admission import Source, Step, admit
from ..core.lines import LineKind, split_line
from .steps import Draft, draft, judge_lines, sample_candidates


class Drafting:
    """Drafter requests of a slot stream (the stream provides ``ctx``, ``slot``, ``s``, ``buffer``,
    ``carried``, ``budget``, ``tokens``, ``pending``, ``dropped``, ``pool``, ``accepted``, ``timed``,
    ``sent``, ``room``, ``kind`` and ``offer``)."""

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

    def candidates(self, rejected: str) -> tuple[bool, str | None]:
        """Drafter samples n lines in one request, the target judges them in one batch.

        Returns ``(handled, stop reason)``; not handled when no candidate is
        accepted (the target repairs then).
        """
        ctx, prefix = self.ctx, tuple(self.accepted)
        if self.room() <= 0:
            return False, None
        samples, meta = self.sent("candidates", sample_candidates, self.slot, prefix, ctx, self.room())
        ctx.recorder.request("drafter", "candidates", meta)
        lines: list[str] = []
        for text, reason in samples:
            got, _, truncated = split_line(text, reason)
            if got and not truncated and got[0] != rejected and got[0] not in lines \
                    and admit(Source.CANDIDATE, self.kind(got[0])).step is not Step.DROP:
                lines.append(got[0])
        if not lines:
            return False, None
        verdicts, jmeta = self.sent("verify_candidates", judge_lines, self.s, self.slot, lines, ctx)
        ctx.recorder.request("target", "verify_candidates", jmeta, n=int(jmeta.get("requests", 1)))
        ranked = sorted((-v.score, i) for i, v in enumerate(verdicts) if v.accepted)
        if not ranked:
            return False, None
        best = ranked[0][1]
        done, _ = self.offer(lines[best], Source.CANDIDATE, LineKind.JUDGE, lambda: {"accepted": True},
                             score=verdicts[best].score, rejected=rejected)
        if done.step is Step.DROP:
            return False, None  # another branch accepted it meanwhile: the target repairs
        return True, done.reason
