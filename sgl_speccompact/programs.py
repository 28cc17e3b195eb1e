"""SpecCompact as SGLang programs (paper sections "SpecCompact" and
"Efficient Slot-Parallel Execution").

Target side, one RadixAttention prefix::

    system + user[ shared prefix | slot request ] + assistant[ accepted lines ... ]
                  `-- identical for every slot --'

``speccompact`` appends the shared prefix, forks one branch per slot (the
fork prefills the prefix once) and runs the slot streams concurrently, one
thread per branch, so one slot never waits for another and the server
batches their requests.  A branch only grows, so every later request of the
slot reuses the cache.

Each slot stream loops: draft (drafter, several lines per call: the draft
buffer) -> checks -> verify (one-token judgement on a copy of the branch) ->
accept, or repair (target continues the branch, stopping at the newline).

``draft_slot`` is the drafter's program: Figure 5's prompt followed by the
slot's accepted lines, one ``gen`` of up to 64 tokens.  ``draft_context``
prefills the drafter's shared part (instruction, schema, conversation) once,
while the target prefills its own.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import sglang as sgl

from .config import CompactConfig
from .endpoint import LabelJudgement
from .errors import BackendError, SpecCompactError
from .lines import DraftBuffer, LineKind, SlotBudget, classify_line, split_draft, split_line
from .prompts import SUMMARIZER_SYSTEM, drafter_slot_request, target_slot_request, verify_question
from .result import LineOrigin, SlotResult, StatsRecorder, SummaryLine
from .schema import Slot


@dataclass
class SlotContext:
    """Everything a slot stream needs besides its branch.  One per compaction."""

    cfg: CompactConfig  # budgets, threshold, labels
    slots: tuple[Slot, ...]  # the schema, in summary order
    drafter: Any  # sglang backend of the drafter
    drafter_context: str  # Figure 5 text before the slot request (same for all slots)
    count_tokens: Callable[[list[str]], list[int]]  # text -> length in target tokens
    recorder: StatsRecorder  # this compaction's stats
    target_prefix: str = ""  # opens every target assistant turn (empty think block for Qwen3)
    drafter_prefix: str = ""  # the same for the drafter
    has_previous: bool = False  # a previous summary is part of the source
    on_event: Callable[[dict], None] | None = None  # progress callback (called from slot threads)
    shared: str = ""  # the target's shared text (set by fork_slots; per slot when shared_prefix is off)
    chat_prefix: bool = False  # the shared prefix is chat-templated text ending inside a user turn (agent layout)
    cancel: threading.Event = field(default_factory=threading.Event)  # set when any slot fails

    def emit(self, **event) -> None:
        if self.on_event is not None:
            self.on_event(event)


# ---------------------------------------------------------------- sampling, defined once


def draft_sampling(cfg: CompactConfig) -> dict:
    """``gen`` arguments of a draft: several lines up to ``max_new_tokens`` (draft
    buffer), or one line stopping at the newline.

    >>> draft_sampling(CompactConfig(draft_buffer=False))
    {'max_tokens': 64, 'temperature': 0.0, 'stop': '\\n'}
    """
    out = {"max_tokens": cfg.max_new_tokens, "temperature": cfg.draft_temperature}
    return out if cfg.draft_buffer else {**out, "stop": "\n"}


def repair_sampling(cfg: CompactConfig) -> dict:
    """``gen`` arguments of a repair: one line (line-aware stopping at the newline),
    or up to ``max_new_tokens`` when line-aware stopping is off."""
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
def draft_context(s, context):
    """Drafter: prefill the text every slot's draft starts with, once.

    The six first drafts leave together; without this, one scheduler batch
    would compute the uncached conversation once per slot.
    """
    s += sgl.system(SUMMARIZER_SYSTEM)
    s += sgl.user_begin()
    s += context
    s += sgl.gen("prefill", max_tokens=0)


def prefill_drafter(ctx: "SlotContext") -> None:
    """Run :func:`draft_context` and count it."""
    t0 = time.perf_counter()
    state = draft_context.run(context=ctx.drafter_context, backend=ctx.drafter)
    _, meta = result_of(state, "prefill")
    ctx.recorder.request("drafter", "prefill", meta)
    ctx.recorder.time("drafter_prefill", time.perf_counter() - t0)


@sgl.function
def speccompact(s, shared, ctx):
    """Target: shared prefix, one fork per slot, concurrent slot streams.

    Returns the :class:`SlotResult` of every slot in schema order.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        warm = pool.submit(prefill_drafter, ctx)  # both servers prefill at once
        branches = fork_slots(s, shared, ctx)
    try:
        warm.result()
        return run_concurrently(
            [lambda b=b, slot=slot: slot_stream(b, slot, ctx) for b, slot in zip(branches, ctx.slots)],
            ctx.cancel,
        )
    finally:
        end_states(branches)


