"""Baselines on SpecCompact's interface (paper "Experiments", Tables 1-3).

* **Hermes-style**: one target generation of Hermes Agent's compressor
  summary (thirteen sections, "Historical" ones marking the past, the latest
  unfulfilled user request quoted, secrets redacted).
* **OpenClaw-style**: one target generation of the six-slot summary (any
  schema), conversation wrapped in ``<conversation>`` tags.
* **Target-self**: SpecCompact's slot-parallel layout -- the same shared
  prefix, prefilled once by the fork, and one branch per slot -- but the
  target writes each slot itself in one generation: no drafter, no judge.

All three return a :class:`~sgl_speccompact.result.CompactionResult` under
the same 2,048-token summary budget, take a previous summary (the
monolithic ones switch to their update prompt; Target-self puts it in the
shared prefix), and can run Source-Judged Compaction afterwards.

A monolithic summary cut off by ``monolithic_max_tokens`` is incomplete, so
it raises :class:`~sgl_speccompact.errors.SummaryBudgetError` like an
over-budget one.  Its ``## `` sections are reported as slots (lines origin
``target_written``).  Progress events for the monolithic methods are sent
after the single generation: each section's ``line`` events, then its
``slot_done``.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

import sglang as sgl

from .compactor import finish, prepare
from .config import CompactConfig
from .endpoint import connect, token_counter
from .errors import BackendError, SpecCompactError, SummaryBudgetError
from .lines import SlotBudget, split_draft
from .programs import SlotContext, fork_slots, open_slot, result_of, run_concurrently
from .prompts import HERMES_SYSTEM, SUMMARIZER_SYSTEM, hermes_prompt, openclaw_prompt, target_shared
from .result import CompactionResult, LineOrigin, SlotResult, StatsRecorder, SummaryLine
from .schema import Slot
from .source_judge import check_labels, source_judge_result

# ---------------------------------------------------------------- sampling, defined once


def monolithic_sampling(cfg: CompactConfig) -> dict:
    """``gen`` arguments of a one-shot summary: greedy, up to ``monolithic_max_tokens``."""
    return {"max_tokens": cfg.monolithic_max_tokens, "temperature": 0.0}


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
def hermes_program(s, history, previous_summary, assistant_prefix, sampling):
    """Hermes-style: the whole summary in one generation."""
    answer(s, HERMES_SYSTEM, hermes_prompt(history, previous_summary), assistant_prefix, sampling)


@sgl.function
def openclaw_program(s, history, slots, previous_summary, assistant_prefix, sampling):
    """OpenClaw-style: every slot of the schema in one generation."""
    answer(s, SUMMARIZER_SYSTEM, openclaw_prompt(history, slots, previous_summary), assistant_prefix, sampling)


@sgl.function
def target_self_program(s, shared, ctx):
    """Target-self: shared prefix, one fork per slot, one generation per slot.

    Returns the :class:`SlotResult` of every slot in schema order.
    """
    branches = fork_slots(s, shared, ctx)
    return run_concurrently(
        [lambda b=b, slot=slot: write_slot(b, slot, ctx) for b, slot in zip(branches, ctx.slots)],
        ctx.cancel,
    )


def write_slot(s, slot: Slot, ctx: SlotContext) -> SlotResult:
    """The target writes one slot in one generation, capped at the slot budget."""
    open_slot(s, slot, ctx)
    if ctx.cancel.is_set():
        return SlotResult(name=slot.name, title=slot.title, stop_reason="cancelled")
    t0 = time.perf_counter()
    s += sgl.gen("slot", **slot_sampling(ctx.cfg))
    text, meta = result_of(s, "slot")
    ctx.recorder.time("generate", time.perf_counter() - t0)
    ctx.recorder.request("target", "generate", meta)
    finished = (meta.get("finish_reason") or {}).get("type") != "length"
    lines, truncated = split_draft(text, finished)
    result = cap_slot(slot, [] if truncated else lines, ctx.count_tokens, ctx.cfg)
    if not finished and result.stop_reason == "complete":
        result.stop_reason = "token_budget"  # the generation itself hit the slot's token cap
    for line in result.lines:
        if line.text.strip():
            ctx.emit(type="line", slot=slot.name, text=line.text, origin=LineOrigin.TARGET.value, score=None)
    ctx.emit(type="slot_done", slot=slot.name, stop_reason=result.stop_reason, lines=len(result.lines))
    return result


def cap_slot(slot: Slot, lines: list[str], count: Callable[[list[str]], list[int]],
             cfg: CompactConfig) -> SlotResult:
    """Keep the leading lines that fit the slot's line and token budgets.

    Leading and trailing blank lines are dropped; ``stop_reason`` names the
    budget that cut the slot, or ``complete``.
    """
    lines = _trim(lines)
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


# ---------------------------------------------------------------- monolithic results


def slug(title: str) -> str:
    """A slot-style name for a section title.

    >>> slug("Constraints & Preferences")
    'constraints_preferences'
    """
    return re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_") or "section"


def sections(summary: str, names: dict[str, str] | None = None) -> list[tuple[str, str, list[str]]]:
    """``(name, title, body lines)`` of each ``## `` section of a summary, in order.

    ``names`` maps known titles to slot names; other titles are slugged.
    Text before the first heading is a section titled ``Preamble``; a
    summary without headings is one section titled ``Summary``.

    >>> sections("## Goal\\n- a\\n\\n## Next Steps\\n1. b\\n", {"Goal": "goal"})
    [('goal', 'Goal', ['- a']), ('next_steps', 'Next Steps', ['1. b'])]
    """
    names = names or {}
    parts: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in summary.split("\n"):
        if line.startswith("## "):
            parts.append((line[3:].strip(), []))
        else:
            parts[-1][1].append(line)
    out = []
    for title, body in parts:
        body = _trim(body)
        if title is None:
            if not body:
                continue
            title = "Summary" if len(parts) == 1 else "Preamble"
        out.append((names.get(title, slug(title)), title, body))
    return out


def _trim(lines: list[str]) -> list[str]:
    """Without leading and trailing blank lines."""
    keep = [i for i, line in enumerate(lines) if line.strip()]
    return lines[keep[0]:keep[-1] + 1] if keep else []


def finish_monolithic(method: str, text: str, meta: dict, cfg: CompactConfig,
                      count: Callable[[list[str]], list[int]], recorder: StatsRecorder, t0: float,
                      names: dict[str, str] | None = None,
                      on_event: Callable[[dict], None] | None = None) -> CompactionResult:
    """Check a one-shot summary against the budgets and report its sections as slots."""
    if (meta.get("finish_reason") or {}).get("type") == "length":
        used = int(meta.get("completion_tokens") or 0) or count([text])[0]
        raise SummaryBudgetError(used, cfg.monolithic_max_tokens)
    summary = text.strip()
    if not summary:
        raise BackendError("the target returned an empty summary")
    summary += "\n"
    tokens = count([summary])[0]
    if tokens > cfg.max_summary_tokens:
        raise SummaryBudgetError(tokens, cfg.max_summary_tokens)
    parts = sections(summary, names)
    sizes = count(["".join(line + "\n" for line in body) for _, _, body in parts])
    slots = []
    for (name, title, body), n in zip(parts, sizes):
        slots.append(SlotResult(name=name, title=title, stop_reason="complete", tokens=n,
                                lines=[SummaryLine(text=line, origin=LineOrigin.TARGET) for line in body]))
    if on_event is not None:
        for slot in slots:
            for line in slot.lines:
                if line.text.strip():
                    on_event({"type": "line", "slot": slot.name, "text": line.text,
                              "origin": LineOrigin.TARGET.value, "score": None})
            on_event({"type": "slot_done", "slot": slot.name, "stop_reason": "complete",
                      "lines": len(slot.lines)})
    recorder.stats.total_wall_s = time.perf_counter() - t0
    return CompactionResult(method=method, summary=summary, summary_tokens=tokens, slots=slots,
                            stats=recorder.stats)


def _monolithic(method: str, program, messages, *, target, config, schema, previous_summary,
                source_judge: bool, on_event, by_schema: bool) -> CompactionResult:
    """Run a one-shot program; ``by_schema``: its prompt lists the schema's slots."""
    t0 = time.perf_counter()
    cfg, slots, history = prepare(messages, config, schema)
    target = connect(target)
    if source_judge:
        check_labels(target, cfg)
    count, recorder = token_counter(target), StatsRecorder()
    state = program.run(history=history, previous_summary=previous_summary,
                        assistant_prefix=getattr(target, "assistant_prefix", ""),
                        sampling=monolithic_sampling(cfg), backend=target,
                        **({"slots": slots} if by_schema else {}))
    text, meta = result_of(state, "summary")
    recorder.time("generate", time.perf_counter() - t0)
    recorder.request("target", "generate", meta)
    names = {s.title: s.name for s in slots} if by_schema else None
    result = finish_monolithic(method, text, meta, cfg, count, recorder, t0, names, on_event)
    if source_judge:
        result = source_judge_result(result, messages, target=target, config=cfg,
                                     previous_summary=previous_summary)
    return result


