"""Carried proposals: how a slot stream proposes the previous summary's lines (incremental compaction).

:class:`CarriedProposals` is the part of
:class:`~sgl_speccompact.programs.slot_stream.SlotStream` that handles the
lines :mod:`~sgl_speccompact.core.carried` reads from the previous summary:
each is judged for whether it still holds after the new turns
(:data:`~sgl_speccompact.core.prompts.CARRIED_QUESTION`), kept (origin
``carried``) or dropped as stale.  The branch's carried lines are judged
together when it proposes the first one (one prefill-only target request,
:mod:`~sgl_speccompact.programs.carried_batch`), and kept within the share of
the slot's budget that the judged share allows (the evidence rule,
:func:`~sgl_speccompact.programs.carried_batch.carried_cap`); a one-branch
slot with sub-sections drafts each section's new lines before the next
carried section heading.  See docs/concepts/incremental-compaction.md.
"""

from __future__ import annotations

from ..core.admission import Source, Step
from ..core.carried import section_heading
from ..core.lines import LineKind, norm_line
from .carried_batch import carried_cap, judge_carried_lines


class CarriedProposals:
    """Carried-line handling of a slot stream (the stream provides ``kind``, ``offer``, ``judge``,
    ``budget``, ``tokens``, ``carried``, ``carried_used``, ``stale``, ``section_drafted``; ``verdicts`` and
    ``cap`` are set here, on the first carried line)."""

    verdicts: dict | None = None  # carried line -> its verdict, judged together (None: not judged yet)
    cap = None  # CarriedCap: how much of the budget carried lines may take (the evidence rule)

    def carry(self, prefix: tuple[str, ...], line: str) -> None:
        """Propose a line of the previous summary (see carried.py): kept (origin carried) if the
        target judges it still holds after the new turns, else dropped and remembered as stale.

        Only the slot's own sub-section headings pass unjudged, in the schema's
        words; any other heading, a marker, a blank, a duplicate (across the
        slot's branches too) or an over-long line is dropped.  Carried lines
        stop at the cap the evidence rule sets (carried_batch.py).
        """
        heading = section_heading(line, self.slot) if self.section is None else None
        line = heading or line
        done, _ = self.offer(line, Source.HEADING if heading else Source.CARRIED, self.kind(line),
                             lambda: self.judge_carried(prefix, line))
        if done.step is Step.STALE:  # completed, abandoned or contradicted by the new turns: not drafted back either
            self.stale.add(norm_line(line))
        elif done.step is Step.ACCEPT and not heading:
            self.carried_used = (self.carried_used[0] + 1, self.carried_used[1] + self.tokens[line])

    def judge_carried(self, prefix: tuple[str, ...], line: str) -> dict | None:
        """The target's judgement of a carried line; None once carried lines fill their cap."""
        if self.verdicts is None:
            self.judge_all_carried(line)
        verdict = self.verdicts.get(line)
        if verdict is not None and not verdict.get("accepted"):
            return verdict  # stale whatever the cap: a draft proposing it again is not judged afresh
        if (self.carried_used[0] + 1 > self.cap.lines
                or self.carried_used[1] + self.tokens[line] > self.cap.tokens):
            self.stale.update(norm_line(x) for x in self.carried
                              if not (self.verdicts.get(x) or {"accepted": True}).get("accepted"))
            self.carried = [x for x in self.carried if section_heading(x, self.slot)]  # the rest is for new lines
            return None
        return verdict if verdict is not None else self.judge(prefix, line, carried=True)

    def judge_all_carried(self, first: str) -> None:
        """Judge ``first`` and every carried line still to come that needs a judgement, together,
        and set the cap from the judged share."""
        pending = [first] + [x for x in self.carried if section_heading(x, self.slot) is None
                             and self.kind(x) is LineKind.JUDGE]
        lines = list(dict.fromkeys(pending))
        self.count(lines)
        verdicts, meta = self.sent("verify_carried", judge_carried_lines, self.s, self.slot, lines, self.ctx)
        self.ctx.recorder.request("target", "verify_carried", meta, n=int(meta.get("requests", 1)))
        for v in verdicts:
            self.ctx.recorder.carried(bool(v.get("accepted")))
        self.verdicts = dict(zip(lines, verdicts))
        held = sum(bool(v.get("accepted")) for v in verdicts)
        mean = sum(self.tokens[x] for x in lines) / len(lines)
        self.cap = carried_cap(held, len(lines), self.budget.max_lines, self.budget.max_tokens, mean,
                               self.ctx.cfg.max_carried_share)

    def draft_section(self) -> bool:
        """Whether to draft now although carried lines remain: the next carried line heads the
        slot's next sub-section, so the new lines of the one carried so far go before it (a new
        Done line lands under Done).  Once per heading: the flag clears when it is carried."""
        if self.budget.lines and not self.section_drafted and section_heading(self.carried[0], self.slot):
            return True
        self.section_drafted = False
        return False
