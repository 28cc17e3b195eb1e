"""The compaction HTTP service (FastAPI).

``create_app(target, drafter, ...)`` builds the app around backends made by
the caller (``launch.main`` makes :class:`~sgl_speccompact.backends.endpoint.SpecCompactEndpoint`
objects); nothing here opens a connection of its own except the ``/health``
probes, which go through ``http`` when one is passed.

Routes
------
``POST /v1/compact``
    Body ``{messages, previous_summary?, method?, source_judge?, config?, stream?,
    focus?, tools?, layout?, chat_template_kwargs?, routing_key?, session?, mode?}``
    (validated by :mod:`sgl_speccompact.service.body`).  ``method`` defaults
    to the service's (``auto`` unless the operator set another): ``auto``
    runs the method the cost model predicts fastest on this deployment
    (:mod:`sgl_speccompact.methods.autopick`) and the result's
    ``stats.auto`` names the pick, the predicted times and the reason.  Returns
    ``CompactionResult.to_json_dict()``, or with ``stream: true``
    Server-Sent Events: one event per runner event (``line``, ``slot_done``),
    then ``result``, then ``data: [DONE]``.  A failure after the stream
    started ends it with one ``error`` event and no ``result`` or ``[DONE]``;
    so does the service stopping (``service_stopping``, status 503): the
    stream then ends cleanly, not mid-chunk.
    ``mode: "prepare"`` (with a ``session``) answers 202 at once and
    compacts in the background; a later compact of that session reuses it
    (:mod:`sgl_speccompact.service.sessions`: identical prepares join,
    longer ones roll on the last, 429 with ``Retry-After`` beyond the
    prepare queue; the result then has a ``session`` entry).  Prepares'
    target requests carry ``ServiceLimits.prepare_priority`` when set.
    With ``auto`` a session keeps its first pick; acceptance estimates are
    kept per API key (:mod:`~sgl_speccompact.service.keyed`).
``GET /health``
    200 when every SGLang server answers its ``/health``, else 503.
``GET /metrics``
    Prometheus text from a registry private to this app.

Errors are typed bodies ``{"error": {"type", "message", "field"?}}`` with the
status of :func:`sgl_speccompact.errors.http_status`; an upstream failure is
502/504 and never carries a partial summary.  Upstreams are named by role
(``target``, ``drafter``), not by URL, unless the operator asks for detail.

JSON bodies must be sent as ``application/json`` (415 otherwise).

Request bodies are parsed and checked on a small pool of prepare threads,
never on the event loop, so a large body cannot hold up ``/health`` or other
requests.  Each compaction runs on a daemon thread the app owns, bound to a
:class:`~sgl_speccompact.service.cancel.CancelScope`: a client that disconnects
(stream or not), the whole-compaction deadline and the app's shutdown all
cancel it, and its backends send no further request.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..config import CompactConfig, make_config
from ..errors import (
    CompactionCancelledError,
    ConfigError,
    InvalidRequestError,
    RequestTooLargeError,
    ServiceBusyError,
    ServiceStoppingError,
    SpecCompactError,
    UnauthorizedError,
    UnknownMethodError,
)
from ..history.messages import parse_messages
from .body import (CompactRequest, check_content_type, openapi_body, parse_json, parse_request,
                           request_config)
from .keyed import KeyedPickers
from .metrics import Metrics
from .sessions import PrepareLimits, Sessions, cost_predictor
from .stream import error_body, error_status, stream_response
from .store import SessionStore, auth_scope
from .runtime import (
    Compactions,
    RoundRobin,
    ServiceLimits,
    Upstreams,
    as_typed_error,
    http_probe,
)

log = logging.getLogger(__name__)

API_KEY_ENV = "SGL_SPECCOMPACT_API_KEY"
DEFAULT_METHODS = ("speccompact", "hermes", "openclaw", "target_self")
PREPARE_WORKERS = 4  # threads that parse and check request bodies

__all__ = ["API_KEY_ENV", "DEFAULT_METHODS", "ServiceLimits", "as_typed_error", "create_app", "error_body",
           "error_status", "http_probe", "resolve_api_key"]


def resolve_api_key(cli_value: str | None) -> str | None:
    """The service token: the flag's value, else ``$SGL_SPECCOMPACT_API_KEY``, else None.

    An empty or blank key is a :class:`ConfigError`, never "auth off".

    >>> resolve_api_key("")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: --api-key: is empty; omit it to run without auth
    """
    for value, where in ((cli_value, "--api-key"), (os.environ.get(API_KEY_ENV), f"${API_KEY_ENV}")):
        if value is None:
            continue
        if not value.strip():
            raise ConfigError("is empty; omit it to run without auth", field=where)
        return value
    return None


def make_store(limits: ServiceLimits) -> Any:
    """The prepared-results store ``limits.session_store`` names: in memory (None) or Redis (``redis://...``)."""
    url = limits.session_store
    if url is None or url == "memory":
        return SessionStore(limits.session_store_bytes, limits.session_ttl_s)
    if url.split("://", 1)[0] in ("redis", "rediss", "unix"):
        from .redis_store import RedisStore

        return RedisStore(url, limits.session_store_bytes, limits.session_ttl_s)
    raise ConfigError("must be memory or a redis://, rediss:// or unix:// URL", field="--session-store")


def _default_runner() -> tuple[Callable, tuple[str, ...]]:
    from ..methods.registry import METHODS, run_method  # imported late: pulls in sglang's frontend

    return run_method, tuple(METHODS)


async def _read_body(request: Request, limits: ServiceLimits) -> bytes:
    limit = limits.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise RequestTooLargeError(f"is {declared} bytes, limit is {limit}", field="body")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:  # stop reading: a lying or absent Content-Length
            raise RequestTooLargeError(f"exceeds {limit} bytes", field="body")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    target: Any,
    drafter: Any,
    *,
    api_key: str | None = None,
    limits: ServiceLimits = ServiceLimits(),
    default_config: CompactConfig | dict | None = None,
    default_method: str = "auto",
    runner: Callable[..., Any] | None = None,
    methods: Sequence[str] | None = None,
    health_probe: Callable[[Any], dict] | None = None,
    chat_template: Any = None,
    cost_models: dict | None = None,
    deployment: Any = None,
    auto: Any = None,
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
        Bearer token required on ``/v1/*``; no auth when None.  An empty
        string is a :class:`ConfigError`.
    limits : ServiceLimits
        Body bounds, workers, deadline, probe timeout, upstream detail.
    default_config : CompactConfig or dict, optional
        Config every request starts from; its ``max_*`` limits cap requests.
    default_method : str
        Method when a request names none; ``auto`` (the default) picks per request.
    runner : callable, optional
        ``run_method``-compatible function; ``sgl_speccompact.methods.registry.run_method``
        when omitted.
    methods : sequence of str, optional
        Accepted method names; ``methods.METHODS`` with the default runner.
    health_probe : callable, optional
        ``probe(backend) -> {"ok": bool, ...}``; :func:`http_probe` when omitted.
    chat_template : str or tokenizer, optional
        The target's tokenizer (path or hub name): with it, compactions use
        the agent-aligned layout unless a request asks for ``classic``.
    cost_models : dict, optional
        Role -> :class:`~sgl_speccompact.core.calibration.CostFit` of each server
        (calibrated, saved or a shipped profile); shown in ``/health`` and
        ``/metrics``.
    deployment : sgl_speccompact.methods.auto.Deployment, optional
        The GPUs and models the service runs on: a compact that finds a
        prepare of its session running waits for it or cancels it by the
        cost model's predicted times; without it, by a moving average.  By
        default the deployment of ``auto``, when one is given.
    auto : AutoPicker, optional
        What ``method="auto"`` predicts from (:mod:`sgl_speccompact.methods.autopick`):
        the deployment and the acceptance observed per model pair.  When
        omitted: the models the servers report (else Qwen3-8B and Qwen3-0.6B) on one
        shared H200 (:func:`~sgl_speccompact.methods.resolve.served_picker`), which the
        result's ``stats.auto.cost_model`` says.

    Returns
    -------
    fastapi.FastAPI
    """
    if api_key is not None and not api_key.strip():
        raise ConfigError("is empty; pass None to run without auth", field="api_key")
    if runner is None:
        runner, default_names = _default_runner()
        methods = methods or default_names
    method_names = tuple(methods or DEFAULT_METHODS)
    from ..methods.autopick import AUTO  # imported late, as the runner is
    from ..methods.request import MethodRequest, Offer
    from ..methods.resolve import resolve_method, served_picker

    first = target[0] if isinstance(target, (list, tuple)) and target else target
    picker = auto if auto is not None else served_picker(first, drafter)  # the models the servers report
    pickers = KeyedPickers(picker)  # acceptance per API key: one client's eta never moves another's picks
    if default_method not in method_names + (AUTO,):
        raise UnknownMethodError(f"default method {default_method!r} is not one of {list(method_names)}")
    base_config = make_config(default_config)
    targets = RoundRobin(list(target) if isinstance(target, (list, tuple)) else [target])
    upstreams = Upstreams(targets.backends, drafter, show_urls=limits.expose_upstream_urls)
    probe = health_probe or http_probe(timeout_s=limits.health_timeout_s)
    metrics = Metrics()
    cost_report = {role: fit.to_dict() for role, fit in (cost_models or {}).items()}
    metrics.set_cost_models(cost_models or {})
    metrics.observed_acceptance.labels(picker.pair).set(picker.acceptance.get(picker.pair))
    pickable = tuple(m for m in method_names if m != "speccompact" or drafter is not None)
    compactions = Compactions(limits, metrics)
    if deployment is None and auto is not None:  # the deployment auto picks on times the prepares too
        deployment = auto.deployment
    sessions = Sessions(make_store(limits), metrics, cost_predictor(deployment) if deployment is not None else None,
                        PrepareLimits(limits.prepare_workers, limits.prepare_queue, limits.prepare_queue_bytes))

    app = FastAPI(title="sgl_speccompact", version="0.1.0")
    app.state.metrics = metrics
    app.state.compactions = compactions
    app.state.sessions = sessions
    app.router.add_event_handler("shutdown", compactions.shutdown)
    # bodies are parsed here, not in the default executor the /health probes use
    pool: list[ThreadPoolExecutor] = []  # made on first use, so an app started again (tests) gets a new one

    def preparing() -> ThreadPoolExecutor:  # called on the event loop only
        if not pool:
            pool.append(ThreadPoolExecutor(max_workers=PREPARE_WORKERS, thread_name_prefix="prepare"))
        return pool[0]

    def stop_preparing() -> None:
        while pool:
            pool.pop().shutdown(wait=False, cancel_futures=True)

    app.router.add_event_handler("shutdown", stop_preparing)

    def check_auth(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise UnauthorizedError("missing or invalid bearer token")

    def prepare(raw: bytes, scope: str = "anonymous") -> tuple[CompactRequest, str, CompactConfig]:
        """Parse and check one body: CPU work, run on a prepare thread (see ``compact``)."""
        req = parse_request(parse_json(raw, limits), limits)
        method = req.method or default_method
        if method not in method_names + (AUTO,):
            raise InvalidRequestError(f"unknown method {method!r}; one of {list(method_names + (AUTO,))}",
                                      field="method")
        if method == "speccompact" and drafter is None:
            raise InvalidRequestError("speccompact needs a drafter; this service has none", field="method")
        cfg = request_config(base_config, req.config)
        parse_messages(req.messages, max_messages=cfg.max_history_messages, max_chars=cfg.max_history_chars)
        if method != AUTO:  # an explicit method always wins
            return req, method, cfg, None
        if not pickable:
            raise InvalidRequestError("auto has no method to pick from on this service", field="method")
        request = MethodRequest(req.messages, req.previous_summary)
        offer = Offer(has_drafter=drafter is not None, offered=pickable, context_tokens=cfg.target_context_tokens,
                      config=cfg)
        choice = sessions.auto_pick(scope, req.session,  # once per session: its prepares stay reusable
                                    lambda: resolve_method(AUTO, request, offer, pickers.get(scope))[1])
        metrics.auto_picks.labels(choice["method"]).inc()
        return req, choice["method"], cfg, choice

    def job(req: CompactRequest, method: str, cfg: CompactConfig, on_event=None, choice: dict | None = None,
            scope: str = "anonymous", background: bool = False):
        layout = {k: v for k, v in (("layout", req.layout), ("tools", req.tools), ("chat_template", chat_template),
                                    ("chat_template_kwargs", req.chat_template_kwargs), ("focus", req.focus))
                  if v is not None}

        def run(target_backend, drafter_backend):
            result = runner(method, req.messages, target=target_backend, drafter=drafter_backend, config=cfg,
                            previous_summary=req.previous_summary, source_judge=req.source_judge,
                            on_event=on_event, **layout)
            pickers.get(scope).observe(method, result.stats.acceptance_rate)  # the estimate this key picks with
            estimate = picker.observe(method, result.stats.acceptance_rate)  # service-wide, for the gauge
            if estimate is not None:
                metrics.observed_acceptance.labels(picker.pair).set(estimate)
            if choice is not None:
                result.stats.auto = choice
            return result
        target = targets.pick()
        if req.routing_key and hasattr(target, "with_routing_key"):  # sglang-router manual policy
            target = target.with_routing_key(req.routing_key)
        if background and limits.prepare_priority is not None and hasattr(target, "with_priority"):
            target = target.with_priority(limits.prepare_priority)  # behind the agent's own requests
        return run, target, drafter

    def fail(err: SpecCompactError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(err, UnauthorizedError) else None
        if isinstance(err, ServiceBusyError):
            headers = {"Retry-After": str(max(1, int(err.retry_after_s)))}
        return JSONResponse(upstreams.scrub(error_body(err)), status_code=error_status(err), headers=headers)

    @app.post("/v1/compact", openapi_extra=openapi_body())
    async def compact(request: Request):
        arrived = time.monotonic()  # the compaction's deadline counts from here, a wait for a prepare included
        scope = auth_scope(request.headers.get("authorization"))
        try:
            check_auth(request)
            check_content_type(request.headers.get("content-type"))
            raw = await _read_body(request, limits)
            # parsing and checking a large body is CPU work: off the event loop, so /health and
            # other requests are served meanwhile (redaction runs on the compaction's thread)
            req, method, cfg, choice = await asyncio.get_running_loop().run_in_executor(
                preparing(), prepare, raw, scope)
            if req.mode == "prepare":
                body = sessions.prepare(scope, req, method, lambda r: compactions.start(
                    method, *job(r, method, cfg, None, choice, scope, background=True)), size=len(raw))
                return JSONResponse(body, status_code=202)
        except SpecCompactError as err:
            metrics.compactions.labels("-", "rejected").inc()
            return fail(err)

        def start(r: CompactRequest, on_event=None):
            return compactions.start(method, *job(r, method, cfg, on_event, choice, scope), since=arrived)

        async def resolve():  # the session's stored prefix, after waiting (within the deadline) for its prepare
            if req.session is None:
                return req, None, None
            deadline = None if limits.compaction_timeout_s is None else arrived + limits.compaction_timeout_s
            plan = await sessions.resolve(scope, req, method, deadline, limits.compaction_timeout_s,
                                          request.is_disconnected)
            return plan.request, plan.info, plan.ready

        if req.stream:  # resolved inside the stream: keep-alive pings flow while it waits for a prepare
            return stream_response(start, upstreams.scrub, resolve=resolve)
        try:
            run_req, info, ready = await resolve()
        except SpecCompactError as err:
            if isinstance(err, CompactionCancelledError) and not isinstance(err, ServiceStoppingError):
                return Response(status_code=error_status(err))  # nobody is listening
            return fail(err)
        if ready is not None:
            return JSONResponse({**ready.to_json_dict(), "session": info})
        t0 = time.monotonic()
        task = start(run_req)
        try:
            result = await task.wait(request)
        except asyncio.CancelledError:  # the server is stopping and cancels open requests
            task.scope.cancel("shutdown")
            return fail(task.scope.error())
        except SpecCompactError as err:
            if isinstance(err, CompactionCancelledError) and not isinstance(err, ServiceStoppingError):
                return Response(status_code=error_status(err))  # nobody is listening
            return fail(err)
        sessions.expected.observe(time.monotonic() - t0)
        out = result.to_json_dict()
        return JSONResponse(out if info is None else {**out, "session": info})

    @app.get("/health")
    async def health():
        loop = asyncio.get_running_loop()
        named = upstreams.named()
        results = await asyncio.gather(*(loop.run_in_executor(None, probe, b) for _, b in named))
        report = {name: upstreams.health_entry(r) for (name, _), r in zip(named, results)}
        ok = all(r.get("ok") for r in results)
        return JSONResponse({"status": "ok" if ok else "degraded", "upstreams": report,
                             "cost_model": cost_report}, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def prometheus_metrics():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
