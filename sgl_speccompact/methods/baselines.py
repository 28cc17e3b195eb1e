"""Baselines on SpecCompact's interface (paper "Experiments", Tables 1-3).

* **Hermes**: one target generation with hermes-agent 0.19.0's compressor
  prompt (:mod:`~sgl_speccompact.core.hermes_prompt`: its transcript format,
  thirteen sections, length target and date rule, in our words), sent as
  one user message like Hermes sends it.
* **OpenClaw-style**: one target generation of the six-slot summary (any
  schema), conversation wrapped in ``<conversation>`` tags.
* **Target-self**: SpecCompact's slot-parallel layout -- the same shared
  prefix, prefilled once by the fork, and one branch per slot -- but the
  target writes each slot itself in one generation: no drafter, no judge.

All three return a :class:`~sgl_speccompact.result.CompactionResult`, take
a previous summary (the monolithic ones switch to their update prompt;
Target-self puts it in the shared prefix) and a focus topic, and can run
Source-Judged Compaction afterwards.  OpenClaw-style and Target-self keep
the 2,048-token summary budget.  Hermes, like hermes-agent, has only its
prompt's length target (``max(2000, min(20% of the turns, 5% of
cfg.agent_context_tokens, 10000))`` tokens); SGLang needs a generation cap,
so it gets ``hermes_cap_ratio`` times that target.

A monolithic summary cut off by its cap is incomplete, so it raises
:class:`~sgl_speccompact.errors.SummaryBudgetError`, or with
``report_cut_off`` comes back with ``truncated=True`` (the benchmarks
report it instead of failing).  Its ``## `` sections are reported as slots
(lines origin ``target_written``).  Progress events for the monolithic
methods are sent after the single generation: each section's ``line``
events, then its ``slot_done``.
"""

from __future__ import annotations

import time
from typing import Callable

import sglang as sgl

from .assembly import OneShot, sections, slug, trim  # noqa: F401 - sections, slug: public here too
from .speccompact import run_slots, slot_context
from ..config import CompactConfig
from ..core.lines import SlotBudget, placeholder_texts, split_draft
from .pipeline import Job, register
from ..core.hermes_prompt import MIN_TARGET, hermes_prompt, rough_tokens, summary_target, transcript
from .chunking import context_tokens, room_left
from ..core.sections import join_parts
from ..programs.slot_stream import HEADING, SECTION_STOP
from ..programs.slots import branches_of, per_slot
from ..programs.states import retire
from ..programs.context import SlotRun
from ..programs.states import on_daemon_thread, run_concurrently
from ..programs.steps import end_states, fork_slots, open_slot, result_of
from ..core.prompts import SUMMARIZER_SYSTEM, openclaw_prompt
from ..result import LineOrigin, SlotResult, SummaryLine
from ..schema import Slot

# ---------------------------------------------------------------- sampling, defined once


def monolithic_sampling(cfg: CompactConfig, max_tokens: int | None = None) -> dict:
    """``gen`` arguments of a one-shot summary: greedy, up to ``max_tokens`` (``monolithic_max_tokens``)."""
    return {"max_tokens": max_tokens or cfg.monolithic_max_tokens, "temperature": 0.0}


def hermes_cap(target_tokens: int, cfg: CompactConfig) -> int:
    """Hermes's generation cap: hermes-agent sends none, SGLang needs one; ``hermes_cap_ratio`` x the target.

    >>> from ..config import make_config
    >>> hermes_cap(2000, make_config())
    4000
    """
    return int(target_tokens * cfg.hermes_cap_ratio)




def slot_sampling(cfg: CompactConfig) -> dict:
    """``gen`` arguments of a Target-self slot: greedy, up to the slot's token budget."""
    return {"max_tokens": cfg.max_tokens_per_slot, "temperature": 0.0}


# ---------------------------------------------------------------- programs


def answer(s, system: str, prompt: str, assistant_prefix: str, sampling: dict) -> None:
    """System and user turn, then the assistant writes ``summary``."""
    s += sgl.system(system)
    s += sgl.user(prompt)
    s += sgl.assistant_begin()
    s += assistant_prefix
    s += sgl.gen("summary", **sampling)