# ---------------------------------------------------------------- entry points


def hermes_style(messages: list[dict], *, target: Any, config: CompactConfig | dict | None = None,
                 previous_summary: str | None = None, source_judge: bool = False,
                 on_event: Callable[[dict], None] | None = None) -> CompactionResult:
    """Compact a history the way Hermes Agent's compressor does: one generation.

    Parameters
    ----------
    messages : list of dict
        OpenAI chat messages; read only.
    target : sglang backend or str
        The target model (a backend or a base URL).
    config : CompactConfig or dict, optional
        ``monolithic_max_tokens`` caps the generation, ``max_summary_tokens``
        the summary.
    previous_summary : str, optional
        Summary of earlier turns: the prompt becomes Hermes's update form.
    source_judge : bool
        Run Source-Judged Compaction on the summary.
    on_event : callable, optional
        ``line`` and ``slot_done`` events per section, sent after the generation.

    Returns
    -------
    CompactionResult
        ``method="hermes"``; one target request (kind ``generate``), plus
        the judge request with ``source_judge``.

    Raises
    ------
    InvalidHistoryError, ConfigError, BackendError, SummaryBudgetError
    """
    return _monolithic("hermes", hermes_program, messages, target=target, config=config, schema=None,
                       previous_summary=previous_summary, source_judge=source_judge, on_event=on_event,
                       by_schema=False)


