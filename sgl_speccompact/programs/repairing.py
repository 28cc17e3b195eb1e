"""Repairs: how a slot stream replaces a rejected line (paper section "SpecCompact").

:class:`Repairs` is the part of
:class:`~sgl_speccompact.programs.slot_stream.SlotStream` that proposes the
line in place of a rejected one: with ``repair_candidates``, first lines the
drafter samples in one request and the target judges in one batch (the best
accepted one is offered, as a candidate); else, or when none is accepted,
the line the target writes (offered as a repair).  Both go through the
stream's one admission, :meth:`~.slot_stream.SlotStream.offer`.

A blank repair is a paragraph break, kept (blank lines at a slot's ends are
dropped when it stops), so a real line may follow it, also at a slot's
start.  An empty repair (:func:`~sgl_speccompact.core.lines.empty_repair`:
a second blank repair with no real line accepted in between) stops the slot
with ``stop_reason="empty_repair"``, keeping its accepted prefix, as the
paper says: a target that only answers blank costs at most two repairs.
"""

from __future__ import annotations

from dataclasses import asdict

from ..core.admission import Source, Step, admit
from ..core.judge import acted
from ..core.lines import LineKind, empty_repair, read_repair, split_line
from .steps import judge_lines, repair_line, sample_candidates


class Repairs:
    """Repairs of a slot stream (the stream provides ``ctx``, ``slot``, ``s``, ``accepted``,
    ``blank_repair``, ``sent``, ``room``, ``kind``, ``ends_section`` and ``offer``)."""

    def repair(self, rejected: str | None, score: float | None, unreliable: bool = False) -> str | None:
        """Replace ``rejected`` (None: write the first line of a slot the drafter left empty): a judged
        drafter candidate, else a target-written line.

        ``score`` is the rejected draft's; the repair is not judged, so it
        reports no score of its own (``unreliable``: the draft's verdict had
        too little label mass to act on).
        """
        if self.ctx.cfg.repair_candidates and not unreliable:  # the same judge would pick the candidate
            done, reason = self.candidates(rejected)
            if done:
                return reason
        text, meta = self.sent("repair", repair_line, self.s, self.ctx)
        self.ctx.recorder.request("target", "repair", meta)
        # no explicit discard: buffered lines continue a prefix that now differs, so take() refuses them
        out = read_repair(text, meta.get("finish_reason"))
        if out.truncated:
            return "repair_truncated"  # an unfinished line is neither stored nor built upon
        if out.line is None:
            return "target_ended"
        if empty_repair(out.line, self.accepted, self.blank_repair):
            return "empty_repair"
        self.blank_repair = not out.line.strip()  # a paragraph break, kept
        if self.ends_section(out.line):
            return "complete"
        done, _ = self.offer(out.line, Source.REPAIR, self.kind(out.line), rejected=rejected, rejected_score=score,
                             unreliable_verdict=unreliable)
        if done.step is Step.STOP:
            return done.reason
        return "target_ended" if out.ended else None

    def first_line(self) -> str | None:
        """The drafter wrote nothing for a branch without content: the target decides, writing its
        first line as a repair does.  The branch ends ``complete`` and empty only if the target
        writes nothing too, or an empty marker."""
        reason = self.repair(None, score=None)
        markers = {m.lower() for m in self.ctx.cfg.empty_markers}
        marker = reason is None and bool(self.accepted) and self.accepted[-1].strip().lower() in markers
        return "complete" if reason == "target_ended" or marker else reason

    def candidates(self, rejected: str | None) -> tuple[bool, str | None]:
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
        trusted = []  # accepted on a reliable verdict
        for v in verdicts:
            trusted.append(acted(asdict(v), ctx.cfg.min_label_mass))
            ctx.recorder.verdict(trusted[-1])
        trusted = [t["accepted"] for t in trusted]
        ranked = sorted((-v.score, i) for i, v in enumerate(verdicts) if trusted[i])
        if not ranked:
            return False, None
        best = ranked[0][1]
        done, _ = self.offer(lines[best], Source.CANDIDATE, LineKind.JUDGE, lambda: {"accepted": True},
                             score=verdicts[best].score, rejected=rejected)
        if done.step is Step.DROP:
            return False, None  # another branch accepted it meanwhile: the target repairs
        return True, done.reason
