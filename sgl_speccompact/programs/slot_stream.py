"""The slot stream: draft, check, verify, repair, line by line (paper sections
"SpecCompact" and "Efficient Slot-Parallel Execution").

:mod:`~sgl_speccompact.programs.slots` forks one branch per slot and runs one
:class:`SlotStream` per branch, concurrently.  Each stream loops::

    take the next proposed line (a line carried from the previous summary,
      see carrying.py; else buffered, prefetched, or drafted now: drafting.py)
      -> checks (duplicate / too long -> repair; heading, marker, blank -> accept)
      -> budget check
      -> judge (while it is judged, the drafter already drafts the next line:
         pipelined drafting; dropped if this line is rejected)
      -> claim (no other branch of the slot has it) -> accept,
         or repair: drafter candidates judged in one batch
         (``repair_candidates``), else the target writes the line.

Every proposed line, whatever its source (draft, carried, repair,
candidate), takes that order through one decision,
:func:`~sgl_speccompact.core.admission.admit`, in :meth:`SlotStream.offer`.

With ``lockstep_branches`` on, every blocking request waits for its round
(:mod:`~sgl_speccompact.programs.experimental`), so the branches' requests share
forward passes.

Decisions depend only on the drafted lines and the verdicts, so they are the
same with and without pipelining.

A blank repair is a paragraph break, kept (blank lines at a slot's ends are
dropped when it stops), so a real line may follow it, also at a slot's
start.  An empty repair (:func:`~sgl_speccompact.core.lines.empty_repair`:
a second blank repair with no real line accepted in between) stops the slot
with ``stop_reason="empty_repair"``, keeping its accepted prefix, as the
paper says: a target that only answers blank costs at most two repairs.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from .carrying import CarriedProposals
from .drafting import Drafting
from ..core.admission import Admission, Source, Step, admit
from ..core.lines import DraftBuffer, LineKind, SlotBudget, classify_line, empty_repair, norm_line, read_repair
from .steps import SlotContext, open_slot, repair_line, verify_line
from ..result import LineOrigin, SlotResult, SummaryLine
from ..schema import Slot
from ..core.sections import SlotLines, branch_lines

HEADING = "### {}"  # how a sub-section heading line looks
ORIGINS = {Source.DRAFT: LineOrigin.DRAFTED, Source.CARRIED: LineOrigin.CARRIED, Source.REPAIR: LineOrigin.REPAIRED,
           Source.CANDIDATE: LineOrigin.CANDIDATE}  # the origin of a judged line each source admits


class SlotStream(CarriedProposals, Drafting):
    """One branch: its accepted lines, budget, draft buffer and prefetched draft.

    Parameters
    ----------
    s : ProgramState
        The branch forked from the shared prefix.
    slot : Slot
        The slot this branch writes.
    ctx : SlotContext
        The compaction's context.
    section : str, optional
        The sub-section this branch writes; it opens with its heading and
        ends at the next heading.  The slot's budget is shared: the join
        keeps lines in sub-section order while they fit.
    shared : SlotLines, optional
        The judged lines every branch of the slot accepted (duplicate check).
    index : int
        The sub-section's place in the slot (earlier ones' headings use lines).
    """

    def __init__(self, s, slot: Slot, ctx: SlotContext, section: str | None = None,
                 shared: SlotLines | None = None, index: int = 0):
        self.s, self.slot, self.ctx, self.section = s, slot, ctx, section
        cfg = ctx.cfg
        self.result = SlotResult(name=slot.name, title=slot.title)
        self.accepted: list[str] = []  # the branch's lines so far, blank lines included
        self.shared = shared if shared is not None else SlotLines()  # judged lines of the whole slot
        self.blank_repair = False  # the last repair was blank and no real line was accepted since
        self.budget = SlotBudget(branch_lines(cfg.max_lines_per_slot, index), cfg.max_tokens_per_slot,
                                 cfg.max_blank_lines_per_slot)
        self.buffer = DraftBuffer()
        self.cut: str | None = None  # a drafted line cut off by the token limit
        self.capped = False  # ... by the slot's remaining tokens
        self.tokens: dict[str, int] = {}  # line -> target tokens (with its newline)
        self.pending: tuple[tuple[str, ...], Future] | None = None  # prefetched draft and its prefix
        self.dropped: list[Future] = []  # prefetched drafts sent, then dropped
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.carried = list(ctx.carried.get((slot.name, section), ()))  # proposed before any draft
        self.carried_used = (0, 0)  # carried lines kept: (lines, tokens), against max_carried_share
        self.stale: set[str] = set()  # carried lines judged no longer to hold (norm_line), never kept
        self.section_drafted = False  # the new lines before the next carried sub-section heading are drafted

    # ------------------------------------------------------------ bookkeeping

    def timed(self, phase: str, fn, *args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.ctx.recorder.time(phase, time.perf_counter() - t0)

    def sent(self, phase: str, fn, *args):
        """A blocking request: it waits for its round first when branches run in lockstep."""
        if self.ctx.lockstep is not None:
            self.timed("lockstep_wait", self.ctx.lockstep.wait)
        return self.timed(phase, fn, *args)

    def count(self, lines: list[str]) -> None:
        new = [line for line in dict.fromkeys(lines) if line not in self.tokens]
        if new:
            self.tokens.update(zip(new, self.ctx.count_tokens([line + "\n" for line in new])))

    def accept(self, line: str, origin: LineOrigin, score: float | None = None,
               rejected: str | None = None) -> None:
        self.s += line + "\n"
        self.budget.add(line, self.tokens[line])
        self.accepted.append(line)
        self.result.lines.append(SummaryLine(text=line, origin=origin, score=score, rejected_draft=rejected))
        if line.strip():
            self.blank_repair = False  # "two blank repairs in a row" counts between real lines only
        if origin is not LineOrigin.DRAFTED:
            self.ctx.recorder.line(origin, line)
        if line.strip():
            self.ctx.emit(type="line", slot=self.slot.name, text=line, origin=origin.value, score=score)

    def kind(self, line: str) -> LineKind:
        """The line checks, with the duplicate check across the slot's branches; a line the target
        judged stale as a carried line counts as a duplicate (it goes to repair unjudged)."""
        kind = classify_line(line, self.accepted, self.ctx.cfg)
        if kind is LineKind.JUDGE and (self.shared.has(line) or norm_line(line) in self.stale):
            return LineKind.DUPLICATE
        return kind

    def stop(self, reason: str) -> SlotResult:
        lines = self.result.lines
        for end in (-1, 0):  # blank lines at either end are not content
            while lines and not lines[end].text.strip():
                self.budget.tokens -= self.tokens[lines.pop(end).text]
                self.budget.blanks -= 1
        self.result.stop_reason = reason
        self.result.tokens = self.budget.tokens
        return self.result

    def room(self, extra: int = 0) -> int:
        """Tokens a draft may still ask for: the slot's remaining tokens, at most max_new_tokens."""
        return min(self.ctx.cfg.max_new_tokens, self.budget.max_tokens - self.budget.tokens - extra)

    # ------------------------------------------------------------ the loop

    def run(self) -> SlotResult:
        """Write the branch until it stops; returns its :class:`SlotResult`."""
        try:
            open_slot(self.s, self.slot, self.ctx)
            if self.section is not None:
                heading = HEADING.format(self.section)
                self.count([heading])
                self.accept(heading, LineOrigin.UNJUDGED)
            return self.stop(self.loop())
        finally:
            if self.ctx.lockstep is not None:
                self.ctx.lockstep.leave()  # however the branch ends, later rounds go without it
            if self.pending is not None:
                self.drop(self.pending[1])
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.settle()

    def loop(self) -> str:
        while True:
            if self.ctx.cancel.is_set():
                return "cancelled"
            if self.budget.lines >= self.budget.max_lines:
                return "line_budget"  # full: no drafter call
            prefix = tuple(self.accepted)
            if self.carried and not self.draft_section():
                self.carry(prefix, self.carried.pop(0))
                continue
            line = self.buffer.take(prefix)
            if line is not None:
                if self.carried and line.strip().startswith("#"):
                    self.section_drafted = True  # the drafter moves on: the carried heading comes next
                    continue
                reason = self.step(prefix, line)
                if reason in ("complete", "target_ended") and self.carried:
                    self.section_drafted = True
                elif reason:
                    return reason
                continue
            if self.buffer.done(prefix) and self.carried:
                self.section_drafted = True
                continue
            if self.buffer.done(prefix):
                return "complete"
            if self.room() <= 0:
                return "token_budget"
            d = self.next_draft(prefix)
            lines = list(d.lines)
            while not any(a.strip() for a in prefix) and lines and not lines[0].strip():
                lines.pop(0)  # a slot does not open with blank lines
            if not lines and self.carried:
                self.section_drafted = True
                continue
            if not lines:
                return "complete"
            self.buffer = DraftBuffer(prefix, lines, d.ended)
            self.cut, self.capped = (lines[-1] if d.truncated else None), d.capped
            self.count(lines)

    def ends_section(self, line: str) -> bool:
        """A heading in a sub-section branch starts the next sub-section: this one is done."""
        return self.section is not None and line.strip().startswith("#")

    def step(self, prefix: tuple[str, ...], line: str) -> str | None:
        """Handle one proposed line; returns a stop reason or None to go on."""
        ctx = self.ctx
        if self.ends_section(line):
            return "complete"
        kind = self.kind(line)
        if kind is LineKind.JUDGE and line == self.cut:
            if self.capped:
                return "token_budget"  # the line did not fit the slot's remaining tokens
            kind = LineKind.TOO_LONG

        def judge() -> dict:
            judgement = self.judge(prefix, line)
            ctx.recorder.judged(bool(judgement.get("accepted")))
            return judgement
        done, score = self.offer(line, Source.DRAFT, kind, judge)
        if done.step is Step.REPAIR:  # rejected, another branch has it, or it failed its checks
            return self.repair(line, score=score)
        return done.reason

    def judge(self, prefix: tuple[str, ...], line: str, carried: bool = False) -> dict:
        """The target's judgement of one proposed line; the drafter drafts the next one meanwhile."""
        self.prefetch(prefix, line)
        meta = self.sent("verify", verify_line, self.s, self.slot, line, self.ctx, carried)
        self.ctx.recorder.request("target", "verify", meta, n=int(meta.get("requests", 1)))
        return meta.get("judgement") or {}

    def offer(self, line: str, source: Source, kind: LineKind, judge: Callable[[], dict | None] | None = None,
              score: float | None = None, rejected: str | None = None) -> tuple[Admission, float | None]:
        """Take ``line`` through :func:`~sgl_speccompact.core.admission.admit`, doing each step it
        names, and accept it if admitted; returns the final admission and the line's score.

        ``judge()`` asks the target (None: the line is not judged after all, and dropped).
        """
        over = judged = claimed = None
        while True:
            done = admit(source, kind, over, judged, claimed)
            if done.step is Step.MEASURE:
                self.count([line])
                over = self.budget.check(line, self.tokens[line]) or ""
            elif done.step is Step.JUDGE:
                judgement = judge()
                if judgement is None:
                    return Admission(Step.DROP), score
                judged, score = bool(judgement.get("accepted")), judgement.get("score", score)
            elif done.step is Step.CLAIM:
                claimed = self.shared.claim(line)
            else:
                break
        if done.step is Step.ACCEPT:
            self.accept(line, ORIGINS[source] if kind is LineKind.JUDGE or source is Source.REPAIR
                        else LineOrigin.UNJUDGED, score=score, rejected=rejected)
        return done, score

    # ------------------------------------------------------------ repairs

    def repair(self, rejected: str, score: float | None) -> str | None:
        """Replace ``rejected``: a judged drafter candidate, else a target-written line."""
        if self.ctx.cfg.repair_candidates:
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
        done, _ = self.offer(out.line, Source.REPAIR, self.kind(out.line), score=score, rejected=rejected)
        if done.step is Step.STOP:
            return done.reason
        return "target_ended" if out.ended else None