def openclaw_style(messages: list[dict], *, target: Any, config: CompactConfig | dict | None = None,
                   schema: tuple[Slot, ...] | None = None, previous_summary: str | None = None,
                   source_judge: bool = False,
                   on_event: Callable[[dict], None] | None = None) -> CompactionResult:
    """Compact a history with OpenClaw's six-slot summary in one generation.

    Parameters are those of :func:`hermes_style`, plus ``schema`` (the
    summary sections; the six OpenClaw slots when omitted).  Sections whose
    heading matches a slot title get that slot's name.

    Returns
    -------
    CompactionResult
        ``method="openclaw"``; one target request (kind ``generate``), plus
        the judge request with ``source_judge``.
    """
    return _monolithic("openclaw", openclaw_program, messages, target=target, config=config, schema=schema,
                       previous_summary=previous_summary, source_judge=source_judge, on_event=on_event,
                       by_schema=True)


def target_self(messages: list[dict], *, target: Any, config: CompactConfig | dict | None = None,
                schema: tuple[Slot, ...] | None = None, previous_summary: str | None = None,
                source_judge: bool = False,
                on_event: Callable[[dict], None] | None = None) -> CompactionResult:
    """Compact a history slot-parallel with the target alone.

    Same shared prefix and fork as SpecCompact; each slot is one target
    generation of at most ``max_tokens_per_slot`` tokens, kept up to the
    slot's line and token budgets (a line cut by the cap is dropped).

    Parameters are those of :func:`openclaw_style`; ``on_event`` gets
    ``line`` and ``slot_done`` events as each slot finishes.

    Returns
    -------
    CompactionResult
        ``method="target_self"``; one prefill (the fork) plus one
        ``generate`` per slot, plus the judge request with ``source_judge``.
    """
    t0 = time.perf_counter()
    cfg, slots, history = prepare(messages, config, schema)
    target = connect(target)
    if source_judge:
        check_labels(target, cfg)
    count, recorder = token_counter(target), StatsRecorder()
    ctx = SlotContext(cfg=cfg, slots=slots, drafter=None, drafter_context="", count_tokens=count,
                      recorder=recorder, target_prefix=getattr(target, "assistant_prefix", ""),
                      has_previous=bool(previous_summary), on_event=on_event)
    state = target_self_program.run(shared=target_shared(history, slots, previous_summary), ctx=ctx,
                                    backend=target)
    err = state.error()  # e.g. a failed prefix prefill, which fork() does not raise
    if err is not None:
        raise err if isinstance(err, SpecCompactError) else BackendError(f"SGLang request failed: {err}")
    result = finish("target_self", slots, state.ret_value, cfg, count, recorder, t0)
    if source_judge:
        result = source_judge_result(result, messages, target=target, config=cfg,
                                     previous_summary=previous_summary)
    return result

