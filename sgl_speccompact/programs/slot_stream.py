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
         or repair (repairing.py): drafter candidates judged in one batch
         (``repair_candidates``), else the target writes the line.

Every proposed line, whatever its source (carried, buffered or drafted,
repair, candidate), takes that order through one decision,
:func:`~sgl_speccompact.core.admission.admit`, in :meth:`SlotStream.offer`,
the one place a line is accepted.  Decisions depend only on the drafted
lines and the verdicts, so they are the same with and without pipelining.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from .carrying import CarriedProposals
from .drafting import Drafting
from .repairing import Repairs
from ..core.admission import Admission, Source, Step, admit
from ..core.judge import acted
from ..core.lines import DraftBuffer, LineKind, SlotBudget, classify_line, drop_blank_ends, norm_line
from .context import SlotRun
from .steps import open_slot, verify_line
from ..result import LineOrigin, SlotResult, SummaryLine
from ..schema import Slot
from ..core.sections import SlotLines, branch_lines

HEADING = "### {}"  # how a sub-section heading line looks
ORIGINS = {Source.DRAFT: LineOrigin.DRAFTED, Source.CARRIED: LineOrigin.CARRIED, Source.REPAIR: LineOrigin.REPAIRED,
           Source.CANDIDATE: LineOrigin.CANDIDATE}  # the origin of a judged line each source admits


