"""One slot branch: its lines and budget, and the one admission every proposed line goes through.

A :class:`Branch` is the state a slot's loop (:mod:`~.slot_loop`) grows:
the forked program state, the result's lines (everything else about them --
the accepted prefix, the budget used, whether the last repair was blank --
is read from those lines), the lines' token counts and the stale set.
:meth:`Branch.admit` runs a :class:`~sgl_speccompact.core.admission.Proposal`
through the admission's stages in order (checks, budget, judge, verdict),
and :meth:`Branch.offer` does what the admission says: :meth:`Branch.accept`
is the one place a line enters the summary and reports its ``line`` event.
"""

from __future__ import annotations

import time

from ..core.admission import (Admission, Proposal, Source, Step, admit, checks_evidence, fit, needs_verdict,
                              screen, vouch)
from ..core.evidence import Evidence
from ..core.judge import Verdict
from ..core.lines import LineKind, SlotBudget, Used, classify_line, drop_blank_ends, is_heading, norm_line
from ..result import LineOrigin, SlotResult, StopReason, SummaryLine
from ..schema import Slot
from .context import SlotRun
from .judges import verify_line
from .steps import open_slot


def is_content(line: str) -> bool:
    """A line that is content: neither blank nor a heading.

    >>> is_content("- a"), is_content("### Done"), is_content(" ")
    (True, False, False)
    """
    return bool(line.strip()) and not is_heading(line)


