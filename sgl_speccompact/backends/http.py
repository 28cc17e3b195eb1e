"""An SGLang server over HTTP, as an sglang frontend backend: the transport under :mod:`sgl_speccompact.backends.endpoint`.

:class:`HttpEndpoint` is a ``RuntimeEndpoint`` that sends every request
over pooled connections (:class:`Wire`) with a timeout, maps transport
failures and error answers to :mod:`sgl_speccompact.errors`, adds what
sglang's frontend cannot send (``lora_path`` for LoRA drafters, a routing
key), and tokenizes with the server's ``/tokenize``.

Prompts go out as ``input_ids`` when the server's tokenizer allows it
(:mod:`sgl_speccompact.backends.token_ids`): the shared history is then tokenized once
per compaction instead of once per request, and the ids are exactly those of
tokenizing the whole prompt text.  Within a block's session
(:meth:`~HttpEndpoint.prefix_session`, :mod:`sgl_speccompact.backends.server_session`)
a prompt goes upstream once and every later request sends only its suffix.

Bodies are encoded and answers decoded with ``orjson`` (it ships with
sglang); what ``requests`` would read from the environment for every request
(proxies, a CA bundle, a netrc file) is read once per server URL.

Every request has a total deadline, its timeout (capped by the
compaction's time left): the answer's status and headers must come within
it (per read), and a body still arriving at the deadline is cut off
(:func:`read_within`), so a server trickling its answer costs one timeout,
never more.

Views (:meth:`~HttpEndpoint.with_cancel`, :meth:`~HttpEndpoint.with_routing_key`,
:meth:`~HttpEndpoint.with_token_ids`) are shallow copies for one
compaction: they share the connection pool and the token-id cache.

A view bound to a compaction's cancel scope gives every ``/generate`` body
``rid``s of that compaction and keeps the ones still waiting for their
answer (:class:`InFlight`, one place for both); when the scope is
cancelled (the client left, the deadline passed, the service stops) each is
aborted on its server with sglang's ``POST /abort_request``, so the GPU
stops working on a compaction nobody waits for.  A request sampling ``n >
1`` is the exception: sglang gives its samples rids of its own, which no
abort of ours names; it ends at its timeout.
"""

from __future__ import annotations

import copy
import heapq
import http.client
import itertools
import logging
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Iterator

import orjson
import requests
import urllib3
from sglang.lang.backend.base_backend import BaseBackend
from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint

from ..errors import (BackendError, BackendTimeoutError, BackendUnavailableError, CompactionCancelledError,
                     ConfigError, PromptTooLongError, SpecCompactError)
from ..history.estimate import chars_to_tokens
from ..result import HostCpu
from .router import ROUTING_KEY_HEADER, tokenize_base
from .server_session import CAPACITY_OF_STR_LEN, REFUSALS, SESSION_IDLE_S, Continuation, ServerSession, suffix_ids
from .token_ids import TokenIdCache, concatenates


POOL_SIZE = 64  # kept-alive connections per server: six slots, each with copies in flight
ABORT_TIMEOUT_S = 5.0  # one POST /abort_request (seconds)
# aborts are sent again while a request still waits for its answer: one sent as the compaction was cancelled
# may reach the server before the request it names (on a loaded client, well over a second before); every
# request ends at its own timeout, so the rounds end too
ABORT_PAUSE_S = 0.2  # before the second round (seconds); doubled each round up to ABORT_MAX_PAUSE_S
ABORT_MAX_PAUSE_S = 2.0  # the longest pause between rounds (seconds)

log = logging.getLogger(__name__)

# sglang's tokenizer_manager rejects prompts over the context window with the first two; its scheduler
# (validate_input_length) with the third, e.g. a session request's rebuilt prompt
CONTEXT_ERRORS = ("longer than the model's context length", "exceeds the model's maximum context length",
                  "exceeds the maximum allowed length")
JSON_HEADERS = {"Content-Type": "application/json"}
EMPTY_ANSWERS = ("/close_session",)  # routes sglang answers with an empty 200 (read as None)


def closed_before_answer(exc: requests.ConnectionError) -> bool:
    """Whether the server closed the connection before it sent any answer.

    That is what a kept-alive connection looks like when the server's idle
    timeout (uvicorn's keep-alive, 5 s in sglang) closes it while a request
    goes out on it; the request is then sent once more, on a new connection.
    A refused connection is not this case.

    >>> closed_before_answer(requests.ConnectionError(urllib3.exceptions.ProtocolError(
    ...     "Connection aborted.", http.client.RemoteDisconnected("closed"))))
    True
    >>> closed_before_answer(requests.ConnectionError(ConnectionRefusedError(111, "refused")))
    False
    """
    inner = exc.args[0] if exc.args else None
    return (isinstance(inner, urllib3.exceptions.ProtocolError) and len(inner.args) > 1
            and isinstance(inner.args[1], (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)))


