"""Where a slot's lines come from: one proposer per source, and the target's repair.

Every slot method is the same loop (:mod:`~.slot_loop`) over proposals,
propose -> check and admit -> accept or repair, fed by a choice of these
(:class:`~.context.Proposers`):

* :class:`CarriedLines` -- the previous summary's lines for the branch, each
  judged for whether it still holds after the new turns.  They are judged
  in bounded batches, never more than the slot can keep
  (:func:`~sgl_speccompact.core.carried.carried_bound`), one request each
  (criterion first, the shared part prefilled once: :class:`~.judges.CarriedQuestions`),
  and kept within the cap the evidence rule sets
  (:func:`~sgl_speccompact.core.carried.carried_cap`).
* :class:`Drafter` -- the drafter's next line, drafted one line per request;
  with ``pipelined_drafting`` the line after it is drafted while the target
  judges it (dropped if it is rejected).
* :class:`TargetWriter` -- the target continues the branch in one
  generation capped at the slot's remaining tokens; its lines are not
  judged, and one refused by a check is skipped.

:class:`Repairer` writes the target's line in place of a rejected draft
(SpecCompact), and the first line of a branch the drafter left empty.

A proposer answers ``propose(branch)`` with a
:class:`~sgl_speccompact.core.admission.Proposal`, a
:class:`~sgl_speccompact.result.StopReason` (it has nothing more), or None
(it handled a line itself: ask again).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from ..core.admission import Proposal, Source, Step
from ..core.carried import CarriedCap, carried_bound, carried_cap, section_heading
from ..core.judge import Verdict
from ..core.lines import DraftBuffer, LineKind, empty_repair, norm_line, read_repair, split_draft
from ..result import StopReason
from .branch import Branch
from .judges import CarriedQuestions
from .steps import Draft, draft, gen_on_copy, repair_line

# a generation of one sub-section ends where the next heading starts.  A string, not a list: sglang's
# interpreter extends a list stop in place with the chat template's stops (``clone.stop += ...``),
# so a shared list would grow on every call until the server refuses it
SECTION_STOP = "\n#"
SECTION_ENDS = (StopReason.COMPLETE, StopReason.TARGET_ENDED)  # a writer that ends so has written its section


class Proposer(Protocol):
    """A source of proposed lines for one branch."""

    def propose(self, branch: Branch) -> Proposal | StopReason | None:
        """The next proposal; a stop reason when it has nothing more; None when it handled a line itself."""

    def judging(self, branch: Branch, p: Proposal) -> None:
        """Called while the target judges ``p`` (the drafter drafts the line after it meanwhile)."""

    def close(self, branch: Branch) -> None:
        """The branch ended: settle whatever is still in flight."""


# ---------------------------------------------------------------- carried lines


class CarriedLines:
    """The previous summary's lines for one branch, proposed before any new line.

    Only the slot's own sub-section headings pass unjudged, in the schema's
    words; any other heading, a marker, a blank, a duplicate (across the
    slot's branches too) or an over-long line is refused by its checks,
    unjudged.  A one-branch slot with sub-sections lets its writer write each
    section's new lines before the next carried sub-section heading.
    """

    def __init__(self, branch: Branch, lines: tuple[str, ...]):
        self.queue = list(lines)  # still to propose, in the previous summary's order
        self.verdicts: dict[str, Verdict] = {}  # norm_line -> verdict, for every line judged
        self.held = 0  # lines judged to still hold
        self.judged_tokens = 0  # tokens of the lines judged (their mean sizes the new lines' room)
        self.cap: CarriedCap | None = None  # how much of the budget carried lines may take (after a batch)
        self.section_written = False  # the writer wrote the section before the next carried heading
        cfg = branch.ctx.cfg
        self.bound = carried_bound(branch.budget.max_lines, cfg.max_carried_share)  # most a slot keeps

    @property
    def pending(self) -> bool:
        """Carried lines remain to be proposed."""
        return bool(self.queue)

    def turn(self, branch: Branch) -> bool:
        """Whether the next proposal is a carried line: not when it heads the slot's next sub-section
        and this section's new lines are still to write (a new Done line lands under Done).  Once per
        heading: the flag clears when the heading is proposed."""
        if not self.queue:
            return False
        if branch.budget.lines and not self.section_written and section_heading(self.queue[0], branch.slot):
            return False
        self.section_written = False
        return True

    def headings_ahead(self, branch: Branch) -> bool:
        """A carried sub-section heading is still to come (a generation must stop before it)."""
        return any(section_heading(x, branch.slot) for x in self.queue)

    def propose(self, branch: Branch) -> Proposal | None:
        """The next carried line with its verdict; None when carried lines have taken what they may."""
        line = self.queue.pop(0)
        heading = section_heading(line, branch.slot) if branch.section is None else None
        if heading:
            return Proposal(heading, Source.HEADING)
        if branch.kind(line) is not LineKind.JUDGE:
            return Proposal(line, Source.CARRIED)  # refused by its checks: no verdict needed
        v = self.verdict(branch, line)
        if v is None or (v.accepted and not self.fits(branch, line)):
            self.give_up(branch)
            return None
        return Proposal(line, Source.CARRIED, verdict=v)

    def verdict(self, branch: Branch, line: str) -> Verdict | None:
        """``line``'s verdict, judging the next bounded batch if it has none; None past what the slot keeps."""
        key = norm_line(line)
        if key not in self.verdicts:
            self.judge_batch(branch, line)
        return self.verdicts.get(key)

    def judge_batch(self, branch: Branch, first: str) -> None:
        """Judge ``first`` and the lines after it, as many as the slot may still keep, in one batch."""
        kept, _ = branch.carried_kept()
        if self.cap is not None and kept >= self.cap.lines:
            return  # the evidence so far keeps no more
        room = min(self.bound - kept, branch.budget.max_lines - len(self.verdicts))
        if room <= 0:
            return
        batch, keys = [], set()
        for x in [first] + self.queue:
            key = norm_line(x)
            if len(batch) == room:
                break
            if (key in keys or key in self.verdicts or section_heading(x, branch.slot)
                    or branch.kind(x) is not LineKind.JUDGE):
                continue
            batch.append(x)
            keys.add(key)
        if not batch:
            return
        ctx = branch.ctx
        branch.count(batch)
        verdicts, meta = branch.timed("verify_carried", ctx.judge.judge,
                                      CarriedQuestions(branch.s, branch.slot, tuple(batch), ctx))
        ctx.recorder.request("target", "verify_carried", meta, n=int(meta.get("requests", 1)))
        ctx.recorder.carried(len(batch))
        ctx.recorder.verdicts(verdicts)
        self.verdicts.update((norm_line(x), v) for x, v in zip(batch, verdicts))
        self.held += sum(v.accepted for v in verdicts)
        self.judged_tokens += sum(branch.tokens[x] for x in batch)
        judged = len(self.verdicts)
        self.cap = carried_cap(self.held, judged, branch.budget.max_lines, branch.budget.max_tokens,
                               self.judged_tokens / judged, ctx.cfg.max_carried_share)

    def fits(self, branch: Branch, line: str) -> bool:
        """Whether keeping ``line`` stays within the cap."""
        lines, tokens = branch.carried_kept()
        branch.count([line])
        return self.cap is not None and lines + 1 <= self.cap.lines and tokens + branch.tokens[line] <= self.cap.tokens

    def give_up(self, branch: Branch) -> None:
        """Carried lines took what they may: the rest of the budget is for new lines (headings stay)."""
        self.queue = [x for x in self.queue if section_heading(x, branch.slot)]

    def close(self, branch: Branch) -> None:
        """Nothing in flight."""


# ---------------------------------------------------------------- the target's repair


class Repairer:
    """The target writes a line in place of a rejected one (SpecCompact's repair)."""

    def repair(self, branch: Branch, rejected: str | None, v: Verdict | None) -> StopReason | None:
        """Replace ``rejected`` (None: write the first line of a branch the drafter left empty).

        The repair is not judged; it reports the rejected draft's score
        (``v``; None when it failed a check) and whether that verdict was
        unreliable.  Returns a stop reason, or None to go on.
        """
        text, meta = branch.timed("repair", repair_line, branch.s, branch.ctx)
        branch.ctx.recorder.request("target", "repair", meta)
        # no explicit discard: buffered lines continue a prefix that now differs, so take() refuses them
        out = read_repair(text, meta.get("finish_reason"))
        if out.truncated:
            return StopReason.REPAIR_TRUNCATED  # an unfinished line is neither stored nor built upon
        if out.line is None:
            return StopReason.TARGET_ENDED
        if empty_repair(out.line, branch.accepted, branch.blank_repair):
            return StopReason.EMPTY_REPAIR
        branch.blank_repair = not out.line.strip()  # a paragraph break, kept
        if branch.ends_section(out.line):
            return StopReason.COMPLETE
        done, _ = branch.offer(Proposal(out.line, Source.REPAIR), rejected_draft=rejected,
                               rejected_score=v.score if v is not None else None,
                               unreliable_verdict=v is not None and not v.reliable)
        if done.step is Step.STOP:
            return done.reason
        return StopReason.TARGET_ENDED if out.ended else None

    def first_line(self, branch: Branch) -> StopReason | None:
        """The drafter wrote nothing for a branch without content: the target decides, writing its
        first line as a repair does.  The branch ends ``complete`` and empty only if the target
        writes nothing too, or an empty marker."""
        reason = self.repair(branch, None, None)
        markers = {m.lower() for m in branch.ctx.cfg.empty_markers}
        marker = reason is None and bool(branch.accepted) and branch.accepted[-1].strip().lower() in markers
        return StopReason.COMPLETE if reason is StopReason.TARGET_ENDED or marker else reason


# ---------------------------------------------------------------- the drafter


class Drafter:
    """The drafter's lines: one per request, the next drafted while the target judges this one."""

    def __init__(self, carried: CarriedLines | None, repairer: Repairer):
        self.carried = carried  # the branch's carried lines: no draft ahead while one is next
        self.repairer = repairer  # writes the first line of a branch the drafter leaves empty
        self.buffer = DraftBuffer()  # lines of the last draft, valid only for the prefix they continue
        self.cut: str | None = None  # a drafted line cut off by the token limit
        self.capped = False  # ... by the slot's remaining tokens
        self.pending: tuple[tuple[str, ...], Future] | None = None  # drafted ahead, and the prefix it continues
        self.dropped: list[Future] = []  # drafts sent ahead, then dropped
        self.pool = ThreadPoolExecutor(max_workers=1)

    def propose(self, branch: Branch) -> Proposal | StopReason | None:
        """The next drafted line; ``complete`` when the drafter has nothing more (while the branch has no
        content, the target decides: :meth:`Repairer.first_line`), ``token_budget`` when no tokens are left."""
        prefix = tuple(branch.accepted)
        line = self.buffer.take(prefix)
        if line is not None:
            return Proposal(line, Source.DRAFT, cut=line == self.cut, capped=self.capped)
        if self.buffer.done(prefix):
            return StopReason.COMPLETE
        if branch.room() <= 0:
            return StopReason.TOKEN_BUDGET
        d = self.next_draft(branch, prefix)
        lines = list(d.lines)
        while not any(a.strip() for a in prefix) and lines and not lines[0].strip():
            lines.pop(0)  # a slot does not open with blank lines
        if not lines:
            return StopReason.COMPLETE if branch.has_content else self.repairer.first_line(branch)
        self.buffer = DraftBuffer(prefix, lines, d.ended)
        self.cut, self.capped = (lines[-1] if d.truncated else None), d.capped
        branch.count(lines)
        return self.propose(branch)

    def next_draft(self, branch: Branch, prefix: tuple[str, ...]) -> Draft:
        """The draft continuing ``prefix``: the one drafted ahead if it matches, else a new call."""
        pending, self.pending = self.pending, None
        if pending is not None and pending[0] == prefix:
            d = branch.timed("draft_wait", pending[1].result)
        else:
            if pending is not None:
                self.drop(pending[1])
            d = branch.timed("draft", draft, branch.slot, prefix, branch.ctx, branch.room())
        branch.ctx.recorder.request("drafter", "draft", d.meta)
        return d

    def judging(self, branch: Branch, p: Proposal) -> None:
        """Draft what follows ``p`` while the target judges it (pipelined drafting)."""
        buf = self.buffer
        if (not branch.ctx.cfg.pipelined_drafting or self.pending is not None or buf.lines or buf.exhausted
                or (self.carried is not None and self.carried.pending)):  # a carried line comes next
            return
        room = branch.room(branch.tokens[p.text])
        if room <= 0 or branch.budget.lines + 1 >= branch.budget.max_lines:
            return  # accepting the line fills the slot: nothing to draft
        nxt = tuple(branch.accepted) + (p.text,)
        self.pending = (nxt, self.pool.submit(draft, branch.slot, nxt, branch.ctx, room))

    def drop(self, fut: Future) -> None:
        """Drop a draft sent ahead whose line was rejected (counted once answered, in :meth:`close`)."""
        if not fut.cancel():  # already sent
            self.dropped.append(fut)

    def close(self, branch: Branch) -> None:
        """Wait for dropped drafts still in flight and count them, so no request outlives the slot."""
        if self.pending is not None:
            self.drop(self.pending[1])
            self.pending = None
        self.pool.shutdown(wait=False, cancel_futures=True)
        recorder = branch.ctx.recorder
        for fut in self.dropped:
            exc = fut.exception()  # waits; a failed draft sent ahead decides nothing
            recorder.dropped()
            recorder.request("drafter", "draft_dropped", fut.result().meta if exc is None else {})
        self.dropped = []


# ---------------------------------------------------------------- the target as writer


class TargetWriter:
    """The target continues the branch on a copy, up to the slot's remaining tokens; its lines, unjudged."""

    def __init__(self, carried: CarriedLines | None):
        self.carried = carried  # the branch's carried lines: a generation stops before their next heading
        self.queue: list[str] = []  # complete lines of the last generation, not yet proposed
        self.cut: str | None = None  # its last line, when the token limit cut it off
        self.ended: StopReason | None = None  # why the last generation ended, once its lines are used

    def propose(self, branch: Branch) -> Proposal | StopReason:
        """The next line the target wrote; when its generation's lines are used, why it ended."""
        if self.queue:
            line = self.queue.pop(0)
            return Proposal(line, Source.TARGET, cut=not self.queue and line == self.cut, capped=True)
        if self.ended is not None:
            ended, self.ended = self.ended, None
            return ended
        left = branch.budget.max_tokens - branch.budget.tokens
        if left <= 0:
            return StopReason.TOKEN_BUDGET
        sampling = {"max_tokens": left, "temperature": 0.0}
        if branch.section is not None or (self.carried is not None and self.carried.headings_ahead(branch)):
            sampling["stop"] = SECTION_STOP
        text, meta = branch.timed("generate", gen_on_copy, branch.s, "slot", sampling)
        branch.ctx.recorder.request("target", "generate", meta)
        finished = (meta.get("finish_reason") or {}).get("type") != "length"
        lines, truncated = split_draft(text, finished)
        while not any(a.strip() for a in branch.accepted) and lines and not lines[0].strip():
            lines.pop(0)  # a slot does not open with blank lines
        ended = StopReason.COMPLETE if finished else StopReason.TOKEN_BUDGET
        if not lines:
            return ended
        self.queue, self.cut, self.ended = lines, (lines[-1] if truncated else None), ended
        branch.count(lines)
        return self.propose(branch)

    def judging(self, branch: Branch, p: Proposal) -> None:
        """The target's lines are not judged."""

    def close(self, branch: Branch) -> None:
        """Nothing in flight."""
