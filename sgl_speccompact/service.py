"""The compaction HTTP service (FastAPI).

``create_app(target, drafter, ...)`` builds the app around backends made by
the caller (``launch.main`` makes :class:`~sgl_speccompact.endpoint.SpecCompactEndpoint`
objects); nothing here opens a connection of its own except the ``/health``
probes, which go through ``http`` when one is passed.

Routes
------
``POST /v1/compact``
    Body ``{messages, previous_summary?, method?, source_judge?, config?, stream?}``.
    Returns ``CompactionResult.to_json_dict()``, or with ``stream: true``
    Server-Sent Events: one event per runner event (``line``, ``slot_done``),
    then ``result``, then ``data: [DONE]``.  A failure after the stream
    started ends it with one ``error`` event and no ``result`` or ``[DONE]``.
``GET /health``
    200 when every SGLang server answers its ``/health``, else 503.
``GET /metrics``
    Prometheus text from a registry private to this app.

Errors are typed bodies ``{"error": {"type", "message", "field"?}}`` with the
status of :func:`sgl_speccompact.errors.http_status`; an upstream failure is
502/504 and never carries a partial summary.  Each compaction runs in a
worker thread with its own stats, so concurrent requests do not share state.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import logging
import os
import socket
import threading
import time
import urllib.error
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, ValidationError

from .config import CompactConfig, make_config
from .errors import (
    BackendTimeoutError,
    BackendUnavailableError,
    ConfigError,
    InvalidRequestError,
    MalformedJSONError,
    RequestTooLargeError,
    SpecCompactError,
    UnauthorizedError,
    UnknownMethodError,
    http_status,
)
from .history import parse_messages

log = logging.getLogger(__name__)

API_KEY_ENV = "SGL_SPECCOMPACT_API_KEY"
DEFAULT_METHODS = ("speccompact", "hermes", "openclaw", "target_self")
# limits a request's config may lower but never raise past the service's
_SERVICE_LIMIT_FIELDS = ("max_history_messages", "max_history_chars")


@dataclass(frozen=True)
class ServiceLimits:
    """Service-wide limits (history limits live in CompactConfig)."""

    max_body_bytes: int = 32 * 2**20  # larger request bodies get 413 (bytes)
    max_workers: int = 32  # compactions running at once; more wait for a worker (threads)
    health_timeout_s: float = 5.0  # per upstream /health probe (seconds)


class CompactRequest(BaseModel):
    """Body of ``POST /v1/compact``; unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid")

    messages: list[Any]  # OpenAI chat messages, validated by parse_messages
    previous_summary: StrictStr | None = None  # summary of turns before `messages`
    method: StrictStr | None = None  # speccompact | hermes | openclaw | target_self
    source_judge: StrictBool = False  # run the Source-Judged post-filter
    config: dict[str, Any] | None = None  # CompactConfig overrides
    stream: StrictBool = False  # answer with Server-Sent Events


def resolve_api_key(cli_value: str | None) -> str | None:
    """The service token: the flag's value, else ``$SGL_SPECCOMPACT_API_KEY``, else None."""
    return cli_value or os.environ.get(API_KEY_ENV) or None


def error_body(err: SpecCompactError) -> dict:
    """``{"error": {...}}`` for a typed error."""
    return {"error": err.to_dict()}


def error_status(err: SpecCompactError) -> int:
    """HTTP status of a typed error."""
    return http_status(err)


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


class _RoundRobin:
    """Hands out target backends in turn; one compaction keeps the one it got.

    Pinning keeps a compaction's shared prefix in one server's radix cache.
    """

    def __init__(self, backends: Sequence[Any]):
        if not backends:
            raise ConfigError("at least one target backend is needed")
        self.backends = tuple(backends)
        self._cycle = itertools.cycle(self.backends)
        self._lock = threading.Lock()

    def pick(self) -> Any:
        with self._lock:
            return next(self._cycle)


class _Metrics:
    """Prometheus metrics in a registry owned by one app."""

    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.compactions = Counter("speccompact_compactions_total", "Compactions by method and outcome",
                                   ["method", "outcome"], registry=r)
        self.latency = Histogram("speccompact_compaction_seconds", "End-to-end compaction latency",
                                 ["method"], registry=r,
                                 buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300))
        ratio_buckets = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
        self.acceptance = Histogram("speccompact_acceptance_rate", "Judged draft lines accepted per compaction",
                                    ["method"], registry=r, buckets=ratio_buckets)
        self.cached = Histogram("speccompact_target_cached_ratio", "Target cached/prompt tokens per compaction",
                                ["method"], registry=r, buckets=ratio_buckets)
        self.in_flight = Gauge("speccompact_in_flight", "Compactions running now", registry=r)

    def observe(self, method: str, outcome: str, seconds: float, result: Any = None) -> None:
        self.compactions.labels(method, outcome).inc()
        self.latency.labels(method).observe(seconds)
        if result is None:
            return
        if result.stats.acceptance_rate is not None:
            self.acceptance.labels(method).observe(result.stats.acceptance_rate)
        cached = result.stats.cached_ratio("target")
        if cached is not None:
            self.cached.labels(method).observe(cached)