class SlotStream(CarriedProposals, Drafting, Repairs):
    """One branch: its accepted lines, budget, draft buffer and prefetched draft.

    Parameters
    ----------
    s : ProgramState
        The branch forked from the shared prefix.
    slot : Slot
        The slot this branch writes.
    run : SlotRun
        The program's run: its :class:`~.context.SlotContext` (``ctx``),
        shared text, cancel flag and lockstep gate.
    section : str, optional
        The sub-section this branch writes; it opens with its heading and
        ends at the next heading.  The slot's budget is shared: the join
        keeps lines in sub-section order while they fit.
    shared : SlotLines, optional
        The judged lines every branch of the slot accepted (duplicate check).
    index : int
        The sub-section's place in the slot (earlier ones' headings use lines).
    """

    def __init__(self, s, slot: Slot, run: SlotRun, section: str | None = None,
                 shared: SlotLines | None = None, index: int = 0):
        self.s, self.slot, self.section = s, slot, section
        self.program, self.ctx = run, run.ctx  # the run (shared text, cancel, gate) and what it is asked
        ctx, cfg = run.ctx, run.ctx.cfg
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
        self.carried_used = (0, 0)  # carried lines kept: (lines, tokens), against the cap (carried_batch.py)
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
        """A blocking request (with experimental lockstep rounds, it waits for its round first)."""
        if self.program.gate is not None:
            self.timed("lockstep_wait", self.program.gate.wait)
        return self.timed(phase, fn, *args)

    def count(self, lines: list[str]) -> None:
        new = [line for line in dict.fromkeys(lines) if line not in self.tokens]
        if new:
            self.tokens.update(zip(new, self.ctx.count_tokens([line + "\n" for line in new])))

    def accept(self, line: str, origin: LineOrigin, score: float | None = None,
               rejected: str | None = None, **more) -> None:
        self.s += line + "\n"
        self.budget.add(line, self.tokens[line])
        self.accepted.append(line)
        self.result.lines.append(SummaryLine(text=line, origin=origin, score=score, rejected_draft=rejected, **more))
        if line.strip():
            self.blank_repair = False  # "two blank repairs in a row" counts between real lines only
        if origin is not LineOrigin.DRAFTED:
            self.ctx.recorder.line(origin, line)
        if line.strip():
            self.ctx.emit(type="line", slot=self.slot.name, text=line, origin=origin.value, score=score)

    def kind(self, line: str) -> LineKind:
        """The line checks, with the duplicate check across the slot's branches; a line the target
        judged stale as a carried line counts as a duplicate (it goes to repair unjudged)."""
        kind = classify_line(line, self.accepted, self.ctx.cfg, self.ctx.placeholders)
        if kind is LineKind.JUDGE and (self.shared.has(line) or norm_line(line) in self.stale):
            return LineKind.DUPLICATE
        return kind

    def stop(self, reason: str) -> SlotResult:
        """The branch's result, without blank lines at either end (they are not content)."""
        for line in drop_blank_ends(self.result.lines):
            self.budget.tokens -= self.tokens[line.text]
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
            open_slot(self.s, self.slot, self.program)
            if self.section is not None:
                heading = HEADING.format(self.section)
                self.count([heading])
                self.accept(heading, LineOrigin.UNJUDGED)
            return self.stop(self.loop())
        finally:
            if self.program.gate is not None:
                self.program.gate.leave()  # however the branch ends, later rounds go without it
            if self.pending is not None:
                self.drop(self.pending[1])
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.settle()

    def loop(self) -> str:
        """Propose lines until the branch stops; returns its stop reason.

        The source of the next line: the previous summary's carried lines
        first (:meth:`carry`, but a sub-section's new lines are drafted before
        the next carried heading), else the draft buffer (:meth:`step`), else
        a new draft fills the buffer (:meth:`refill`).
        """
        while True:
            if self.program.cancel.is_set():
                return "cancelled"
            if self.budget.lines >= self.budget.max_lines:
                return "line_budget"  # full: no drafter call
            prefix = tuple(self.accepted)
            if self.carried and not self.draft_section():
                self.carry(prefix, self.carried.pop(0))
                continue
            line = self.buffer.take(prefix)
            if line is None:
                reason = self.refill(prefix)
            elif self.carried and line.strip().startswith("#"):
                reason = "complete"  # the drafter moves on: the carried heading comes next
            else:
                reason = self.step(prefix, line)
            if reason in ("complete", "target_ended") and self.carried:
                self.section_drafted = True  # this section's new lines are written: back to the carried ones
            elif reason:
                return reason

    def ends_section(self, line: str) -> bool:
        """A heading in a sub-section branch starts the next sub-section: this one is done."""
        return self.section is not None and line.strip().startswith("#")

    def step(self, prefix: tuple[str, ...], line: str) -> str | None:
        """Propose a drafted line: admitted, or repaired; returns a stop reason or None to go on."""
        if self.ends_section(line):
            return "complete"
        kind = self.kind(line)
        if kind is LineKind.JUDGE and line == self.cut:
            if self.capped:
                return "token_budget"  # the line did not fit the slot's remaining tokens
            kind = LineKind.TOO_LONG
        done, score = self.offer(line, Source.DRAFT, kind, lambda: self.judge(prefix, line))
        if done.step is Step.REPAIR:  # rejected, another branch has it, or it failed its checks (then not judged)
            return self.repair(line, score=score, unreliable=kind is LineKind.JUDGE and self.unsure)
        return done.reason

    def judge(self, prefix: tuple[str, ...], line: str, carried: bool = False) -> dict:
        """The target's judgement of one proposed line (``carried``: whether it still holds);
        the drafter drafts the next line meanwhile."""
        self.prefetch(prefix, line)
        meta = self.sent("verify", verify_line, self.s, self.slot, line, self.ctx, carried)
        self.ctx.recorder.request("target", "verify", meta, n=int(meta.get("requests", 1)))
        judgement = acted(meta.get("judgement") or {}, self.ctx.cfg.min_label_mass)  # unreliable: accepts nothing
        self.ctx.recorder.verdict(judgement)
        self.unsure = bool(judgement.get("unreliable"))  # the last verdict had too little label mass to act on
        (self.ctx.recorder.carried if carried else self.ctx.recorder.judged)(bool(judgement.get("accepted")))
        return judgement

    def offer(self, line: str, source: Source, kind: LineKind, judge: Callable[[], dict | None] | None = None,
              score: float | None = None, rejected: str | None = None, **more) -> tuple[Admission, float | None]:
        """Take ``line`` through :func:`~sgl_speccompact.core.admission.admit`, doing each step it
        names, and accept it if admitted; returns the final admission and the line's score.

        ``judge()`` asks the target (None: the line is not judged after all, and dropped); ``more``: SummaryLine fields.
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
                        else LineOrigin.UNJUDGED, score=score, rejected=rejected, **more)
        return done, score