def fork_slots(s, shared: str, ctx: SlotContext) -> list:
    """Append the shared prefix and fork one branch per slot; the fork prefills it once.

    With ``shared_prefix`` off nothing is appended: each branch gets its own
    prompt in :func:`open_slot`, and a fork of an empty state sends no request.
    """
    ctx.shared = shared
    if not ctx.cfg.shared_prefix:
        return list(s.fork(len(ctx.slots)).states)
    if not ctx.chat_prefix:  # the agent layout's prefix carries its own chat turns
        s += sgl.system(SUMMARIZER_SYSTEM)
        s += sgl.user_begin()
    s += shared
    # fork() decides whether to prefill before it syncs; materialize the prefix first
    s.text()
    t0 = time.perf_counter()
    branches = s.fork(len(ctx.slots))
    if len(ctx.slots) > 1:
        ctx.recorder.request("target", "prefill", s.get_meta_info("prefill"))
        ctx.recorder.time("prefill", time.perf_counter() - t0)
    return list(branches.states)


def end_states(states: list) -> None:
    """Stop the worker thread of each forked state now.

    sglang stops a forked state's (non-daemon) thread only on ``join`` or
    when the state is garbage-collected; after a failure a traceback can
    keep the states alive, and their threads would keep the process alive.
    """
    for st in states:
        st.stream_executor.end()


def run_concurrently(jobs: list[Callable[[], Any]], cancel: threading.Event) -> list:
    """Run jobs on one thread each; on the first failure cancel the rest and raise it."""
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        futures = [pool.submit(job) for job in jobs]
        errors = []
        for f in futures:
            try:
                f.result()
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                cancel.set()
                errors.append(exc)
    if errors:
        raise errors[0]
    return [f.result() for f in futures]


# ---------------------------------------------------------------- helpers taking s


def result_of(s, name: str) -> tuple[Any, dict]:
    """Value and meta_info of variable ``name``, raising the request's error if it failed."""
    s.sync()
    err = s.error()
    if err is not None:
        if isinstance(err, SpecCompactError):
            raise err
        raise BackendError(f"SGLang request failed: {err}") from err
    return s[name], (s.get_meta_info(name) or {})


def open_slot(s, slot: Slot, ctx: SlotContext) -> None:
    """Append the slot request and open the assistant turn the slot is written in.

    Without a shared prefix the slot request comes first, then the shared text.
    """
    if not ctx.cfg.shared_prefix and ctx.chat_prefix:  # the agent's turns cannot move behind the request
        s += ctx.shared + target_slot_request(slot, ctx.has_previous)
    elif not ctx.cfg.shared_prefix:
        s += sgl.system(SUMMARIZER_SYSTEM)
        s += sgl.user_begin()
        s += target_slot_request(slot, ctx.has_previous) + "\n\n" + ctx.shared
    else:
        s += target_slot_request(slot, ctx.has_previous)
    s += sgl.user_end()
    s += sgl.assistant_begin()
    s += ctx.target_prefix


def verify_line(s, slot: Slot, line: str, ctx: SlotContext) -> dict:
    """Judge ``line`` on a copy of the branch; the branch itself is not changed.

    The copy is a 1-way fork, which sends no request of its own, so a
    verification costs one target request on ``SpecCompactEndpoint``.
    """
    cfg = ctx.cfg
    with s.copy() as v:
        v += sgl.assistant_end()
        v += sgl.user(verify_question(slot, line, cfg.positive_label, cfg.negative_label, ctx.has_previous,
                                      short=cfg.short_judge_suffix))
        v += sgl.assistant_begin()
        v += ctx.target_prefix
        v += sgl.select("verdict", choices=[cfg.positive_label, cfg.negative_label],
                        choices_method=LabelJudgement(cfg.eta, one_request=cfg.one_request_judging))
        _, meta = result_of(v, "verdict")
    return meta


def repair_line(s, ctx: SlotContext) -> tuple[str, dict]:
    """Target writes the next line itself, stopping at the newline (not appended).

    Without line-aware stopping the repair runs on, on a copy of the branch,
    and only its first line is kept (the caller appends it).
    """
    if not ctx.cfg.line_aware_stopping:
        with s.copy() as r:
            r += sgl.gen("repair", **repair_sampling(ctx.cfg))
            text, meta = result_of(r, "repair")
        return text.split("\n", 1)[0], meta
    s += sgl.gen("repair", **repair_sampling(ctx.cfg))
    return result_of(s, "repair")


def draft(slot: Slot, accepted: list[str], ctx: SlotContext) -> tuple[list[str], bool, bool]:
    """One drafter call: ``(complete lines, drafter finished the slot, tail truncated)``."""
    state = draft_slot.run(
        context=ctx.drafter_context,
        slot_request=drafter_slot_request(slot, ctx.has_previous),
        accepted="".join(line + "\n" for line in accepted),
        assistant_prefix=ctx.drafter_prefix,
        sampling=draft_sampling(ctx.cfg),
        backend=ctx.drafter,
    )
    text, meta = result_of(state, "draft")
    ctx.recorder.request("drafter", "draft", meta)
    if not ctx.cfg.draft_buffer:
        return split_line(text, meta.get("finish_reason"))
    finished = (meta.get("finish_reason") or {}).get("type") != "length"
    lines, truncated = split_draft(text, finished)
    return lines, finished, truncated


