"""What the compaction service runs and owns: worker threads, upstream names, probes.

:class:`Compactions` starts each compaction on a daemon thread of its own,
bound to a :class:`~sgl_speccompact.service.cancel.CancelScope` with the
whole-compaction deadline.  At most ``max_workers`` run at once; the
in-flight gauge follows the threads, not the clients.  On shutdown every
scope is cancelled, so no compaction sends another request, and the app
waits a bounded grace period for the threads.

:class:`Upstreams` names the servers by role (``target``, ``drafter``) in
error bodies and ``/health``; their URLs appear only when the operator asks
(:attr:`~sgl_speccompact.options.ServiceSettings.upstream_detail`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import socket
import threading
import time
import urllib.error
from typing import Any, Callable, Sequence

from .cancel import CancelScope, bind
from ..options import ServiceSettings, defaults
from ..errors import (BackendTimeoutError, BackendUnavailableError, CompactionCancelledError, ConfigError,
                     SpecCompactError, http_status)
from .metrics import Metrics, outcome

log = logging.getLogger(__name__)

POLL_S = 0.25  # how often a waiting request checks for a client disconnect (seconds)
THREAD_NAME = "compaction"  # name of every compaction thread (launch looks for them at exit)


def as_typed_error(exc: BaseException) -> SpecCompactError:
    """Map an exception escaping a runner onto the error hierarchy.

    Transport errors that a backend did not wrap still become 502/504, so a
    client never sees a bare 500 for a dead upstream.
    """
    if isinstance(exc, SpecCompactError):
        return exc
    import httpx
    import requests

    if isinstance(exc, (TimeoutError, socket.timeout, requests.Timeout, httpx.TimeoutException)):
        return BackendTimeoutError(f"upstream timed out: {exc}")
    if isinstance(exc, (ConnectionError, urllib.error.URLError, requests.ConnectionError, httpx.TransportError)):
        return BackendUnavailableError(f"upstream unreachable: {exc.__class__.__name__}: {exc}")
    return SpecCompactError(f"internal error: {exc.__class__.__name__}: {exc}")


class RoundRobin:
    """Hands out target backends in turn; one compaction keeps the one it got.

    Pinning keeps a compaction's shared prefix in one server's radix cache.
    """

    def __init__(self, backends: Sequence[Any]):
        if not backends:
            raise ConfigError("at least one target backend is needed")
        self.backends = tuple(backends)  # every target, in turn order
        self._cycle = itertools.cycle(self.backends)
        self._lock = threading.Lock()

    def pick(self) -> Any:
        with self._lock:
            return next(self._cycle)


_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>)]+", re.I)
_HOST_PORT = re.compile(r"host='[^']*', port=\d+")


class Upstreams:
    """Role names of the upstream servers, and scrubbing of their URLs from messages.

    >>> class B: base_url = "http://10.0.0.7:30000"
    >>> Upstreams([B()], None).scrub({"error": {"message": "http://10.0.0.7:30000/generate returned 503"}})
    {'error': {'message': 'target/generate returned 503'}}
    """

    def __init__(self, targets: Sequence[Any], drafter: Any, *, show_urls: bool = False):
        named = [(f"target[{i}]" if len(targets) > 1 else "target", b) for i, b in enumerate(targets)]
        if drafter is not None:
            named.append(("drafter", drafter))
        self._named = named  # (role, backend)
        self.show_urls = show_urls  # operator asked for URLs in errors and /health
        urls = [(b.base_url, role) for role, b in named]
        self._urls = sorted(((u.rstrip("/"), r) for u, r in urls if u), key=lambda x: -len(x[0]))

    def named(self) -> list[tuple[str, Any]]:
        return list(self._named)

    def scrub_text(self, text: str) -> str:
        """``text`` with known upstream URLs replaced by roles and other URLs hidden."""
        if self.show_urls:
            return text
        for url, role in self._urls:
            text = text.replace(url, role)
        return _HOST_PORT.sub("host=<upstream>", _URL.sub("<url>", text))

    def scrub(self, body: dict) -> dict:
        """An error body with every message scrubbed."""
        if self.show_urls or not isinstance(body.get("error"), dict):
            return body
        err = dict(body["error"])
        err["message"] = self.scrub_text(str(err.get("message", "")))
        return {**body, "error": err}

    def health_entry(self, probe_result: dict) -> dict:
        """One upstream's ``/health`` entry: ok and a short detail, the URL only on request."""
        entry = {"ok": bool(probe_result.get("ok")), "detail": self.scrub_text(str(probe_result.get("detail", "")))}
        if probe_result.get("busy"):
            entry["busy"] = True
        if self.show_urls:
            entry["url"] = probe_result.get("url")
        return entry


