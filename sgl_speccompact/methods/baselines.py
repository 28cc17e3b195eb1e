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
  It is the one slot program with one proposer, the target as writer
  (:mod:`~sgl_speccompact.programs.slot_loop`): its lines pass the same
  checks and budget, and a duplicate or a copied placeholder is skipped.

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
events, then its ``slot_written``.
"""

from __future__ import annotations

import time

import sglang as sgl

from .assembly import OneShot, sections, slug  # noqa: F401 - sections, slug: public here too
from .speccompact import run_slots, slot_context
from ..config import CompactConfig
from ..core.lines import placeholder_texts
from .pipeline import Job, register
from ..core.hermes_prompt import MIN_TARGET, hermes_prompt, rough_tokens, summary_target, transcript
from .chunking import context_tokens, room_left
from ..programs.context import TARGET_SELF
from ..programs.states import retire
from ..programs.steps import result_of
from ..core.prompts import SUMMARIZER_SYSTEM, openclaw_prompt
from ..result import SlotResult

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
    return run_slots(job, slot_context(job, TARGET_SELF))
