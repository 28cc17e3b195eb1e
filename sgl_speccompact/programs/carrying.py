"""Carried proposals: how a slot stream proposes the previous summary's lines (incremental compaction).

:class:`CarriedProposals` is the part of
:class:`~sgl_speccompact.programs.slot_stream.SlotStream` that handles the
lines :mod:`~sgl_speccompact.core.carried` reads from the previous summary:
each is judged for whether it still holds after the new turns
(:data:`~sgl_speccompact.core.prompts.CARRIED_QUESTION`), kept (origin
``carried``) or dropped as stale, within ``max_carried_share`` of the slot's
budget; a one-branch slot with sub-sections drafts each section's new lines
before the next carried section heading.  See
docs/concepts/incremental-compaction.md.
"""

from __future__ import annotations

from ..core.admission import Source, Step
from ..core.carried import section_heading
from ..core.lines import norm_line


class CarriedProposals:
    """Carried-line handling of a slot stream (the stream provides ``kind``, ``offer``, ``judge``,
    ``budget``, ``tokens``, ``carried``, ``carried_used``, ``stale``, ``section_drafted``)."""

    def carry(self, prefix: tuple[str, ...], line: str) -> None:
        """Propose a line of the previous summary (see carried.py): kept (origin carried) if the
        target judges it still holds after the new turns, else dropped and remembered as stale.

        Only the slot's own sub-section headings pass unjudged, in the schema's
        words; any other heading, a marker, a blank, a duplicate (across the
        slot's branches too) or an over-long line is dropped.  Carried lines
        stop at ``max_carried_share`` of the slot's lines and tokens.
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
        """The target's judgement of a carried line; None once carried lines fill their share."""
        share = self.ctx.cfg.max_carried_share
        if (self.carried_used[0] + 1 > int(self.budget.max_lines * share)
                or self.carried_used[1] + self.tokens[line] > int(self.budget.max_tokens * share)):
            self.carried = [x for x in self.carried if section_heading(x, self.slot)]  # the rest is for new lines
            return None
        return self.judge(prefix, line, carried=True)

    def draft_section(self) -> bool:
        """Whether to draft now although carried lines remain: the next carried line heads the
        slot's next sub-section, so the new lines of the one carried so far go before it (a new
        Done line lands under Done).  Once per heading: the flag clears when it is carried."""
        if self.budget.lines and not self.section_drafted and section_heading(self.carried[0], self.slot):
            return True
        self.section_drafted = False
        return False