HEALTH_SHARE = 0.6  # share of a probe's time its /health may take; the rest asks whether the server is busy


def http_probe(http: Any = None, timeout_s: float | None = None,
               health_share: float = HEALTH_SHARE) -> Callable[[Any], dict]:
    """A health probe: GET ``<backend.base_url>/health``; when that times out, is the server busy or stuck?

    SGLang's ``/health`` runs a one-token generation through the scheduler,
    so a busy server answers it late.  When it does not answer within
    ``health_share`` of ``timeout_s``, the rest of the time asks
    ``/v1/loads?include=core``, which the HTTP server answers from its load
    snapshot without the scheduler: a server with requests running or
    waiting is busy but answering (``ok``, ``busy``); one with none is stuck
    (not ok).  A server without ``/v1/loads`` that answers
    ``/get_model_info`` counts as busy too.

    Parameters
    ----------
    http : httpx.Client, optional
        Client to use; module-level ``httpx.get`` when omitted.
    timeout_s : float, optional
        The probe's time in all (seconds); ``health_timeout_s`` of
        :data:`sgl_speccompact.options.DEFAULTS` when omitted.
    health_share : float
        Share of ``timeout_s`` that ``/health`` may take, in (0, 1).

    Returns
    -------
    callable
        ``probe(backend) -> {"ok": bool, "url": str, "detail": str, "busy"?: True}``.
    """
    import httpx

    get = http.get if http is not None else httpx.get
    if timeout_s is None:
        timeout_s = defaults().health_timeout_s
    if not 0 < health_share < 1:
        raise ValueError(f"health_share must be in (0, 1), got {health_share!r}")

    def probe(backend: Any) -> dict:
        base = backend.base_url
        if not base:  # an in-process backend has no server that could be down
            return {"ok": True, "url": None, "detail": "in-process backend"}
        key = getattr(backend, "api_key", None)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        url = base.rstrip("/") + "/health"
        first = health_share * timeout_s
        try:
            res = get(url, headers=headers, timeout=first)
        except httpx.TimeoutException as exc:
            late = f"/health did not answer within {first:g} s ({exc.__class__.__name__})"
            return {"url": url, **busy(base.rstrip("/"), headers, timeout_s - first, late)}
        except httpx.HTTPError as exc:
            return {"ok": False, "url": url, "detail": f"{exc.__class__.__name__}: {exc}"}
        return {"ok": res.status_code == 200, "url": url, "detail": f"HTTP {res.status_code}"}

    def busy(base: str, headers: dict, timeout: float, late: str) -> dict:
        from .yielding import LOADS_PATH, server_requests

        try:
            res = get(base + LOADS_PATH, headers=headers, timeout=timeout)
            if res.status_code == 404:
                res = get(base + "/get_model_info", headers=headers, timeout=timeout)
                if res.status_code == 200:
                    return {"ok": True, "busy": True, "detail": f"busy: {late}; /get_model_info answered"}
                return {"ok": False, "detail": f"{late}; /get_model_info: HTTP {res.status_code}"}
            if res.status_code != 200:
                return {"ok": False, "detail": f"{late}; /v1/loads: HTTP {res.status_code}"}
            n = server_requests(res.json())
        except httpx.HTTPError as exc:
            return {"ok": False, "detail": f"{late}; /v1/loads: {exc.__class__.__name__}"}
        except ValueError:
            return {"ok": False, "detail": f"{late}; /v1/loads: not a load answer"}
        if n == 0:
            return {"ok": False, "detail": f"stuck: {late} with no request running or waiting"}
        return {"ok": True, "busy": True, "detail": f"busy: {n} requests running or waiting; {late}"}

    return probe


class Task:
    """One running compaction as seen by the request that started it."""

    def __init__(self, scope: CancelScope, future: asyncio.Future):
        self.scope = scope  # cancel flag and deadline shared with the worker thread
        self.future = future  # resolved with the result or a typed error

    async def wait(self, request: Any = None):
        """The result; cancels the compaction if ``request``'s client disconnects
        or the deadline passes first, and raises the scope's typed error."""
        while True:
            left = self.scope.remaining()
            done, _ = await asyncio.wait({self.future}, timeout=POLL_S if left is None else min(POLL_S, left))
            if done:
                return self.future.result()
            if request is not None and await request.is_disconnected():
                self.scope.cancel("cancelled")
            if self.scope.cancelled:  # also turns a passed deadline into "timeout"
                raise self.scope.error()