class Watchdog:
    """One daemon thread that shuts the socket of every read still running at its deadline.

    A ``threading.Timer`` per request cost about a millisecond of CPU each
    (a thread started and ended); this keeps one thread and a heap of
    deadlines.  :meth:`watch` registers a read, :meth:`release` ends it and
    says whether the deadline cut it first (decided under one lock, so a
    read is either cut or released, never both).
    """

    def __init__(self):
        self._cv = threading.Condition()
        self._heap: list[list] = []  # [deadline, seq, socket, released, cut], earliest first
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: float, sock) -> list:
        """Shut ``sock`` at ``deadline`` (monotonic) unless released first; the handle for :meth:`release`."""
        entry = [deadline, next(self._seq), sock, False, False]
        with self._cv:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="read-deadlines", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._cv.notify()
        return entry

    def release(self, entry: list) -> bool:
        """The read ended; True when its deadline had cut it first."""
        with self._cv:
            entry[3] = True
            return entry[4]

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    while self._heap and self._heap[0][3]:
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cv.wait()
                        continue
                    left = self._heap[0][0] - time.monotonic()
                    if left <= 0:
                        break
                    self._cv.wait(left)
                entry = heapq.heappop(self._heap)
                entry[4] = True
            try:
                entry[2].shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


WATCHDOG = Watchdog()  # the process's one deadline thread


def read_within(res: requests.Response, deadline: float) -> bytes:
    """The body of ``res`` (sent with ``stream=True``), read by ``deadline`` (monotonic) or ``requests.Timeout``.

    A read blocked past the deadline is ended by shutting the connection's
    socket (:class:`Watchdog`; the connection is then discarded, never pooled).
    """
    left = deadline - time.monotonic()
    sock = getattr(getattr(res.raw, "connection", None), "sock", None)
    if left <= 0:
        res.close()
        raise requests.Timeout("no time left to read the answer")
    entry = WATCHDOG.watch(deadline, sock) if sock is not None else None
    try:
        content = res.content
    except requests.RequestException:
        res.close()
        if entry is not None and WATCHDOG.release(entry):
            raise requests.Timeout("the answer did not arrive in time") from None
        raise
    if entry is not None and WATCHDOG.release(entry):
        res.close()
        raise requests.Timeout("the answer did not arrive in time")
    return content


class Answer:
    """A server's answer as this module reads it: status, the raw urllib3 response, the body once read."""

    def __init__(self, raw):
        self.raw = raw  # urllib3.HTTPResponse, body not read yet
        self.status_code = raw.status
        self._content: bytes | None = None

    @property
    def content(self) -> bytes:
        """The whole body (the connection goes back to its pool); ``requests.ConnectionError`` if it breaks."""
        if self._content is None:
            try:
                self._content = self.raw.read(decode_content=True)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                self.raw.close()
                raise requests.ConnectionError(exc) from None
            self.raw.release_conn()
        return self._content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def close(self) -> None:
        self.raw.close()


class Wire:
    """HTTP to the servers, straight on urllib3's pooled connections: ``requests``'s per-request work
    (preparing, merging settings, cookies, hooks) cost more CPU than the request itself.

    Each server URL's connection pool, TLS settings and proxy are set up once
    by ``requests``'s own adapter, from the settings :func:`environment_settings`
    read; failures raise ``requests``'s exceptions, as ``Session.request``
    would.  Shared by every view of an endpoint.
    """

    def __init__(self, pool_size: int = POOL_SIZE):
        self.session = requests.Session()  # the adapter's home, and plain GETs (a router's /workers)
        self.session.trust_env = False
        self.adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=pool_size)
        self.session.mount("http://", self.adapter)
        self.session.mount("https://", self.adapter)
        self._pools: dict[tuple, tuple] = {}  # (origin, proxies) -> (connection pool, whether URLs go whole)
        self._lock = threading.Lock()

    def get(self, url: str, **kw):
        """A plain ``requests`` GET (rare requests: a router's ``/workers``)."""
        return self.session.get(url, **kw)

    def request(self, method: str, url: str, data: bytes | None = None, headers: dict | None = None,
                timeout: float | None = None, stream: bool = True, proxies: dict | None = None,
                verify=True, cert=None, auth=None) -> Answer:
        """Send one request; its :class:`Answer` with the body unread (``stream`` is always on)."""
        origin = url[: url.find("/", url.find("//") + 2) if url.count("/") > 2 else len(url)]
        pool, whole = self._pool(origin, proxies or {}, verify, cert)
        headers = dict(headers or {})
        if auth is not None:
            headers["Authorization"] = requests.auth._basic_auth_str(*auth)  # requests' own Basic header (.netrc)
        if data is not None:
            headers.setdefault("Content-Length", str(len(data)))
        try:
            raw = pool.urlopen(method=method, url=url if whole else url[len(origin):] or "/", body=data,
                               headers=headers, redirect=False, assert_same_host=False, preload_content=False,
                               decode_content=False, retries=self.adapter.max_retries,
                               timeout=urllib3.Timeout(connect=timeout, read=timeout), chunked=False)
        except (urllib3.exceptions.ProtocolError, OSError) as exc:
            raise requests.ConnectionError(exc) from None
        except urllib3.exceptions.MaxRetryError as exc:
            reason = exc.reason
            if isinstance(reason, urllib3.exceptions.ConnectTimeoutError) and \
                    not isinstance(reason, urllib3.exceptions.NewConnectionError):
                raise requests.ConnectTimeout(exc) from None
            if isinstance(reason, urllib3.exceptions.SSLError):
                raise requests.exceptions.SSLError(exc) from None
            raise requests.ConnectionError(exc) from None
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise requests.ReadTimeout(exc) from None
        except urllib3.exceptions.HTTPError as exc:
            raise requests.ConnectionError(exc) from None
        return Answer(raw)

    def _pool(self, origin: str, proxies: dict, verify, cert) -> tuple:
        key = (origin, tuple(sorted(proxies.items())), verify, cert)
        with self._lock:
            got = self._pools.get(key)
        if got is None:
            probe = requests.Request("GET", origin + "/").prepare()
            pool = self.adapter.get_connection_with_tls_context(probe, verify, proxies=proxies, cert=cert)
            self.adapter.cert_verify(pool, probe.url, verify, cert)
            got = (pool, self.adapter.request_url(probe, proxies) != "/")
            with self._lock:
                self._pools[key] = got
        return got