def _outcome(err: SpecCompactError) -> str:
    status = error_status(err)
    return {502: "upstream_error", 504: "upstream_timeout"}.get(status, "client_error" if status < 500 else "error")


async def _read_body(request: Request, limit: int) -> dict:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise RequestTooLargeError(f"is {declared} bytes, limit is {limit}", field="body")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:  # stop reading: a lying or absent Content-Length
            raise RequestTooLargeError(f"exceeds {limit} bytes", field="body")
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks) or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MalformedJSONError(f"is not valid JSON: {exc}", field="body") from exc
    if not isinstance(body, dict):
        raise InvalidRequestError("must be a JSON object", field="body")
    return body


def _parse_request(body: dict) -> CompactRequest:
    try:
        return CompactRequest.model_validate(body)
    except ValidationError as exc:
        e = exc.errors()[0]
        field = ".".join(str(p) for p in e["loc"]) or "body"
        msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"]
        raise InvalidRequestError(msg, field=field) from None


def _request_config(base: CompactConfig, overrides: dict | None) -> CompactConfig:
    overrides = dict(overrides or {})
    for name in _SERVICE_LIMIT_FIELDS:
        if name in overrides and isinstance(overrides[name], int) and overrides[name] > getattr(base, name):
            raise InvalidRequestError(f"may not exceed the service limit {getattr(base, name)}",
                                      field=f"config.{name}")
    unknown = sorted(set(overrides) - set(CompactConfig.model_fields))
    if unknown:
        raise InvalidRequestError("unknown config field", field=f"config.{unknown[0]}")
    try:
        return make_config(base, **overrides)
    except ConfigError as exc:
        raise InvalidRequestError(str(exc), field="config") from exc


def _default_runner() -> tuple[Callable, tuple[str, ...]]:
    from .methods import METHODS, run_method  # imported late: pulls in sglang's frontend

    return run_method, tuple(METHODS)


