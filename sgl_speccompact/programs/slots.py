"""SpecCompact's target-side program: the shared prefix forked into one slot stream per branch.

``speccompact`` forks one branch per slot (per sub-section for a slot with
``sections`` when ``sub_slot_branches`` is on: one shared budget and one
duplicate check across them, :mod:`~sgl_speccompact.core.sections`), runs one
:class:`~sgl_speccompact.programs.slot_stream.SlotStream` per branch,
concurrently, and joins a slot's sub-sections in order.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import sglang as sgl

from ..core.lines import SlotBudget
from ..core.sections import SlotLines, join_parts
from ..result import SlotResult
from ..schema import Slot
from .slot_stream import SlotStream
from .context import SlotContext, SlotRun
from .states import on_daemon_thread, run_concurrently
from .steps import end_states, fork_slots, prefill_drafter


@sgl.function
def speccompact(s, shared, ctx):
    """Target: shared prefix, one fork per branch, concurrent slot streams.

    Returns the :class:`SlotResult` of every slot in schema order.  The
    branches run on daemon threads (:func:`~.states.on_daemon_thread`).
    """
    return on_daemon_thread(speccompact_body, s, shared, ctx)


def speccompact_body(s, shared, ctx) -> list[SlotResult]:
    """The body of :func:`speccompact`, on a daemon thread: prefill, fork, every slot, end the forks."""
    if ctx.target is None:
        ctx = replace(ctx, target=s.stream_executor.backend)
    units = sum(len(branches_of(slot, ctx)) for slot in ctx.slots)
    run = SlotRun(ctx, shared)
    with ThreadPoolExecutor(max_workers=1) as pool:
        warm = pool.submit(prefill_drafter, ctx)  # both servers prefill at once
        forks = fork_slots(s, run, n=units)
    try:
        warm.result()
        return per_slot(forks, run, run_slot)
    finally:
        end_states(forks)


def per_slot(forks: list, run: SlotRun, write) -> list[SlotResult]:
    """``write(branches, slot, run)`` for every slot, concurrently, each with its own slice of ``forks``
    (one fork per branch, in schema order: :func:`branches_of`)."""
    jobs, i = [], 0
    for slot in run.ctx.slots:
        k = len(branches_of(slot, run.ctx))
        jobs.append(lambda slot=slot, mine=forks[i:i + k]: write(mine, slot, run))
        i += k
    return run_concurrently(jobs, run.cancel)


def run_slot(forks: list, slot: Slot, run: SlotRun, stream: type[SlotStream] = SlotStream) -> SlotResult:
    """One slot: its branches (concurrently if several), joined; reports ``slot_done``.

    ``stream`` writes each branch (Target-delta's :class:`~.delta.DeltaStream` has the target write).
    """
    ctx = run.ctx
    sections, shared = branches_of(slot, ctx), SlotLines()
    streams = [stream(b, slot, run, sec, shared=shared, index=i)
               for i, (b, sec) in enumerate(zip(forks, sections))]
    if len(streams) == 1:
        out = streams[0].run()
    else:
        parts = run_concurrently([st.run for st in streams], run.cancel)
        out = join_sections(slot, parts, streams, ctx)
    ctx.emit(type="slot_done", slot=slot.name, stop_reason=out.stop_reason,
             lines=sum(1 for line in out.lines if line.text.strip()))
    return out


def branches_of(slot: Slot, ctx: SlotContext) -> list[str | None]:
    """The sub-sections a slot runs as separate branches, or ``[None]`` for one branch."""
    return list(slot.sections) if slot.sections and ctx.cfg.sub_slot_branches else [None]


def join_sections(slot: Slot, parts: list[SlotResult], streams: list["SlotStream"], ctx: SlotContext) -> SlotResult:
    """One slot from its branches, in order, within the slot's whole budget."""
    tokens: dict[str, int] = {"": ctx.count_tokens(["\n"])[0]}
    for st in streams:
        tokens.update(st.tokens)
    cfg = ctx.cfg
    return join_parts(slot.name, slot.title, parts, tokens.__getitem__,
                      SlotBudget(cfg.max_lines_per_slot, cfg.max_tokens_per_slot, cfg.max_blank_lines_per_slot))