def http_error(url: str, status: int, body: str) -> SpecCompactError:
    """The typed error for a non-200 answer of an SGLang server.

    >>> type(http_error("u", 400, "The input (9 tokens) is longer than the model's context length (8 tokens).")).__name__
    'PromptTooLongError'
    >>> type(http_error("u", 503, "")).__name__
    'BackendUnavailableError'
    """
    if status == 400 and any(words in body for words in CONTEXT_ERRORS):
        return PromptTooLongError(f"the prompt does not fit the model served at {url}: {body[:300]}",
                                  field="messages")
    kind = BackendUnavailableError if status >= 500 else BackendError
    return kind(f"{url} returned HTTP {status}: {body[:300]}")


class InFlight:
    """The ``/generate`` requests of one compaction's view of a server that still wait for their answer.

    :meth:`start` gives a body its ``rid`` (one per prompt of a batch):
    ``speccompact-<compaction>.<n>.``, so no rid is the start of another
    (sglang aborts every request whose rid starts with the one named); a
    body that has its rids (a session's request) keeps them;
    :meth:`abort` aborts every rid still waiting, from a thread of its own.

    >>> class E:
    ...     sent = []
    ...     def abort_request(self, rid): self.sent.append(rid)
    >>> flight = InFlight(E()); body = {"text": ["a", "b"]}; rids = flight.start(body)
    >>> body["rid"] == rids and rids[0].endswith(".0.") and flight.waiting() == rids
    True
    >>> flight.abort_waiting(), E.sent == rids
    (2, True)
    >>> flight.end(rids); flight.waiting()
    []
    """

    def __init__(self, endpoint):
        self.endpoint = endpoint  # what sends the aborts: abort_request(rid)
        self.prefix = f"speccompact-{uuid.uuid4().hex[:16]}"  # this compaction's rids start with it
        self._n = itertools.count()  # numbers the rids
        self._lock = threading.Lock()  # guards _rids (requests go out from many threads)
        self._rids: dict[str, None] = {}  # rids still waiting for their answer, in order
        self.aborted: list[str] = []  # rids an abort was sent for

    def start(self, body: dict) -> list[str]:
        """Give ``body`` its rids (unless it has them) and count them in flight; the rids."""
        given = body.get("rid")
        if given is not None:
            rids = list(given) if isinstance(given, list) else [given]
        else:
            prompt = body.get("input_ids", body.get("text"))
            batch = isinstance(prompt, list) and bool(prompt) and not isinstance(prompt[0], int)
            rids = [f"{self.prefix}.{next(self._n)}." for _ in range(len(prompt) if batch else 1)]
            body["rid"] = rids if batch else rids[0]
        with self._lock:
            self._rids.update(dict.fromkeys(rids))
        return rids

    def end(self, rids: list[str]) -> None:
        """The answer came (or the request failed): these rids no longer run."""
        with self._lock:
            for rid in rids:
                self._rids.pop(rid, None)

    def waiting(self) -> list[str]:
        with self._lock:
            return list(self._rids)

    def abort(self) -> None:
        """Abort every request still waiting (the cancel scope's callback: returns at once)."""
        threading.Thread(target=self.abort_rounds, name="abort-requests", daemon=True).start()

    def abort_rounds(self) -> None:
        """Abort what waits, again and again, until nothing waits (each request ends at its timeout)."""
        pause = ABORT_PAUSE_S
        while self.abort_waiting():
            time.sleep(pause)
            pause = min(2 * pause, ABORT_MAX_PAUSE_S)

    def abort_waiting(self) -> int:
        """One ``/abort_request`` per rid still waiting; how many were sent."""
        rids = self.waiting()
        for rid in rids:
            try:
                self.endpoint.abort_request(rid)
                self.aborted.append(rid)
            except SpecCompactError as exc:  # best effort: the request still ends at its timeout
                log.debug("abort of %s failed: %s", rid, exc)
        return len(rids)


