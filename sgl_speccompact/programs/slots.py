"""The one slot program: the shared prefix forked into one branch per slot, for every slot method.

:func:`speccompact` forks one branch per slot, writes every branch with the
one loop (:mod:`~.slot_loop`), concurrently.  The method is the context's
choice of proposers (:class:`~.context.Proposers`): SpecCompact,
Target-delta and Target-self all run this program.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import sglang as sgl

from ..backends.endpoint import connect
from ..result import SlotResult, StopReason
from ..schema import Slot
from .branch import Branch
from .context import SlotContext, SlotRun
from .judges import make_judge
from .slot_loop import write_branch
from .states import on_daemon_thread, run_concurrently
from .steps import end_states, fork_slots, prefill_drafter


@sgl.function
def speccompact(s, shared, ctx):
    """Target: shared prefix, one fork per slot, every slot written by the one slot loop.

    ``ctx`` (:class:`~.context.SlotContext`) names the method's proposers;
    returns the :class:`SlotResult` of every slot in schema order.  The
    branches run on daemon threads (:func:`~.states.on_daemon_thread`).
    """
    return on_daemon_thread(slots_body, s, shared, ctx)


def slots_body(s, shared, ctx: SlotContext) -> list[SlotResult]:
    """The body of :func:`speccompact`, on a daemon thread: prefill, fork, every slot, end the forks."""
    if ctx.target is None:
        ctx = replace(ctx, target=connect(s.stream_executor.backend))
    if ctx.judge is None:
        ctx = replace(ctx, judge=make_judge(ctx.target, ctx.cfg))
    run = SlotRun(ctx, shared)
    with ThreadPoolExecutor(max_workers=1) as pool:
        # both servers prefill at once
        warm = pool.submit(prefill_drafter, ctx) if ctx.proposers.drafter else None
        forks = fork_slots(s, run)
    try:
        if warm is not None:
            warm.result()
        jobs = [lambda fork=fork, slot=slot: run_slot(fork, slot, run) for fork, slot in zip(forks, ctx.slots)]
        return run_concurrently(jobs, run.cancel)
    finally:
        end_states(forks)


def run_slot(fork, slot: Slot, run: SlotRun) -> SlotResult:
    """One slot on its fork; reports ``slot_written``."""
    out = write_branch(Branch(fork, slot, run))
    run.ctx.emit(type="slot_written", slot=slot.name, stop_reason=StopReason(out.stop_reason).value,
                 lines=sum(1 for line in out.lines if line.text.strip()))
    return out
