"""The one slot loop: propose, admit (score), then accept or repair (paper sections "SpecCompact" and
"Efficient Slot-Parallel Execution").

Every slot method is this loop fed by different proposers
(:class:`~.context.Proposers`, :mod:`~.proposers`), the way vLLM's
speculative worker is propose -> score -> verify::

    Target-self  = [target writer]
    Target-delta = [carried lines, target writer]
    SpecCompact  = [carried lines, drafter] + the target's repair

Each slot loops::

    the carried lines of one section (its heading first), then the writer's new lines for it:
      propose -> admit: checks -> evidence -> budget -> judge (a drafted line; a carried line comes
                 judged, in a bounded batch) -> verdict
              -> accept, or repair: the target writes the line (a drafted line only)

Every proposal, whatever its source, takes that order through
:meth:`~.branch.Branch.offer`; :meth:`~.branch.Branch.accept` is the one
place a line enters the summary and reports its ``line`` event, and
:func:`~.slots.run_slot` reports ``slot_written`` when the slot ends (progress; the
result's ``slot_done`` comes later, :mod:`~sgl_speccompact.methods.displayed`).
Decisions depend only on the proposals and the verdicts.

A slot with sub-sections interleaves its sources: the carried lines of one
sub-section, then the writer's new lines for it (its generation stops at
the next heading, and a heading it writes ends the section), then the next
carried sub-section heading, and so on.  Lines a writer wrote before
carried lines came between are not proposed after them
(:class:`~sgl_speccompact.core.admission.Continuation`).
"""

from __future__ import annotations

from ..core.admission import Admission, Proposal, Step
from ..core.lines import is_heading
from ..result import SlotResult, StopReason
from .branch import Branch
from .proposers import CarriedLines, Drafter, Repairer, TargetWriter, Writer

SECTION_ENDS = (StopReason.COMPLETE, StopReason.TARGET_ENDED)  # a writer that ends so has written its section


def write_branch(branch: Branch) -> SlotResult:
    """Write one slot with its method's proposers until it stops; its :class:`SlotResult`."""
    ctx, plan = branch.ctx, branch.ctx.proposers
    carried = CarriedLines(ctx.carried.get(branch.slot.name, ()) if plan.carried else ())
    writer = Drafter() if plan.drafter else TargetWriter()
    repairer = Repairer() if plan.drafter else None
    branch.open()
    return branch.stop(loop(branch, carried, writer, repairer))


def loop(branch: Branch, carried: CarriedLines, writer: Writer, repairer: Repairer | None) -> StopReason:
    """Each section's carried lines, then the writer's new lines for it, until the slot stops."""
    while True:
        reason = keep_carried(branch, carried) or write(branch, writer, repairer, heading_ahead=carried.pending)
        if reason not in SECTION_ENDS or not carried.pending:
            return reason


def halted(branch: Branch) -> StopReason | None:
    """Why no proposer is asked for another line: the run was cancelled, or the slot is full."""
    if branch.run.cancel.is_set():
        return StopReason.CANCELLED
    return StopReason.LINE_BUDGET if branch.full else None


def keep_carried(branch: Branch, carried: CarriedLines) -> StopReason | None:
    """Offer the carried lines of one section: its first line, then the rest up to the next sub-section
    heading (while the slot holds no line yet, a heading is taken at once: no new line comes before it)."""
    first = True
    while carried.pending and (first or not branch.used.lines or not carried.heads_section(branch)):
        stop = halted(branch)
        if stop is not None:
            return stop
        first = False
        p = carried.propose(branch)
        if p is not None:
            branch.offer(p)
    return None


def write(branch: Branch, writer: Writer, repairer: Repairer | None, heading_ahead: bool) -> StopReason:
    """The writer's new lines until it ends; with a carried heading ahead, a heading it writes ends the section."""
    while True:
        stop = halted(branch)
        if stop is not None:
            return stop
        p = writer.propose(branch, heading_ahead)
        if p is None:  # the drafter drafted nothing for an empty branch: the target decides
            stop = first_line(branch, repairer)
        elif isinstance(p, StopReason):
            return p
        elif heading_ahead and is_heading(p.text):
            return StopReason.COMPLETE  # the next heading is carried
        else:
            done = branch.offer(p)
            stop = done.reason if done.step is Step.STOP else None
            if done.step is Step.REPAIR and repairer is not None:
                stop = repair(branch, repairer, p, done)
        if stop is not None:
            return stop


def repair(branch: Branch, repairer: Repairer, rejected: Proposal | None, why: Admission | None) -> StopReason | None:
    """The target writes the line in place of ``rejected`` (None: the first line of an empty branch); a stop
    reason, or None to go on."""
    p = repairer.propose(branch)
    if isinstance(p, StopReason):
        return p
    done = branch.offer(p, replaces=rejected, why=why)
    if done.step is Step.STOP:
        return done.reason
    return StopReason.TARGET_ENDED if p.last else None


def first_line(branch: Branch, repairer: Repairer | None) -> StopReason | None:
    """The drafter wrote nothing for a branch without content: the target writes its first line as a repair
    does.  The slot ends ``complete`` and empty only if the target writes nothing too, or an empty marker
    (or when no target repairs)."""
    reason = repair(branch, repairer, None, None) if repairer is not None else StopReason.TARGET_ENDED
    markers = {m.lower() for m in branch.ctx.cfg.empty_markers}
    marker = reason is None and bool(branch.accepted) and branch.accepted[-1].strip().lower() in markers
    return StopReason.COMPLETE if reason is StopReason.TARGET_ENDED or marker else reason
