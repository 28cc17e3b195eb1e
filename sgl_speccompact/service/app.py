"""The compaction HTTP service (FastAPI).

``create_app(target, drafter, **options)`` builds the app around backends made
by the caller (``launch.main`` makes
:class:`~sgl_speccompact.backends.endpoint.SpecCompactEndpoint` objects);
nothing here opens a connection of its own except the ``/health`` probes,
which go through ``http`` when one is passed.  ``options`` are
:class:`ServiceOptions`; what the routes share is one :class:`AppState`; the
routes sit on an ``APIRouter`` whose dependencies check auth and the body's
type and size; the app's lifespan stops its threads on shutdown.

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
    Server-Sent Events: one event per runner event (``line``, ``slot_written``,
    ``retract``, ``slot_done``: :mod:`sgl_speccompact.methods.displayed`), then ``result``, then ``data: [DONE]``.  A failure after the stream
    started ends it with one ``error`` event and no ``result`` or ``[DONE]``;
    so does the service stopping (``service_stopping``, status 503): the
    stream then ends cleanly, not mid-chunk.
    ``mode: "prepare"`` (with a ``session``) answers 202 at once and
    compacts in the background; a later compact of that session reuses it
    (:mod:`sgl_speccompact.service.sessions`: identical prepares join,
    longer ones roll on the last, 429 with ``Retry-After`` beyond the
    prepare queue; the result then has a ``session`` entry).  Prepares'
    target requests carry ``ServiceSettings.prepare_priority`` when set, and
    with ``ServiceSettings.prepare_yield_s`` each waits, up to that bound, while
    the target serves foreground work (:mod:`~sgl_speccompact.service.yielding`).
    With ``auto`` a session keeps its first pick; acceptance and label-mass
    estimates are kept per API key (:mod:`~sgl_speccompact.service.keyed`).
``GET /health``
    200 when every SGLang server answers its ``/health``, or is busy but
    answering (:func:`~sgl_speccompact.service.runtime.http_probe`), else 503;
    each probe ends by its total deadline.  ``session_store`` reports the
    store's state (its circuit breaker, failures, malformed values) from what
    its calls saw, without asking it.
``GET /metrics``
    Prometheus text from a registry private to this app.

Each finished compaction writes one line to the service log, and one running
longer than a few seconds logs its progress with totals
(:mod:`~sgl_speccompact.service.compaction_log`).

Errors are typed bodies ``{"error": {"type", "message", "field"?}}`` with the
status of :func:`sgl_speccompact.errors.http_status`, a route that does not
exist (404 ``not_found``) or a wrong HTTP method (405 ``method_not_allowed``)
included; an upstream failure is
502/504 and never carries a partial summary.  Upstreams are named by role
(``target``, ``drafter``), not by URL, unless the operator asks for detail.

JSON bodies must be sent as ``application/json`` (415 otherwise).

Request bodies are parsed and checked on a small pool of body-parsing
threads (:data:`PARSE_WORKERS`), never on the event loop, so a large body cannot hold up ``/health`` or other
requests.  Each compaction runs on a daemon thread the app owns, bound to a
:class:`~sgl_speccompact.service.cancel.CancelScope`: a client that disconnects
(stream or not), the whole-compaction deadline and the app's shutdown all
cancel it, and its backends send no further request.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..config import CompactConfig, make_config
from ..options import API_KEY_ENV, ServiceSettings, defaults, resolve_api_key
from ..errors import (
    CompactionCancelledError,
    ConfigError,
    InvalidRequestError,
    MethodNotAllowedError,
    NotFoundError,
    RequestTooLargeError,
    ServiceBusyError,
    ServiceStoppingError,
    SpecCompactError,
    UnauthorizedError,
    UnknownMethodError,
)
from .body import (CompactRequest, check_content_type, openapi_body, parse_json, parse_request,
                           request_config)
from .compaction_log import ProgressLog, compaction_line, history_tokens
from .keyed import KeyedPickers, operator_labels
from .metrics import Metrics
from .sessions import PrepareLimits, Sessions, cost_predictor
from .stream import error_body, error_status, stream_response
from .store import SessionStore, auth_scope
from .runtime import (
    Compactions,
    RoundRobin,
    Upstreams,
    as_typed_error,
    http_probe,
    retrieved,
)

log = logging.getLogger(__name__)

PARSE_WORKERS = 4  # threads that parse and check request bodies (not prepares: those are ahead-of-time compactions)
HEALTH_GRACE_S = 0.5  # a probe answers within the probe timeout plus this, whatever the upstream does (seconds)

__all__ = ["API_KEY_ENV", "ServiceSettings", "as_typed_error", "create_app", "error_body",
           "error_status", "http_probe", "resolve_api_key"]


def make_store(settings: ServiceSettings) -> Any:
    """The prepared-results store ``settings.session_store`` names: in memory or Redis (``redis://...``)."""
    url = settings.session_store
    if url == "memory":
        return SessionStore(settings.session_store_bytes, settings.session_ttl_s)
    if url.split("://", 1)[0] in ("redis", "rediss", "unix"):
        from .redis_store import RedisStore

        return RedisStore(url, settings.session_store_bytes, settings.session_ttl_s)
    raise ConfigError("must be memory or a redis://, rediss:// or unix:// URL", field="--session-store")


def _default_runner() -> Callable:
    from ..methods.registry import run_method  # imported late: pulls in sglang's frontend

    return run_method


async def _read_body(request: Request, settings: ServiceSettings) -> bytes:
    limit = settings.max_body_bytes
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


@dataclass(frozen=True)
class ServiceOptions:
    """How :func:`create_app` serves; each field is one of its keywords.

    Attributes
    ----------
    api_key : str, optional
        Bearer token required on ``/v1/*``; no auth when None.  An empty
        string is a :class:`ConfigError`.
    settings : ServiceSettings, optional
        Body bounds, workers, deadline, probe timeout, upstream detail,
        prepares, and ``method``, the method when a request names none
        (``auto``: picked per request); :data:`sgl_speccompact.options.DEFAULTS`
        when omitted.
    default_config : CompactConfig or dict, optional
        Config every request starts from; its ``max_*`` limits cap requests.
    runner : callable, optional
        ``run_method``-compatible function; ``sgl_speccompact.methods.registry.run_method``
        when omitted.  It is called as ``runner(method, request, target=...,
        drafter=..., config=...)`` with one
        :class:`~sgl_speccompact.methods.request.MethodRequest` whose
        messages the service has parsed already.
    methods : sequence of str, optional
        Accepted method names; ``methods.METHODS`` when omitted.
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
    clock : callable, optional
        Seconds, read to log the progress of compactions running longer than
        :data:`~sgl_speccompact.service.compaction_log.PROGRESS_EVERY_S`;
        ``time.monotonic`` when omitted.
    """

    api_key: str | None = None  # bearer token on /v1/*; None: no auth
    settings: ServiceSettings | None = None  # body bounds, workers, deadline, prepares, method; None: options.DEFAULTS
    default_config: CompactConfig | dict | None = None  # config every request starts from (its max_* cap requests)
    runner: Callable[..., Any] | None = None  # run_method-compatible function; None: run_method
    methods: Sequence[str] | None = None  # accepted method names; None: methods.METHODS
    health_probe: Callable[[Any], dict] | None = None  # probe(backend) -> {"ok": bool, ...}; None: http_probe
    chat_template: Any = None  # the target's tokenizer: the agent layout unless a request asks for classic
    cost_models: dict | None = None  # role -> CostFit, shown in /health and /metrics
    deployment: Any = None  # what a compact waiting on a prepare predicts with; None: auto's deployment
    auto: Any = None  # AutoPicker for method="auto"; None: the models the servers report
    clock: Callable[[], float] | None = None  # seconds, for progress lines of long compactions; None: time.monotonic


@dataclass(frozen=True)
class ParsedBody:
    """One request body parsed and checked, and the method it runs."""

    req: CompactRequest  # the validated body
    method: str  # the method to run (auto resolved)
    cfg: CompactConfig  # the request's config (the service's, tightened by the body)
    choice: dict | None  # auto's pick (stats.auto); None for an explicit method
    request: Any  # the body's MethodRequest, its messages parsed once here (progress events unset)


@dataclass
class AppState:
    """What the routes of one app share; built once by :func:`create_app`."""

    options: ServiceOptions  # how the app serves
    settings: ServiceSettings  # the options' settings (options.DEFAULTS when none were given)
    runner: Callable[..., Any]  # run_method-compatible
    method_names: tuple[str, ...]  # accepted methods
    drafter: Any  # drafter backend, or None
    targets: RoundRobin  # target backends, one per compaction
    upstreams: Upstreams  # the backends named by role (health, error scrubbing)
    picker: Any  # AutoPicker: service-wide acceptance (the gauge), the operator's labels' label mass
    pickers: KeyedPickers  # acceptance and label mass per API key (what auto picks with)
    base_config: CompactConfig  # config every request starts from
    metrics: Metrics  # this app's Prometheus registry
    compactions: Compactions  # running compaction threads
    sessions: Sessions  # prepared results and running prepares
    probe: Callable[[Any], dict]  # /health probe of one backend
    parse_pool: ThreadPoolExecutor | None = None  # body-parsing threads; made on first use (a restarted app gets new ones)
    gates: dict = field(default_factory=dict)  # id(target backend) -> its YieldGate (prepares yield to the agent)

    def parsers(self) -> ThreadPoolExecutor:
        """The body-parsing threads (called on the event loop only)."""
        if self.parse_pool is None:
            self.parse_pool = ThreadPoolExecutor(max_workers=PARSE_WORKERS, thread_name_prefix="parse-body")
        return self.parse_pool

    def stop(self) -> None:
        """Cancel running compactions and drop queued bodies (the app's shutdown)."""
        self.compactions.shutdown()
        self.sessions.close()
        if self.parse_pool is not None:
            self.parse_pool.shutdown(wait=False, cancel_futures=True)
            self.parse_pool = None

    def parse_body(self, raw: bytes, scope: str = "anonymous") -> ParsedBody:
        """Parse and check one body: CPU work, run on a body-parsing thread (see ``compact``)."""
        from ..methods.autopick import AUTO  # imported late, as the runner is
        from ..methods.request import Offer
        from ..methods.resolve import carries_lines, resolve_method

        settings, names = self.settings, self.method_names + (AUTO,)
        req = parse_request(parse_json(raw, settings), settings)
        method = req.method or settings.method
        if method not in names:
            raise InvalidRequestError(f"unknown method {method!r}; one of {list(names)}", field="method")
        if method == "speccompact" and self.drafter is None:
            raise InvalidRequestError("speccompact needs a drafter; this service has none", field="method")
        cfg = request_config(self.base_config, req.config)
        request = self.method_request(req).parsed(cfg)  # the one parse of the messages: checked here, run below
        if method != AUTO:  # an explicit method always wins
            return ParsedBody(req, method, cfg, None, request)
        pickable = tuple(m for m in self.method_names if m != "speccompact" or self.drafter is not None)
        if not pickable:
            raise InvalidRequestError("auto has no method to pick from on this service", field="method")
        offer = Offer(cfg, has_drafter=self.drafter is not None, offered=pickable)
        choice = self.sessions.auto_pick(scope, req.session,  # once per session, again after each compaction
                                         lambda held: resolve_method(AUTO, request, offer, self.pickers.get(scope),
                                                                     held)[1],
                                         allowed=pickable, carries=carries_lines(request, offer))
        self.metrics.auto_picks.labels(choice["method"]).inc()
        return ParsedBody(req, choice["method"], cfg, choice, request)

    def method_request(self, req: CompactRequest, on_event=None) -> Any:
        """The :class:`~sgl_speccompact.methods.request.MethodRequest` of a body (or its session's rest)."""
        from ..methods.request import AgentLayout, MethodRequest

        layout = AgentLayout(req.layout, req.tools, self.options.chat_template, req.chat_template_kwargs)
        return MethodRequest(req.messages, req.previous_summary, req.focus, source_judge=req.source_judge,
                             layout=layout, on_event=on_event)

    def job(self, p: ParsedBody, req: CompactRequest, on_event=None, scope: str = "anonymous",
            background: bool = False) -> tuple[Callable, Any, Any]:
        """``(run, target, drafter)`` of one compaction of ``req`` (the body, or its session's rest)."""
        if req is p.req:  # the body itself: parsed in parse_body
            request = replace(p.request, on_event=on_event)
        else:
            request = self.method_request(req, on_event)

        from ..methods.auto import held_share

        def run(target_backend, drafter_backend):
            label = f"prepare {p.method}" if background else p.method
            watched = replace(request, on_progress=ProgressLog(label, log, self.options.clock))
            result = self.runner(p.method, watched, target=target_backend, drafter=drafter_backend, config=p.cfg)
            log.info(compaction_line(p.method, history_tokens(request), result, background))
            mass = result.stats.label_mass_median  # with this request's label words
            self.pickers.get(scope).observe(p.method, result.stats.acceptance_rate, mass)  # what this key picks with
            shared = mass if operator_labels(p.cfg, self.base_config) else None  # a client's words steer only itself
            estimate = self.picker.observe(p.method, result.stats.acceptance_rate, shared)  # service-wide
            if estimate is not None:
                self.metrics.observed_acceptance.labels(self.picker.pair).set(estimate)
            if p.choice is not None:
                result.stats.auto = p.choice
            if request.previous_summary:  # what still held: the session's next auto pick predicts with it
                self.sessions.remember_held(scope, req.session, held_share(result.summary, request.previous_summary))
            return result
        target = self.targets.pick()
        if req.routing_key:  # sglang-router manual policy
            target = target.with_routing_key(req.routing_key)
        priority = self.settings.prepare_priority
        if background and priority is not None:
            target = target.with_priority(priority)  # behind the agent's own requests
        if background and self.settings.prepare_yield_s:
            target = target.with_yield(self.gate(target))  # each request waits while the agent's run
        return run, target, self.drafter

    def gate(self, target: Any):
        """The :class:`~sgl_speccompact.service.yielding.YieldGate` of ``target``'s server (one per server)."""
        from .yielding import YieldGate, Unsupported

        key = target.base_url or id(target)
        gate = self.gates.get(key)
        if gate is None:
            def fetch(backend=target):
                try:
                    return backend.loads()
                except SpecCompactError as exc:
                    if "returned HTTP 404" in str(exc):
                        raise Unsupported(str(exc)) from exc
                    raise

            metrics = self.metrics

            def held(waited: float) -> None:
                metrics.prepare_yields.inc()
                metrics.prepare_yield_s.inc(waited)

            name = self.upstreams.scrub_text(str(key))
            gate = self.gates.setdefault(key, YieldGate(fetch, float(self.settings.prepare_yield_s),
                                                        name=name, on_hold=held))
        return gate

    def fail(self, err: SpecCompactError) -> JSONResponse:
        """The typed error body of ``err``, upstream details scrubbed."""
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(err, UnauthorizedError) else None
        if isinstance(err, ServiceBusyError):
            headers = {"Retry-After": str(max(1, int(err.retry_after_s)))}
        return JSONResponse(self.upstreams.scrub(error_body(err)), status_code=error_status(err), headers=headers)


def service(request: Request) -> AppState:
    """The app's shared state (a route dependency)."""
    return request.app.state.service


def authorized(request: Request, state: AppState = Depends(service)) -> str:
    """The caller's scope (its API key's), once its bearer token is checked."""
    api_key = state.options.api_key
    if api_key is not None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise UnauthorizedError("missing or invalid bearer token")
    return auth_scope(request.headers.get("authorization"))


async def body(request: Request, state: AppState = Depends(service), scope: str = Depends(authorized)) -> bytes:
    """The raw JSON body, within the size limit (a route dependency, after auth)."""
    check_content_type(request.headers.get("content-type"))
    return await _read_body(request, state.settings)


router = APIRouter()


@router.post("/v1/compact", openapi_extra=openapi_body())
async def compact(request: Request, state: AppState = Depends(service), scope: str = Depends(authorized),
                  raw: bytes = Depends(body)):
    arrived = time.monotonic()  # the compaction's deadline counts from here, a wait for a prepare included
    try:
        # parsing and checking a large body is CPU work: off the event loop, so /health and
        # other requests are served meanwhile (redaction runs on the compaction's thread)
        p = await asyncio.get_running_loop().run_in_executor(state.parsers(), state.parse_body, raw, scope)
        if p.req.mode == "prepare":
            answer = await state.sessions.prepare(scope, p.req, p.method, lambda r: state.compactions.start(
                p.method, *state.job(p, r, None, scope, background=True)), size=len(raw))
            return JSONResponse(answer, status_code=202)
    except SpecCompactError as err:
        return rejected(state, err)
    settings = state.settings

    def start(r: CompactRequest, on_event=None):
        return state.compactions.start(p.method, *state.job(p, r, on_event, scope), since=arrived)

    async def resolve():  # the session's stored prefix, after waiting (within the deadline) for its prepare
        if p.req.session is None:
            return p.req, None, None
        deadline = None if settings.compaction_timeout_s is None else arrived + settings.compaction_timeout_s
        plan = await state.sessions.resolve(scope, p.req, p.method, deadline, settings.compaction_timeout_s,
                                            request.is_disconnected)
        return plan.request, plan.info, plan.ready

    if p.req.stream:  # resolved inside the stream: keep-alive pings flow while it waits for a prepare
        return stream_response(start, state.upstreams.scrub, resolve=resolve)
    try:
        run_req, info, ready = await resolve()
        if ready is not None:
            return JSONResponse({**ready.to_json_dict(), "session": info})
        t0 = time.monotonic()
        task = start(run_req)
        try:
            result = await task.wait(request)
        except asyncio.CancelledError:  # the server is stopping and cancels open requests
            task.scope.cancel("shutdown")
            return state.fail(task.scope.error())
    except SpecCompactError as err:
        if isinstance(err, CompactionCancelledError) and not isinstance(err, ServiceStoppingError):
            return Response(status_code=error_status(err))  # nobody is listening
        return state.fail(err)
    state.sessions.expected.observe(time.monotonic() - t0)
    out = result.to_json_dict()
    return JSONResponse(out if info is None else {**out, "session": info})


def rejected(state: AppState, err: SpecCompactError) -> JSONResponse:
    """A request refused before its compaction started: counted, then its typed error."""
    state.metrics.compactions.labels("-", "rejected").inc()
    return state.fail(err)


def routing_error(state: AppState, request: Request, exc: Any) -> JSONResponse:
    """The router's own 404 (no such path) and 405 (a wrong HTTP method) in the service's ``{"error": ...}`` shape."""
    headers = getattr(exc, "headers", None)
    if exc.status_code == 405:
        err: SpecCompactError = MethodNotAllowedError(f"{request.method} is not allowed on {request.url.path}; "
                                                      f"allowed: {(headers or {}).get('Allow', 'none')}")
    else:
        err = NotFoundError(f"no route {request.url.path}; the service serves POST /v1/compact, "
                            "GET /health and GET /metrics")
    return JSONResponse(state.upstreams.scrub(error_body(err)), status_code=exc.status_code, headers=headers)


async def probe_within(state: AppState, backend: Any) -> dict:
    """One upstream's probe, off the event loop, answered by its total deadline whatever the probe does."""
    budget = state.settings.health_timeout_s + HEALTH_GRACE_S
    call = asyncio.get_running_loop().run_in_executor(None, state.probe, backend)
    try:
        return await asyncio.wait_for(asyncio.shield(call), budget)
    except asyncio.TimeoutError:
        call.add_done_callback(retrieved)
        return {"ok": False, "detail": f"the probe did not end within {budget:g} s"}


@router.get("/health")
async def health(state: AppState = Depends(service)):
    named = state.upstreams.named()
    results = await asyncio.gather(*(probe_within(state, b) for _, b in named))
    report = {name: state.upstreams.health_entry(r) for (name, _), r in zip(named, results)}
    ok = all(r.get("ok") for r in results)
    cost_report = {role: fit.to_dict() for role, fit in (state.options.cost_models or {}).items()}
    return JSONResponse({"status": "ok" if ok else "degraded", "upstreams": report,
                         "session_store": state.sessions.store_health(),  # what its calls saw: no request
                         "cost_model": cost_report}, status_code=200 if ok else 503)


@router.get("/metrics")
async def prometheus_metrics(state: AppState = Depends(service)):
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def create_app(target: Any, drafter: Any, **options: Any) -> FastAPI:
    """Build the compaction service around existing backends.

    Parameters
    ----------
    target : backend or sequence of backends
        Target SGLang backend(s).  With several, each compaction is pinned to
        one, chosen round-robin, so its shared prefix stays in one radix cache.
    drafter : backend or None
        Drafter backend; None serves only the target-only methods.
    **options
        :class:`ServiceOptions` fields (``api_key``, ``settings``, ``runner``, ``auto``, ...).

    Returns
    -------
    fastapi.FastAPI
    """
    state = app_state(target, drafter, ServiceOptions(**options))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        state.stop()

    app = FastAPI(title="sgl_speccompact", version="0.1.0", lifespan=lifespan)
    app.state.service = state
    app.state.metrics, app.state.compactions, app.state.sessions = state.metrics, state.compactions, state.sessions

    async def refused(request: Request, err: SpecCompactError) -> JSONResponse:
        return rejected(state, err)  # raised by a route's dependency: auth, content type, body size

    async def routing(request: Request, exc: Exception) -> JSONResponse:
        return routing_error(state, request, exc)

    app.add_exception_handler(SpecCompactError, refused)
    for status in (404, 405):  # the router's own answers, in the service's error shape too
        app.add_exception_handler(status, routing)
    app.include_router(router)
    return app


def app_state(target: Any, drafter: Any, options: ServiceOptions) -> AppState:
    """Check the options and build what the routes share."""
    from ..methods.autopick import AUTO  # imported late, as the runner is
    from ..methods.resolve import served_picker

    if options.api_key is not None and not options.api_key.strip():
        raise ConfigError("is empty; pass None to run without auth", field="api_key")
    from ..methods.names import METHODS

    settings = options.settings or defaults()
    runner = options.runner or _default_runner()
    method_names = tuple(options.methods or METHODS)
    if settings.method not in method_names + (AUTO,):
        raise UnknownMethodError(f"default method {settings.method!r} is not one of {list(method_names)}")
    base_config = make_config(options.default_config)
    targets = RoundRobin(list(target) if isinstance(target, (list, tuple)) else [target])
    picker = options.auto if options.auto is not None else served_picker(targets.backends[0], drafter)
    metrics = Metrics()
    metrics.set_cost_models(options.cost_models or {})
    metrics.observed_acceptance.labels(picker.pair).set(picker.acceptance.get(picker.pair))
    deployment = options.deployment
    if deployment is None and options.auto is not None:  # the deployment auto picks on times the prepares too
        deployment = options.auto.deployment
    sessions = Sessions(make_store(settings), metrics, cost_predictor(deployment) if deployment is not None else None,
                        PrepareLimits.of(settings))
    return AppState(options=options, settings=settings, runner=runner, method_names=method_names, drafter=drafter, targets=targets,
                    upstreams=Upstreams(targets.backends, drafter, show_urls=settings.upstream_detail),
                    picker=picker,  # the models the servers report, unless the caller gave a picker
                    pickers=KeyedPickers(picker),  # per API key: one client's eta or labels never move another's
                    base_config=base_config, metrics=metrics,
                    compactions=Compactions(settings, metrics), sessions=sessions,
                    probe=options.health_probe or http_probe(timeout_s=settings.health_timeout_s))
