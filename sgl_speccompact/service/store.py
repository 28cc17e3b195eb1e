"""Ahead-of-time compaction: prepared summaries of a session's message prefixes, reused later.

A client that expects to compact soon sends ``{"mode": "prepare", "session": id}``
with the messages it would compact now.  The service answers 202 at once and
compacts them in the background; the result goes into a :class:`SessionStore`.
When the client's ``compact`` for that session arrives, the longest stored
prefix of its messages is reused: only the turns after it are compacted,
incrementally, with the stored summary as ``previous_summary``; if nothing
follows the prefix the stored result is the answer.

Keys
    ``(scope, session, params, prefix digest)``.  ``scope`` is a hash of the
    bearer token the caller presented (``anonymous`` without one), so no
    other API key sees a stored summary; ``params`` hashes every body field
    that shapes the summary (method, previous summary, config, focus,
    source_judge, layout, tools, chat-template kwargs), so a summary is only
    reused for the request it answers.  The prefix digest is a SHA-256 over
    the canonical JSON of the exact messages.

Matching under growth
    A stored prefix is reused when every one of its messages is byte-identical
    in the later request, with one exception: a tool output the client has
    since replaced by :data:`DUPLICATE_OUTPUT` (Hermes's pruning does this to
    the older copy once the same output comes back later), when its call id
    and name are unchanged.  The stored summary saw the full copy; the later
    request still holds it, in the newer message.  Each stored entry keeps one
    short hash per message (:func:`message_keys`) for this check.

Bounds
    The store holds at most ``max_bytes`` of results (oldest evicted first)
    and drops entries older than ``ttl_s``.  :class:`SessionStore` lives in
    memory: a restart loses it, and a ``compact`` then simply compacts
    everything.  :class:`~sgl_speccompact.service.redis_store.RedisStore` keeps
    the same keys and bounds in Redis, shared by replicas and kept across
    restarts.

Prepares in flight
    See :mod:`~sgl_speccompact.service.sessions`: identical prepares join,
    a longer one waits for the running one and continues from its result,
    and a bounded queue answers 429 beyond its bounds.

Wasted work
    Seconds of prepares cancelled, failed, or stored and never reused
    (evicted, expired, or replaced) are counted in
    ``speccompact_prepare_wasted_seconds_total``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from ..options import defaults
from ..history.estimate import chars_to_tokens

FIXED_SHARE = 0.5  # share of a compaction's time that does not depend on the history's length
SEED_SECONDS = 5.0  # expected compaction time before any compaction finished (seconds)
EWMA_WEIGHT = 0.2  # weight of the newest compaction in the expected time
SUMMARY_TOKENS = 1000  # a prepared summary's size before it exists (tokens; about 43 lines of 24 tokens)


def auth_scope(authorization: str | None) -> str:
    """The store's scope of a caller: a hash of its bearer token, or ``anonymous``.

    >>> auth_scope(None), auth_scope("Bearer k1") == auth_scope("bearer  k1"), auth_scope("Bearer k2")[:7]
    ('anonymous', True, 'key:015')
    """
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return "anonymous"
    return "key:" + hashlib.sha256(token.encode()).hexdigest()[:32]


def params_digest(fields: dict) -> str:
    """A digest of the body fields that shape a summary (order of keys does not matter).

    >>> params_digest({"method": "a", "focus": None}) == params_digest({"focus": None, "method": "a"})
    True
    """
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def prefix_digests(messages: list, lengths: set[int]) -> dict[int, str]:
    """SHA-256 of the canonical JSON of ``messages[:n]``, for each ``n`` in ``lengths`` (one pass).

    >>> m = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    >>> d = prefix_digests(m, {1, 2})
    >>> d[1] == prefix_digests(m[:1], {1})[1], d[1] != d[2]
    (True, True)
    """
    h, out = hashlib.sha256(), {}
    for n, m in enumerate(messages, 1):
        h.update(json.dumps(m, sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\x1e")  # record separator: no two message lists hash alike
        if n in lengths:
            out[n] = h.copy().hexdigest()
    return out


def self_contained(messages: list) -> bool:
    """Whether every tool result in ``messages`` answers a call made in ``messages``.

    The turns after a stored prefix are compacted on their own, so they may
    not start with results of calls inside the prefix.

    >>> call = {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "ls"}}]}
    >>> result = {"role": "tool", "tool_call_id": "c1"}
    >>> self_contained([call, result]), self_contained([result])
    (True, False)
    """
    ids: set = set()
    for m in messages:
        for c in m.get("tool_calls") or []:
            ids.add(c.get("id") if isinstance(c, dict) else None)
        if m.get("role") == "tool" and m.get("tool_call_id") not in ids:
            return False
    return True


def should_wait(elapsed_s: float, expected_s: float, rest: bool) -> bool:
    """Whether a ``compact`` waits for a running prepare of its prefix (else it cancels it).

    Compaction time is modelled as ``T(c) = T_avg * (f + (1 - f) * c / c_avg)``
    for a history of ``c`` characters: a fixed share ``f`` (writing the
    summary) plus a share that grows with the history.  Waiting costs the
    prepare's remaining ``T(c_prefix) - elapsed`` plus an incremental
    compaction of the rest ``T(c_rest)``; starting fresh costs
    ``T(c_prefix + c_rest)``.  Waiting is sooner exactly when
    ``elapsed > f * T_avg``, whatever the sizes.  With nothing after the
    prefix there is no second compaction, and waiting is always sooner.

    >>> should_wait(1.0, 10.0, rest=True), should_wait(6.0, 10.0, rest=True), should_wait(0.0, 10.0, rest=False)
    (False, True, True)
    """
    return not rest or elapsed_s > FIXED_SHARE * expected_s


def should_wait_predicted(elapsed_s: float, prefix_s: float, rest_s: float, whole_s: float) -> bool:
    """:func:`should_wait` with each compaction's time predicted for its own size (the cost model).

    Waiting costs the prepare's remaining ``prefix_s - elapsed_s`` (never
    below 0: it may outrun its prediction) plus ``rest_s``, the incremental
    compaction of the turns after the prefix (0 when there are none);
    starting fresh costs ``whole_s``.  Ties wait: the prepare's work is kept.

    >>> should_wait_predicted(1.0, 10.0, 2.0, 10.5), should_wait_predicted(9.0, 10.0, 2.0, 10.5)
    (False, True)
    >>> should_wait_predicted(0.0, 10.0, 0.0, 10.0)  # nothing after the prefix: waiting is never later
    True
    """
    return max(0.0, prefix_s - elapsed_s) + rest_s <= whole_s


def history_tokens(messages: list) -> int:
    """Tokens of ``messages`` as the cost model counts them: a quarter of their JSON's characters.

    >>> history_tokens([{"role": "user", "content": "x" * 400}])
    108
    """
    return chars_to_tokens(sum(len(json.dumps(m, ensure_ascii=False)) for m in messages))


DUPLICATE_OUTPUT = "[Duplicate tool output — same content as a more recent call]"  # Hermes's back-reference
KEY_CHARS = 16  # hex characters kept of each per-message hash (64 bits)
MAX_PER_SESSION = 8  # entries kept per (scope, session, params); the shortest prefix goes first


def _short(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:KEY_CHARS]


def message_keys(messages: list) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(exact, loose)``: per message a hash of it, and for a tool output a hash without its content.

    ``loose`` is ``""`` for every message that is not a tool output.

    >>> a = {"role": "tool", "tool_call_id": "c1", "content": "x" * 300}
    >>> exact, loose = message_keys([{"role": "user", "content": "u"}, a, {**a, "content": DUPLICATE_OUTPUT}])
    >>> exact[1] != exact[2], loose[0], loose[1] == loose[2] != ""
    (True, '', True)
    """
    exact = tuple(_short(m) for m in messages)
    loose = tuple(_short({k: v for k, v in m.items() if k != "content"})
                  if isinstance(m, dict) and m.get("role") == "tool" else "" for m in messages)
    return exact, loose


