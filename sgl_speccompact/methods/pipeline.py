"""One path for every compaction method.

::

    request -> parse once -> [prune] -> blocks -> per block: redact + render -> method program
               (request.py)  (pruning)  (chunking)  (Job)                        (registered)
            -> assemble + budget + exact ledger -> [SJC]        each block on the last block's summary
               (assembly.py)                       (source_judge.py)

``run(name, request, target, drafter, config)`` reads one
:class:`~.request.MethodRequest`; the config is made, the schema validated
and the backends connected once, and each block of a chunked history is a
sub-request of it.

A method is a small program registered by name: it reads a :class:`Job`
(config, schema, rendered history, connected backends, stats) and returns
either its slot results or one generated text (:class:`~.assembly.OneShot`).
Everything else -- argument checks, history parsing, label resolution,
assembly, the summary budget, the exact ledger (no model: it is read back
from the previous summary here and never shown to one), Source-Judged
Compaction and the wall time -- happens here, once, the same way for every
method.

A slot-parallel method records its shared target prefix in
``Job.shared_prefix``; SJC then judges on branches of that prefix (already
in the target's radix cache) instead of prefilling the record again.

Each block runs on views of the backends that share one session per server
(``Backend.prefix_session``, ``CompactConfig.server_sessions``), closed when
the block ends however it ends; the result's ``stats.host_cpu_s`` is this
process's CPU on the compaction (:class:`~sgl_speccompact.result.HostCpu`).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Callable

from .chunking import run_blocks, split_request
from .displayed import Displayed
from .assembly import Assembled, OneShot, from_slots, from_text, section_events, with_ledger
from ..config import CompactConfig
from ..backends.endpoint import connect
from ..backends.contract import Backend, ProgramBackend
from ..errors import ConfigError, PromptTooLongError, UnknownMethodError
from ..history.ledger_entries import SHARED_MEMO, ledger_entries
from ..history.messages import Turn, render_history
from ..core.ledger import LedgerSection, split_ledger
from ..backends.layout import LayoutPlan, plan_layout
from ..history.pruning import prune_tool_outputs, report_dict, with_stubs
from ..history.redaction import add_counts, redact, redact_json, redact_messages, redact_turns
from ..programs.states import on_daemon_thread
from ..result import CompactionResult, HostCpu, SlotResult, StatsRecorder
from ..schema import OPENCLAW_SLOTS, Slot, validate_schema
from ..core.outputs import clean_result, cleaning_events
from .progress import Tracker
from .request import MethodRequest
from .source_judge import SharedPrefix, check_labels, source_judge_result
from ..history.untrusted import neutralise


@dataclass
class Job:
    """One compaction's inputs, validated and rendered once; what a method program reads."""

    method: str  # registered name of the method
    cfg: CompactConfig  # budgets, thresholds, labels
    slots: tuple[Slot, ...]  # the schema, in summary order (the OpenClaw slots by default)
    turns: tuple[Turn, ...]  # the parsed history
    history: str  # the rendered history, as every prompt embeds it
    target: Backend  # connected target backend
    drafter: Backend | None  # connected drafter backend, or None
    previous_summary: str | None  # summary of earlier turns (incremental compaction)
    count: Callable[[list[str]], list[int]]  # texts -> length in target tokens
    recorder: StatsRecorder  # this compaction's stats
    on_event: Callable[[dict], None] | None = None  # progress callback (events cleaned: see outputs.py)
    shared_prefix: SharedPrefix | None = None  # the prefix the method's target branches share, if any
    layout: LayoutPlan = LayoutPlan("classic")  # where the target's shared prefix comes from
    redactions: dict[str, int] | None = None  # secrets replaced in turns, tools, previous summary, focus, per kind
    focus: str | None = None  # topic the summary should favour (untrusted text; prompts quote it)
    ran_as: str | None = None  # set by a method that ran as another one (the result's ran_as)
    carried_ledger: LedgerSection = LedgerSection()  # the previous summary's exact ledger, read back (no model sees it)
    indices: tuple[int, ...] | None = None  # each turn's index in the caller's messages (MethodRequest.indices)

    def emit(self, event: dict) -> None:
        if self.on_event is not None:
            self.on_event(event)


Written = list[SlotResult] | OneShot  # what a method program returns


@dataclass(frozen=True)
class Method:
    """A registered compaction method."""

    name: str  # as given to run_method, the service and the CLI
    program: Callable[[Job], Written]  # writes the summary
    needs_drafter: bool = False  # refuse to run without a drafter backend
    fixed_sections: str = ""  # non-empty: the method's own sections (named here); takes no schema
    judges: bool = False  # uses the judge labels itself: resolve them before any request
    new_tokens: Callable[[CompactConfig], int] | None = None  # output tokens a request may add (chunking reserve)


REGISTRY: dict[str, Method] = {}


