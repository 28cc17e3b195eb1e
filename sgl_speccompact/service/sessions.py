"""The service's side of ahead-of-time compaction: prepares in flight, reuse at compact time.

:class:`Sessions` sits between the ``POST /v1/compact`` route and
:class:`~.runtime.Compactions`; the store, the keys and the wait-or-cancel
rule are in :mod:`~sgl_speccompact.service.store`.  Everything here runs on
the app's event loop (prepare results arrive through their future's
callbacks), so the maps of prepares need no lock.

The prepare protocol
    * **Join.** A prepare identical to the one running (or queued) for its
      session (same fields, same messages) joins it: nothing is cancelled or
      started again, so a client may re-send or poll freely.
    * **Rolling.** A prepare of a longer history that extends the running one
      waits behind it and then compacts only its new turns, on the running
      one's stored summary.  A session holds at most one running and one
      waiting prepare; a newer waiting one replaces the older (it never
      started, so nothing is wasted).  A prepare that does not extend the
      running one cancels it.
    * **Bounded.** At most ``prepare_workers`` prepares compute at once; the
      others wait as data, not threads.  Beyond ``prepare_queue`` waiting
      prepares or ``prepare_queue_bytes`` of their bodies a prepare gets 429
      with ``Retry-After``.
    * **Deadline.** A compact that waits for a running prepare waits within
      its own deadline (``compaction_timeout_s``, counted from its arrival);
      its own compaction gets what is left.

The store off the event loop
    A store whose calls wait on the network (``blocking``: the Redis store)
    is called on a few threads of its own, each call within
    :data:`STORE_DEADLINE_S`; a call past it is a miss (or a skipped put),
    and the store's circuit breaker opens.  So only a request that needs the
    store waits on it: a compact without a session, ``/health`` and
    ``/metrics`` never do.  The ``auto`` pick of a session is read on the
    body's prepare thread, within the store's own socket timeout and breaker.
    A prepare's result is stored before its session's waiting compact or
    rolling prepare looks it up; when that put failed, a compact that waited
    for the prepare still reuses its result.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from ..history.estimate import chars_to_tokens
from ..options import ServiceSettings, defaults
from ..errors import CompactionCancelledError, CompactionTimeoutError, ServiceBusyError
from .body import CompactRequest
from .metrics import Metrics
from .runtime import retrieved
from .store import (SUMMARY_TOKENS, ExpectedTime, SessionStore, covers, history_tokens, make_stored,
                    message_keys, params_digest, prefix_digests, should_wait, should_wait_predicted)

# predicted seconds of one compaction by ``method`` of a history of ``tokens`` tokens; None: no prediction
Predictor = Callable[[str, int], "float | None"]

# body fields that shape the summary (everything but the messages, how to answer, and routing)
SHAPING = ("previous_summary", "source_judge", "config", "focus", "tools", "layout", "chat_template_kwargs")
MAX_HELD = 10_000  # sessions whose last held share is remembered (oldest forgotten first)
POLL_S = 0.25  # how often a compact waiting for a prepare checks its client and deadline (seconds)
MAX_RETRY_AFTER_S = 600  # the longest Retry-After a 429 names (seconds)
STORE_DEADLINE_S = 2.0  # total time one call of a blocking store may take; later it is a miss (seconds)
STORE_THREADS = 8  # threads running a blocking store's calls


def cost_predictor(deployment: Any, p_accept: float | None = None) -> Predictor:
    """:data:`Predictor` from the cost model (:func:`~sgl_speccompact.methods.auto.predict`) for ``deployment``.

    Methods the cost model does not know predict None (the moving average decides).

    >>> from sgl_speccompact.methods.auto import Deployment
    >>> p = cost_predictor(Deployment.named(target="qwen3-8b", gpus=2))
    >>> 0 < p("speccompact", 8000) < p("speccompact", 64000), p("speccompact_sjc", 8000)
    (True, None)
    """
    from ..methods.auto import DEFAULT_P_ACCEPT, predict
    from ..methods.names import METHODS

    accept = DEFAULT_P_ACCEPT if p_accept is None else p_accept
    return lambda method, tokens: predict(method, deployment, tokens, accept) if method in METHODS else None


@dataclass(frozen=True)
class PrepareLimits:
    """How many prepares compute and wait, at most (:meth:`of` the service's settings)."""

    workers: int  # prepares computing at once (threads)
    queue: int  # prepares accepted and waiting to start, at most; beyond: 429
    queue_bytes: int  # request-body bytes of those waiting prepares, at most; beyond: 429

    @classmethod
    def of(cls, settings: ServiceSettings) -> "PrepareLimits":
        """The prepare bounds of ``settings`` (``prepare_workers``, ``prepare_queue``, ``prepare_queue_mb``)."""
        return cls(settings.prepare_workers, settings.prepare_queue, settings.prepare_queue_bytes)


@dataclass
class Prepare:
    """One prepare: waiting to start, then running."""

    req: CompactRequest  # its request (the whole history it covers)
    params: str  # params digest of its request
    n_messages: int  # messages of the prefix it covers
    digest: str  # prefix digest of those messages
    exact: tuple  # message_keys(messages)[0]: lets a later request be matched as store.covers does
    loose: tuple  # message_keys(messages)[1]
    size: int  # bytes of its request body (counted against the queue's byte bound while it waits)
    start: Callable[[CompactRequest], Any]  # starts its compaction, returns a runtime.Task
    task: Any = None  # the runtime.Task once started (None while its stored base is looked up)
    started: float = 0.0  # when it took a worker (monotonic seconds)
    settled: bool = False  # its cost was already counted as wasted (cancelled)
    cancelled: bool = False  # cancelled before its task started: it never starts
    done: Any = None  # asyncio.Future set once it ended and its result (if any) was stored
    result: Any = None  # its CompactionResult once it succeeded (reused if the store lost it)


@dataclass
class PrepareLane:
    """A session's place in the prepare queue: at most one prepare running and one waiting behind it."""

    running: Prepare | None = None  # computing now (or cancelled and still ending: see Sessions.n_running)
    waiting: Prepare | None = None  # accepted, starts when ``running`` ends and a worker is free


@dataclass
class Resolution:
    """What a ``compact`` of a session does: run ``request``, or answer with ``ready``."""

    request: CompactRequest  # the request to run (the turns after a reused prefix, incrementally)
    ready: Any = None  # a stored CompactionResult covering every message, when one exists
    info: dict = field(default_factory=dict)  # the answer's "session" entry


def incremental(req: CompactRequest, stored: Any) -> CompactRequest:
    """``req`` for the turns after a stored prefix, on the stored summary."""
    return req.model_copy(update={"messages": req.messages[stored.n_messages:],
                                  "previous_summary": stored.result.summary})


class Sessions:
    """Prepares, the store of their results, and their metrics, for one app."""

    def __init__(self, store: Any, metrics: Metrics, predict: Predictor | None = None,
                 limits: PrepareLimits | None = None, store_deadline_s: float = STORE_DEADLINE_S):
        self.metrics = metrics
        self.store = store if store is not None else SessionStore()  # SessionStore or RedisStore
        self.store.on_waste = self._wasted
        self.store.on_fault = lambda kind, what: metrics.session_store_faults.labels(kind, what).inc()
        self.store_deadline_s = store_deadline_s  # total time of one call of a blocking store (seconds)
        self._store_pool: ThreadPoolExecutor | None = None  # a blocking store's threads; made on first use
        self._tasks: set = set()  # prepares being launched or stored (kept referenced until they end)
        self.expected = ExpectedTime()  # expected seconds of one compaction (the fallback of ``predict``)
        self.predict = predict  # the cost model's compaction time, where the deployment is known
        self.limits = limits or PrepareLimits.of(defaults())  # prepares computing and waiting, at most
        self.lanes: dict[tuple[str, str], PrepareLane] = {}  # (scope, session) -> its prepares
        self.queue: collections.deque = collections.deque()  # sessions whose waiting prepare may start, in order
        self.n_running = 0  # prepare threads alive (cancelled ones until they end)
        self.n_waiting = 0  # prepares waiting to start
        self.queued_bytes = 0  # their request bodies' bytes
        self.held: collections.OrderedDict = collections.OrderedDict()  # (scope, session) -> (held share, pick)

    @property
    def running(self) -> dict:
        """Sessions with a prepare running or waiting (empty when idle)."""
        return {k: s for k, s in self.lanes.items() if s.running or s.waiting}

    def _wasted(self, seconds: float) -> None:
        self.metrics.prepare_wasted.inc(max(0.0, seconds))

    def store_health(self) -> dict:
        """The store's state for ``/health``, from what its calls saw (never a request to the store)."""
        return self.store.health()

    def close(self) -> None:
        """Stop the store's threads (the app's shutdown); calls in flight end by their socket timeout."""
        if self._store_pool is not None:
            self._store_pool.shutdown(wait=False, cancel_futures=True)
            self._store_pool = None

    async def _store(self, op: str, fn: Callable[..., Any], *args: Any, default: Any = None) -> Any:
        """``fn(*args)``, a store call: inline for the memory store, else off the loop within the deadline."""
        if not self.store.blocking:
            return fn(*args)
        if self._store_pool is None:
            self._store_pool = ThreadPoolExecutor(max_workers=STORE_THREADS, thread_name_prefix="store")
        try:
            call = asyncio.get_running_loop().run_in_executor(self._store_pool, fn, *args)
        except RuntimeError:  # the app is stopping and its store threads are gone
            return default
        try:
            return await asyncio.wait_for(asyncio.shield(call), self.store_deadline_s)
        except asyncio.TimeoutError:
            call.add_done_callback(retrieved)
            self.metrics.session_store_faults.labels("deadline", op).inc()
            if self.store.breaker is not None:
                self.store.breaker.trip()
            return default

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def params(self, req: CompactRequest, method: str) -> str:
        return params_digest({"method": method, **{k: getattr(req, k) for k in SHAPING}})

    def auto_pick(self, scope: str, session: str | None, pick: Callable[[float | None], dict],
                  allowed: tuple[str, ...] | None = None, carries: bool = True) -> dict:
        """The ``auto`` pick of a session: made once (``pick(None)``), then the same for its later requests,
        until a compaction of the session tells what still holds: then ``pick(held)`` with the share of the
        previous summary it kept (:meth:`remember_held`), the same until the next compaction.

        A request that cannot carry lines (``carries`` False: no previous
        summary, or ``carry_previous_lines`` off) holds nothing: it gets the
        session's first pick, and the held share waits for a request that can.

        A pick that changed as the history grew would change the params of
        every later request and miss every prepare.  Without a session each
        request picks.  A kept pick naming a method outside ``allowed`` (when
        given) is dropped and counted as malformed, and the request picks
        afresh: no stored value selects a method the request may not run.
        """
        if session is None:
            return pick(None)
        got = self.held.get((scope, session)) if carries else None
        if got is not None:
            if got[1] is None or (allowed is not None and got[1].get("method") not in allowed):
                got = (got[0], pick(got[0]))
                self.held[(scope, session)] = got
            return {**got[1], "session_pick": "held share"}
        kept = self.store.pick(scope, session)
        if kept is not None and allowed is not None and kept.get("method") not in allowed:
            self.store.drop_pick(scope, session)
            kept = None
        if kept is None:
            fresh = pick(None)
            kept = self.store.set_pick(scope, session, fresh)
            return kept if allowed is None or kept.get("method") in allowed else fresh
        return {**kept, "session_pick": "kept"}

    def remember_held(self, scope: str, session: str | None, held: float | None) -> None:
        """Remember the share of the previous summary a compaction of ``session`` kept; the next pick uses it."""
        if session is None or held is None:
            return
        key = (scope, session)
        if key in self.held and self.held[key][0] == held:
            return
        self.held[key] = (held, None)
        self.held.move_to_end(key)
        while len(self.held) > MAX_HELD:
            self.held.popitem(last=False)

    def _cancel(self, run: Prepare) -> None:
        """Cancel a prepare; its backends send no further request; its time so far is wasted."""
        if run.task is None:  # still looking up its stored base: it will not start
            run.cancelled = True
            return
        if run.task.scope.cancel("cancelled"):
            run.settled = True
            self._wasted(time.monotonic() - run.started)

    def _drop_waiting(self, lane: PrepareLane) -> None:
        if lane.waiting is not None:
            self.n_waiting -= 1
            self.queued_bytes -= lane.waiting.size
            lane.waiting = None
            self.metrics.prepares_waiting.set(self.n_waiting)

    def _admit(self, lane: PrepareLane, size: int) -> None:
        """Raise 429 when one more waiting prepare (replacing the lane's) would pass a bound."""
        n = self.n_waiting + (0 if lane.waiting else 1)
        nbytes = self.queued_bytes + size - (lane.waiting.size if lane.waiting else 0)
        if n <= self.limits.queue and nbytes <= self.limits.queue_bytes:
            return
        self.metrics.prepares_refused.inc()
        ahead = max(1, self.n_waiting) / max(1, self.limits.workers)
        retry = min(MAX_RETRY_AFTER_S, max(1, math.ceil(ahead * self.expected.seconds)))
        what = f"{self.n_waiting} prepares" if n > self.limits.queue else f"{self.queued_bytes} bytes of prepares"
        raise ServiceBusyError(f"the prepare queue is full ({what} waiting); retry in {retry} s",
                               retry_after_s=retry)

    async def prepare(self, scope: str, req: CompactRequest, method: str,
                      start: Callable[[CompactRequest], Any], size: int = 0) -> dict:
        """Accept a prepare of ``req`` (see the module doc); the 202 body, or 429 (:class:`ServiceBusyError`).

        A stored result already covering every message is kept, and nothing runs.
        """
        key, params, n = (scope, req.session), self.params(req, method), len(req.messages)
        body = {"session": req.session, "messages": n}
        digest = prefix_digests(req.messages, {n})[n]
        joined = self._join(key, params, digest, n)
        if joined is not None:
            return {**body, "status": joined, "joined": True}
        base = await self._store("lookup", self.store.longest, scope, req.session, params, req.messages)
        joined = self._join(key, params, digest, n)  # an identical prepare may have come in meanwhile
        if joined is not None:
            return {**body, "status": joined, "joined": True}
        lane = self.lanes.get(key) or PrepareLane()
        if base is not None and base.n_messages == n:
            return {**body, "status": "ready"}
        self._admit(lane, size)
        keys = message_keys(req.messages)
        run = lane.running
        if run is not None and not (run.params == params and run.n_messages < n and covers(run, keys, req.messages)):
            self._cancel(run)  # a different history: the running prepare would never be reused
            lane.running = None
        self._drop_waiting(lane)
        lane.waiting = Prepare(req, params, n, digest, *keys, size, start)
        self.n_waiting += 1
        self.queued_bytes += size
        self.metrics.prepares_waiting.set(self.n_waiting)
        self.lanes[key] = lane
        if lane.running is None and key not in self.queue:
            self.queue.append(key)
        self._pump()
        state = "preparing" if lane.running is not None and lane.running.req is req else "queued"
        return {**body, "status": state, "joined": False, "reused_messages": base.n_messages if base else 0}

    def _join(self, key: tuple[str, str], params: str, digest: str, n: int) -> str | None:
        """``preparing`` or ``queued`` when an identical prepare of the session is alive (it is joined)."""
        lane = self.lanes.get(key) or PrepareLane()
        for state, p in (("preparing", lane.running), ("queued", lane.waiting)):
            if p is not None and (p.params, p.digest, p.n_messages) == (params, digest, n) \
                    and not (p.cancelled or p.task is not None and p.task.scope.cancelled):
                self.metrics.prepares_joined.inc()
                return state
        return None

    def _pump(self) -> None:
        """Give free workers to waiting prepares, in the order they became ready (each then starts)."""
        while self.n_running < self.limits.workers and self.queue:
            key = self.queue.popleft()
            lane = self.lanes.get(key)
            if lane is None or lane.running is not None or lane.waiting is None:
                continue
            p = lane.waiting
            self._drop_waiting(lane)
            p.started, p.done = time.monotonic(), asyncio.get_running_loop().create_future()
            lane.running = p
            self.n_running += 1
            self._spawn(self._launch(key, p))

    async def _launch(self, key: tuple[str, str], p: Prepare) -> None:
        """Start ``p`` on the newest stored result of its session (rolling), unless one covers it already."""
        base = await self._store("lookup", self.store.longest, key[0], key[1], p.params, p.req.messages)
        if p.cancelled or (base is not None and base.n_messages == p.n_messages):
            self._release(key, p)
            return
        try:
            p.task = p.start(incremental(p.req, base) if base else p.req)
        except Exception:
            self._release(key, p)
            raise
        self.metrics.prepares.inc()
        p.task.future.add_done_callback(lambda f, key=key, p=p: self._spawn(self._prepared(key, p, f)))

    def _forget_if_idle(self, key: tuple[str, str], lane: PrepareLane) -> None:
        if lane.running is None and lane.waiting is None and self.lanes.get(key) is lane:
            del self.lanes[key]

    async def _prepared(self, key: tuple[str, str], run: Prepare, future: asyncio.Future) -> None:
        """A prepare ended: store its result (or count its time as wasted), then free its worker."""
        elapsed = time.monotonic() - run.started
        if future.cancelled() or future.exception() is not None:
            if not run.settled:
                self._wasted(elapsed)
        else:
            self.expected.observe(elapsed)
            run.result = future.result()
            await self._store("put", self.store.put, key[0], key[1], run.params,
                              make_stored(run.result, run.req.messages, elapsed))
            self.metrics.prepares_stored.inc()
        self._release(key, run)

    def _release(self, key: tuple[str, str], run: Prepare) -> None:
        """``run`` ended (or never started): free its worker, wake who waits for it, start the next."""
        self.n_running -= 1
        lane = self.lanes.get(key)
        if lane is not None and lane.running is run:
            lane.running = None
            if lane.waiting is not None and key not in self.queue:
                self.queue.append(key)
            self._forget_if_idle(key, lane)
        if not run.done.done():
            run.done.set_result(None)
        self._pump()

    def _should_wait(self, elapsed: float, req: CompactRequest, method: str, n_prefix: int) -> bool:
        """Wait for a running prepare of ``n_prefix`` messages, or cancel it and start afresh?

        The cost model's predictions for the prefix, the rest (incremental,
        on the prepare's summary: assumed the previous summary's size, or
        ``SUMMARY_TOKENS``) and the whole, when ``predict`` gives all three;
        else the moving-average rule.
        """
        rest = req.messages[n_prefix:]
        if self.predict is not None:
            summary = chars_to_tokens(len(req.previous_summary)) if req.previous_summary else SUMMARY_TOKENS
            prefix_t, rest_t = history_tokens(req.messages[:n_prefix]), history_tokens(rest)
            times = [self.predict(method, prefix_t), self.predict(method, rest_t + summary) if rest else 0.0,
                     self.predict(method, prefix_t + rest_t)]
            if all(t is not None and math.isfinite(t) and t >= 0 for t in times):
                return should_wait_predicted(elapsed, *times)
        return should_wait(elapsed, self.expected.seconds, rest=bool(rest))

    async def _wait(self, run: Prepare, deadline: float | None, timeout_s: float | None,
                    gone: Callable[[], Awaitable[bool]] | None) -> None:
        """Wait for ``run`` to end, within the compact's ``deadline`` (monotonic) and while its client stays."""
        while not run.done.done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise CompactionTimeoutError(f"the compaction did not finish within {timeout_s:g} s "
                                             "(it waited for a prepare of its session)")
            await asyncio.wait({run.done}, timeout=POLL_S if left is None else min(POLL_S, left))
            if not run.done.done() and gone is not None and await gone():
                raise CompactionCancelledError("compaction cancelled")

    async def resolve(self, scope: str, req: CompactRequest, method: str, deadline: float | None = None,
                      timeout_s: float | None = None, gone: Callable[[], Awaitable[bool]] | None = None
                      ) -> Resolution:
        """What a ``compact`` of ``req.session`` runs: the longest stored prefix is reused.

        A prepare of this session still running on a prefix of the messages
        is waited for (within ``deadline``) or cancelled (:meth:`_should_wait`);
        one waiting to start is dropped: the compact covers it.
        """
        key, params = (scope, req.session), self.params(req, method)
        info: dict = {"id": req.session, "reused_messages": 0, "prepare": None}
        lane = self.lanes.get(key)
        run = lane.running if lane is not None else None
        if lane is not None:
            self._drop_waiting(lane)
        waited = None
        if run is not None and run.params == params and covers(run, message_keys(req.messages), req.messages):
            elapsed = time.monotonic() - run.started
            if self._should_wait(elapsed, req, method, run.n_messages):
                info["prepare"] = "waited"
                await self._wait(run, deadline, timeout_s, gone)  # its result is stored before this resumes
                waited = run
            else:
                info["prepare"] = "cancelled"
                self._cancel(run)
                lane.running = None
        if lane is not None:
            self._forget_if_idle(key, lane)
        hit = await self._store("lookup", self.store.longest, scope, req.session, params, req.messages)
        if hit is None and waited is not None and waited.result is not None:  # the store lost it: reuse it here
            hit = make_stored(waited.result, waited.req.messages, 0.0)
        if hit is None:
            self.metrics.session_lookups.labels("miss").inc()
            return Resolution(req, None, info)
        self.metrics.session_lookups.labels("hit").inc()
        info["reused_messages"] = hit.n_messages
        if hit.n_messages == len(req.messages):
            return Resolution(req, hit.result, info)
        return Resolution(incremental(req, hit), None, info)
