"""One entry point for every compaction method (HTTP service, CLI, benchmarks).

``run_method(name, messages, ...)`` runs SpecCompact or a baseline and,
with ``source_judge=True``, Source-Judged Compaction on its summary.  Every
method returns the same :class:`~sgl_speccompact.result.CompactionResult`.
``run_method("auto", ...)`` runs the method the cost model predicts fastest
on ``deployment`` (:mod:`~sgl_speccompact.methods.autopick`) and records the
pick in ``result.stats.auto``.

Target requests per compaction (``stats.requests["target"]``; n = slots,
six by default, e entries of the summary):

=============  =====================================================  ========
method         target                                                 drafter
=============  =====================================================  ========
speccompact    1 prefill + 1 per judged line + 1 per repair           drafts
hermes         1 generate                                             --
openclaw       1 generate                                             --
target_self    1 prefill + n generate                                 --
target_delta   1 prefill + n generate + 1-2 per slot with carried     --
               lines (judge batch, shared prefix) + 1 generate per
               carried sub-section heading
+ SJC          + 1 judge (one batch of e prompts)                     --
=============  =====================================================  ========
"""

from __future__ import annotations

from typing import Any

from . import baselines, speccompact, target_delta  # noqa: F401 - importing them registers the methods
from ..config import CompactConfig, make_config
from .auto import Deployment
from .names import METHODS  # the built-in methods, written once
from .autopick import AUTO, AutoPicker
from .pipeline import run
from .request import MethodRequest, Offer, as_request
from .resolve import as_picker, resolve_method, served_picker
from ..backends.endpoint import connect
from ..result import CompactionResult



def run_method(method: str, messages: list[dict] | MethodRequest, *, target: Any, drafter: Any = None,
               config: CompactConfig | dict | None = None, previous_summary: str | None = None,
               source_judge: bool = False, deployment: Deployment | AutoPicker | None = None) -> CompactionResult:
    """Compact ``messages`` with the named method.

    Parameters
    ----------
    method : str
        One of :data:`METHODS`, ``"auto"``, or a name added with
        :func:`~sgl_speccompact.methods.pipeline.register`.
    messages : list of dict or MethodRequest
        OpenAI chat messages (read only, never modified), or a
        :class:`~sgl_speccompact.methods.request.MethodRequest` carrying
        them with the rarely used options (see below).
    target : sglang backend or str
        The target model: a backend (``SpecCompactEndpoint`` for one-request
        judging) or a base URL.
    drafter : sglang backend or str, optional
        The drafter; required by ``speccompact``, ignored by the baselines.
    config : CompactConfig or dict, optional
        Budgets, thresholds and labels; the paper's defaults when omitted.
    previous_summary : str, optional
        Summary of earlier turns (incremental compaction): part of the
        source for verification and for SJC; the monolithic methods use
        their update prompts.  Given here, it replaces a request's own.
    source_judge : bool
        Delete summary entries without a source (Source-Judged Compaction);
        the result's ``summary`` is the filtered one and ``source_judge``
        holds the report.  True here sets it on a request too.
    deployment : Deployment or AutoPicker, optional
        What ``method="auto"`` predicts on (ignored otherwise).  An
        :class:`~sgl_speccompact.methods.autopick.AutoPicker` also carries the
        acceptance observed so far and is updated by a SpecCompact run; a
        bare :class:`~sgl_speccompact.methods.auto.Deployment` starts from the
        prior acceptance.  Default: the models the servers report
        (:func:`~sgl_speccompact.methods.resolve.served_picker`; Qwen3-8B and
        Qwen3-0.6B where they report none) on one shared H200.
        ``auto`` picks only among the methods that accept the request
        (:func:`~sgl_speccompact.methods.resolve.resolve_method`): not
        ``speccompact`` without a ``drafter``, not ``hermes`` with a ``schema``.

    Returns
    -------
    CompactionResult

    Raises
    ------
    UnknownMethodError
        ``method`` is not registered (:data:`METHODS` are the built-in ones).
    ConfigError
        ``speccompact`` without a drafter, ``hermes`` with a schema, or an
        invalid config.
    InvalidHistoryError, LabelTokenError, BackendError, SummaryBudgetError

    Notes
    -----
    The other options are fields of the
    :class:`~sgl_speccompact.methods.request.MethodRequest` passed as
    ``messages``:

    - ``schema``: summary sections for ``speccompact``, ``openclaw`` and
      ``target_self`` (OpenClaw's six slots when None); ``hermes`` has its
      own fixed sections and takes none.
    - ``focus``: what the summary should favour (Hermes's
      ``/compress <focus>``); untrusted text, quoted into every method's
      prompt as a label.
    - ``on_event``: events ``{"type": "line" | "slot_written" | "retract"
      | "slot_done", "slot": ..., ...}``.  Slot-parallel methods
      (``speccompact``, ``target_self``) send ``line`` (provisional:
      ``"final": false``) and ``slot_written`` as slots progress, from
      worker threads; the monolithic ones send each section's once their
      single generation is done.  When the result is ready, each slot is
      settled: ``retract`` for every shown line the result dropped, then
      ``slot_done`` with its final lines
      (:mod:`~sgl_speccompact.methods.displayed`).
    - ``layout``: an :class:`~sgl_speccompact.methods.request.AgentLayout`,
      the layout of the target's shared prefix (slot-parallel methods).
      Its ``name`` ``"agent"`` renders the agent's conversation with the
      target's chat template, exactly as SGLang's chat endpoint did for
      the agent, so the compaction reuses the agent's radix cache (see
      :mod:`~sgl_speccompact.backends.layout`); ``"classic"`` is our own
      rendering; default: ``agent`` when ``chat_template`` is given, else
      ``classic``.  ``tools`` are the agent's OpenAI tools as it sent
      them; ``chat_template`` the target's Hugging Face tokenizer, or its
      local path or hub name (with ``"agent"`` and none, the tokenizer the
      target server reports is loaded if it is local);
      ``chat_template_kwargs`` what the agent sent as such.

    Examples
    --------
    >>> from sgl_speccompact.methods.request import AgentLayout, MethodRequest
    >>> request = MethodRequest([{"role": "user", "content": "fix a.py"}], focus="the parser",
    ...                         layout=AgentLayout("classic"))
    >>> run_method("no-such-method", request, target=None)
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.UnknownMethodError: unknown method 'no-such-method'; ...
    """
    request = as_request(messages, previous_summary=previous_summary, source_judge=source_judge)
    return run_request(method, request, target, drafter, make_config(config), deployment)


def run_request(method: str, request: MethodRequest, target: Any, drafter: Any, config: CompactConfig,
                deployment: Deployment | AutoPicker | None = None) -> CompactionResult:
    """:func:`run_method` on a request built already (``auto`` resolved here, then run)."""
    if method == AUTO and deployment is None:  # predict for the models the servers report
        target, drafter = connect(target), (connect(drafter) if drafter is not None else None)
        deployment = served_picker(target, drafter)
    picker = as_picker(deployment, drafter is not None) if method == AUTO else None
    offer = Offer(config, has_drafter=drafter is not None, offered=METHODS)
    method, choice = resolve_method(method, request, offer, picker)
    result = run(method, request, target, drafter, config)
    if choice is not None:
        picker.observe(method, result.stats.acceptance_rate, result.stats.label_mass_median)
        result.stats.auto = choice
    return result