def covers(stored: "Stored", keys: tuple[tuple[str, ...], tuple[str, ...]], messages: list) -> bool:
    """Whether ``stored`` is a reusable prefix of ``messages`` (``keys``: their :func:`message_keys`).

    Each stored message must be identical, or a tool output that ``messages``
    now carries as :data:`DUPLICATE_OUTPUT` under the same call; the rest
    must be self-contained.

    >>> call = {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "cat"}}]}
    >>> out = {"role": "tool", "tool_call_id": "c1", "content": "x" * 300}
    >>> first = [call, out]
    >>> e, lo = message_keys(first)
    >>> s = Stored(None, 2, "", 0, 0.0, 0.0, e, lo)
    >>> later = [call, {**out, "content": DUPLICATE_OUTPUT}, {"role": "user", "content": "again"}]
    >>> covers(s, message_keys(later), later), covers(s, message_keys(later[:1]), later[:1])
    (True, False)
    """
    n = stored.n_messages
    exact, loose = keys
    if n > len(messages) or len(stored.exact) != n:
        return False
    for i in range(n):
        if exact[i] == stored.exact[i]:
            continue
        if not (stored.loose[i] and loose[i] == stored.loose[i] and messages[i].get("content") == DUPLICATE_OUTPUT):
            return False
    return self_contained(messages[n:])


@dataclass
class Stored:
    """One prepared result."""

    result: Any  # the CompactionResult
    n_messages: int  # messages of the prefix it covers
    digest: str  # prefix digest of those messages
    size: int  # bytes it counts against the store's bound
    cost_s: float  # wall time it took to make (seconds)
    created: float  # when it was stored (the store's clock, set by put)
    exact: tuple[str, ...] = ()  # message_keys(prefix)[0]: one hash per message
    loose: tuple[str, ...] = ()  # message_keys(prefix)[1]: per tool output, a hash without its content
    used: bool = False  # reused by at least one compact


