"""SpecCompact as SGLang programs (paper sections "SpecCompact" and
"Efficient Slot-Parallel Execution"): the requests, not the loop.

Target side, one RadixAttention prefix::

    system + user[ shared prefix | slot request ] + assistant[ accepted lines ... ]
                  `-- identical for every slot --'

``fork_slots`` appends the shared prefix and forks one branch per slot (the
fork prefills the prefix once).  A branch only grows, so every later request
of the slot reuses the cache.  On a branch, ``repair_line`` lets the target
write the next line (on a copy, so a cut-off line never enters the branch);
the judge's questions are asked on copies too (:mod:`~.questions`,
:mod:`~.judges`).

Drafter side: ``draft_slot`` is Figure 5's prompt followed by the slot's
accepted lines and one ``gen`` of one line; ``draft`` runs it and reads the
result as a :class:`Draft`.  ``draft_context`` prefills the drafter's shared
part once.

The slot loop that uses these is :mod:`~sgl_speccompact.programs.slot_loop`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import sglang as sgl

from ..config import CompactConfig
from ..errors import BackendError, SpecCompactError
from ..core.lines import split_line
from ..core.prompts import SUMMARIZER_SYSTEM, drafter_slot_request, target_slot_request
from ..schema import Slot
from .context import SlotContext, SlotRun
from .states import retire, scratch

ERROR_WAIT_S = 10.0  # longest wait for sglang's executor thread to store a request's error, s


# ---------------------------------------------------------------- sampling, defined once


def draft_sampling(cfg: CompactConfig, max_tokens: int | None = None) -> dict:
    """``gen`` arguments of a draft: one line, stopping at the newline; at most ``max_tokens``
    (the slot's remaining tokens), never more than ``max_new_tokens``.

    >>> draft_sampling(CompactConfig(), max_tokens=20)
    {'max_tokens': 20, 'temperature': 0.0, 'stop': '\\n'}
    """
    cap = cfg.max_new_tokens if max_tokens is None else min(cfg.max_new_tokens, max_tokens)
    return {"max_tokens": cap, "temperature": cfg.draft_temperature, "stop": "\n"}


def repair_sampling(cfg: CompactConfig) -> dict:
    """``gen`` arguments of a repair: one line (line-aware stopping at the newline),
    or up to ``max_new_tokens`` when line-aware stopping is off.

    >>> repair_sampling(CompactConfig(line_aware_stopping=False))
    {'max_tokens': 64, 'temperature': 0.0}
    """
    out = {"max_tokens": cfg.max_new_tokens, "temperature": cfg.repair_temperature}
    return {**out, "stop": "\n"} if cfg.line_aware_stopping else out


def write_sampling(cfg: CompactConfig, max_tokens: int, stop: str | None = None) -> dict:
    """``gen`` arguments of the target writing a slot's lines (Target-self, Target-delta): up to
    ``max_tokens`` (the slot's remaining tokens), at the target's temperature, stopping at ``stop``.

    >>> write_sampling(CompactConfig(repair_temperature=0.3), 100, "\\n#")
    {'max_tokens': 100, 'temperature': 0.3, 'stop': '\\n#'}
    """
    out = {"max_tokens": max_tokens, "temperature": cfg.repair_temperature}
    return {**out, "stop": stop} if stop is not None else out


# ---------------------------------------------------------------- programs


@sgl.function
def draft_slot(s, context, slot_request, accepted, assistant_prefix, sampling):
    """Drafter: Figure 5 prompt, then the slot's accepted lines, then one line (up to 64 tokens).

    ``sampling`` is ``gen`` keyword arguments, e.g. ``draft_sampling(cfg)``.
    """
    s += sgl.system(SUMMARIZER_SYSTEM)
    s += sgl.user(context + slot_request)
    s += sgl.assistant_begin()
    s += assistant_prefix + accepted
    s += sgl.gen("draft", **sampling)


@sgl.function
def draft_context(s, context):
    """Drafter: prefill the text every slot's draft starts with, once.

    The six first drafts leave together; without this, one scheduler batch
    would compute the uncached conversation once per slot.
    """
    s += sgl.system(SUMMARIZER_SYSTEM)
    s += sgl.user_begin()
    s += context
    s += sgl.gen("prefill", max_tokens=0)


def prefill_drafter(ctx: SlotContext) -> None:
    """Run :func:`draft_context` and count it."""
    t0 = time.perf_counter()
    state = draft_context.run(context=ctx.drafter_context, backend=ctx.drafter)
    try:
        _, meta = result_of(state, "prefill")
    finally:
        retire([state])
    ctx.recorder.request("drafter", "prefill", meta)
    ctx.recorder.time("drafter_prefill", time.perf_counter() - t0)


def fork_slots(s, run: SlotRun, n: int | None = None) -> list:
    """Append the shared prefix and fork one branch per slot; the fork prefills it once."""
    ctx = run.ctx
    n = len(ctx.slots) if n is None else n
    if not ctx.chat_prefix:  # the agent layout's prefix carries its own chat turns
        s += sgl.system(SUMMARIZER_SYSTEM)
        s += sgl.user_begin()
    s += run.shared
    # fork() decides whether to prefill before it syncs; materialize the prefix first
    s.text()
    t0 = time.perf_counter()
    branches = s.fork(n)
    if n > 1:
        ctx.recorder.request("target", "prefill", s.get_meta_info("prefill"))
        ctx.recorder.time("prefill", time.perf_counter() - t0)
    return list(branches.states)


def end_states(states: list) -> None:
    """Stop the worker thread of each forked state now (:func:`~.states.retire`).

    sglang stops a forked state's (non-daemon) thread only on ``join`` or
    when the state is garbage-collected; after a failure a traceback can
    keep the states alive, and their threads would keep the process alive.
    """
    retire(states)


# ---------------------------------------------------------------- helpers taking s


def result_of(s, name: str) -> tuple[Any, dict]:
    """Value and meta_info of variable ``name``, raising the request's error if it failed."""
    s.sync()
    err = s.error()
    if err is None and name not in s.stream_executor.variables:
        # sglang 0.5.23's worker releases sync() before it stores its error (interpreter.py
        # _thread_worker_func); it ends right after, so wait for it and look again
        worker = getattr(s.stream_executor, "worker", None)
        if worker is not None:
            worker.join(ERROR_WAIT_S)
        err = s.error()
    if err is not None:
        if isinstance(err, SpecCompactError):
            raise err
        raise BackendError(f"SGLang request failed: {err}") from err
    return s[name], (s.get_meta_info(name) or {})


def open_slot(s, slot: Slot, run: SlotRun) -> None:
    """Append the slot request and open the assistant turn the slot is written in."""
    ctx = run.ctx
    s += target_slot_request(slot, ctx.has_previous)
    s += sgl.user_end()
    s += sgl.assistant_begin()
    s += ctx.target_prefix


def repair_line(s, ctx: SlotContext) -> tuple[str, dict]:
    """The target writes the next line on a copy of the branch (the caller appends it).

    On a copy, a line cut off by the token limit never enters the branch.
    Without line-aware stopping the repair runs on; the caller keeps the first line.
    """
    return gen_on_copy(s, "repair", repair_sampling(ctx.cfg))


def gen_on_copy(s, name: str, sampling: dict) -> tuple[str, dict]:
    """``gen`` variable ``name`` on a copy of the branch: ``(its text, its meta_info)``; ``s`` is not changed."""
    with scratch(s) as c:
        c += sgl.gen(name, **sampling)
        return result_of(c, name)


@dataclass
class Draft:
    """One drafter answer, read into lines."""

    prefix: tuple[str, ...]  # accepted lines it continues
    lines: list[str]  # complete lines (blank lines included), a cut-off one last if truncated
    ended: bool  # the drafter ended the slot after these lines
    truncated: bool  # the last line was cut off by the token limit
    capped: bool  # that limit was the slot's remaining tokens, not max_new_tokens
    meta: dict  # meta_info of the request


def draft(slot: Slot, prefix: tuple[str, ...], ctx: SlotContext, max_tokens: int | None = None) -> Draft:
    """One drafter call continuing ``prefix``; the caller records its request.

    A drafter that ignores the stop returns several lines: each is a line of
    its own (:func:`~sgl_speccompact.core.lines.split_line`).
    """
    sampling = draft_sampling(ctx.cfg, max_tokens)
    state = draft_slot.run(
        context=ctx.drafter_context,
        slot_request=drafter_slot_request(slot, ctx.has_previous),
        accepted="".join(line + "\n" for line in prefix),
        assistant_prefix=ctx.drafter_prefix,
        sampling=sampling,
        backend=ctx.drafter,
    )
    try:
        text, meta = result_of(state, "draft")
    finally:
        retire([state])
    lines, ended, truncated = split_line(text, meta.get("finish_reason"))
    return Draft(prefix, lines, ended, truncated, sampling["max_tokens"] < ctx.cfg.max_new_tokens, meta)
