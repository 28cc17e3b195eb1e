"""``compact()``: SpecCompact as a registered method of the one pipeline.

The public entry point of SpecCompact (paper Figure 3): history in,
complete structured summary out.  :mod:`~sgl_speccompact.methods.pipeline`
validates, renders, assembles and checks the budget; this module holds the
method's program: build the slot context, prefill the shared prefix, run
the slot streams.  Input is only read; any failure raises a typed
:mod:`~sgl_speccompact.errors` error and returns no summary.
"""

from __future__ import annotations

from typing import Any, Callable

from ..core.carried import previous_lines
from ..core.evidence import LineSources, ledger_source
from ..config import CompactConfig, make_config
from ..errors import BackendError, SpecCompactError
from ..core.judge_prompts import judge_rubric
from .pipeline import Job, register, run
from ..programs.states import retire
from ..programs.context import SPECCOMPACT, Proposers, SlotContext
from ..programs.judges import make_judge
from ..core.prompts import SUMMARIZER_SYSTEM, drafter_context, focus_block, target_shared
from ..result import CompactionResult, SlotResult
from ..schema import Slot
from ..programs.slots import speccompact
from .request import MethodRequest, as_request
from .source_judge import SharedPrefix


def line_sources(job: Job, proposers: Proposers, carried: dict) -> LineSources | None:
    """The evidence check's sources for a slot method that judges lines (drafts, or ``carried`` lines),
    indexed only once a line is checked; None with ``evidence_check`` off or nothing to judge (Target-self)."""
    if not job.cfg.evidence_check or not (proposers.drafter or carried):
        return None
    return LineSources(job.history, job.previous_summary or "", ledger_source(job.carried_ledger.entries))


def slot_context(job: Job, proposers: Proposers, drafter_text: str = "") -> SlotContext:
    """The :class:`SlotContext` of a slot method (its ``proposers``), from the job."""
    cfg = job.cfg
    carried = (previous_lines(job.previous_summary, job.slots, cfg.empty_markers)
               if cfg.carry_previous_lines and proposers.carried else {})
    return SlotContext(
        cfg=cfg, slots=job.slots, drafter=job.drafter, drafter_context=drafter_text,
        count_tokens=job.count, recorder=job.recorder, target=job.target,
        target_prefix=job.target.assistant_prefix,
        drafter_prefix=job.drafter.assistant_prefix if job.drafter is not None else "",
        has_previous=bool(job.previous_summary), on_event=job.on_event,
        chat_prefix=job.layout.chat_prefix,
        carried=carried, proposers=proposers, judge=make_judge(job.target, cfg),
        record=(target_shared(job.history, job.slots, job.previous_summary, focus=job.focus)
                if cfg.judge == "decisions" else ""),
        evidence=line_sources(job, proposers, carried),
    )


def shared_text(job: Job) -> tuple[str, int | None, str]:
    """The target text every branch of a slot method starts with: ``(shared, agent tokens, rubric)``."""
    cfg = job.cfg
    rubric = (judge_rubric(cfg.positive_label, cfg.negative_label, bool(job.previous_summary))
              if cfg.short_judge_suffix else "")
    classic = target_shared(job.history, job.slots, job.previous_summary, rubric, focus=job.focus)
    shared, agent_tokens = job.layout.prefix(classic, job.slots, job.previous_summary,
                                             focus_block(job.focus) + rubric)
    return shared, agent_tokens, rubric


def run_slots(job: Job, ctx: SlotContext) -> list[SlotResult]:
    """Run the slot program on the shared prefix; record the prefix for SJC to branch from
    when ``source_judge_on_prefix`` asks SJC to use it."""
    cfg = job.cfg
    shared, agent_tokens, rubric = shared_text(job)
    state = speccompact.run(shared=shared, ctx=ctx, backend=job.target)
    try:
        err = state.error()  # e.g. a failed prefix prefill, which fork() does not raise
    finally:
        retire([state])
    if err is not None:
        raise err if isinstance(err, SpecCompactError) else BackendError(f"SGLang request failed: {err}")
    job.recorder.agent_reuse(job.layout.name, agent_tokens)
    if cfg.source_judge_on_prefix:
        # opened as fork_slots opens it: the agent layout's text carries its own chat turns
        system = None if job.layout.chat_prefix else SUMMARIZER_SYSTEM
        job.shared_prefix = SharedPrefix(system=system, user=shared, rubric=bool(rubric))
    return state.ret_value


@register("speccompact", needs_drafter=True, judges=True,
          new_tokens=lambda cfg: cfg.max_tokens_per_slot + cfg.max_new_tokens)  # a branch's lines + one request
def speccompact_method(job: Job) -> list[SlotResult]:
    """SpecCompact: carried lines kept, the drafter drafts, the target judges and repairs; one branch per slot."""
    ctx = slot_context(job, SPECCOMPACT, drafter_context(job.history, job.slots, job.previous_summary, job.focus))
    return run_slots(job, ctx)


def compact(messages: list[dict] | MethodRequest, *, target: Any, drafter: Any,
            config: CompactConfig | dict | None = None, schema: tuple[Slot, ...] | None = None,
            previous_summary: str | None = None, on_event: Callable[[dict], None] | None = None) -> CompactionResult:
    """Compact an agent history with SpecCompact.

    Parameters
    ----------
    messages : list of dict or MethodRequest
        OpenAI chat messages (system/user/assistant/tool, ``tool_calls``,
        ``tool_call_id``), read only, never modified; or a
        :class:`~sgl_speccompact.methods.request.MethodRequest` carrying
        them with the rarely used options: ``focus`` (a topic the shared
        prefixes of target and drafter ask every slot to favour; untrusted
        text, quoted) and ``layout``, an
        :class:`~sgl_speccompact.methods.request.AgentLayout` (the target
        prefix's layout, tools, chat template and its kwargs; see
        :func:`~.methods.run_method`: ``AgentLayout("agent", ...)`` reuses
        the agent's own radix cache, and ``stats.agent_cached_tokens``
        reports how much of it).
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
        Called with ``{"type": "line" | "slot_written" | "retract" | "slot_done", ...}`` as slots
        progress and when the result settles them (:mod:`~sgl_speccompact.methods.displayed`).

    A keyword given here replaces the request's own value.

    Returns
    -------
    CompactionResult
        The complete summary, each line's origin and score, and stats.

    Raises
    ------
    InvalidHistoryError, ConfigError, LabelTokenError, BackendError, SummaryBudgetError
    """
    request = as_request(messages, schema=schema, previous_summary=previous_summary, on_event=on_event)
    return run("speccompact", request, target, drafter, make_config(config))