class Compactions:
    """The compaction threads of one app."""

    def __init__(self, limits: ServiceSettings, metrics: Metrics):
        self.limits = limits
        self.metrics = metrics
        self._free_workers = threading.BoundedSemaphore(limits.max_workers)  # running compactions
        self._active: dict[threading.Thread, CancelScope] = {}  # thread -> its scope
        self._lock = threading.Lock()
        self._closed = False  # set by shutdown: no new compactions

    def start(self, method: str, run: Callable[[Any, Any], Any], target: Any, drafter: Any,
              since: float | None = None) -> Task:
        """Start ``run(target, drafter)`` (both bound to a new scope) on a thread.

        The deadline counts from ``since`` (monotonic seconds; default now):
        a compact that waited for a prepare passes its own arrival.
        """
        loop = asyncio.get_running_loop()
        scope = CancelScope(self.limits.compaction_timeout_s, since)
        future = loop.create_future()
        future.add_done_callback(retrieved)  # a client that left never reads the error
        if self._closed:
            scope.cancel("shutdown")

        def settle(value: Any, err: SpecCompactError | None) -> None:
            def apply() -> None:
                if future.done():
                    return
                if err is None:
                    future.set_result(value)
                else:
                    future.set_exception(err)
            try:
                loop.call_soon_threadsafe(apply)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        def body() -> None:
            try:
                self._work(method, run, target, drafter, scope, settle)
            finally:
                with self._lock:
                    self._active.pop(threading.current_thread(), None)

        thread = threading.Thread(target=body, name=THREAD_NAME, daemon=True)
        with self._lock:
            self._active[thread] = scope
        thread.start()
        return Task(scope, future)

    def _work(self, method, run, target, drafter, scope: CancelScope, settle) -> None:
        try:
            while not self._free_workers.acquire(timeout=POLL_S):  # queued: a cancel still ends it
                scope.check()
        except SpecCompactError as err:
            self.metrics.observe(method, outcome(err), 0.0)
            settle(None, err)
            return
        t0 = time.perf_counter()
        self.metrics.in_flight.inc()
        result, err = None, None
        try:
            scope.check()
            result = run(bind(target, scope), bind(drafter, scope))
        except BaseException as exc:  # every failure becomes a typed error
            err = as_typed_error(exc)
            if error_is_bug(err, exc):
                log.error("compaction failed: %s", err, exc_info=exc)
        finally:
            self.metrics.in_flight.dec()
            self._free_workers.release()
        if err is None and not scope.finish():
            result = None  # cancelled first: the result is discarded
        if scope.reason is not None:  # the client got (or will get) the cancel/timeout answer
            err = scope.error()
        if isinstance(err, CompactionCancelledError) and scope.reason == "cancelled":
            log.warning("compaction cancelled (its client left, or a newer prepare replaced it); its upstream "
                        "requests in flight were aborted")
        elif err is not None and not error_is_bug(err, err):
            log.warning("compaction failed: %s", err)
        self.metrics.observe(method, "ok" if err is None else outcome(err), time.perf_counter() - t0, result)
        settle(result, err)

    def running(self) -> int:
        """Compaction threads alive now."""
        with self._lock:
            return len(self._active)

    def stop(self) -> list[tuple[threading.Thread, CancelScope]]:
        """Refuse new compactions and cancel every running one, without waiting.

        Called as soon as the server begins to stop: each open request
        answers ``service_stopping`` (503, or an ``error`` event that ends
        its stream) while the server still drains its connections.
        """
        self._closed = True
        with self._lock:
            active = list(self._active.items())
        for _, scope in active:
            scope.cancel("shutdown")
        return active

    def shutdown(self) -> None:
        """Cancel every compaction and wait up to ``shutdown_grace_s`` for its thread."""
        active = self.stop()
        end = time.monotonic() + self.limits.shutdown_grace_s
        for thread, _ in active:
            thread.join(max(0.0, end - time.monotonic()))
        left = self.running()
        if left:
            log.warning("%d compaction thread(s) still in a request at shutdown", left)


def retrieved(future: asyncio.Future) -> None:
    """Read a future's outcome that nobody awaits, so its exception is not logged as never retrieved."""
    if not future.cancelled():
        future.exception()


def error_is_bug(err: SpecCompactError, exc: BaseException) -> bool:
    """An untyped exception that became a 500: worth a traceback in the log."""
    return http_status(err) >= 500 and err is not exc and not isinstance(err, CompactionCancelledError)
