"""The one slot program: the shared prefix forked into one branch per slot, for every slot method.

:func:`speccompact` forks one branch per slot (per sub-section for a slot
with ``sections`` when ``sub_slot_branches`` is on: one shared budget and
one duplicate check across them, :mod:`~sgl_speccompact.core.sections`),
writes every branch with the one loop (:mod:`~.slot_loop`), concurrently,
and joins a slot's sub-sections in order.  The method is the context's
choice of proposers (:class:`~.context.Proposers`): SpecCompact,
Target-delta and Target-self all run this program.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import sglang as sgl

from ..backends.endpoint import connect
from ..core.lines import SlotBudget
from ..core.sections import SlotLines, join_parts
from ..result import LineOrigin, SlotResult, StopReason
from ..schema import Slot
from .branch import Branch
from .context import SlotContext, SlotRun
from .judges import make_judge
from .slot_loop import write_branch
from .states import on_daemon_thread, run_concurrently
from .steps import end_states, fork_slots, prefill_drafter


@sgl.function
def speccompact(s, shared, ctx):
    """Target: shared prefix, one fork per branch, every branch written by the one slot loop.

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
    units = sum(len(branches_of(slot, ctx)) for slot in ctx.slots)
    run = SlotRun(ctx, shared)
    with ThreadPoolExecutor(max_workers=1) as pool:
        # both servers prefill at once
        warm = pool.submit(prefill_drafter, ctx) if ctx.proposers.drafter else None
        forks = fork_slots(s, run, n=units)
    try:
        if warm is not None:
            warm.result()
        return per_slot(forks, run)
    finally:
        end_states(forks)


def per_slot(forks: list, run: SlotRun) -> list[SlotResult]:
    """:func:`run_slot` for every slot, concurrently, each with its own slice of ``forks``
    (one fork per branch, in schema order: :func:`branches_of`)."""
    jobs, i = [], 0
    for slot in run.ctx.slots:
        k = len(branches_of(slot, run.ctx))
        jobs.append(lambda slot=slot, mine=forks[i:i + k]: run_slot(mine, slot, run))
        i += k
    return run_concurrently(jobs, run.cancel)


def run_slot(forks: list, slot: Slot, run: SlotRun) -> SlotResult:
    """One slot: its branches (concurrently if several), joined; reports ``slot_written``."""
    ctx = run.ctx
    sections, shared = branches_of(slot, ctx), SlotLines()
    branches = [Branch(b, slot, run, sec, shared=shared, index=i) for i, (b, sec) in enumerate(zip(forks, sections))]
    if len(branches) == 1:
        out = write_branch(branches[0])
    else:
        parts = run_concurrently([lambda b=b: write_branch(b) for b in branches], run.cancel)
        out = join_sections(slot, parts, branches, ctx)
        if ctx.proposers.target_only:  # the separators the join adds, as one branch's target wrote them
            for line in out.lines:
                line.origin = LineOrigin.TARGET
    ctx.emit(type="slot_written", slot=slot.name, stop_reason=StopReason(out.stop_reason).value,
             lines=sum(1 for line in out.lines if line.text.strip()))
    return out


def branches_of(slot: Slot, ctx: SlotContext) -> list[str | None]:
    """The sub-sections a slot runs as separate branches, or ``[None]`` for one branch."""
    return list(slot.sections) if slot.sections and ctx.cfg.sub_slot_branches else [None]


def join_sections(slot: Slot, parts: list[SlotResult], branches: list[Branch], ctx: SlotContext) -> SlotResult:
    """One slot from its branches, in order, within the slot's whole budget."""
    tokens: dict[str, int] = {"": ctx.count_tokens(["\n"])[0]}
    for b in branches:
        tokens.update(b.tokens)
    cfg = ctx.cfg
    return join_parts(slot.name, slot.title, parts, tokens.__getitem__,
                      SlotBudget(cfg.max_lines_per_slot, cfg.max_tokens_per_slot, cfg.max_blank_lines_per_slot))