def register(name: str, **flags) -> Callable[[Callable[[Job], Written]], Callable[[Job], Written]]:
    """Register ``program`` as the method ``name`` (flags: :class:`Method` fields).

    >>> @register("echo", fixed_sections="one Summary section")
    ... def echo(job):
    ...     return OneShot(job.history)
    >>> REGISTRY.pop("echo").fixed_sections
    'one Summary section'
    """
    def wrap(program: Callable[[Job], Written]) -> Callable[[Job], Written]:
        REGISTRY[name] = Method(name=name, program=program, **flags)
        return program
    return wrap


def refusal(method: Method, *, has_drafter: bool, schema_given: bool) -> str | None:
    """Why ``method`` cannot serve a compaction, from its registry flags (None: it can).

    >>> refusal(Method("x", print, fixed_sections="its own"), has_drafter=True, schema_given=True)
    'x uses its own and takes no schema'
    """
    if method.needs_drafter and not has_drafter:
        return f"{method.name} needs a drafter backend"
    if method.fixed_sections and schema_given:
        return f"{method.name} uses {method.fixed_sections} and takes no schema"
    return None


@dataclass(frozen=True)
class Backends:
    """The connected backends of one compaction."""

    target: Backend  # the target backend
    drafter: Backend | None = None  # the drafter backend; None for a method that needs none


def run(name: str, request: MethodRequest, target: Backend | ProgramBackend | str,
        drafter: Backend | ProgramBackend | str | None = None,
        config: CompactConfig | None = None) -> CompactionResult:
    """Run the registered method ``name`` on ``request``; see :func:`~.methods.run_method`.

    ``config`` was validated at the edge (``compact()``, ``run_method``, the
    CLI, the service body); None: the defaults.  The schema is validated and
    the backends connected here, once for every block of a chunked history.
    """
    method = REGISTRY.get(name)
    if method is None:
        raise UnknownMethodError(f"unknown method {name!r}; one of {list(REGISTRY)}")
    refused = refusal(method, has_drafter=drafter is not None, schema_given=request.schema is not None)
    if refused:
        raise ConfigError(refused)
    cfg = config if config is not None else CompactConfig()
    cpu = HostCpu()
    cpu.begin()
    request = request.parsed(cfg)  # the one parse: below here every step works on request.turns
    shown = Displayed(request.on_event) if request.on_event is not None else None
    if shown is not None:  # line events provisional until the result settles them (methods/displayed.py)
        request = replace(request, on_event=shown.see)
    pruned = None
    if cfg.prune_tool_outputs:  # before anything is measured or rendered: every block sees the stubs
        # an output is redacted before its stub cuts it (a cut secret matches no pattern), the stub after
        messages, pruned = prune_tool_outputs(request.messages, cfg.keep_tool_outputs,
                                              redact_secrets=cfg.redact_secrets)
        request = replace(request, messages=messages, turns=with_stubs(request.turns, request.messages, messages))
    target = connect(target)
    drafter = connect(drafter) if method.needs_drafter else None
    slots = validate_schema(request.schema if request.schema is not None else OPENCLAW_SLOTS)

    def plan(exact: bool) -> list[MethodRequest]:
        return split_request(request, target=target, cfg=cfg, slots=slots, count=target.count_tokens,
                             exact=exact, reserve=method.new_tokens(cfg) if method.new_tokens else None)

    tracker: Tracker | None = None  # the progress of the blocks being run (a new plan starts it again)

    def one(block: MethodRequest, previous: str | None, last: bool) -> CompactionResult:
        # every sglang state of the block is made on a daemon thread (programs/states.py says why)
        return on_daemon_thread(run_block, method, replace(block, previous_summary=previous),
                                Backends(target, drafter), cfg, slots, tracker, cpu)

    def run_planned(blocks: list[MethodRequest]) -> CompactionResult:
        nonlocal tracker
        tracker = Tracker(request.on_progress, len(blocks), len(slots)) if request.on_progress else None
        return run_blocks(blocks, request.previous_summary, one, on_block=tracker.block_done if tracker else None)
    with ThreadPoolExecutor(max_workers=1) as pool:
        # the tokens pruning saved are counted beside the compaction, not before it
        saved = pool.submit(report_dict, pruned, target.count_tokens) if pruned is not None else None
        blocks = plan(exact=False)
        try:
            result = run_planned(blocks)
        except PromptTooLongError:
            if len(blocks) > 1 or len(blocks := plan(exact=True)) == 1:
                raise  # already cut by exact counts, or it fits by them: nothing smaller to try
            result = run_planned(blocks)
        if saved is not None:
            result = result.model_copy(update={"pruning": saved.result(),
                                               "redactions": add_counts(result.redactions, pruned.redactions)})
    if shown is not None:
        shown.finish(result)
    cpu.touch()
    result.stats.host_cpu_s = cpu.seconds
    return result