# ---------------------------------------------------------------- the slot stream


class _Slot:
    """Mutable state of one slot stream: accepted lines, budget, draft buffer."""

    def __init__(self, s, slot: Slot, ctx: SlotContext):
        self.s, self.slot, self.ctx = s, slot, ctx
        self.result = SlotResult(name=slot.name, title=slot.title)
        self.accepted: list[str] = []  # the slot's lines so far, blank lines included
        self.budget = SlotBudget(ctx.cfg.max_lines_per_slot, ctx.cfg.max_tokens_per_slot)
        self.buffer = DraftBuffer()
        self.tokens: dict[str, int] = {}  # line -> target tokens (with its newline)
        self.truncated: str | None = None  # a drafted line cut off by the token limit

    def timed(self, phase: str, fn, *args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.ctx.recorder.time(phase, time.perf_counter() - t0)

    def count(self, lines: list[str]) -> None:
        new = [line for line in dict.fromkeys(lines) if line not in self.tokens]
        if new:
            self.tokens.update(zip(new, self.ctx.count_tokens([line + "\n" for line in new])))

    def accept(self, line: str, origin: LineOrigin, score: float | None = None,
               rejected: str | None = None, appended: bool = False) -> None:
        self.s += "\n" if appended else line + "\n"
        self.budget.add(line, self.tokens[line])
        self.accepted.append(line)
        self.result.lines.append(SummaryLine(text=line, origin=origin, score=score, rejected_draft=rejected))
        if line.strip():
            self.ctx.emit(type="line", slot=self.slot.name, text=line, origin=origin.value, score=score)

    def stop(self, reason: str) -> SlotResult:
        while self.result.lines and not self.result.lines[-1].text.strip():
            self.result.lines.pop()  # trailing blank lines are not content
        self.result.stop_reason = reason
        self.result.tokens = self.budget.tokens
        self.ctx.emit(type="slot_done", slot=self.slot.name, stop_reason=reason,
                      lines=sum(1 for line in self.result.lines if line.text.strip()))
        return self.result


def slot_stream(s, slot: Slot, ctx: SlotContext) -> SlotResult:
    """Draft, check, verify and repair lines of one slot until it stops."""
    st = _Slot(s, slot, ctx)
    open_slot(s, slot, ctx)
    while True:
        if ctx.cancel.is_set():
            return st.stop("cancelled")
        prefix = tuple(st.accepted)
        line = st.buffer.take(prefix)
        if line is None:
            if st.buffer.done(prefix):
                return st.stop("complete")
            lines, finished, truncated = st.timed("draft", draft, slot, st.accepted, ctx)
            while not prefix and lines and not lines[0].strip():
                lines.pop(0)  # a slot does not open with blank lines
            if not lines:
                return st.stop("complete")
            st.buffer = DraftBuffer(prefix, lines, finished)
            st.truncated = lines[-1] if truncated else None
            st.count(lines)
            continue
        reason = step(st, line)
        if reason:
            return st.stop(reason)


def step(st: _Slot, line: str) -> str | None:
    """Handle one proposed line; returns a stop reason or None to go on."""
    ctx, cfg = st.ctx, st.ctx.cfg
    kind = classify_line(line, st.accepted, cfg)
    if kind is LineKind.JUDGE and line == st.truncated:
        kind = LineKind.TOO_LONG
    if kind in (LineKind.DUPLICATE, LineKind.TOO_LONG):
        return repair(st, rejected=line, score=None)
    over = st.budget.check(line, st.tokens[line])
    if over:
        return over
    if kind in (LineKind.UNJUDGED, LineKind.BLANK):
        st.accept(line, LineOrigin.UNJUDGED)
        ctx.recorder.line(LineOrigin.UNJUDGED)
        return None
    meta = st.timed("verify", verify_line, st.s, st.slot, line, ctx)
    judgement = meta.get("judgement") or {}
    ctx.recorder.request("target", "verify", meta, n=int(meta.get("requests", 1)))
    ctx.recorder.judged(bool(judgement.get("accepted")))
    if judgement.get("accepted"):
        st.accept(line, LineOrigin.DRAFTED, score=judgement.get("score"))
        return None
    return repair(st, rejected=line, score=judgement.get("score"))


def repair(st: _Slot, rejected: str, score: float | None) -> str | None:
    """Replace ``rejected`` with a target-written line; the replacement gets the same checks."""
    ctx = st.ctx
    text, meta = st.timed("repair", repair_line, st.s, ctx)
    ctx.recorder.request("target", "repair", meta)
    # no explicit discard: the buffer's lines continue a prefix that now differs, so take() refuses them
    if not text.strip():
        return "target_ended"
    if classify_line(text, st.accepted, ctx.cfg) in (LineKind.DUPLICATE, LineKind.TOO_LONG):
        return "repair_failed"
    st.count([text])
    over = st.budget.check(text, st.tokens[text])
    if over:
        return over
    st.accept(text, LineOrigin.REPAIRED, score=score, rejected=rejected,
              appended=ctx.cfg.line_aware_stopping)
    ctx.recorder.line(LineOrigin.REPAIRED)
    return None
