"""``compact()``: validate, render, run the SpecCompact program, assemble.

The one public entry point of SpecCompact (paper Figure 3): history in,
complete structured summary out.  Input is only read; any failure raises a
typed :mod:`~sgl_speccompact.errors` error and returns no summary.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .config import CompactConfig, make_config
from .endpoint import connect, token_counter
from .errors import SummaryBudgetError
from .history import parse_messages, render_history
from .programs import SlotContext, speccompact
from .prompts import assemble, drafter_context, target_shared
from .result import CompactionResult, SlotResult, StatsRecorder
from .schema import OPENCLAW_SLOTS, Slot, validate_schema


def prepare(messages, config, schema) -> tuple[CompactConfig, tuple[Slot, ...], str]:
    """Validated config, schema and rendered history (shared by every method)."""
    cfg = make_config(config)
    slots = validate_schema(schema if schema is not None else OPENCLAW_SLOTS)
    turns = parse_messages(messages, max_messages=cfg.max_history_messages, max_chars=cfg.max_history_chars)
    return cfg, slots, render_history(turns)


def finish(method: str, slots: tuple[Slot, ...], results: list[SlotResult], cfg: CompactConfig,
           count: Callable[[list[str]], list[int]], recorder: StatsRecorder, t0: float) -> CompactionResult:
    """Assemble slot results in schema order and enforce the summary budget."""
    bodies = {r.name: [line.text for line in r.lines] for r in results}
    summary = assemble(slots, bodies)
    tokens = count([summary])[0]
    if tokens > cfg.max_summary_tokens:
        raise SummaryBudgetError(tokens, cfg.max_summary_tokens)
    recorder.stats.total_wall_s = time.perf_counter() - t0
    return CompactionResult(method=method, summary=summary, summary_tokens=tokens, slots=results,
                            stats=recorder.stats)


def compact(messages: list[dict], *, target: Any, drafter: Any, config: CompactConfig | dict | None = None,
            schema: tuple[Slot, ...] | None = None, previous_summary: str | None = None,
            on_event: Callable[[dict], None] | None = None) -> CompactionResult:
    """Compact an agent history with SpecCompact.

    Parameters
    ----------
    messages : list of dict
        OpenAI chat messages (system/user/assistant/tool, ``tool_calls``,
        ``tool_call_id``).  Read only, never modified.
    target, drafter : sglang backend or str
        The target and drafter: SGLang backends (``SpecCompactEndpoint``
        for one-request judging, or any ``RuntimeEndpoint``) or base URLs.
    config : CompactConfig or dict, optional
        Budgets and threshold; the paper's defaults when omitted.
    schema : tuple of Slot, optional
        Summary sections; the six OpenClaw slots when omitted.
    previous_summary : str, optional
        Summary of earlier turns; part of the source for verification.
    on_event : callable, optional
        Called with ``{"type": "line" | "slot_done", ...}`` as slots progress.

    Returns
    -------
    CompactionResult
        The complete summary, each line's origin and score, and stats.

    Raises
    ------
    InvalidHistoryError, ConfigError, LabelTokenError, BackendError, SummaryBudgetError
    """
    t0 = time.perf_counter()
    cfg, slots, history = prepare(messages, config, schema)
    target, drafter = connect(target), connect(drafter)
    if hasattr(target, "label_tokens"):
        target.label_tokens(cfg.positive_label, cfg.negative_label)  # fail at start-up, not mid-way
    count = token_counter(target)
    recorder = StatsRecorder()
    ctx = SlotContext(
        cfg=cfg, slots=slots, drafter=drafter,
        drafter_context=drafter_context(history, slots, previous_summary),
        count_tokens=count, recorder=recorder,
        target_prefix=getattr(target, "assistant_prefix", ""),
        drafter_prefix=getattr(drafter, "assistant_prefix", ""),
        has_previous=bool(previous_summary), on_event=on_event,
    )
    state = speccompact.run(shared=target_shared(history, slots, previous_summary), ctx=ctx, backend=target)
    return finish("speccompact", slots, state.ret_value, cfg, count, recorder, t0)