def run_block(method: Method, request: MethodRequest, backends: Backends, cfg: CompactConfig,
              slots: tuple[Slot, ...], tracker: Tracker | None = None, cpu: HostCpu | None = None) -> CompactionResult:
    """One compaction of ``request`` (the whole history, or one block of a chunked one);
    ``tracker`` reports its progress, ``cpu`` counts its threads' CPU.

    Its requests share one session per server (``cfg.server_sessions``), closed
    on the way out whatever the outcome.
    """
    cpu = cpu if cpu is not None else HostCpu()
    cpu.begin()
    try:
        with ExitStack() as sessions:
            target = sessions.enter_context(backends.target.prefix_session(cfg.server_sessions, cpu))
            drafter = (sessions.enter_context(backends.drafter.prefix_session(cfg.server_sessions, cpu))
                       if backends.drafter is not None else None)
            return _run_block(method, request, Backends(target, drafter), cfg, slots, tracker)
    finally:
        cpu.touch()


def _run_block(method: Method, request: MethodRequest, backends: Backends, cfg: CompactConfig,
               slots: tuple[Slot, ...], tracker: Tracker | None) -> CompactionResult:
    t0 = time.perf_counter()
    job = start(method, request, backends, cfg, slots, tracker)
    # the agent layout renders the messages themselves: redacted copies where a secret was found
    shown = redact_messages(request.messages) if job.redactions else request.messages
    agent = request.layout
    tools, focus = agent.tools, request.focus
    if tools and cfg.redact_secrets:  # the tools schema is rendered into the agent's prefix too
        tools, found = redact_json(tools)
        job.redactions = add_counts(job.redactions or {}, found)
    job.layout = plan_layout(agent.name, shown, target=job.target, tools=tools, chat_template=agent.chat_template,
                             chat_template_kwargs=agent.chat_template_kwargs)
    if focus and cfg.redact_secrets:  # the focus is the user's text too
        focus, found = redact(focus)
        job.redactions = add_counts(job.redactions or {}, found)
    job.focus = neutralise(focus) if focus else None
    written = method.program(job)
    result = finish(job, written, t0)
    if request.source_judge:
        result = source_judge_result(result, job.turns, target=job.target, config=cfg,
                                     previous_summary=job.previous_summary, shared_prefix=job.shared_prefix)
    # every returned text in the caller's bytes (no U+2060 of neutralise), no secret a model wrote
    return clean_result(result, redact_secrets=cfg.redact_secrets, count=job.count)


def start(method: Method, request: MethodRequest, backends: Backends, cfg: CompactConfig,
          slots: tuple[Slot, ...], tracker: Tracker | None = None) -> Job:
    """Redact and render once; resolve labels before any generation."""
    turns, previous_summary = request.turns, request.previous_summary
    redactions: dict[str, int] = {}
    if cfg.redact_secrets:  # before anything is rendered, so no prompt of any method sees a secret
        turns, redactions = redact_turns(turns)
        if previous_summary:
            previous_summary, found = redact(previous_summary)
            redactions = add_counts(redactions, found)
    # the previous ledger is carried as it was written: no model sees, judges or rewrites it
    previous_summary, carried_ledger = split_ledger(previous_summary)
    if previous_summary:
        previous_summary = neutralise(previous_summary)  # untrusted too (render_history does the turns)
    target = backends.target.with_token_ids(cfg.send_token_ids)
    drafter = backends.drafter.with_token_ids(cfg.send_token_ids) if method.needs_drafter else None
    if method.judges or request.source_judge:
        check_labels(target, cfg)  # a bad label fails at start-up, not mid-way
    recorder = StatsRecorder()
    on_event = cleaning_events(request.on_event, redact_secrets=cfg.redact_secrets)
    return Job(method=method.name, cfg=cfg, slots=slots, turns=turns, history=render_history(turns),
               target=target, drafter=drafter, previous_summary=previous_summary,
               count=target.count_tokens, recorder=recorder, redactions=redactions,
               on_event=tracker.watch(on_event, recorder) if tracker else on_event,
               carried_ledger=carried_ledger, indices=request.indices)


def finish(job: Job, written: Written, t0: float) -> CompactionResult:
    """Assemble what the program wrote, check the budget, add the exact ledger, time the compaction.

    A one-shot text's sections are reported as slots; its progress events
    are sent now, after the single generation.  The ledger is built from the
    redacted turns (no model) and takes the room the sections left.
    """
    if isinstance(written, OneShot):
        done: Assembled = from_text(written, job.cfg, job.count)
        for event in section_events(done.slots):
            job.emit(event)
    else:
        done = from_slots(job.slots, written, job.cfg, job.count)
    ledger = None
    if job.cfg.ledger:
        sections = len(done.slots)
        found = ledger_entries(job.turns, job.indices, SHARED_MEMO)  # messages seen before are not scanned again
        done, ledger = with_ledger(done, found, job.carried_ledger, job.cfg, job.count)
        for event in section_events(done.slots[sections:], written=False):  # not a slot of the schema
            job.emit(event)
    job.recorder.stats.total_wall_s = time.perf_counter() - t0
    return CompactionResult(method=job.method, summary=done.summary, summary_tokens=done.tokens,
                            slots=done.slots, stats=job.recorder.stats, redactions=dict(job.redactions or {}),
                            truncated=done.truncated, ran_as=job.ran_as, ledger=ledger)