class Branch:
    """One branch of a slot: the slot's forked program state and its lines so far.

    Parameters
    ----------
    s : ProgramState
        The branch forked from the shared prefix.
    slot : Slot
        The slot this branch writes.
    run : SlotRun
        The program's run: its context (``ctx``), shared text and cancel flag.
    """

    def __init__(self, s, slot: Slot, run: SlotRun):
        cfg = run.ctx.cfg
        self.s, self.slot = s, slot
        self.run, self.ctx = run, run.ctx  # the run (shared text, cancel) and what it is asked
        self.result = SlotResult(name=slot.name, title=slot.title)  # the lines, with their origins and verdicts
        self.budget = SlotBudget(cfg.max_lines_per_slot, cfg.max_tokens_per_slot, cfg.max_blank_lines_per_slot)
        self.tokens: dict[str, int] = {}  # line -> target tokens (with its newline): a cache of counts
        self.stale: set[str] = set()  # carried lines a reliable verdict said no longer hold (norm_line)
        self.checked: dict[tuple[str, bool], Evidence] = {}  # (line, carried) -> its evidence: each checked once

    def open(self) -> None:
        """The slot request and the assistant turn."""
        open_slot(self.s, self.slot, self.run)

    # ------------------------------------------------------------ what the lines say

    @property
    def accepted(self) -> tuple[str, ...]:
        """The branch's lines so far, blank lines included."""
        return tuple(line.text for line in self.result.lines)

    @property
    def used(self) -> Used:
        """What the lines so far use of the slot's budget."""
        return Used.of(self.accepted, self.tokens.__getitem__)

    @property
    def full(self) -> bool:
        """The branch holds all the lines it may: no proposer is asked for more."""
        return self.used.lines >= self.budget.max_lines

    @property
    def has_content(self) -> bool:
        """Some accepted line is content (not a blank or a heading)."""
        return any(is_content(a) for a in self.accepted)

    @property
    def blank_repair(self) -> bool:
        """A blank repair was accepted since the last real line (a second one in a row ends the slot)."""
        for line in reversed(self.result.lines):
            if line.text.strip():
                return False
            if line.origin is LineOrigin.REPAIRED:
                return True
        return False

    def carried_kept(self) -> tuple[int, int]:
        """The carried lines kept so far: ``(lines, tokens)``."""
        kept = [line.text for line in self.result.lines if line.origin is LineOrigin.CARRIED]
        return len(kept), sum(self.tokens[t] for t in kept)

    def room(self, extra: int = 0) -> int:
        """Tokens a request may still ask for: the slot's remaining tokens, at most max_new_tokens."""
        return min(self.ctx.cfg.max_new_tokens, self.budget.max_tokens - self.used.tokens - extra)

    def kind(self, line: str) -> LineKind:
        """The line checks; a line judged stale as a carried line counts as a duplicate (it goes to repair
        unjudged)."""
        kind = classify_line(line, self.accepted, self.ctx.cfg, self.ctx.placeholders, self.slot.sections)
        return LineKind.DUPLICATE if kind is LineKind.JUDGE and norm_line(line) in self.stale else kind

    def evidence(self, p: Proposal, kind: LineKind) -> Evidence | None:
        """``p``'s evidence (:mod:`~sgl_speccompact.core.evidence`); None when it is not checked
        (``evidence_check`` off, a method that judges nothing, or a line the check does not read)."""
        sources = self.ctx.evidence
        if sources is None or not checks_evidence(p, kind):
            return None
        key = (p.text, p.source is Source.CARRIED)
        if key not in self.checked:
            self.checked[key] = sources.check(p.text, carried=key[1])
        return self.checked[key]

    def count(self, lines: list[str]) -> None:
        """Measure the lines not measured yet, in target tokens (one call for all of them)."""
        new = [line for line in dict.fromkeys(lines) if line not in self.tokens]
        if new:
            self.tokens.update(zip(new, self.ctx.count_tokens([line + "\n" for line in new])))

    # ------------------------------------------------------------ the one admission

    def admit(self, p: Proposal) -> Admission:
        """``p`` through the admission's stages, in order; each refuses or lets it on.

        The checks, then the evidence (a line naming a string with no
        source is refused unjudged), then the budget (the line measured only
        once it passed those), then the judge for a line that needs a
        verdict and came without one, then the decision.
        """
        kind = self.kind(p.text)
        done = screen(p, kind)
        if done is not None:
            return done
        done = vouch(p, self.evidence(p, kind))
        if done is not None:
            self.ctx.recorder.evidence_refused()
            return done
        self.count([p.text])
        done = fit(p, self.budget.check(self.used, p.text, self.tokens[p.text]))
        if done is not None:
            return done
        v = p.verdict
        if v is None and needs_verdict(p, kind):
            v = self.judge(p.text)
        return admit(p, kind, v)

    def offer(self, p: Proposal, replaces: Proposal | None = None, why: Admission | None = None) -> Admission:
        """Admit ``p`` and do what the admission says: accept it, or remember a stale carried line.

        ``replaces`` and ``why``: the drafted line a repair replaces and
        what became of it (recorded on the repair's line).
        """
        done = self.admit(p)
        if done.step is Step.ACCEPT:
            self.accept(SummaryLine(text=p.text, origin=done.origin, verdict=done.verdict,
                                    rejected_draft=replaces.text if replaces is not None else None,
                                    rejected_verdict=why.verdict if why is not None else None,
                                    refused=why.refused if why is not None else None,
                                    unsourced=list(why.unsourced) if why is not None else []))
        elif done.step is Step.STALE:  # completed, abandoned or contradicted: not drafted back either
            self.stale.add(norm_line(p.text))
        return done

    def judge(self, line: str) -> Verdict:
        """The judge's verdict on a proposed next line, counted in the stats."""
        ctx, t0 = self.ctx, time.perf_counter()
        judged = verify_line(self.s, self.slot, line, ctx, accepted=self.accepted)
        ctx.recorder.time("verify", time.perf_counter() - t0)
        ctx.recorder.request("target", "verify", judged.counts, n=judged.requests)
        ctx.recorder.verdicts(judged.verdicts)
        (v,) = judged.verdicts
        ctx.recorder.judged(v.accepted)
        return v

    def accept(self, line: SummaryLine) -> None:
        """Append ``line`` to the branch and its result; report it (the ``line`` event)."""
        self.count([line.text])
        self.s += line.text + "\n"
        self.result.lines.append(line)
        if line.origin is not LineOrigin.DRAFTED:
            self.ctx.recorder.line(line.origin, line.text)
        if line.text.strip():
            self.ctx.emit(type="line", slot=self.slot.name, text=line.text, origin=line.origin.value,
                          score=line.score)

    # ------------------------------------------------------------ the end

    def timed(self, phase: str, fn, *args):
        """``fn(*args)``, its wall time recorded under ``phase``."""
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.ctx.recorder.time(phase, time.perf_counter() - t0)

    def stop(self, reason: StopReason) -> SlotResult:
        """The branch's result, without blank lines at either end (they are not content)."""
        drop_blank_ends(self.result.lines)
        self.result.stop_reason = reason
        self.result.tokens = self.used.tokens
        return self.result
