"""The one slot loop: proposal, then checks and admission, then accept or repair (paper sections
"SpecCompact" and "Efficient Slot-Parallel Execution").

Every slot method is this loop fed by different proposers
(:class:`~.context.Proposers`, :mod:`~.proposers`), the way vLLM's
speculative worker is propose -> score -> verify::

    Target-self  = [target writer]
    Target-delta = [carried lines, target writer]
    SpecCompact  = [carried lines, drafter] + the target's repair

Each branch loops::

    the next proposal (a carried line, while it is their turn; else the writer's next line)
      -> checks (duplicate / too long / placeholder: repair or skip; heading, marker, blank: accept)
      -> budget check
      -> judge (a drafted line; a carried line comes with its verdict, judged in a bounded batch)
      -> claim (no other branch of the slot has it) -> accept,
         or repair: the target writes the line (a drafted line only)

Every proposal, whatever its source, takes that order through one
decision, :func:`~sgl_speccompact.core.admission.admit`, in
:meth:`~.branch.Branch.offer`; :meth:`~.branch.Branch.accept` is the one
place a line enters the summary and reports its ``line`` event, and
:func:`~.slots.run_slot` reports ``slot_written`` when the slot ends (progress; the
result's ``slot_done`` comes later, :mod:`~sgl_speccompact.methods.displayed`).
Decisions depend only on the proposals and the verdicts, so they are the
same with and without pipelined drafting.

A one-branch slot with sub-sections interleaves its sources: the carried
lines of one sub-section, then the writer's new lines for it (its
generation or draft stops at the next heading), then the next carried
sub-section heading, and so on.
"""

from __future__ import annotations

from ..core.admission import Proposal, Step
from ..result import SlotResult, StopReason
from .branch import Branch
from .proposers import SECTION_ENDS, CarriedLines, Drafter, Proposer, Repairer, TargetWriter


def write_branch(branch: Branch) -> SlotResult:
    """Write one branch with its method's proposers until it stops; its :class:`SlotResult`."""
    ctx, plan = branch.ctx, branch.ctx.proposers
    lines = ctx.carried.get((branch.slot.name, branch.section), ()) if plan.carried else ()
    carried = CarriedLines(branch, lines)
    repairer = Repairer() if plan.drafter else None
    writer: Proposer = Drafter(carried, repairer) if plan.drafter else TargetWriter(carried)
    try:
        branch.open()
        return branch.stop(loop(branch, carried, writer, repairer))
    finally:
        writer.close(branch)


def loop(branch: Branch, carried: CarriedLines, writer: Proposer, repairer: Repairer | None) -> StopReason:
    """Propose lines until the branch stops; returns its stop reason."""
    while True:
        if branch.run.cancel.is_set():
            return StopReason.CANCELLED
        if branch.full:
            return StopReason.LINE_BUDGET  # no proposer is asked
        if carried.turn(branch):
            p = carried.propose(branch)
            if p is not None:
                branch.offer(p)
            continue
        got = writer.propose(branch)
        if isinstance(got, Proposal):
            heading = got.text.strip().startswith("#")
            ends = branch.ends_section(got.text) or (carried.pending and heading)  # the next heading is carried
            got = StopReason.COMPLETE if ends else admit_line(branch, got, writer, repairer)
        if got in SECTION_ENDS and carried.pending:
            carried.section_written = True  # this section's new lines are written: back to the carried ones
        elif got is not None:
            return got


def admit_line(branch: Branch, p: Proposal, writer: Proposer, repairer: Repairer | None) -> StopReason | None:
    """Offer the writer's line; a drafted line refused or rejected is repaired.  A stop reason, or None."""
    done, v = branch.offer(p, judging=lambda: writer.judging(branch, p))
    if done.step is Step.REPAIR and repairer is not None:
        return repairer.repair(branch, p.text, v)
    return done.reason if done.step is Step.STOP else None
