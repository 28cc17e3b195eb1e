"""The slot stream: draft, check, verify, repair, line by line (paper sections
"SpecCompact" and "Efficient Slot-Parallel Execution").

:mod:`~sgl_speccompact.programs.slots` forks one branch per slot and runs one
:class:`SlotStream` per branch, concurrently.  Each stream loops::

    take the next proposed line (a line carried from the previous summary;
      else buffered, prefetched, or drafted now)
      -> checks (duplicate / too long -> repair; heading, marker, blank -> accept)
      -> budget check
      -> judge (while it is judged, the drafter already drafts the next line:
         pipelined drafting; dropped if this line is rejected)
      -> claim (no other branch of the slot has it) -> accept,
         or repair: drafter candidates judged in one batch
         (``repair_candidates``), else the target writes the line.

Every proposed line, whatever its source (carried, buffered or drafted,
repair, candidate), takes that order through one decision,
:func:`~sgl_speccompact.core.admission.admit`, in :meth:`SlotStream.offer`,
the one place a line is accepted.  Decisions depend only on the drafted
lines and the verdicts, so they are the same with and without pipelining.

The class reads in that order: its state, the loop, the one admission
(:meth:`~SlotStream.offer`) and the judgement, then where proposals come
from (drafts, repairs, carried lines), then the bookkeeping they share.

**Drafts.**  The draft continuing the accepted prefix fills the draft buffer;
with ``pipelined_drafting`` it is sent while the target judges the line
before it, and dropped if that line is rejected (each dropped draft is
still counted once answered, so no request outlives the slot).

**Repairs.**  In place of a rejected line: with ``repair_candidates``, first
lines the drafter samples in one request and the target judges in one batch
(the best accepted one is offered, as a candidate); else, or when none is
accepted, the line the target writes (offered as a repair).  A blank repair
is a paragraph break, kept (blank lines at a slot's ends are dropped when it
stops), so a real line may follow it, also at a slot's start.  An empty
repair (:func:`~sgl_speccompact.core.lines.empty_repair`: a second blank
repair with no real line accepted in between) stops the slot with
``stop_reason="empty_repair"``, keeping its accepted prefix, as the paper
says: a target that only answers blank costs at most two repairs.

**Carried lines** (incremental compaction).  The lines
:mod:`~sgl_speccompact.core.carried` reads from the previous summary are each
judged for whether they still hold after the new turns
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

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from typing import Callable

from ..core.admission import Admission, Source, Step, admit
from ..core.carried import section_heading
from ..core.judge import acted
from ..core.lines import (DraftBuffer, LineKind, SlotBudget, classify_line, drop_blank_ends, empty_repair, norm_line,
                          read_repair, split_line)
from ..core.sections import SlotLines, branch_lines
from ..result import LineOrigin, SlotResult, SummaryLine
from ..schema import Slot
from .carried_batch import CarriedCap, carried_cap, judge_carried_lines
from .context import SlotRun
from .steps import Draft, draft, judge_lines, open_slot, repair_line, sample_candidates, verify_line

HEADING = "### {}"  # how a sub-section heading line looks
# a generation of one sub-section ends where the next heading starts.  A string, not a list: sglang's
# interpreter extends a list stop in place with the chat template's stops (``clone.stop += ...``),
# so a shared list would grow on every call until the server refuses it
SECTION_STOP = "\n#"
ORIGINS = {Source.DRAFT: LineOrigin.DRAFTED, Source.CARRIED: LineOrigin.CARRIED, Source.REPAIR: LineOrigin.REPAIRED,
           Source.CANDIDATE: LineOrigin.CANDIDATE, Source.TARGET: LineOrigin.TARGET}  # a judged line's origin


def is_content(line: str) -> bool:
    """A line that is content: neither blank nor a heading.

    >>> is_content("- a"), is_content("### Done"), is_content(" ")
    (True, False, False)
    """
    return bool(line.strip()) and not line.strip().startswith("#")


class SlotStream:
    """One branch: its accepted lines, budget, draft buffer and prefetched draft.

    Parameters
    ----------
    s : ProgramState
        The branch forked from the shared prefix.
    slot : Slot
        The slot this branch writes.
    run : SlotRun
        The program's run: its :class:`~.context.SlotContext` (``ctx``),
        shared text and cancel flag.
    section : str, optional
        The sub-section this branch writes; it opens with its heading and
        ends at the next heading.  The slot's budget is shared: the join
        keeps lines in sub-section order while they fit.
    shared : SlotLines, optional
        The judged lines every branch of the slot accepted (duplicate check).
    index : int
        The sub-section's place in the slot (earlier ones' headings use lines).
    """

    short_carried = False  # carried questions ask their criterion before the line (CARRIED_QUESTION_SHORT)

    def __init__(self, s, slot: Slot, run: SlotRun, section: str | None = None,
                 shared: SlotLines | None = None, index: int = 0):
        self.s, self.slot, self.section = s, slot, section
        self.program, self.ctx = run, run.ctx  # the run (shared text, cancel) and what it is asked
        ctx, cfg = run.ctx, run.ctx.cfg
        self.result = SlotResult(name=slot.name, title=slot.title)
        self.accepted: list[str] = []  # the branch's lines so far, blank lines included
        self.shared = shared if shared is not None else SlotLines()  # judged lines of the whole slot
        self.budget = SlotBudget(branch_lines(cfg.max_lines_per_slot, index), cfg.max_tokens_per_slot,
                                 cfg.max_blank_lines_per_slot)
        self.tokens: dict[str, int] = {}  # line -> target tokens (with its newline)
        self.unsure = False  # the last verdict had too little label mass to act on
        # drafts
        self.buffer = DraftBuffer()
        self.cut: str | None = None  # a drafted line cut off by the token limit
        self.capped = False  # ... by the slot's remaining tokens
        self.pending: tuple[tuple[str, ...], Future] | None = None  # prefetched draft and its prefix
        self.dropped: list[Future] = []  # prefetched drafts sent, then dropped
        self.pool = ThreadPoolExecutor(max_workers=1)
        # repairs
        self.blank_repair = False  # the last repair was blank and no real line was accepted since
        # carried lines
        self.carried = list(ctx.carried.get((slot.name, section), ()))  # proposed before any draft
        self.carried_used = (0, 0)  # carried lines kept: (lines, tokens), against the cap (carried_batch.py)
        self.stale: set[str] = set()  # carried lines judged no longer to hold (norm_line), never kept
        self.section_drafted = False  # the new lines before the next carried sub-section heading are drafted
        self.verdicts: dict[str, dict] | None = None  # carried line -> its verdict, judged together (None: not yet)
        self.cap: CarriedCap | None = None  # how much of the budget carried lines may take (set with verdicts)

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

    # ------------------------------------------------------------ the one admission

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
            self.accept(line, ORIGINS[source] if kind is LineKind.JUDGE or source in (Source.REPAIR, Source.TARGET)
                        else LineOrigin.UNJUDGED, score=score, rejected=rejected, **more)
        return done, score

    def judge(self, prefix: tuple[str, ...], line: str, carried: bool = False) -> dict:
        """The target's judgement of one proposed line (``carried``: whether it still holds);
        the drafter drafts the next line meanwhile."""
        self.prefetch(prefix, line)
        meta = self.timed("verify", verify_line, self.s, self.slot, line, self.ctx, carried,
                          carried and self.short_carried)
        self.ctx.recorder.request("target", "verify", meta, n=int(meta.get("requests", 1)))
        judgement = acted(meta.get("judgement") or {}, self.ctx.cfg.min_label_mass)  # unreliable: accepts nothing
        self.ctx.recorder.verdict(judgement)
        self.unsure = bool(judgement.get("unreliable"))
        (self.ctx.recorder.carried if carried else self.ctx.recorder.judged)(bool(judgement.get("accepted")))
        return judgement

    # ------------------------------------------------------------ drafts

    def refill(self, prefix: tuple[str, ...]) -> str | None:
        """Fill the draft buffer with the lines continuing ``prefix``; a stop reason when the
        drafter has nothing more to write (``complete``; while the branch has no content, the target
        decides: :meth:`first_line`) or no tokens are left (``token_budget``)."""
        if self.buffer.done(prefix):
            return "complete"
        if self.room() <= 0:
            return "token_budget"
        d = self.next_draft(prefix)
        lines = list(d.lines)
        while not any(a.strip() for a in prefix) and lines and not lines[0].strip():
            lines.pop(0)  # a slot does not open with blank lines
        if not lines:
            return "complete" if any(is_content(a) for a in prefix) else self.first_line()  # the target decides
        self.buffer = DraftBuffer(prefix, lines, d.ended)
        self.cut, self.capped = (lines[-1] if d.truncated else None), d.capped
        self.count(lines)
        return None

    def next_draft(self, prefix: tuple[str, ...]) -> Draft:
        """The draft continuing ``prefix``: the prefetched one if it matches, else a new call."""
        pending, self.pending = self.pending, None
        if pending is not None and pending[0] == prefix:
            d = self.timed("draft_wait", pending[1].result)
        else:
            if pending is not None:
                self.drop(pending[1])
            d = self.timed("draft", draft, self.slot, prefix, self.ctx, self.room())
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
        """Drop a prefetched draft whose line was rejected (counted once answered, in :meth:`settle`)."""
        if not fut.cancel():  # already sent
            self.dropped.append(fut)

    def settle(self) -> None:
        """Wait for dropped drafts still in flight and count them, so no request outlives the slot."""
        for fut in self.dropped:
            exc = fut.exception()  # waits; a failed speculative draft decides nothing
            self.ctx.recorder.dropped()
            self.ctx.recorder.request("drafter", "draft_dropped", fut.result().meta if exc is None else {})

    # ------------------------------------------------------------ repairs

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
        text, meta = self.timed("repair", repair_line, self.s, self.ctx)
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
        samples, meta = self.timed("candidates", sample_candidates, self.slot, prefix, ctx, self.room())
        ctx.recorder.request("drafter", "candidates", meta)
        lines: list[str] = []
        for text, reason in samples:
            got, _, truncated = split_line(text, reason)
            if got and not truncated and got[0] != rejected and got[0] not in lines \
                    and admit(Source.CANDIDATE, self.kind(got[0])).step is not Step.DROP:
                lines.append(got[0])
        if not lines:
            return False, None
        verdicts, jmeta = self.timed("verify_candidates", judge_lines, self.s, self.slot, lines, ctx)
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

    # ------------------------------------------------------------ carried lines

    def carry(self, prefix: tuple[str, ...], line: str) -> None:
        """Propose a line of the previous summary: kept (origin carried) if the target judges it
        still holds after the new turns, else dropped and remembered as stale.

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
        verdicts, meta = self.timed("verify_carried", judge_carried_lines, self.s, self.slot, lines, self.ctx,
                                    self.short_carried)
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

    # ------------------------------------------------------------ bookkeeping

    def timed(self, phase: str, fn, *args):
        """``fn(*args)``, its wall time recorded under ``phase``."""
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.ctx.recorder.time(phase, time.perf_counter() - t0)

    def count(self, lines: list[str]) -> None:
        """Measure the lines not measured yet, in target tokens (one call for all of them)."""
        new = [line for line in dict.fromkeys(lines) if line not in self.tokens]
        if new:
            self.tokens.update(zip(new, self.ctx.count_tokens([line + "\n" for line in new])))

    def accept(self, line: str, origin: LineOrigin, score: float | None = None,
               rejected: str | None = None, **more) -> None:
        """Append ``line`` to the branch, its budget and its result; report it."""
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

    def ends_section(self, line: str) -> bool:
        """A heading in a sub-section branch starts the next sub-section: this one is done."""
        return self.section is not None and line.strip().startswith("#")

    def room(self, extra: int = 0) -> int:
        """Tokens a draft may still ask for: the slot's remaining tokens, at most max_new_tokens."""
        return min(self.ctx.cfg.max_new_tokens, self.budget.max_tokens - self.budget.tokens - extra)

    def stop(self, reason: str) -> SlotResult:
        """The branch's result, without blank lines at either end (they are not content)."""
        for line in drop_blank_ends(self.result.lines):
            self.budget.tokens -= self.tokens[line.text]
            self.budget.blanks -= 1
        self.result.stop_reason = reason
        self.result.tokens = self.budget.tokens
        return self.result