def make_stored(result: Any, messages: list, cost_s: float) -> Stored:
    """A :class:`Stored` for ``result`` of ``messages``; its size counts the result's JSON and the hashes."""
    n = len(messages)
    exact, loose = message_keys(messages)
    size = len(result.model_dump_json()) + (2 * KEY_CHARS + 8) * n
    return Stored(result, n, prefix_digests(messages, {n})[n] if n else "", size, cost_s, 0.0, exact, loose)


@dataclass
class SessionStore:
    """Prepared results and each session's ``auto`` pick, in memory, bounded by bytes and age; thread-safe.

    Parameters
    ----------
    max_bytes : int
        Total size of stored results (their JSON); the oldest go first.
    ttl_s : float
        Age after which an entry is dropped (seconds).
    on_waste : callable, optional
        Called with the cost in seconds of an entry dropped without being used.
    clock : callable
        Monotonic clock (seconds); tests pass their own.
    """

    max_bytes: int = field(default_factory=lambda: defaults().session_store_bytes)  # bound on stored result bytes
    ttl_s: float = field(default_factory=lambda: defaults().session_ttl_s)  # older entries are dropped (seconds)
    on_waste: Callable[[float], None] | None = None  # cost of an entry dropped unused (seconds)
    clock: Callable[[], float] = time.monotonic  # monotonic seconds
    max_picks: int = 65536  # sessions whose auto pick is remembered, at most (the oldest are forgotten)
    on_fault: Callable[[str, str], None] | None = None  # RedisStore's fault hook; memory never faults
    blocking: ClassVar[bool] = False  # its calls never wait on the network: the service runs them inline
    breaker: ClassVar[None] = None  # no circuit to open: RedisStore's breaker
    _entries: OrderedDict = field(default_factory=OrderedDict)  # (scope, session, params, digest) -> Stored
    _picks: OrderedDict = field(default_factory=OrderedDict)  # (scope, session) -> (time, pick)
    _bytes: int = 0  # their total size
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, scope: str, session: str, params: str, stored: Stored) -> None:
        """Store one result (replacing the same key), then enforce the bounds."""
        key = (scope, session, params, stored.digest)
        with self._lock:
            stored.created = self.clock()
            if key in self._entries:
                self._drop(key)
            if stored.size > self.max_bytes:
                self._waste(stored)
                return
            self._entries[key] = stored
            self._bytes += stored.size
            self._expire()
            mine = [k for k in self._entries if k[:3] == key[:3]]
            while len(mine) > MAX_PER_SESSION:
                shortest = min(mine, key=lambda k: self._entries[k].n_messages)
                self._drop(shortest)
                mine.remove(shortest)
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))

    def longest(self, scope: str, session: str, params: str, messages: list) -> Stored | None:
        """The stored entry covering the longest prefix of ``messages`` (:func:`covers`)."""
        with self._lock:
            self._expire()
            mine = [s for (sc, se, pa, _), s in self._entries.items() if (sc, se, pa) == (scope, session, params)
                    and s.n_messages <= len(messages)]
        if not mine:
            return None
        keys = message_keys(messages)
        for s in sorted(mine, key=lambda s: -s.n_messages):
            if covers(s, keys, messages):
                with self._lock:
                    s.used = True
                return s
        return None

    def pick(self, scope: str, session: str) -> dict | None:
        """The ``auto`` pick stored for a session (None: none yet, or older than ``ttl_s``)."""
        with self._lock:
            got = self._picks.get((scope, session))
            if got is None or self.clock() - got[0] > self.ttl_s:
                return None
            return got[1]

    def set_pick(self, scope: str, session: str, choice: dict) -> dict:
        """Keep ``choice`` as the session's pick unless one is kept already; the kept one."""
        with self._lock:
            got = self._picks.get((scope, session))
            if got is not None and self.clock() - got[0] <= self.ttl_s:
                return got[1]
            self._picks[(scope, session)] = (self.clock(), choice)
            self._picks.move_to_end((scope, session))
            while len(self._picks) > self.max_picks:
                self._picks.popitem(last=False)
            return choice

    def drop_pick(self, scope: str, session: str) -> None:
        """Forget a session's pick (one its request may not run)."""
        with self._lock:
            self._picks.pop((scope, session), None)

    def health(self) -> dict:
        """The store's state for ``/health``."""
        return {"kind": "memory", "entries": len(self)}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def bytes(self) -> int:
        """Bytes stored now."""
        return self._bytes

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, s in self._entries.items() if now - s.created > self.ttl_s]:
            self._drop(key)

    def _drop(self, key) -> None:
        stored = self._entries.pop(key)
        self._bytes -= stored.size
        if not stored.used:
            self._waste(stored)

    def _waste(self, stored: Stored) -> None:
        if self.on_waste is not None:
            self.on_waste(stored.cost_s)


class ExpectedTime:
    """The expected time of one compaction: a moving average of the service's finished ones."""

    def __init__(self, seed_s: float = SEED_SECONDS):
        self.seconds = seed_s  # current estimate (seconds)
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        with self._lock:
            self.seconds += EWMA_WEIGHT * (seconds - self.seconds)