@sgl.function
def hermes_program(s, prompt, assistant_prefix, sampling):
    """Hermes: one user message and no system turn, as hermes-agent sends it; one generation."""
    s += sgl.user(prompt)
    s += sgl.assistant_begin()
    s += assistant_prefix
    s += sgl.gen("summary", **sampling)


@sgl.function
def openclaw_program(s, history, slots, previous_summary, focus, assistant_prefix, sampling):
    """OpenClaw-style: every slot of the schema in one generation."""
    answer(s, SUMMARIZER_SYSTEM, openclaw_prompt(history, slots, previous_summary, focus), assistant_prefix,
           sampling)


@sgl.function
def target_self_program(s, shared, ctx):
    """Target-self: shared prefix, one fork per slot, one generation per slot.

    With ``sub_slot_branches`` on, a slot with sub-sections (Progress: Done /
    In Progress / Blocked) forks one branch per sub-section, as SpecCompact
    does, and its parts are joined in order within the slot's one budget.
    Returns the :class:`SlotResult` of every slot in schema order.  The
    branches run on daemon threads (:func:`~sgl_speccompact.programs.states.on_daemon_thread`).
    """
    return on_daemon_thread(target_self_body, s, shared, ctx)


def target_self_body(s, shared, ctx) -> list[SlotResult]:
    """The body of :func:`target_self_program`, on a daemon thread: fork, every slot, end the forks."""
    run = SlotRun(ctx, shared)
    branches = fork_slots(s, run, n=sum(len(branches_of(slot, ctx)) for slot in ctx.slots))
    try:
        return per_slot(branches, run, write_slot)
    finally:
        end_states(branches)


def write_slot(states: list, slot: Slot, run: SlotRun) -> SlotResult:
    """The target writes one slot: one generation per branch, capped at the slot budget."""
    ctx = run.ctx
    subs = branches_of(slot, ctx)
    if len(subs) == 1:
        result = write_part(states[0], slot, run)
    else:
        parts = run_concurrently([lambda b=b, sec=sec: write_part(b, slot, run, sec)
                                  for b, sec in zip(states, subs)], run.cancel)
        texts = list(dict.fromkeys(line.text for part in parts for line in part.lines)) + [""]
        tokens = dict(zip(texts, ctx.count_tokens([t + "\n" for t in texts])))
        cfg = ctx.cfg
        result = join_parts(slot.name, slot.title, parts, tokens.__getitem__,
                            SlotBudget(cfg.max_lines_per_slot, cfg.max_tokens_per_slot, cfg.max_blank_lines_per_slot))
        for line in result.lines:  # the target writes every line of its slots, separators included
            line.origin = LineOrigin.TARGET
    for line in result.lines:
        if line.text.strip():
            ctx.emit(type="line", slot=slot.name, text=line.text, origin=LineOrigin.TARGET.value, score=None)
    ctx.emit(type="slot_done", slot=slot.name, stop_reason=result.stop_reason,
             lines=sum(1 for line in result.lines if line.text.strip()))
    return result


def write_part(s, slot: Slot, run: SlotRun, section: str | None = None) -> SlotResult:
    """One generation: the whole slot, or (``section``) one sub-section under its heading.

    A sub-section's generation stops at the next heading, so it writes only
    its own part.
    """
    ctx = run.ctx
    open_slot(s, slot, run)
    if run.cancel.is_set():
        return SlotResult(name=slot.name, title=slot.title, stop_reason="cancelled")
    head = [HEADING.format(section)] if section is not None else []
    sampling = slot_sampling(ctx.cfg)
    if head:
        s += head[0] + "\n"
        sampling = {**sampling, "stop": SECTION_STOP}
    t0 = time.perf_counter()
    s += sgl.gen("slot", **sampling)
    text, meta = result_of(s, "slot")
    ctx.recorder.time("generate", time.perf_counter() - t0)
    ctx.recorder.request("target", "generate", meta)
    finished = (meta.get("finish_reason") or {}).get("type") != "length"
    lines, truncated = split_draft(text, finished)
    result = cap_slot(slot, head + ([] if truncated else lines), ctx.count_tokens, ctx.cfg)
    if not finished and result.stop_reason == "complete":
        result.stop_reason = "token_budget"  # the generation itself hit the slot's token cap
    return result


