"""The service's side of ahead-of-time compaction: prepares in flight, reuse at compact time.

:class:`Sessions` sits between the ``POST /v1/compact`` route and
:class:`~.service_runtime.Compactions`; the store, the keys and the
wait-or-cancel rule are in :mod:`~sgl_speccompact.service.store`.  Everything
here runs on the app's event loop (prepare results arrive through their
future's callbacks), so the map of running prepares needs no lock.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .body import CompactRequest
from .metrics import Metrics
from .store import (SUMMARY_TOKENS, ExpectedTime, SessionStore, Stored, history_tokens, params_digest,
                    prefix_digests, self_contained, should_wait, should_wait_predicted)

# predicted seconds of one compaction by ``method`` of a history of ``tokens`` tokens; None: no prediction
Predictor = Callable[[str, int], "float | None"]

# body fields that shape the summary (everything but the messages, how to answer, and routing)
SHAPING = ("previous_summary", "source_judge", "config", "focus", "tools", "layout", "chat_template_kwargs")


def cost_predictor(deployment: Any, p_accept: float | None = None) -> Predictor:
    """:data:`Predictor` from the cost model (:func:`~sgl_speccompact.methods.auto.predict`) for ``deployment``.

    Methods the cost model does not know predict None (the moving average decides).

    >>> from sgl_speccompact.methods.auto import Deployment
    >>> p = cost_predictor(Deployment.named(target="qwen3-8b", gpus=2))
    >>> 0 < p("speccompact", 8000) < p("speccompact", 64000), p("speccompact_sjc", 8000)
    (True, None)
    """
    from ..methods.auto import DEFAULT_P_ACCEPT, METHODS, predict

    accept = DEFAULT_P_ACCEPT if p_accept is None else p_accept
    return lambda method, tokens: predict(method, deployment, tokens, accept) if method in METHODS else None


@dataclass
class Running:
    """A prepare in flight."""

    task: Any  # the service_runtime.Task running it
    params: str  # params digest of its request
    n_messages: int  # messages of the prefix it covers
    digest: str  # prefix digest of those messages
    started: float = field(default_factory=time.monotonic)  # when it started (monotonic seconds)
    settled: bool = False  # its cost was already counted as wasted (cancelled)


@dataclass
class Resolution:
    """What a ``compact`` of a session does: run ``request``, or answer with ``ready``."""

    request: CompactRequest  # the request to run (the turns after a reused prefix, incrementally)
    ready: Any = None  # a stored CompactionResult covering every message, when one exists
    info: dict = field(default_factory=dict)  # the answer's "session" entry


def incremental(req: CompactRequest, stored: Stored) -> CompactRequest:
    """``req`` for the turns after a stored prefix, on the stored summary."""
    return req.model_copy(update={"messages": req.messages[stored.n_messages:],
                                  "previous_summary": stored.result.summary})


class Sessions:
    """Prepares, the store of their results, and their metrics, for one app."""

    def __init__(self, max_bytes: int, ttl_s: float, metrics: Metrics, predict: Predictor | None = None):
        self.metrics = metrics
        self.store = SessionStore(max_bytes, ttl_s, on_waste=self._wasted)
        self.expected = ExpectedTime()  # expected seconds of one compaction (the fallback of ``predict``)
        self.predict = predict  # the cost model's compaction time, where the deployment is known
        self.running: dict[tuple[str, str], Running] = {}  # (scope, session) -> its prepare in flight

    def _wasted(self, seconds: float) -> None:
        self.metrics.prepare_wasted.inc(max(0.0, seconds))

    def params(self, req: CompactRequest, method: str) -> str:
        return params_digest({"method": method, **{k: getattr(req, k) for k in SHAPING}})

    def _cancel(self, run: Running) -> None:
        """Cancel a prepare; its backends send no further request; its time so far is wasted."""
        if run.task.scope.cancel("cancelled"):
            run.settled = True
            self._wasted(time.monotonic() - run.started)

    def prepare(self, scope: str, req: CompactRequest, method: str,
                start: Callable[[CompactRequest], Any]) -> dict:
        """Start compacting ``req`` in the background (a newer prepare cancels an older one).

        Returns the 202 body.  A stored result already covering every
        message is kept, and nothing runs.
        """
        key, params = (scope, req.session), self.params(req, method)
        old = self.running.pop(key, None)
        if old is not None:
            self._cancel(old)
        base = self.store.longest(scope, req.session, params, req.messages)
        n = len(req.messages)
        if base is not None and base.n_messages == n:
            return {"session": req.session, "status": "ready", "messages": n}
        digest = prefix_digests(req.messages, {n})[n]
        run = Running(start(incremental(req, base) if base else req), params, n, digest)
        self.running[key] = run
        self.metrics.prepares.inc()
        run.task.future.add_done_callback(lambda f: self._prepared(key, params, run, f))
        return {"session": req.session, "status": "preparing", "messages": n,
                "reused_messages": base.n_messages if base else 0}

    def _prepared(self, key: tuple[str, str], params: str, run: Running, future: asyncio.Future) -> None:
        """A prepare ended: store its result, or count its time as wasted."""
        if self.running.get(key) is run:
            del self.running[key]
        elapsed = time.monotonic() - run.started
        if future.cancelled() or future.exception() is not None:
            if not run.settled:
                self._wasted(elapsed)
            return
        result = future.result()
        self.expected.observe(elapsed)
        size = len(json.dumps(result.to_json_dict()))
        self.store.put(key[0], key[1], params, Stored(result, run.n_messages, run.digest, size, elapsed,
                                                      time.monotonic()))
        self.metrics.prepares_stored.inc()

    def _should_wait(self, elapsed: float, req: CompactRequest, method: str, n_prefix: int) -> bool:
        """Wait for a running prepare of ``n_prefix`` messages, or cancel it and start afresh?

        The cost model's predictions for the prefix, the rest (incremental,
        on the prepare's summary: assumed the previous summary's size, or
        ``SUMMARY_TOKENS``) and the whole, when ``predict`` gives all three;
        else the moving-average rule.
        """
        rest = req.messages[n_prefix:]
        if self.predict is not None:
            summary = len(req.previous_summary) // 4 if req.previous_summary else SUMMARY_TOKENS
            prefix_t, rest_t = history_tokens(req.messages[:n_prefix]), history_tokens(rest)
            times = [self.predict(method, prefix_t), self.predict(method, rest_t + summary) if rest else 0.0,
                     self.predict(method, prefix_t + rest_t)]
            if all(t is not None and math.isfinite(t) and t >= 0 for t in times):
                return should_wait_predicted(elapsed, *times)
        return should_wait(elapsed, self.expected.seconds, rest=bool(rest))

    async def resolve(self, scope: str, req: CompactRequest, method: str) -> Resolution:
        """What a ``compact`` of ``req.session`` runs: the longest stored prefix is reused.

        A prepare of this session still running on a prefix of the messages
        is waited for or cancelled (:meth:`_should_wait`).
        """
        key, params = (scope, req.session), self.params(req, method)
        info: dict = {"id": req.session, "reused_messages": 0, "prepare": None}
        run = self.running.get(key)
        if run is not None and run.params == params and run.n_messages <= len(req.messages) \
                and prefix_digests(req.messages, {run.n_messages}).get(run.n_messages) == run.digest \
                and self_contained(req.messages[run.n_messages:]):
            elapsed = time.monotonic() - run.started
            if self._should_wait(elapsed, req, method, run.n_messages):
                info["prepare"] = "waited"
                await asyncio.wait({run.task.future})  # its result is stored before this resumes
            else:
                info["prepare"] = "cancelled"
                self.running.pop(key, None)
                self._cancel(run)
        hit = self.store.longest(scope, req.session, params, req.messages)
        if hit is None:
            self.metrics.session_lookups.labels("miss").inc()
            return Resolution(req, None, info)
        self.metrics.session_lookups.labels("hit").inc()
        info["reused_messages"] = hit.n_messages
        if hit.n_messages == len(req.messages):
            return Resolution(req, hit.result, info)
        return Resolution(incremental(req, hit), None, info)
