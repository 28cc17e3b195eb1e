"""One slot branch: its lines and budget, and the one admission every proposed line goes through.

A :class:`Branch` is the state a slot's loop (:mod:`~.slot_loop`) grows:
the forked program state, the accepted lines, the budget, the lines'
token counts and the stale set.  :meth:`Branch.offer` takes a
:class:`~sgl_speccompact.core.admission.Proposal` through
:func:`~sgl_speccompact.core.admission.admit`, doing each step it names
(measure, judge, claim), and :meth:`Branch.accept` is the one place a line
enters the summary: it reports the ``line`` progress event.
"""

from __future__ import annotations

import time
from typing import Callable

from ..core.admission import Admission, Proposal, Source, Step, admit
from ..core.judge import Verdict
from ..core.lines import LineKind, SlotBudget, classify_line, drop_blank_ends, norm_line
from ..core.sections import SlotLines, branch_lines
from ..result import LineOrigin, SlotResult, StopReason, SummaryLine
from ..schema import Slot
from .context import SlotRun
from .judges import LineQuestions
from .steps import open_slot

HEADING = "### {}"  # how a sub-section heading line looks
ORIGINS = {Source.DRAFT: LineOrigin.DRAFTED, Source.CARRIED: LineOrigin.CARRIED, Source.REPAIR: LineOrigin.REPAIRED,
           Source.TARGET: LineOrigin.TARGET}  # a written or judged line's origin


def is_content(line: str) -> bool:
    """A line that is content: neither blank nor a heading.

    >>> is_content("- a"), is_content("### Done"), is_content(" ")
    (True, False, False)
    """
    return bool(line.strip()) and not line.strip().startswith("#")


