"""Where a slot's lines come from: one proposer per source.

Every slot method is the same loop (:mod:`~.slot_loop`) over proposals,
propose -> admit -> accept or repair, fed by a choice of these
(:class:`~.context.Proposers`):

* :class:`CarriedLines` -- the previous summary's lines for the slot, each
  judged for whether it still holds after the new turns.  They are judged
  in bounded batches, never more than the slot can keep
  (:func:`~sgl_speccompact.core.carried.carried_bound`), one request each
  (criterion first, the shared part prefilled once: :class:`~.questions.CarriedQuestions`),
  and kept within the cap the evidence rule sets
  (:func:`~sgl_speccompact.core.carried.carried_cap`).
* :class:`Drafter` -- the drafter's next line, drafted one line per request.
* :class:`TargetWriter` -- the target continues the branch in one
  generation capped at the slot's remaining tokens; its lines are not
  judged, and one refused by a check is skipped.
* :class:`Repairer` -- the target's line in place of a rejected draft
  (SpecCompact), or the first line of a branch the drafter left empty.

A proposer only proposes: ``propose(branch)`` answers a
:class:`~sgl_speccompact.core.admission.Proposal`, a
:class:`~sgl_speccompact.result.StopReason` (it has nothing more), or None
(no proposal this time: a carried line it gave up on; for the drafter, a
branch it left empty, whose first line the target writes).  The loop
admits the proposal and calls the repairer; a proposer never admits,
accepts or repairs a line itself.  What a writer wrote in one request is a
:class:`~sgl_speccompact.core.admission.Continuation`: its lines are
proposed while they still continue the branch's lines.
"""

from __future__ import annotations

from typing import Protocol

from ..core.admission import Continuation, Proposal, Source
from ..core.carried import CarriedCap, carried_bound, carried_cap, section_heading
from ..core.judge import Verdict
from ..core.lines import LineKind, empty_repair, is_heading, norm_line, read_repair, split_draft
from ..result import StopReason
from .branch import Branch
from .questions import CarriedQuestions
from .steps import draft, gen_on_copy, repair_line, write_sampling

# a generation of one sub-section ends where the next heading starts.  A string, not a list: sglang's
# interpreter extends a list stop in place with the chat template's stops (``clone.stop += ...``),
# so a shared list would grow on every call until the server refuses it
SECTION_STOP = "\n#"


class Writer(Protocol):
    """What the loop asks of a slot's writer of new lines (:class:`Drafter`, :class:`TargetWriter`)."""

    def propose(self, branch: Branch, heading_ahead: bool = False) -> Proposal | StopReason | None:
        """The next new line; a stop reason when it has nothing more; None when it has no proposal (the target
        decides).  ``heading_ahead``: a carried sub-section heading comes next."""


# ---------------------------------------------------------------- carried lines


class CarriedLines:
    """The previous summary's lines for one slot, proposed before any new line.

    Only the slot's own sub-section headings pass unjudged, in the schema's
    words (``Source.HEADING``); any other heading, a marker, a blank, a
    duplicate or an over-long line is refused by the checks, unjudged.  A
    slot with sub-sections lets its writer write each section's new lines
    before the next carried sub-section heading (:meth:`heads_section`).
    """

    def __init__(self, lines: tuple[str, ...]):
        self.queue = list(lines)  # still to propose, in the previous summary's order
        self.judged: dict[str, tuple[str, Verdict]] = {}  # norm_line -> (line, verdict), for every line judged

    @property
    def pending(self) -> bool:
        """Carried lines remain to be proposed."""
        return bool(self.queue)

    def heads_section(self, branch: Branch) -> bool:
        """The next carried line opens one of the slot's sub-sections (the writer writes this one's new lines first)."""
        return bool(self.queue) and section_heading(self.queue[0], branch.slot) is not None

    def propose(self, branch: Branch) -> Proposal | None:
        """The next carried line with its verdict; None when carried lines have taken what they may."""
        line = self.queue.pop(0)
        heading = section_heading(line, branch.slot)
        if heading:
            return Proposal(heading, Source.HEADING)
        if not self.judgeable(branch, line):
            return Proposal(line, Source.CARRIED)  # refused by the checks or the evidence: no verdict needed
        v = self.verdict(branch, line)
        if v is None or (v.accepted and not self.fits(branch, line)):
            self.give_up(branch)
            return None
        return Proposal(line, Source.CARRIED, verdict=v)

    def judgeable(self, branch: Branch, line: str) -> bool:
        """Whether ``line`` passes the checks a carried line must pass before it is judged, its evidence
        included: a line naming a string with no source joins no batch (admission drops it unjudged)."""
        if is_heading(line) or branch.kind(line) is not LineKind.JUDGE:
            return False
        found = branch.evidence(Proposal(line, Source.CARRIED), LineKind.JUDGE)
        return found is None or found.passed

    def verdict(self, branch: Branch, line: str) -> Verdict | None:
        """``line``'s verdict, judging the next bounded batch if it has none; None past what the slot keeps."""
        key = norm_line(line)
        if key not in self.judged:
            self.judge_next(branch, line)
        got = self.judged.get(key)
        return got[1] if got is not None else None

    def cap(self, branch: Branch) -> CarriedCap | None:
        """How much of the budget carried lines may take, from the verdicts so far (None: none yet)."""
        if not self.judged:
            return None
        held = sum(v.accepted for _, v in self.judged.values())
        tokens = sum(branch.tokens[line] for line, _ in self.judged.values())
        b = branch.budget
        return carried_cap(held, len(self.judged), b.max_lines, b.max_tokens, tokens / len(self.judged),
                           branch.ctx.cfg.max_carried_share)

    def judge_next(self, branch: Branch, first: str) -> None:
        """Judge ``first`` and the lines after it, as many as the slot may still keep, in one batch."""
        kept, _ = branch.carried_kept()
        cap = self.cap(branch)
        if cap is not None and kept >= cap.lines:
            return  # the evidence so far keeps no more
        bound = carried_bound(branch.budget.max_lines, branch.ctx.cfg.max_carried_share)
        room = min(bound - kept, branch.budget.max_lines - len(self.judged))
        if room <= 0:
            return
        batch: dict[str, str] = {}  # norm_line -> line, in order
        for x in [first] + self.queue:
            key = norm_line(x)
            if len(batch) == room:
                break
            if key in batch or key in self.judged or section_heading(x, branch.slot) or not self.judgeable(branch, x):
                continue
            batch[key] = x
        if not batch:
            return
        ctx, lines = branch.ctx, tuple(batch.values())
        branch.count(list(lines))
        judged = branch.timed("verify_carried", ctx.judge.judge, CarriedQuestions(branch.s, branch.slot, lines, ctx))
        ctx.recorder.request("target", "verify_carried", judged.counts, n=judged.requests)
        ctx.recorder.carried(len(lines))
        ctx.recorder.verdicts(judged.verdicts)
        self.judged.update((k, (x, v)) for (k, x), v in zip(batch.items(), judged.verdicts))

    def fits(self, branch: Branch, line: str) -> bool:
        """Whether keeping ``line`` stays within the cap."""
        lines, tokens = branch.carried_kept()
        branch.count([line])
        cap = self.cap(branch)
        return cap is not None and lines + 1 <= cap.lines and tokens + branch.tokens[line] <= cap.tokens

    def give_up(self, branch: Branch) -> None:
        """Carried lines took what they may: the rest of the budget is for new lines (headings stay)."""
        self.queue = [x for x in self.queue if section_heading(x, branch.slot)]


