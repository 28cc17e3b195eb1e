"""SpecCompact as SGLang programs (paper sections "SpecCompact" and
"Efficient Slot-Parallel Execution"): the requests, not the loop.

Target side, one RadixAttention prefix::

    system + user[ shared prefix | slot request ] + assistant[ accepted lines ... ]
                  `-- identical for every slot --'

``fork_slots`` appends the shared prefix and forks one branch per slot (the
fork prefills the prefix once).  A branch only grows, so every later request
of the slot reuses the cache.  On a branch: ``verify_line`` judges one line
and ``judge_lines`` several in one batch (both on copies), ``repair_line``
lets the target write the next line (on a copy, so a cut-off line never
enters the branch).

Drafter side: ``draft_slot`` is Figure 5's prompt followed by the slot's
accepted lines and one ``gen``; ``draft`` runs it and reads the result as a
:class:`Draft`; ``sample_candidates`` asks for n lines in one request.
``draft_context`` prefills the drafter's shared part once.

The slot loop that uses these is :mod:`~sgl_speccompact.programs.slot_stream`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import sglang as sgl

from ..config import CompactConfig
from ..backends.endpoint import LabelJudgement
from ..errors import BackendError, ConfigError, SpecCompactError
from ..core.judge import Judgement, label_choices
from ..core.lines import split_draft, split_line
from ..core.prompts import (SUMMARIZER_SYSTEM, carried_question, drafter_slot_request, target_slot_request,
                            verify_question)
from ..schema import Slot
from .context import SlotContext, SlotRun
from .states import retire, scratch

ERROR_WAIT_S = 10.0  # longest wait for sglang's executor thread to store a request's error, s


# ---------------------------------------------------------------- sampling, defined once


def draft_sampling(cfg: CompactConfig, max_tokens: int | None = None) -> dict:
    """``gen`` arguments of a draft: several lines (draft buffer) or one line
    stopping at the newline; at most ``max_tokens`` (the slot's remaining
    tokens), never more than ``max_new_tokens``.

    >>> draft_sampling(CompactConfig(draft_buffer=False), max_tokens=20)
    {'max_tokens': 20, 'temperature': 0.0, 'stop': '\\n'}
    """
    cap = cfg.max_new_tokens if max_tokens is None else min(cfg.max_new_tokens, max_tokens)
    out = {"max_tokens": cap, "temperature": cfg.draft_temperature}
    return out if cfg.draft_buffer else {**out, "stop": "\n"}


def candidate_sampling(cfg: CompactConfig, max_tokens: int) -> dict:
    """``/generate`` sampling params of the repair candidates: n lines in one request.

    ``n`` is sglang's parallel sampling (``SamplingParams.n``; the server's
    ``GenerateReqInput._handle_parallel_sampling`` fans one prompt out into
    ``n`` samples that share its prefill and returns a list of ``n`` results).

    >>> candidate_sampling(CompactConfig(), 30)
    {'max_new_tokens': 30, 'temperature': 1.0, 'stop': ['\\n'], 'n': 4}
    """
    return {"max_new_tokens": min(cfg.max_new_tokens, max_tokens), "temperature": cfg.candidate_temperature,
            "stop": ["\n"], "n": cfg.repair_samples}


def repair_sampling(cfg: CompactConfig) -> dict:
    """``gen`` arguments of a repair: one line (line-aware stopping at the newline),
    or up to ``max_new_tokens`` when line-aware stopping is off.

    >>> repair_sampling(CompactConfig(line_aware_stopping=False))
    {'max_tokens': 64, 'temperature': 0.0}
    """
    out = {"max_tokens": cfg.max_new_tokens, "temperature": cfg.repair_temperature}
    return {**out, "stop": "\n"} if cfg.line_aware_stopping else out


# ---------------------------------------------------------------- programs


@sgl.function
def draft_slot(s, context, slot_request, accepted, assistant_prefix, sampling):
    """Drafter: Figure 5 prompt, then the slot's accepted lines, then up to 64 tokens.

    ``sampling`` is ``gen`` keyword arguments, e.g. ``draft_sampling(cfg)``.
    """
    s += sgl.system(SUMMARIZER_SYSTEM)
    s += sgl.user(context + slot_request)
    s += sgl.assistant_begin()
    s += assistant_prefix + accepted
    s += sgl.gen("draft", **sampling)


@sgl.function
def draft_prompt(s, context, slot_request, accepted, assistant_prefix):
    """Drafter: the text ``draft_slot`` sends, without the ``gen`` (sends nothing)."""
    s += sgl.system(SUMMARIZER_SYSTEM)
    s += sgl.user(context + slot_request)
    s += sgl.assistant_begin()
    s += assistant_prefix + accepted


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
    """Append the shared prefix and fork one branch per slot; the fork prefills it once.

    With ``shared_prefix`` off nothing is appended: each branch gets its own
    prompt in :func:`open_slot`, and a fork of an empty state sends no request.
    """
    ctx = run.ctx
    n = len(ctx.slots) if n is None else n
    if not ctx.cfg.shared_prefix:
        return list(s.fork(n).states)
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
    """Append the slot request and open the assistant turn the slot is written in.

    Without a shared prefix the slot request comes first, then the shared text.
    """
    ctx = run.ctx
    if not ctx.cfg.shared_prefix and ctx.chat_prefix:  # the agent's turns cannot move behind the request
        s += run.shared + target_slot_request(slot, ctx.has_previous)
    elif not ctx.cfg.shared_prefix:
        s += sgl.system(SUMMARIZER_SYSTEM)
        s += sgl.user_begin()
        s += target_slot_request(slot, ctx.has_previous) + "\n\n" + run.shared
    else:
        s += target_slot_request(slot, ctx.has_previous)
    s += sgl.user_end()
    s += sgl.assistant_begin()
    s += ctx.target_prefix


def ask_verdict(v, slot: Slot, line: str, ctx: SlotContext, carried: bool = False, short: bool = False) -> None:
    """Close the slot's turn on ``v`` (a copy) and ask the judge question about ``line``
    (``carried``: whether the previous summary's line still holds; ``short``: its criterion first)."""
    cfg = ctx.cfg
    v += sgl.assistant_end()
    if carried:
        v += sgl.user(carried_question(slot, line, cfg.positive_label, cfg.negative_label, short))
    else:
        v += sgl.user(verify_question(slot, line, cfg.positive_label, cfg.negative_label, ctx.has_previous,
                                      short=cfg.short_judge_suffix))
    v += sgl.assistant_begin()
    v += ctx.target_prefix


def verify_line(s, slot: Slot, line: str, ctx: SlotContext, carried: bool = False, short: bool = False) -> dict:
    """Judge ``line`` on a copy of the branch; the branch itself is not changed
    (``carried``: a previous summary's line, asked whether it still holds; ``short``: criterion first).

    The copy is a 1-way fork, which sends no request of its own, so a
    verification costs one target request on ``SpecCompactEndpoint``.
    """
    cfg = ctx.cfg
    choices, n_positive = label_choices(cfg.positive_label, cfg.negative_label)
    with scratch(s) as v:
        ask_verdict(v, slot, line, ctx, carried, short)
        v += sgl.select("verdict", choices=choices, choices_method=LabelJudgement(
            cfg.eta, one_request=cfg.one_request_judging, n_positive=n_positive))
        _, meta = result_of(v, "verdict")
    return meta


def judge_lines(s, slot: Slot, lines: list[str], ctx: SlotContext) -> tuple[list[Judgement], dict]:
    """Judge several candidate lines for the same place with ONE batched request.

    Each prompt is the branch plus the judge question about one line (built
    on copies, which send nothing); the target's ``judge_batch`` sends them
    as one ``/generate`` batch that shares the branch's cached prefix.
    """
    texts = []
    for line in lines:
        with scratch(s) as v:
            ask_verdict(v, slot, line, ctx)
            texts.append(v.text())
    cfg = ctx.cfg
    judged = ctx.target.judge_batch(texts, cfg.positive_label, cfg.negative_label, cfg.eta)
    if judged is None:  # the target declines: one request per line would defeat the candidates
        raise ConfigError("repair_candidates needs a target that judges in one request (judge_batch: "
                          "SpecCompactEndpoint)")
    return judged


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
    """One drafter call continuing ``prefix``; the caller records its request."""
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
    reason = meta.get("finish_reason")
    capped = sampling["max_tokens"] < ctx.cfg.max_new_tokens
    if not ctx.cfg.draft_buffer:
        lines, ended, truncated = split_line(text, reason)
    else:
        ended = (reason or {}).get("type") != "length"
        lines, truncated = split_draft(text, ended)
    return Draft(prefix, lines, ended, truncated, capped, meta)


def sample_candidates(slot: Slot, prefix: tuple[str, ...], ctx: SlotContext,
                      max_tokens: int) -> tuple[list[tuple[str, dict]], dict]:
    """``repair_samples`` one-line drafts continuing ``prefix``, in ONE drafter request.

    Returns ``([(text, finish_reason), ...], meta)``.
    """
    state = draft_prompt.run(
        context=ctx.drafter_context, slot_request=drafter_slot_request(slot, ctx.has_previous),
        accepted="".join(line + "\n" for line in prefix), assistant_prefix=ctx.drafter_prefix,
        backend=ctx.drafter,
    )
    try:
        text = state.text()
    finally:
        retire([state])
    samples = ctx.drafter.sample_n(text, candidate_sampling(ctx.cfg, max_tokens))
    if samples is None:  # the drafter declines parallel sampling
        raise ConfigError("repair_candidates needs a drafter that samples n lines in one request (sample_n: "
                          "SpecCompactEndpoint)")
    return samples