class Branch:
    """One branch of a slot: the whole slot, or one of its sub-sections.

    Parameters
    ----------
    s : ProgramState
        The branch forked from the shared prefix.
    slot : Slot
        The slot this branch writes.
    run : SlotRun
        The program's run: its context (``ctx``), shared text and cancel flag.
    section : str, optional
        The sub-section this branch writes; it opens with its heading and
        ends at the next heading.
    shared : SlotLines, optional
        The judged lines every branch of the slot accepted (duplicate check).
    index : int
        The sub-section's place in the slot (earlier ones' headings use lines).
    """

    def __init__(self, s, slot: Slot, run: SlotRun, section: str | None = None,
                 shared: SlotLines | None = None, index: int = 0):
        cfg = run.ctx.cfg
        self.s, self.slot, self.section = s, slot, section
        self.run, self.ctx = run, run.ctx  # the run (shared text, cancel) and what it is asked
        self.result = SlotResult(name=slot.name, title=slot.title)  # the lines, with their origins
        self.accepted: list[str] = []  # the branch's lines so far, blank lines included
        self.shared = shared if shared is not None else SlotLines()  # judged lines of the whole slot
        self.budget = SlotBudget(branch_lines(cfg.max_lines_per_slot, index), cfg.max_tokens_per_slot,
                                 cfg.max_blank_lines_per_slot)
        self.tokens: dict[str, int] = {}  # line -> target tokens (with its newline)
        self.stale: set[str] = set()  # carried lines a reliable verdict said no longer hold (norm_line)
        self.blank_repair = False  # the last repair was blank and no real line was accepted since

    def open(self) -> None:
        """The slot request and the assistant turn; a sub-section's heading first."""
        open_slot(self.s, self.slot, self.run)
        if self.section is not None:
            heading = HEADING.format(self.section)
            self.count([heading])
            self.accept(heading, LineOrigin.TARGET if self.ctx.proposers.target_only else LineOrigin.UNJUDGED)

    # ------------------------------------------------------------ the one admission

    def offer(self, p: Proposal, judging: Callable[[], None] | None = None,
              **note) -> tuple[Admission, Verdict | None]:
        """Take ``p`` through the admission, doing each step it names; accept it if admitted.

        A proposal that comes without a verdict is judged here, as a drafted
        line (``judging`` runs first: the drafter drafts ahead meanwhile).
        ``note``: more :class:`~sgl_speccompact.result.SummaryLine` fields.
        Returns the final admission and the verdict, if any.
        """
        kind, v = self.kind(p.text), p.verdict
        if kind is LineKind.JUDGE and p.cut:
            if p.capped:
                return Admission(Step.STOP, StopReason.TOKEN_BUDGET), None  # it did not fit the slot's tokens
            kind = LineKind.TOO_LONG
        over = judged = claimed = None
        while True:
            done = admit(p.source, kind, over, judged, claimed, v.reliable if v is not None else True)
            if done.step is Step.MEASURE:
                self.count([p.text])
                over = self.budget.check(p.text, self.tokens[p.text]) or ""
            elif done.step is Step.JUDGE:
                v = v if v is not None else self.judge(p.text, judging)
                judged = v.accepted
            elif done.step is Step.CLAIM:
                claimed = self.shared.claim(p.text)
            else:
                break
        if done.step is Step.ACCEPT:
            judged_kind = kind is LineKind.JUDGE or p.source in (Source.REPAIR, Source.TARGET)
            self.accept(p.text, ORIGINS[p.source] if judged_kind else LineOrigin.UNJUDGED,
                        score=v.score if v is not None else None, **note)
        elif done.step is Step.STALE:  # completed, abandoned or contradicted: not drafted back either
            self.stale.add(norm_line(p.text))
        return done, v

    def judge(self, line: str, judging: Callable[[], None] | None = None) -> Verdict:
        """The judge's verdict on a proposed next line (``judging`` runs while it is asked)."""
        if judging is not None:
            judging()
        ctx = self.ctx
        t0 = time.perf_counter()
        (v,), meta = ctx.judge.judge(LineQuestions(self.s, self.slot, (line,), ctx, accepted=tuple(self.accepted)))
        ctx.recorder.time("verify", time.perf_counter() - t0)
        ctx.recorder.request("target", "verify", meta, n=int(meta.get("requests", 1)))
        ctx.recorder.verdicts([v])
        ctx.recorder.judged(v.accepted)
        return v

    def accept(self, line: str, origin: LineOrigin, score: float | None = None, **note) -> None:
        """Append ``line`` to the branch, its budget and its result; report it (the ``line`` event)."""
        self.s += line + "\n"
        self.budget.add(line, self.tokens[line])
        self.accepted.append(line)
        self.result.lines.append(SummaryLine(text=line, origin=origin, score=score, **note))
        if line.strip():
            self.blank_repair = False  # "two blank repairs in a row" counts between real lines only
        if origin is not LineOrigin.DRAFTED:
            self.ctx.recorder.line(origin, line)
        if line.strip():
            self.ctx.emit(type="line", slot=self.slot.name, text=line, origin=origin.value, score=score)

    # ------------------------------------------------------------ what the proposers ask

    def kind(self, line: str) -> LineKind:
        """The line checks, with the duplicate check across the slot's branches; a line judged stale
        as a carried line counts as a duplicate (it goes to repair unjudged)."""
        kind = classify_line(line, self.accepted, self.ctx.cfg, self.ctx.placeholders)
        if kind is LineKind.JUDGE and (self.shared.has(line) or norm_line(line) in self.stale):
            return LineKind.DUPLICATE
        return kind

    def count(self, lines: list[str]) -> None:
        """Measure the lines not measured yet, in target tokens (one call for all of them)."""
        new = [line for line in dict.fromkeys(lines) if line not in self.tokens]
        if new:
            self.tokens.update(zip(new, self.ctx.count_tokens([line + "\n" for line in new])))

    def room(self, extra: int = 0) -> int:
        """Tokens a request may still ask for: the slot's remaining tokens, at most max_new_tokens."""
        return min(self.ctx.cfg.max_new_tokens, self.budget.max_tokens - self.budget.tokens - extra)

    @property
    def full(self) -> bool:
        """The branch holds all the lines it may: no proposer is asked for more."""
        return self.budget.lines >= self.budget.max_lines

    @property
    def has_content(self) -> bool:
        """Some accepted line is content (not a blank or a heading)."""
        return any(is_content(a) for a in self.accepted)

    def ends_section(self, line: str) -> bool:
        """A heading in a sub-section branch starts the next sub-section: this one is done."""
        return self.section is not None and line.strip().startswith("#")

    def carried_kept(self) -> tuple[int, int]:
        """The carried lines kept so far: ``(lines, tokens)``."""
        kept = [line.text for line in self.result.lines if line.origin is LineOrigin.CARRIED]
        return len(kept), sum(self.tokens[t] for t in kept)

    def timed(self, phase: str, fn, *args):
        """``fn(*args)``, its wall time recorded under ``phase``."""
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.ctx.recorder.time(phase, time.perf_counter() - t0)

    def stop(self, reason: StopReason) -> SlotResult:
        """The branch's result, without blank lines at either end (they are not content)."""
        for line in drop_blank_ends(self.result.lines):
            self.budget.tokens -= self.tokens[line.text]
            self.budget.blanks -= 1
        self.result.stop_reason = reason
        self.result.tokens = self.budget.tokens
        return self.result
