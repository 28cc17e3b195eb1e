"""Background prepares yield to foreground work on the target server, between requests.

A prepare's compaction sends many short requests (one per line, judgement
or repair).  Before each target request a background view waits while the
target server runs requests that are not the service's background ones
(the agent's turns, a compaction the agent waits for), up to a bound per
request, so a prepare always finishes.  A request already sent is never
held back: decode steps are shared by the running batch, so the agent's
turns are slowed only by the prepare requests that overlap them.

The server's load comes from SGLang 0.5.23's ``GET /v1/loads?include=core``
(``sglang/srt/entrypoints/v1_loads.py``): ``{"loads": [{"dp_rank",
"num_running_reqs", "num_waiting_reqs", ...}, ...], ...}``, one entry per
DP rank.  The scheduler publishes that snapshot at every prefill, when it
goes idle, and every ``--load-snapshot-publish-interval`` (15) decode steps.
Foreground = running + waiting over every rank, less the background items
(texts x samples) this service had in flight when the snapshot was read.

The bound holds, whatever ``/v1/loads`` does
    * One answer is reused for :data:`LOADS_TTL_S` counted from when it
      *arrived*, so a slow answer is not stale on arrival.
    * At most one ``/v1/loads`` request per server is in flight: it runs on a
      thread of its own, with a total deadline (:data:`LOADS_TIMEOUT_S`), and
      every held request shares it.  A held request never waits in that
      request: it looks at the answers that arrived, and while none has
      arrived yet it waits as if the server were busy.
    * So a request is held at most the bound, the time spent waiting for
      ``/v1/loads`` included, and its compaction's cancel scope (client gone,
      deadline) ends the hold at once.
    * A server without the route (404: an older SGLang, or a router in
      front) is never waited on, and the log says so once; any other failure
      (an error, garbage, the deadline) lets requests go until the next answer.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

log = logging.getLogger(__name__)

LOADS_PATH = "/v1/loads?include=core"  # SGLang 0.5.23's load snapshot, scalar fields only
YIELD_POLL_S = 0.05  # how often a held request looks at the server's load again (seconds)
LOADS_TTL_S = 0.04  # one /v1/loads answer serves every check this long (seconds; under YIELD_POLL_S)
LOADS_TIMEOUT_S = 2.0  # total deadline of one /v1/loads request (seconds); a slower answer counts as unknown
PENDING = object()  # foreground(): no answer has arrived yet and one is on its way


def yield_delay(foreground: int | None, waited_s: float, bound_s: float, poll_s: float = YIELD_POLL_S) -> float:
    """Seconds a background request waits before it looks at the load again; 0.0: send it now.

    It waits while the server runs foreground requests (``foreground`` > 0)
    and it has waited less than ``bound_s``; never past the bound.  An
    unknown load (``None``) never holds a request.

    Worked example, bound 2 s, poll 0.05 s: the agent's turn is running
    (1 foreground request) and the request has waited 0.5 s, so it waits
    0.05 s more; at 1.98 s it waits the 0.02 s left; at 2 s it goes even
    though the turn still runs; with the server free it goes at once.

    >>> yield_delay(1, 0.5, 2.0, 0.05), round(yield_delay(1, 1.98, 2.0, 0.05), 3)
    (0.05, 0.02)
    >>> yield_delay(1, 2.0, 2.0, 0.05), yield_delay(0, 0.5, 2.0, 0.05), yield_delay(None, 0.0, 2.0, 0.05)
    (0.0, 0.0, 0.0)
    """
    if not foreground or bound_s - waited_s <= 1e-9:  # clocks sum in floats: a nanosecond short is the bound
        return 0.0
    return min(poll_s, bound_s - waited_s)


def request_items(body: dict) -> int:
    """Scheduler requests one ``/generate`` body becomes: its texts (or id lists) times ``n``.

    >>> request_items({"text": "a"}), request_items({"text": ["a", "b"], "sampling_params": {"n": 3}})
    (1, 6)
    >>> request_items({"input_ids": [[1, 2], [3]], "sampling_params": [{"n": 1}, {"n": 2}]})
    3
    """
    prompt = body.get("text", body.get("input_ids"))
    batch = isinstance(prompt, list) and bool(prompt) and not isinstance(prompt[0], int)
    texts = len(prompt) if batch else 1
    params = body.get("sampling_params") or {}
    if isinstance(params, list):
        ns = [int((p or {}).get("n") or 1) for p in params] or [1]
        return sum(ns) if len(ns) == texts else texts * max(ns)
    return texts * int(params.get("n") or 1)


def server_requests(answer: Any) -> int:
    """Running plus waiting requests over every DP rank of a ``/v1/loads`` answer.

    Anything else (garbage, a wrong shape, negative counts) raises ``ValueError``.

    >>> server_requests({"loads": [{"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 1},
    ...                            {"dp_rank": 1, "num_running_reqs": 1, "num_waiting_reqs": 0}]})
    4
    >>> server_requests({"loads": "busy"})
    Traceback (most recent call last):
    ...
    ValueError: not a /v1/loads answer
    """
    loads = answer.get("loads") if isinstance(answer, dict) else None
    if not isinstance(loads, list) or not all(isinstance(x, dict) for x in loads):
        raise ValueError("not a /v1/loads answer")
    counts = [x.get(k) or 0 for x in loads for k in ("num_running_reqs", "num_waiting_reqs")]
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        raise ValueError("not a /v1/loads answer")
    return sum(counts)


class Unsupported(Exception):
    """The server has no ``/v1/loads`` (what ``fetch`` raises for a 404)."""


class YieldGate:
    """Holds one target server's background requests while it serves foreground work (see the module doc).

    Parameters
    ----------
    fetch
        ``() -> dict``: the server's ``/v1/loads`` answer, within its own
        total deadline; raises :class:`Unsupported` when the route is missing.
    bound_s
        The longest one request waits (seconds).
    poll_s
        How often a held request looks again (seconds); one answer is reused
        for :data:`LOADS_TTL_S` (the ``ttl_s`` attribute).
    clock, sleep
        ``time.monotonic`` and the wait (injectable: fake clocks in tests).
    spawn
        ``(fn) -> None``: runs the shared ``/v1/loads`` request; by default on
        a new daemon thread (tests run it inline).
    name
        The server's role in log lines.
    on_hold
        ``(seconds)``, called after each request that waited (metrics).

    Attributes ``held`` (requests that waited), ``held_s`` (seconds waited
    in all), ``at_bound`` (requests sent at the bound with foreground work
    still running) and ``loads_asked`` (``/v1/loads`` requests) count what
    the gate did.
    """

    def __init__(self, fetch: Callable[[], dict], bound_s: float, *, poll_s: float = YIELD_POLL_S,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] | None = None, name: str = "target",
                 on_hold: Callable[[float], None] | None = None, spawn: Callable[[Callable], None] | None = None):
        self.fetch, self.bound_s, self.poll_s, self.ttl_s = fetch, bound_s, poll_s, LOADS_TTL_S
        self.clock, self.name, self.on_hold = clock, name, on_hold  # on_hold(seconds): after each held request
        self.sleep = sleep  # None: wait on the request's cancel scope (or time.sleep without one)
        self.spawn = spawn or _on_thread  # runs the shared /v1/loads request
        self._lock = threading.Lock()  # guards the counts and the cached answer; never held across a request
        self._own = 0  # background items in flight on this server
        self._cached: tuple[float, int | None] | None = None  # (when it arrived, foreground) of the last answer
        self._asking = False  # a /v1/loads request is in flight
        self.supported = True  # False once the server answered 404: never wait again
        self.held = self.at_bound = self.loads_asked = 0
        self.held_s = 0.0

    def foreground(self) -> Any:
        """Foreground requests on the server by the latest answer; None: unknown; :data:`PENDING`: none yet.

        An answer older than ``ttl_s`` (since it arrived) starts a new
        ``/v1/loads`` request unless one is in flight; it is used meanwhile.
        Never waits for the request.
        """
        if not self.supported:
            return None
        with self._lock:
            cached = self._cached
            if cached is not None and self.clock() - cached[0] < self.ttl_s:
                return cached[1]
            ask, self._asking = not self._asking, True
            if ask:
                self.loads_asked += 1
        if ask:
            self.spawn(self._ask)
        with self._lock:  # a request run inline has answered already
            return PENDING if self._cached is None else self._cached[1]

    def _ask(self) -> None:
        """One ``/v1/loads`` request; its answer is stamped when it arrives."""
        with self._lock:
            own = self._own
        value = None
        try:
            value = max(0, server_requests(self.fetch()) - own)
        except Unsupported:
            with self._lock:
                was, self.supported = self.supported, False
            if was:
                log.warning("%s has no /v1/loads (HTTP 404: an older SGLang, or a router in front): background "
                            "prepares will not yield to its foreground requests", self.name)
        except Exception as exc:  # noqa: BLE001 - a load we cannot read never holds a request
            log.debug("%s /v1/loads failed: %s", self.name, exc)
        finally:
            with self._lock:
                self._cached, self._asking = (self.clock(), value), False

    def hold(self, scope=None) -> float:
        """Wait before one background request as :func:`yield_delay` says; the seconds waited.

        The wait for a first ``/v1/loads`` answer counts as held (bounded
        alike).  ``scope`` (a :class:`~sgl_speccompact.service.cancel.CancelScope`)
        is checked before every wait and ends the wait when cancelled.
        """
        start = self.clock()
        waited, at_bound = 0.0, False
        while True:
            busy = self.foreground()
            delay = yield_delay(1 if busy is PENDING else busy, waited, self.bound_s, self.poll_s)
            if delay <= 0:
                at_bound = busy is not PENDING and bool(busy)  # sent with foreground work running: the bound
                break
            if scope is not None:
                scope.check()
            if self.sleep is not None:
                self.sleep(delay)
            elif scope is not None:
                scope.wait(delay)
            else:
                time.sleep(delay)
            waited = self.clock() - start
        if scope is not None:
            scope.check()
        if waited > 0:
            with self._lock:
                self.held += 1
                self.held_s += waited
                self.at_bound += at_bound
            if self.on_hold is not None:
                self.on_hold(waited)
        return waited

    @contextmanager
    def sending(self, body: dict) -> Iterator[None]:
        """Count ``body``'s scheduler requests (:func:`request_items`) as background ones while it runs."""
        items = request_items(body)
        with self._lock:
            self._own += items
        try:
            yield
        finally:
            with self._lock:
                self._own -= items

    def own(self) -> int:
        """Background items in flight now."""
        with self._lock:
            return self._own


def _on_thread(fn: Callable[[], None]) -> None:
    threading.Thread(target=fn, name="v1-loads", daemon=True).start()
