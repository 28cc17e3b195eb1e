"""One entry point for every compaction method (HTTP service, CLI, benchmarks).

``run_method(name, messages, ...)`` runs SpecCompact or a baseline and,
with ``source_judge=True``, Source-Judged Compaction on its summary.  Every
method returns the same :class:`~sgl_speccompact.result.CompactionResult`.

Target requests per compaction (``stats.requests["target"]``; n = slots,
six by default, e entries of the summary):

=============  =====================================================  ========
method         target                                                 drafter
=============  =====================================================  ========
speccompact    1 prefill + 1 per judged line + 1 per repair           drafts
hermes         1 generate                                             --
openclaw       1 generate                                             --
target_self    1 prefill + n generate                                 --
+ SJC          + 1 judge (one batch of e prompts)                     --
=============  =====================================================  ========
"""

from __future__ import annotations

from typing import Any, Callable

from .baselines import hermes_style, openclaw_style, target_self
from .compactor import compact
from .config import CompactConfig, make_config
from .endpoint import connect
from .errors import ConfigError, UnknownMethodError
from .result import CompactionResult
from .schema import Slot
from .source_judge import source_judge_result

METHODS = ("speccompact", "hermes", "openclaw", "target_self")


def run_method(method: str, messages: list[dict], *, target: Any, drafter: Any = None,
               config: CompactConfig | dict | None = None, schema: tuple[Slot, ...] | None = None,
               previous_summary: str | None = None, source_judge: bool = False,
               on_event: Callable[[dict], None] | None = None) -> CompactionResult:
    """Compact ``messages`` with the named method.

    Parameters
    ----------
    method : str
        One of :data:`METHODS`.
    messages : list of dict
        OpenAI chat messages; read only, never modified.
    target : sglang backend or str
        The target model: a backend (``SpecCompactEndpoint`` for one-request
        judging) or a base URL.
    drafter : sglang backend or str, optional
        The drafter; required by ``speccompact``, ignored by the baselines.
    config : CompactConfig or dict, optional
        Budgets, thresholds and labels; the paper's defaults when omitted.
    schema : tuple of Slot, optional
        Summary sections for ``speccompact``, ``openclaw`` and
        ``target_self``; ``hermes`` has its own fixed sections and takes none.
    previous_summary : str, optional
        Summary of earlier turns (incremental compaction): part of the
        source for verification and for SJC; the monolithic methods use
        their update prompts.
    source_judge : bool
        Delete summary entries without a source (Source-Judged Compaction);
        the result's ``summary`` is the filtered one and ``source_judge``
        holds the report.
    on_event : callable, optional
        Progress events ``{"type": "line" | "slot_done", "slot": ..., ...}``.
        Slot-parallel methods (``speccompact``, ``target_self``) send them
        as slots progress, from worker threads; the monolithic ones send
        each section's events once their single generation is done.  SJC
        sends none.

    Returns
    -------
    CompactionResult

    Raises
    ------
    UnknownMethodError
        ``method`` is not in :data:`METHODS`.
    ConfigError
        ``speccompact`` without a drafter, ``hermes`` with a schema, or an
        invalid config.
    InvalidHistoryError, LabelTokenError, BackendError, SummaryBudgetError
    """
    if method not in METHODS:
        raise UnknownMethodError(f"unknown method {method!r}; one of {list(METHODS)}")
    if method == "speccompact" and drafter is None:
        raise ConfigError("speccompact needs a drafter backend")
    if method == "hermes" and schema is not None:
        raise ConfigError("hermes uses Hermes Agent's fixed sections and takes no schema")
    cfg = make_config(config)
    target = connect(target)
    common = dict(target=target, config=cfg, previous_summary=previous_summary, on_event=on_event)
    if method == "speccompact":
        result = compact(messages, drafter=connect(drafter), schema=schema, **common)
        if source_judge:
            result = source_judge_result(result, messages, target=target, config=cfg,
                                         previous_summary=previous_summary)
        return result
    if method == "hermes":
        return hermes_style(messages, source_judge=source_judge, **common)
    if method == "openclaw":
        return openclaw_style(messages, schema=schema, source_judge=source_judge, **common)
    return target_self(messages, schema=schema, source_judge=source_judge, **common)