class _TokenIds:
    """Whether a server gets ``input_ids``, and its token-id cache (shared by an endpoint's views)."""

    def __init__(self, mode: bool | None):
        self.mode = mode  # None: if the tokenizer allows; True: required; False: never
        self.cache: TokenIdCache | None = None  # built on first use
        self.lock = threading.Lock()  # guards the fields; never held across a request
        self.deciding: threading.Event | None = None  # set while one thread checks the tokenizer

    def forget(self) -> None:
        """Drop the remembered segments; the tokenizer check stands (call with no request in flight)."""
        with self.lock:
            if self.cache is not None:
                self.cache.clear()


class _Sessions:
    """What an endpoint's views learned of the server's sessions (shared by every view)."""

    def __init__(self):
        self.served: bool | None = None  # False: the server has no /open_session (an old server, sglang-router)
        self.strips: set[int] = set()  # first ids the server strips from a continuation (its bos_token_id)
        self.open: set[str] = set()  # ids of the sessions opened here and not closed yet
        self.lock = threading.Lock()  # guards the fields; never held across a request


class _Slot:
    """One block's session on one server, opened by the block's first request (shared by its views)."""

    def __init__(self):
        self.session: ServerSession | None = None  # the open session (None: none serves this block)
        self.tried = False  # its opening was attempted
        self.opening: threading.Event | None = None  # set when the thread opening it is done
        self.lock = threading.Lock()  # guards the fields; never held across a request


def environment_settings(url: str, api_key: str | None) -> dict:
    """What ``requests`` reads from the environment for each request to ``url`` (proxies, CA bundle, client
    certificate, netrc credentials when no API key is given), read once.

    >>> sorted(environment_settings("http://127.0.0.1:1", "k"))
    ['cert', 'proxies', 'verify']
    """
    settings = requests.Session().merge_environment_settings(url, {}, None, None, None)
    out = {"proxies": settings["proxies"], "verify": settings["verify"], "cert": settings["cert"]}
    auth = None if api_key else requests.utils.get_netrc_auth(url)
    return {**out, "auth": auth} if auth else out