def http_probe(http: Any = None, timeout_s: float = 5.0) -> Callable[[Any], dict]:
    """A health probe: GET ``<backend.base_url>/health``.

    Parameters
    ----------
    http : httpx.Client, optional
        Client to use; module-level ``httpx.get`` when omitted.
    timeout_s : float
        Probe timeout in seconds.

    Returns
    -------
    callable
        ``probe(backend) -> {"ok": bool, "url": str, "detail": str}``.
    """
    import httpx

    get = http.get if http is not None else httpx.get

    def probe(backend: Any) -> dict:
        base = getattr(backend, "base_url", None)
        if not base:  # an in-process backend has no server that could be down
            return {"ok": True, "url": None, "detail": "in-process backend"}
        key = getattr(backend, "api_key", None)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        url = base.rstrip("/") + "/health"
        try:
            res = get(url, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            return {"ok": False, "url": url, "detail": f"{exc.__class__.__name__}: {exc}"}
        return {"ok": res.status_code == 200, "url": url, "detail": f"HTTP {res.status_code}"}

    return probe


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def create_app(
    target: Any,
    drafter: Any,
    *,
    api_key: str | None = None,
    limits: ServiceLimits = ServiceLimits(),
    default_config: CompactConfig | dict | None = None,
    default_method: str = "speccompact",
    runner: Callable[..., Any] | None = None,
    methods: Sequence[str] | None = None,
    health_probe: Callable[[Any], dict] | None = None,
) -> FastAPI:
    """Build the compaction service around existing backends.

    Parameters
    ----------
    target : backend or sequence of backends
        Target SGLang backend(s).  With several, each compaction is pinned to
        one, chosen round-robin, so its shared prefix stays in one radix cache.
    drafter : backend or None
        Drafter backend; None serves only the target-only methods.
    api_key : str, optional
        Bearer token required on ``/v1/*``; no auth when None.
    limits : ServiceLimits
        Body size, worker threads, probe timeout.
    default_config : CompactConfig or dict, optional
        Config every request starts from; its history limits cap requests.
    default_method : str
        Method when a request names none.
    runner : callable, optional
        ``run_method``-compatible function; ``sgl_speccompact.methods.run_method``
        when omitted.
    methods : sequence of str, optional
        Accepted method names; ``methods.METHODS`` with the default runner.
    health_probe : callable, optional
        ``probe(backend) -> {"ok": bool, ...}``; :func:`http_probe` when omitted.

    Returns
    -------
    fastapi.FastAPI
    """
    if runner is None:
        runner, default_names = _default_runner()
        methods = methods or default_names
    method_names = tuple(methods or DEFAULT_METHODS)
    if default_method not in method_names:
        raise UnknownMethodError(f"default method {default_method!r} is not one of {list(method_names)}")
    base_config = make_config(default_config)
    targets = _RoundRobin(list(target) if isinstance(target, (list, tuple)) else [target])
    probe = health_probe or http_probe(timeout_s=limits.health_timeout_s)
    metrics = _Metrics()
    pool = ThreadPoolExecutor(max_workers=limits.max_workers, thread_name_prefix="compact")

    app = FastAPI(title="sgl_speccompact", version="0.1.0")
    app.state.metrics = metrics
    app.state.executor = pool
    app.router.add_event_handler("shutdown", lambda: pool.shutdown(wait=False, cancel_futures=True))

    def check_auth(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise UnauthorizedError("missing or invalid bearer token")

    def prepare(body: dict) -> tuple[CompactRequest, str, CompactConfig]:
        req = _parse_request(body)
        method = req.method or default_method
        if method not in method_names:
            raise InvalidRequestError(f"unknown method {method!r}; one of {list(method_names)}", field="method")
        if method == "speccompact" and drafter is None:
            raise InvalidRequestError("speccompact needs a drafter; this service has none", field="method")
        cfg = _request_config(base_config, req.config)
        parse_messages(req.messages, max_messages=cfg.max_history_messages, max_chars=cfg.max_history_chars)
        return req, method, cfg

    def run(req: CompactRequest, method: str, cfg: CompactConfig, on_event=None):
        return runner(method, req.messages, target=targets.pick(), drafter=drafter, config=cfg,
                      previous_summary=req.previous_summary, source_judge=req.source_judge, on_event=on_event)

    def fail(err: SpecCompactError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(err, UnauthorizedError) else None
        return JSONResponse(error_body(err), status_code=error_status(err), headers=headers)

    @app.post("/v1/compact")
    async def compact(request: Request):
        try:
            check_auth(request)
            req, method, cfg = prepare(await _read_body(request, limits.max_body_bytes))
        except SpecCompactError as err:
            metrics.compactions.labels("-", "rejected").inc()
            return fail(err)
        if req.stream:
            return StreamingResponse(_stream(req, method, cfg), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        t0 = time.perf_counter()
        metrics.in_flight.inc()
        try:
            result = await asyncio.get_running_loop().run_in_executor(pool, run, req, method, cfg)
        except Exception as exc:  # every failure becomes a typed body, never a partial result
            err = as_typed_error(exc)
            _log_failure(err, exc)
            metrics.observe(method, _outcome(err), time.perf_counter() - t0)
            return fail(err)
        finally:
            metrics.in_flight.dec()
        metrics.observe(method, "ok", time.perf_counter() - t0, result)
        return JSONResponse(result.to_json_dict())

    async def _stream(req: CompactRequest, method: str, cfg: CompactConfig):
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def on_event(event: dict) -> None:  # called from the runner's worker threads
            loop.call_soon_threadsafe(queue.put_nowait, ("event", dict(event)))

        def work() -> None:
            try:
                out = ("result", run(req, method, cfg, on_event))
            except Exception as exc:
                out = ("error", exc)
            loop.call_soon_threadsafe(queue.put_nowait, out)

        t0 = time.perf_counter()
        metrics.in_flight.inc()
        try:
            loop.run_in_executor(pool, work)
            while True:
                kind, item = await queue.get()
                if kind == "event":
                    yield _sse(str(item.get("type", "event")), item)
                elif kind == "result":
                    metrics.observe(method, "ok", time.perf_counter() - t0, item)
                    yield _sse("result", item.to_json_dict())
                    yield b"data: [DONE]\n\n"
                    return
                else:
                    err = as_typed_error(item)
                    _log_failure(err, item)
                    metrics.observe(method, _outcome(err), time.perf_counter() - t0)
                    yield _sse("error", {**error_body(err), "status": error_status(err)})
                    return
        finally:
            metrics.in_flight.dec()

    @app.get("/health")
    async def health():
        loop = asyncio.get_running_loop()
        named = [(f"target[{i}]" if len(targets.backends) > 1 else "target", b)
                 for i, b in enumerate(targets.backends)]
        if drafter is not None:
            named.append(("drafter", drafter))
        results = await asyncio.gather(*(loop.run_in_executor(None, probe, b) for _, b in named))
        upstreams = {name: r for (name, _), r in zip(named, results)}
        ok = all(r.get("ok") for r in results)
        return JSONResponse({"status": "ok" if ok else "degraded", "upstreams": upstreams},
                            status_code=200 if ok else 503)

    @app.get("/metrics")
    async def prometheus_metrics():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _log_failure(err: SpecCompactError, exc: BaseException) -> None:
    if error_status(err) >= 500 and err is not exc:  # an untyped exception: keep its traceback
        log.error("compaction failed: %s", err, exc_info=exc)
    else:
        log.warning("compaction failed: %s", err)