# ---------------------------------------------------------------- the target's repair


class Repairer:
    """The target writes the line in place of a rejected draft (SpecCompact's repair)."""

    def propose(self, branch: Branch) -> Proposal | StopReason:
        """The target's next line for the branch, not judged (``last``: the target ended its answer after it);
        a stop reason when it wrote no line the slot can take."""
        text, meta = branch.timed("repair", repair_line, branch.s, branch.ctx)
        branch.ctx.recorder.request("target", "repair", meta)
        out = read_repair(text, meta.get("finish_reason"))
        if out.truncated:
            return StopReason.REPAIR_TRUNCATED  # an unfinished line is neither stored nor built upon
        if out.line is None:
            return StopReason.TARGET_ENDED
        if empty_repair(out.line, branch.accepted, branch.blank_repair):
            return StopReason.EMPTY_REPAIR
        return Proposal(out.line, Source.REPAIR, last=out.ended)


# ---------------------------------------------------------------- the drafter


class Drafter:
    """The drafter's lines: one request per line, each continuing the branch's lines."""

    def __init__(self):
        self.draft = Continuation(Source.DRAFT)  # the last draft's lines, valid while they continue the branch

    def propose(self, branch: Branch, heading_ahead: bool = False) -> Proposal | StopReason | None:
        """The next drafted line; ``complete`` when the drafter has nothing more, ``token_budget`` when no tokens
        are left; None when it drafted nothing for a branch without content (the target decides).
        ``heading_ahead`` changes nothing: a draft is one line, and the loop ends the section at a heading."""
        prefix = branch.accepted
        got = self.draft.next(prefix)
        if got is not None:
            return got
        if branch.room() <= 0:
            return StopReason.TOKEN_BUDGET
        d = branch.timed("draft", draft, branch.slot, prefix, branch.ctx, branch.room())
        branch.ctx.recorder.request("drafter", "draft", d.meta)
        lines = list(d.lines)
        while not any(a.strip() for a in prefix) and lines and not lines[0].strip():
            lines.pop(0)  # a slot does not open with blank lines
        if not lines:
            return StopReason.COMPLETE if branch.has_content else None
        branch.count(lines)
        self.draft = Continuation(Source.DRAFT, prefix, lines, StopReason.COMPLETE if d.ended else None,
                                  cut=d.truncated, capped=d.capped)
        return self.draft.next(prefix)


# ---------------------------------------------------------------- the target as writer


class TargetWriter:
    """The target continues the branch on a copy, up to the slot's remaining tokens; its lines, unjudged."""

    def __init__(self):
        self.text = Continuation(Source.TARGET)  # the last generation's lines, valid while they continue the branch

    def propose(self, branch: Branch, heading_ahead: bool = False) -> Proposal | StopReason:
        """The next line the target wrote; when its generation's lines are used, why it ended.

        ``heading_ahead``: a carried sub-section heading comes next, so a
        generation stops where a heading starts.
        """
        prefix = branch.accepted
        got = self.text.next(prefix)
        if got is not None:
            return got
        left = branch.budget.max_tokens - branch.used.tokens
        if left <= 0:
            return StopReason.TOKEN_BUDGET
        sampling = write_sampling(branch.ctx.cfg, left, SECTION_STOP if heading_ahead else None)
        text, meta = branch.timed("generate", gen_on_copy, branch.s, "slot", sampling)
        branch.ctx.recorder.request("target", "generate", meta)
        finished = (meta.get("finish_reason") or {}).get("type") != "length"
        lines, truncated = split_draft(text, finished)
        while not any(a.strip() for a in prefix) and lines and not lines[0].strip():
            lines.pop(0)  # a slot does not open with blank lines
        ended = StopReason.COMPLETE if finished else StopReason.TOKEN_BUDGET
        if not lines:
            return ended
        branch.count(lines)
        self.text = Continuation(Source.TARGET, prefix, lines, ended, cut=truncated, capped=True)
        return self.text.next(prefix)