class HttpEndpoint(RuntimeEndpoint):
    """``RuntimeEndpoint`` with pooled connections, timeouts, typed errors, LoRA and token ids.

    Parameters are those of :class:`~sgl_speccompact.backends.endpoint.SpecCompactEndpoint`
    that concern the connection: ``base_url``, ``api_key``, ``lora_path``,
    ``timeout_s`` and ``token_ids``.  Construction asks the server for
    ``/get_model_info`` (kept as ``model_info``).
    """

    cancel_scope = None  # a CancelScope checked before every request (set on views, see with_cancel)
    server_session: _Slot | None = None  # the block's session on this server (set on views, see prefix_session)
    host_cpu: HostCpu | None = None  # the compaction's host CPU: each request's thread touches it (prefix_session)
    in_flight: InFlight | None = None  # the bound compaction's requests waiting for an answer (see with_cancel)
    yield_gate = None  # holds each /generate while the server runs foreground work (set on views, see with_yield)
    local_tokenize = None  # (texts, add_special_tokens) -> ids: the served tokenizer in-process (no /tokenize)

    def __init__(self, base_url: str, *, api_key: str | None = None, lora_path: str | None = None,
                 timeout_s: float = 120.0, token_ids: bool | None = None):
        BaseBackend.__init__(self)  # RuntimeEndpoint.__init__ would call the server without a timeout
        self.support_concate_and_append = False
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.verify = None
        self.lora_path = lora_path
        self.routing_key: str | None = None  # sent as X-SMG-Routing-Key (see with_routing_key)
        self.priority: int | None = None  # sent as /generate `priority` (see with_priority)
        self.timeout_s = timeout_s
        # one pool for all threads: sglang runs every fork and every verification
        # copy on a fresh thread, and each should reuse a kept-alive connection
        self._http = Wire()  # pooled connections, shared by every view
        self._env: dict[str, dict] = {}  # server URL -> its environment_settings (shared by every view)
        self._tokenize_base: str | None = None  # where /tokenize goes (a worker when base_url is a router)
        self.model_info = self._request("GET", "/get_model_info")
        self._one_token: dict[str, bool] = {}
        self.send_token_ids = True  # the compaction's preference (CompactConfig.send_token_ids)
        self._token_ids = _TokenIds(token_ids)  # shared by every view of this endpoint
        self._context: dict[str, int | None] = {}  # "tokens" -> the served context window, once asked
        self._sessions = _Sessions()  # what the views learned of the server's sessions

    def with_cancel(self, scope) -> "HttpEndpoint":
        """A view of this endpoint for one compaction, bound to ``scope``.

        It shares the connection pool and caches; before each request
        it raises the scope's error once the scope is cancelled or past its
        deadline, and caps the request's timeout by the time left.  Its
        ``/generate`` requests carry rids of the compaction, and those still
        waiting when the scope is cancelled are aborted (:class:`InFlight`).
        """
        view = copy.copy(self)
        view.cancel_scope = scope
        view.in_flight = InFlight(view)
        scope.on_cancel(view.in_flight.abort)
        return view

    def with_routing_key(self, key: str | None) -> "HttpEndpoint":
        """This endpoint, sending ``X-SMG-Routing-Key: key`` with every request.

        Behind sglang-router's ``manual`` policy, requests with one key land
        on one worker: give a compaction the key its agent's session uses.
        The copy shares the connection pool and caches.
        """
        if not key:
            return self
        other = copy.copy(self)
        other.routing_key = key
        return other

    def with_priority(self, priority: int | None) -> "HttpEndpoint":
        """A view sending ``priority`` with every ``/generate`` (sglang's ``GenerateReqInput.priority``).

        The server orders and preempts by it only when started with
        ``--enable-priority-scheduling`` (higher values first unless
        ``--schedule-low-priority-values-first``).  The copy shares the
        connection pool and caches.
        """
        if priority == self.priority:
            return self
        view = copy.copy(self)
        view.priority = priority
        return view

    def with_yield(self, gate) -> "HttpEndpoint":
        """A view whose every ``/generate`` first waits at ``gate`` (a background prepare's view).

        ``gate`` (:class:`~sgl_speccompact.service.yielding.YieldGate`, one
        per server, shared by its views) holds the request while the server
        runs foreground work, up to its bound, and counts it in flight while
        it runs.  The copy shares the connection pool and caches.
        """
        if gate is self.yield_gate:
            return self
        view = copy.copy(self)
        view.yield_gate = gate
        return view

    def loads(self, timeout_s: float = 2.0) -> dict:
        """The server's ``GET /v1/loads?include=core`` answer (SGLang 0.5.23's load snapshot).

        The whole answer must arrive within ``timeout_s`` (a total deadline,
        :func:`read_within`), else :class:`~sgl_speccompact.errors.BackendTimeoutError`.
        Raises :class:`~sgl_speccompact.errors.BackendError` ("returned HTTP
        404") on a server without the route.
        """
        view = copy.copy(self)
        view.cancel_scope, view.timeout_s = None, min(timeout_s, self.timeout_s)
        return view._request("GET", "/v1/loads?include=core")

    def with_token_ids(self, on: bool) -> "HttpEndpoint":
        """A view that sends prompts as ``input_ids`` (``on``, when the tokenizer allows) or as text.

        Views share the token-id cache, so concurrent compactions with
        different settings do not change each other's requests.
        """
        if on == self.send_token_ids:
            return self
        view = copy.copy(self)
        view.send_token_ids = on
        return view

    @contextmanager
    def prefix_session(self, on: bool = True, cpu: HostCpu | None = None) -> Iterator["HttpEndpoint"]:
        """A view for one block of a compaction, its session closed on the way out.

        With ``on``, the view's ``/generate`` requests share one sglang
        session on this server (:mod:`~sgl_speccompact.backends.server_session`),
        opened by the first of them: a prompt goes upstream once, and each
        later request sends only what follows the deepest earlier prompt it
        starts with.  The session is closed when the block ends, whether it
        succeeded, failed, was cancelled or ran out of time.  A server without
        ``/open_session`` (an older sglang, sglang-router 0.3.2), a tokenizer
        the token-id check refuses, or a view sending text gets every request
        whole, as without a session.  Every thread that sends one of the
        view's requests counts its CPU in ``cpu``
        (:class:`~sgl_speccompact.result.HostCpu`).
        """
        view = copy.copy(self)
        view.host_cpu = cpu
        view.server_session = _Slot() if on else None
        try:
            yield view
        finally:
            view._close_session()

    def open_sessions(self) -> list[str]:
        """Ids of the sessions this endpoint's views opened and have not closed (all views)."""
        with self._sessions.lock:
            return sorted(self._sessions.open)

    def forget_token_ids(self) -> None:
        """Forget every remembered segment, so the next prompts are tokenized afresh (all views)."""
        self._token_ids.forget()

    # ------------------------------------------------------------------ transport

    def context_length(self) -> int | None:
        """The served model's context window in tokens, asked once; None when the server does not say.

        sglang 0.5.23's ``/model_info`` does not report it.  ``/v1/models``
        has ``max_model_len`` (always: ``--context-length`` or the model
        config's window); ``/server_info`` has ``context_length`` only when it
        was given at launch (null otherwise), so it is asked only of a server
        without ``/v1/models``.
        """
        if self._context.get("tokens") is None:  # not asked yet, or not answered: ask again
            found = None
            for path, read in (("/v1/models", lambda j: (j.get("data") or [{}])[0].get("max_model_len")),
                               ("/server_info", lambda j: j.get("context_length"))):
                try:
                    value = read(self._request("GET", path))
                except CompactionCancelledError:
                    raise
                except (SpecCompactError, AttributeError, IndexError, TypeError):  # not served: ask the next
                    continue
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    found = value
                    break
            self._context["tokens"] = found
        return self._context["tokens"]

    def abort_request(self, rid: str) -> None:
        """Abort the request ``rid`` on the server (sglang's ``POST /abort_request``; a rid the server does
        not run is ignored there).  Sent whatever the cancel scope says: it is how a cancel reaches the server.

        Raises
        ------
        BackendError
            The server refused it or could not be reached within :data:`ABORT_TIMEOUT_S`.
        """
        url = self.base_url + "/abort_request"
        try:
            res = self._http.request("POST", url, data=orjson.dumps({"rid": rid}),
                                     headers={**self._headers(), **JSON_HEADERS},
                                     timeout=min(ABORT_TIMEOUT_S, self.timeout_s), **self._environment(self.base_url))
            _ = res.content  # read to the end: the connection goes back to its pool
        except requests.RequestException as exc:
            raise BackendUnavailableError(f"{url} unreachable: {exc.__class__.__name__}") from exc
        if res.status_code != 200:
            raise http_error(url, res.status_code, res.text)

    def _headers(self) -> dict:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        if self.routing_key:  # sglang-router's manual policy pins one key to one worker
            headers[ROUTING_KEY_HEADER] = self.routing_key
        return headers

    def _environment(self, base: str) -> dict:
        env = self._env.get(base)
        if env is None:
            env = self._env[base] = environment_settings(base, self.api_key)
        return env

    def _request(self, method: str, path: str, body: dict | None = None, base: str | None = None):
        cpu = self.host_cpu
        if cpu is None:
            return self._send(method, path, body, base)
        cpu.touch()  # the thread's CPU counts from its first request of the compaction to its last
        try:
            return self._send(method, path, body, base)
        finally:
            cpu.touch()

    def _send(self, method: str, path: str, body: dict | None, base: str | None):
        headers = self._headers()
        data = None if body is None else orjson.dumps(body)
        if data is not None:
            headers.update(JSON_HEADERS)
        base = base or self.base_url
        env = self._environment(base)
        url = base + path
        timeout = self.timeout_s
        if self.cancel_scope is not None:
            self.cancel_scope.check()
            timeout = self.cancel_scope.timeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            try:
                res = self._http.request(method, url, data=data, headers=headers, timeout=timeout, stream=True, **env)
            except requests.ConnectionError as exc:
                if not closed_before_answer(exc):
                    raise
                # the server closed a kept-alive connection (its idle timeout) as this request went out
                res = self._http.request(method, url, data=data, headers=headers, timeout=timeout, stream=True, **env)
            content = read_within(res, deadline)
            if self.cancel_scope is not None:
                self.cancel_scope.check()  # cancelled while it ran: an aborted answer is no answer
        except requests.Timeout as exc:
            if self.cancel_scope is not None and self.cancel_scope.cancelled:
                raise self.cancel_scope.error() from exc
            raise BackendTimeoutError(f"{url} did not answer within {timeout:g} s") from exc
        except requests.RequestException as exc:
            raise BackendUnavailableError(f"{url} unreachable: {exc.__class__.__name__}") from exc
        if res.status_code != 200:
            raise http_error(url, res.status_code, res.text)
        if not content and path in EMPTY_ANSWERS:
            return None
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError as exc:
            raise BackendError(f"{url} returned invalid JSON") from exc

    def _generate(self, body: dict):
        if self.server_session is not None:
            sent = self._session_generate(body)
            if sent is not None:
                return sent
        return self._post_generate(self.as_token_ids(body))

    def _post_generate(self, body: dict):
        """POST a ``/generate`` body as it stands, with the view's adapter and priority."""
        if self.lora_path is not None:
            prompt = body.get("text", body.get("input_ids"))
            n = len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else None
            body["lora_path"] = [self.lora_path] * n if n else self.lora_path
        if self.priority is not None:
            body["priority"] = self.priority
        return self._post_gated("/generate", body, body)

    def _post_gated(self, path: str, body: dict, counted: dict):
        """POST ``body``; on a view with a yield gate, behind the server's foreground work, up to the
        gate's bound, and counted as the service's own while it runs (``counted``: the requests it
        becomes, as a ``/generate`` body)."""
        gate = self.yield_gate
        if gate is not None:
            gate.hold(self.cancel_scope)  # behind the server's foreground work, up to the gate's bound
        # before the scope's check; only /generate takes rids (a decision request has none to abort)
        tracked = self.in_flight is not None and path == "/generate"
        rids = self.in_flight.start(body) if tracked else []
        try:
            if gate is None:
                return self._request("POST", path, body)
            with gate.sending(counted):  # counted as the service's own while it runs
                return self._request("POST", path, body)
        finally:
            if tracked:
                self.in_flight.end(rids)

    # ------------------------------------------------------------------ sessions

    def _session_generate(self, body: dict):
        """``body`` sent in the block's session (see :mod:`~sgl_speccompact.backends.server_session`);
        None when the session does not serve it, and the caller sends it whole."""
        text = body.get("text")
        texts = text if isinstance(text, list) else [text]
        if (not text or not all(isinstance(t, str) and t for t in texts) or not self.send_token_ids
                or "session_params" in body or (body.get("sampling_params") or {}).get("n", 1) != 1):
            return None
        cache = self._token_id_cache()
        session = self._live_session() if cache is not None else None
        if session is None:
            return None
        cont = session.continuation(texts, lambda tail: len(cache.ids(tail, self.tokenize, prefix=False)))
        out = {k: v for k, v in body.items() if k != "text"}
        params: dict = {"id": session.id}
        expected = None
        if cont.node.rid is None:  # a new tree: the prompt whole, as text (the server tokenizes it once)
            out["text"] = text
        else:
            ids = suffix_ids(cache, texts, cont.at, self.tokenize)
            if not self._continues(ids, cont, body.get("sampling_params") or {}):
                return None
            params.update(rid=cont.node.rid, offset=cont.offset, drop_previous_output=True)
            out["input_ids"] = ids if isinstance(text, list) else ids[0]
            expected = [cont.offset + len(i) for i in ids]
        rids = session.rids(len(texts))
        out["session_params"], out["rid"] = params, rids if isinstance(text, list) else rids[0]
        try:
            got = self._post_generate(out)
        except BackendError as exc:
            if not any(words in str(exc) for words in REFUSALS):
                raise
            session.broken = True  # the server lost or refuses the session: the block's requests go whole
            log.warning("%s: session %s refused (%s); sending whole prompts", self.base_url, session.id, exc)
            return None
        answers = got if isinstance(got, list) else [got]
        counts = [int((a.get("meta_info") or {}).get("prompt_tokens") or 0) if isinstance(a, dict) else -1
                  for a in answers]
        if expected is not None and counts != expected:
            self._server_changed(session, ids, expected, counts)
            return None
        session.add(cont, texts, rids, counts)
        return got

    def _continues(self, ids: list[list[int]], cont: Continuation, sampling: dict) -> bool:
        """Whether suffixes ``ids`` may go as a continuation (else the request goes whole)."""
        if not all(ids):
            return False
        with self._sessions.lock:
            strips = set(self._sessions.strips)
        if any(i[0] in strips for i in ids):
            return False
        context = self._context.get("tokens")  # asked when the session opened
        mnt = sampling.get("max_new_tokens")
        # the tokenizer manager checks only the suffix of a session request: one too long for the
        # context goes whole, so the refusal is the usual one (PromptTooLongError)
        return context is None or all(cont.offset + len(i) < context and
                                      (mnt is None or cont.offset + len(i) + mnt <= context) for i in ids)

    def _server_changed(self, session: ServerSession, ids: list[list[int]], expected: list[int],
                        counts: list[int]) -> None:
        """The server counted other prompts than those sent: learn why; the answers are dropped."""
        stripped = [i[0] for i, want, got in zip(ids, expected, counts) if got == want - 1]
        if stripped and all(got in (want, want - 1) for want, got in zip(expected, counts)):
            with self._sessions.lock:  # sglang strips a leading bos_token_id from a continuation
                self._sessions.strips.update(stripped)
            log.info("%s strips token %s from a continuation: such suffixes go whole", self.base_url, stripped)
        else:
            session.broken = True
            log.warning("%s: session %s rebuilt prompts of %s tokens, expected %s; sending whole prompts",
                        self.base_url, session.id, counts, expected)

    def _live_session(self) -> ServerSession | None:
        """The block's session, opened by the first request that asks (None: none serves this block).

        No lock is held across the opening request: other threads wait on an event.
        """
        slot = self.server_session
        while True:
            with slot.lock:
                if slot.tried and slot.opening is None:
                    s = slot.session
                    return None if s is None or s.broken else s
                gate, mine = slot.opening, slot.opening is None
                if mine:
                    gate = slot.opening = threading.Event()
                    slot.tried = True
            if not mine:
                gate.wait()
                continue
            opened = None
            try:
                opened = self._open_session()
            finally:
                with slot.lock:
                    slot.session, slot.opening = opened, None
                gate.set()

    def _open_session(self) -> ServerSession | None:
        """``POST /open_session``; None when the server opens none (remembered when it has no such route)."""
        with self._sessions.lock:
            if self._sessions.served is False:
                return None
        session = ServerSession()
        body = {"capacity_of_str_len": CAPACITY_OF_STR_LEN, "session_id": session.id, "timeout": SESSION_IDLE_S}
        try:
            got = self._request("POST", "/open_session", body)
        except (CompactionCancelledError, BackendTimeoutError):
            raise
        except SpecCompactError as exc:
            if "returned HTTP 404" in str(exc) or "returned HTTP 405" in str(exc):
                with self._sessions.lock:
                    self._sessions.served = False
            log.info("%s opens no session (%s); sending whole prompts", self.base_url, exc)
            return None
        with self._sessions.lock:
            self._sessions.served = True
            self._sessions.open.add(session.id)
        if got != session.id:  # not sglang's answer: do not guess what the server made of it
            self._close(session.id)
            return None
        self.context_length()  # asked once, before the block's threads check their prompts against it
        return session

    def _close_session(self) -> None:
        """Close the block's session, if one was opened; best effort (the server closes it once idle)."""
        slot = self.server_session
        session = slot.session if slot is not None else None
        if session is not None:
            self._close(session.id)

    def _close(self, session_id: str) -> None:
        view = copy.copy(self)  # sent whatever the cancel scope says: it is how the session ends on the server
        view.cancel_scope, view.timeout_s = None, min(ABORT_TIMEOUT_S, self.timeout_s)
        try:
            view._request("POST", "/close_session", {"session_id": session_id})
        except SpecCompactError as exc:
            log.warning("%s: closing session %s failed (the server closes it after %g s idle): %s",
                        self.base_url, session_id, SESSION_IDLE_S, exc)
            return
        with self._sessions.lock:
            self._sessions.open.discard(session_id)

    def as_token_ids(self, body: dict) -> dict:
        """``body`` with its ``text`` (one or a batch) replaced by ``input_ids``, when enabled.

        The ids are exactly the server's tokenization of each full text; only
        segments not seen before are sent to ``/tokenize``.
        """
        text = body.get("text")
        if text is None or not self.send_token_ids or not text:
            return body
        cache = self._token_id_cache()
        if cache is None:
            return body
        # through this view's own connection: the cache may have been built by another compaction's view
        batch = [cache.ids(t, self.tokenize) for t in (text if isinstance(text, list) else [text])]
        if not all(batch):
            return body  # sglang refuses empty input_ids; an empty prompt goes as text
        out = {k: v for k, v in body.items() if k != "text"}
        out["input_ids"] = batch if isinstance(text, list) else batch[0]
        return out

    @property
    def token_id_cache(self) -> TokenIdCache | None:
        """The token-id cache, once built (None before the first prompt, or when text is sent)."""
        return self._token_ids.cache

    def _token_id_cache(self) -> TokenIdCache | None:
        """The token-id cache, or None when this server's tokenizer cannot be cut (checked once).

        The check calls ``/tokenize``; no lock is held across it: other
        threads wait on an event until the first one has decided.
        """
        state = self._token_ids
        while True:
            with state.lock:
                if state.mode is False or state.cache is not None:
                    return state.cache
                gate, mine = state.deciding, state.deciding is None
                if mine:
                    gate = state.deciding = threading.Event()
            if not mine:
                gate.wait()
                continue
            try:
                built = self._build_token_id_cache(state.mode)
                with state.lock:
                    state.cache = built
                    if built is None:
                        state.mode = False
            finally:
                with state.lock:
                    state.deciding = None
                gate.set()

    def _build_token_id_cache(self, mode: bool | None) -> TokenIdCache | None:
        prefix = self.tokenize([""], add_special_tokens=True)[0]
        if self._tokenize_base is not None and not mode:
            return None  # behind sglang-router: its cache-aware policy routes on the prompt text
        if concatenates(lambda text: self.tokenize([text], add_special_tokens=True)[0], self.tokenize, prefix):
            return TokenIdCache(self.tokenize, prefix)
        if mode:
            raise ConfigError(f"{self.base_url}: this tokenizer does not split at line starts; "
                              "send text (token_ids=False)")
        return None

    # ------------------------------------------------------------------ tokenizer

    def tokenize(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        """Token ids of each text in the server's tokenizer (by default no special tokens added).

        With :meth:`use_local_tokenizer` the same tokenizer runs in this
        process and no ``/tokenize`` request is sent.
        """
        if not texts:
            return []
        if self.local_tokenize is not None:
            return self.local_tokenize(list(texts), add_special_tokens)
        body = {"prompt": list(texts), "add_special_tokens": add_special_tokens}
        if self._tokenize_base is None:
            try:
                out = self._request("POST", "/tokenize", body)
            except BackendError as exc:  # sglang-router has no /tokenize: one of its workers tokenizes
                if "returned HTTP 404" not in str(exc):
                    raise
                self._tokenize_base = tokenize_base(self.base_url, self._http, self.api_key, self.timeout_s)
                if self._tokenize_base == self.base_url:
                    raise
        if self._tokenize_base is not None:
            out = self._request("POST", "/tokenize", body, base=self._tokenize_base)
        tokens = out["tokens"]
        return tokens if texts and isinstance(tokens[0], list) else [tokens]

    def use_local_tokenizer(self, tokenizer) -> None:
        """Tokenize with ``tokenizer`` (the served model's, a ``transformers`` tokenizer) in this process.

        The caller vouches that it is the server's own tokenizer (same files):
        the ids sent as ``input_ids`` must be the server's tokenization.
        """
        self.local_tokenize = lambda texts, special: [tokenizer.encode(t, add_special_tokens=special) for t in texts]

    def single_token(self, text: str) -> bool:
        """Whether the server's tokenizer encodes ``text`` as one token (the chat markers asked together)."""
        if text not in self._one_token:
            asked = list(dict.fromkeys([text, "<|im_start|>", "<|im_end|>", "<think>", "</think>"]))
            for t, ids in zip(asked, self.tokenize(asked)):
                self._one_token[t] = len(ids) == 1
        return self._one_token[text]

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Length of each text in target tokens.

        Counted through the token-id cache when the tokenizer allows it: each
        distinct segment is tokenized once (one ``/tokenize`` for all the new
        ones), so a message, a line or a prompt counted again costs nothing.
        """
        cache = self._token_id_cache()
        if cache is None:
            return [len(t) for t in self.tokenize(texts)]
        return cache.counts(list(texts), self.tokenize)


def approx_token_count(texts: list[str]) -> list[int]:
    """Rough length in tokens (4 characters each) for backends without a tokenizer.

    >>> approx_token_count(["abcdefgh", ""])
    [2, 0]
    """
    return [chars_to_tokens(len(t)) for t in texts]