def cap_slot(slot: Slot, lines: list[str], count: Callable[[list[str]], list[int]],
             cfg: CompactConfig) -> SlotResult:
    """Keep the leading lines that fit the slot's line and token budgets.

    Leading and trailing blank lines are dropped; ``stop_reason`` names the
    budget that cut the slot, or ``complete``.
    """
    lines = trim(lines)
    tokens = count([line + "\n" for line in lines]) if lines else []
    budget = SlotBudget(cfg.max_lines_per_slot, cfg.max_tokens_per_slot)
    result = SlotResult(name=slot.name, title=slot.title, stop_reason="complete")
    kept: list[int] = []  # tokens of each kept line
    for line, n in zip(lines, tokens):
        over = budget.check(line, n)
        if over:
            result.stop_reason = over
            break
        budget.add(line, n)
        kept.append(n)
        result.lines.append(SummaryLine(text=line, origin=LineOrigin.TARGET))
    while result.lines and not result.lines[-1].text.strip():  # cut right after a blank line
        result.lines.pop()
        kept.pop()
    result.tokens = sum(kept)
    return result


# ---------------------------------------------------------------- registered methods


def hermes_request(job: Job, today: str | None = None) -> tuple[str, int]:
    """The prompt of a Hermes compaction and its summary length target (tokens).

    The target is hermes-agent's, from the rough size of the turns and the
    agent's context window ``cfg.agent_context_tokens``.
    """
    target_tokens = summary_target(rough_tokens(job.turns), job.cfg.agent_context_tokens)
    prompt = hermes_prompt(transcript(job.turns), job.previous_summary, target_tokens=target_tokens,
                           today=today, focus=job.focus)
    return prompt, target_tokens


def _one_shot(job: Job, program, names: dict[str, str] | None = None, max_tokens: int | None = None,
              budget: int | None = None, placeholders: frozenset[str] = frozenset(), **kwargs) -> OneShot:
    """Run a one-shot program and count its single generation."""
    t0 = time.perf_counter()
    state = program.run(assistant_prefix=job.target.assistant_prefix,
                        sampling=monolithic_sampling(job.cfg, max_tokens), backend=job.target, **kwargs)
    try:
        text, meta = result_of(state, "summary")
    finally:
        retire([state])
    job.recorder.time("generate", time.perf_counter() - t0)
    job.recorder.request("target", "generate", meta)
    return OneShot(text=text, meta=meta, names=names, max_tokens=max_tokens, budget=budget, placeholders=placeholders)


def hermes_reserve(cfg: CompactConfig) -> int:
    """The output tokens a chunked Hermes block reserves: its smallest cap (its cap is then clamped
    to the room its prompt leaves, :func:`~.chunking.room_left`).

    >>> from ..config import make_config
    >>> hermes_reserve(make_config())
    4000
    """
    return hermes_cap(MIN_TARGET, cfg)


@register("hermes", fixed_sections="Hermes Agent's fixed sections", new_tokens=hermes_reserve)
def hermes_method(job: Job) -> OneShot:
    """Hermes: hermes-agent's prompt and length target, the whole summary in one generation.

    Like hermes-agent, no summary budget beyond the prompt's target; the
    generation cap is :func:`hermes_cap`, clamped to the room the prompt
    leaves in the target's context when the context is known.
    """
    prompt, target_tokens = hermes_request(job)
    cap = hermes_cap(target_tokens, job.cfg)
    context = context_tokens(job.target, job.cfg)
    if context is not None:  # sglang refuses prompt + max_new_tokens over the context
        cap = room_left(context, job.count([SUMMARIZER_SYSTEM + prompt])[0], cap)
    return _one_shot(job, hermes_program, max_tokens=cap, budget=cap, prompt=prompt)


@register("openclaw", new_tokens=lambda cfg: cfg.monolithic_max_tokens)
def openclaw_method(job: Job) -> OneShot:
    """OpenClaw-style: every slot of the schema in one generation."""
    return _one_shot(job, openclaw_program, names={s.title: s.name for s in job.slots}, slots=job.slots,
                     placeholders=placeholder_texts(tuple(s.body_format for s in job.slots)),
                     history=job.history, previous_summary=job.previous_summary, focus=job.focus)


@register("target_self", new_tokens=lambda cfg: cfg.max_tokens_per_slot)
def target_self_method(job: Job) -> list[SlotResult]:
    """Target-self: the shared prefix, one fork per slot, the target writes each slot."""
    return run_slots(job, target_self_program, slot_context(job))
