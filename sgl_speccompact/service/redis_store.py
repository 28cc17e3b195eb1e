"""Prepared results in Redis: one store shared by service replicas, kept across restarts.

:class:`RedisStore` has :class:`~sgl_speccompact.service.store.SessionStore`'s
interface, keys and bounds (``max_bytes`` over every replica, ``ttl_s``,
oldest first, :data:`~.store.MAX_PER_SESSION` per session, the waste of
entries dropped unused), so replicas behind one address reuse each other's
prepares and a restarted service finds them again.  Selected with
``--session-store redis://host:port/db``.

Layout, under ``prefix`` (``sgl_speccompact:v1:``), ids being SHA-256 of the
store keys (no caller text in a Redis key):

* ``e:<id>``: hash ``meta`` (JSON: messages, digest, per-message hashes,
  size, cost), ``result`` (the CompactionResult's JSON), ``cost``, ``used``;
* ``g:<group>``: sorted set of a session's entry ids by prefix length;
* ``lru`` (sorted set id -> order stored, from the counter ``seq``),
  ``ages`` (id -> stored at, Unix seconds), ``sizes``, ``groups`` (hashes
  id -> size, group) and ``bytes``: the bounds, shared;
* ``p:<group>``: a session's ``auto`` pick, ``SET NX`` with the TTL.

Puts, lookups and marking an entry used are Lua scripts, so the bounds hold
with several replicas writing at once, and every key a script writes gets
its TTL in the same script (no key is ever left without one).  The scripts
name keys built inside them, which a single Redis server (with or without
replicas) runs; Redis Cluster does not.  Ages use the replicas' wall clocks
(``time.time``): keep them in sync.

Failing small
    The store is a cache: no compaction fails because of it.

    * Every Redis request has a short socket timeout
      (:data:`SOCKET_TIMEOUT_S`).  A request that fails or times out opens a
      circuit breaker (:class:`Breaker`): for :data:`BREAKER_OPEN_S` every
      call is a miss (a lookup) or skipped (a put) at once, without touching
      Redis; one log line says so when it opens, and ``on_fault("skipped",
      op)`` counts each call it answers.  The service runs these calls off
      its event loop (:mod:`~sgl_speccompact.service.sessions`), so only the
      request that needs the store waits on it.
    * Every value read back is parsed into a typed record
      (:class:`EntryMeta`, :class:`PickRecord`, the CompactionResult, the
      integer counters).  A malformed value, or a key of the wrong Redis type,
      is a miss: the key is deleted and ``on_fault("malformed", what)``
      counts it.  A server that answered is not a failure: the breaker stays
      closed.

An unreachable Redis at start is a :class:`~sgl_speccompact.errors.ConfigError`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..options import defaults
from ..errors import ConfigError
from .store import MAX_PER_SESSION, Stored, covers, message_keys

log = logging.getLogger(__name__)

PREFIX = "sgl_speccompact:v1:"  # every key of the store starts with this
SOCKET_TIMEOUT_S = 0.5  # a Redis request (or connect) taking longer counts as a failure (seconds)
BREAKER_OPEN_S = 5.0  # after a failure every call is a miss at once for this long (seconds)
KEEP_EXTRA_S = 60  # Redis expires a key this long after its TTL, should no put sweep it first (seconds)

# the Redis type each fixed bookkeeping key must have (a key of another type is deleted as malformed)
SHARED_KEYS = {"lru": "zset", "ages": "zset", "sizes": "hash", "groups": "hash", "bytes": "string", "seq": "string"}
COUNTERS = ("bytes", "seq")  # shared keys that hold an integer

_DROP = """
local function drop(p, x, acc)
  local e = p .. 'e:' .. x
  local used, c = nil, nil
  if redis.call('TYPE', e).ok == 'hash' then
    used, c = redis.call('HGET', e, 'used'), tonumber(redis.call('HGET', e, 'cost'))
  end
  if used ~= '1' and c then acc.wasted = acc.wasted + c end
  local g = redis.call('HGET', p .. 'groups', x)
  if g then redis.call('ZREM', p .. 'g:' .. g, x) end
  local s = tonumber(redis.call('HGET', p .. 'sizes', x))
  if s then redis.call('DECRBY', p .. 'bytes', math.floor(s)) end
  redis.call('DEL', e)
  redis.call('HDEL', p .. 'sizes', x)
  redis.call('HDEL', p .. 'groups', x)
  redis.call('ZREM', p .. 'lru', x)
  redis.call('ZREM', p .. 'ages', x)
end
local function keep_shared(p, keep)
  for _, k in ipairs({'lru', 'ages', 'sizes', 'groups', 'bytes', 'seq'}) do
    if redis.call('EXISTS', p .. k) == 1 then redis.call('EXPIRE', p .. k, keep) end
  end
end
"""

# ARGV: prefix, id, group, meta, result, size, cost, n, now, ttl, max_bytes, per_session, extra -> wasted seconds
PUT = _DROP + """
local p, id, gid, meta, result = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local size, cost, n = tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8])
local now, ttl, max, per = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local keep = math.ceil(ttl) + tonumber(ARGV[13])
local acc = {wasted = 0}
for _, x in ipairs(redis.call('ZRANGEBYSCORE', p .. 'ages', '-inf', '(' .. (now - ttl))) do drop(p, x, acc) end
if redis.call('ZSCORE', p .. 'lru', id) then drop(p, id, acc) end
if size > max then keep_shared(p, keep) return tostring(acc.wasted + tonumber(cost)) end
local e, g = p .. 'e:' .. id, p .. 'g:' .. gid
redis.call('DEL', e)
redis.call('HSET', e, 'meta', meta, 'result', result, 'cost', cost, 'used', '0')
redis.call('EXPIRE', e, keep)
redis.call('ZADD', g, n, id)
redis.call('EXPIRE', g, keep)
redis.call('ZADD', p .. 'lru', redis.call('INCR', p .. 'seq'), id)
redis.call('ZADD', p .. 'ages', now, id)
redis.call('HSET', p .. 'sizes', id, size)
redis.call('HSET', p .. 'groups', id, gid)
redis.call('INCRBY', p .. 'bytes', size)
while redis.call('ZCARD', g) > per do drop(p, redis.call('ZRANGE', g, 0, 0)[1], acc) end
while tonumber(redis.call('GET', p .. 'bytes') or '0') > max do
  local first = redis.call('ZRANGE', p .. 'lru', 0, 0)
  if #first == 0 then redis.call('SET', p .. 'bytes', 0) break end
  drop(p, first[1], acc)
end
keep_shared(p, keep)
return tostring(acc.wasted)
"""

# ARGV: prefix, id, ttl, extra -> nothing (an entry found malformed: dropped with its bookkeeping)
DROP = _DROP + """
local acc = {wasted = 0}
drop(ARGV[1], ARGV[2], acc)
keep_shared(ARGV[1], math.ceil(tonumber(ARGV[3])) + tonumber(ARGV[4]))
return tostring(acc.wasted)
"""

# ARGV: prefix, group, most messages, oldest stored-at kept -> flat [id, meta, id, meta, ...]
CANDIDATES = """
local p, gid, n, cutoff = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {}
for _, x in ipairs(redis.call('ZRANGEBYSCORE', p .. 'g:' .. gid, '-inf', n)) do
  local at = redis.call('ZSCORE', p .. 'ages', x)
  local e = p .. 'e:' .. x
  local meta = false
  if redis.call('TYPE', e).ok == 'hash' then meta = redis.call('HGET', e, 'meta') end
  if at and tonumber(at) >= cutoff then table.insert(out, x) table.insert(out, meta or '') end
end
return out
"""

# ARGV: prefix, id -> the entry's result, marked used; nil when the entry is gone (nothing is re-created)
TAKE = """
local e = ARGV[1] .. 'e:' .. ARGV[2]
if redis.call('TYPE', e).ok ~= 'hash' then return false end
local result = redis.call('HGET', e, 'result')
if not result then return false end
redis.call('HSET', e, 'used', '1')
return result
"""


class EntryMeta(BaseModel):
    """The ``meta`` field of an entry, as read back (anything else is malformed)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    n: int = Field(ge=0)  # messages of the prefix it covers
    digest: str  # prefix digest of those messages
    exact: list[str]  # one hash per message (store.message_keys)
    loose: list[str]  # per tool output, a hash without its content ("" for other messages)
    size: int = Field(ge=0)  # bytes it counts against the bound
    cost: float = Field(ge=0)  # seconds it took to make

    @model_validator(mode="after")
    def _one_hash_per_message(self) -> "EntryMeta":
        if len(self.exact) != self.n or len(self.loose) != self.n:
            raise ValueError("one exact and one loose hash per message")
        return self


class PickRecord(BaseModel):
    """A session's ``auto`` pick as read back: a JSON object naming a method (its other fields are kept)."""

    model_config = ConfigDict(strict=True, extra="allow")

    method: str = Field(min_length=1)  # the method picked (the caller checks that its request allows it)


def _id(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def safe_url(url: str) -> str:
    """``url`` without its password, for messages.

    >>> safe_url("redis://user:secret@10.0.0.2:6379/0")
    'redis://user:***@10.0.0.2:6379/0'
    """
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


@dataclass
class Breaker:
    """A circuit breaker: after a failure, calls are refused for ``open_s`` seconds; thread-safe.

    >>> t = [0.0]
    >>> b = Breaker(open_s=5.0, clock=lambda: t[0])
    >>> b.allow(), b.trip(), b.trip(), b.allow()
    (True, True, False, False)
    >>> t[0] = 5.0
    >>> b.allow(), b.state()
    (True, 'closed')
    """

    open_s: float = BREAKER_OPEN_S  # how long calls are refused after a failure (seconds)
    clock: Callable[[], float] = time.monotonic  # monotonic seconds
    until: float = float("-inf")  # refused until then (the clock's seconds)
    trips: int = 0  # times it opened
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def allow(self) -> bool:
        """Whether a call may go to the server now."""
        with self._lock:
            return self.clock() >= self.until

    def trip(self) -> bool:
        """A call failed: refuse calls for ``open_s``; True when this opened it (it was closed)."""
        with self._lock:
            now = self.clock()
            opened = now >= self.until
            self.until = now + self.open_s
            self.trips += opened
            return opened

    def state(self) -> str:
        """``closed`` (calls go to the server) or ``open`` (each call is a miss at once)."""
        return "closed" if self.allow() else "open"


class Malformed(Exception):
    """A value or key read back from the store is not what the store writes."""


class RedisStore:
    """:class:`~.store.SessionStore` in Redis (see the module doc).

    Parameters
    ----------
    url : str
        ``redis://[user:password@]host:port/db`` (or ``rediss://``, ``unix://``).
    max_bytes, ttl_s : as SessionStore's, over every replica using the same Redis and ``prefix``.
    clock : callable
        Wall-clock seconds (``time.time``); tests pass their own.
    client : redis.Redis, optional
        A client to use instead of one made from ``url``.
    breaker : Breaker, optional
        The circuit breaker (a fresh one when omitted).
    """

    blocking = True  # its calls wait on the network: the service runs them off its event loop

    def __init__(self, url: str, max_bytes: int | None = None, ttl_s: float | None = None, *,
                 prefix: str = PREFIX, clock: Callable[[], float] = time.time, client: Any = None,
                 breaker: Breaker | None = None):
        self.url = safe_url(url)  # for messages: no password
        table = defaults()  # the service's table, where the caller gives no bound
        self.max_bytes = table.session_store_bytes if max_bytes is None else max_bytes  # bound on stored bytes
        self.ttl_s = table.session_ttl_s if ttl_s is None else ttl_s  # older entries are dropped (seconds)
        self.prefix = prefix  # key prefix: stores with different prefixes share nothing
        self.clock = clock  # wall-clock seconds
        self.breaker = breaker or Breaker()  # open after a failure: every call a miss at once
        self.on_waste: Callable[[float], None] | None = None  # cost of entries dropped unused (seconds)
        self.on_fault: Callable[[str, str], None] | None = None  # (kind, op or what): error, skipped, malformed
        self.failures = 0  # Redis requests that failed
        self.malformed = 0  # values or keys found malformed (each deleted)
        self.last_error = ""  # the latest failure, for /health
        if client is None:
            try:
                import redis
            except ImportError as exc:
                raise ConfigError("needs the redis package: pip install 'sgl-speccompact[redis]'",
                                  field="--session-store") from exc
            client = redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT_S,
                                          socket_connect_timeout=SOCKET_TIMEOUT_S)
        self.redis = client
        try:
            self.redis.ping()
        except Exception as exc:  # noqa: BLE001 - any client error: the store cannot be used
            raise ConfigError(f"cannot reach {self.url}: {exc.__class__.__name__}: {exc}",
                              field="--session-store") from None
        self._put = self.redis.register_script(PUT)
        self._drop = self.redis.register_script(DROP)
        self._candidates = self.redis.register_script(CANDIDATES)
        self._take = self.redis.register_script(TAKE)

    # ------------------------------------------------------------------ failing small

    def health(self) -> dict:
        """The store's state from what its calls saw (no request to Redis: it never blocks)."""
        return {"kind": "redis", "circuit": self.breaker.state(), "failures": self.failures,
                "malformed": self.malformed, "last_error": self.last_error}

    def _fault(self, kind: str, what: str) -> None:
        if self.on_fault is not None:
            self.on_fault(kind, what)

    def _call(self, op: str, fn: Callable[[], Any], default: Any, keys: dict | None = None) -> Any:
        """``fn()`` unless the breaker is open; a failure opens it.  ``default`` when it did not run.

        ``keys`` (key -> Redis type) are the keys ``fn`` touches besides the
        shared ones: checked when Redis refuses ``fn`` for a wrong type.
        """
        if not self.breaker.allow():
            self._fault("skipped", op)
            return default
        try:
            return self._repairing(fn, keys or {})
        except Malformed as exc:  # Redis answered: no reason to stop asking it
            self.malformed += 1
            self._fault("malformed", op)
            log.warning("session store %s: %s refused (%s); treated as a miss", self.url, op, exc)
        except Exception as exc:  # noqa: BLE001 - the store is a cache: a failure is a miss
            self.failures += 1
            self.last_error = f"{op}: {exc.__class__.__name__}"  # no address: /health may be public
            self._fault("error", op)
            if self.breaker.trip():
                log.warning("session store %s: %s failed (%s: %s); every store call is a miss for %g s",
                            self.url, op, exc.__class__.__name__, exc, self.breaker.open_s)
        return default

    def _repairing(self, fn: Callable[[], Any], keys: dict) -> Any:
        """``fn()``; when Redis refuses it for a key of the wrong type, delete such keys and run it again once."""
        import redis

        try:
            return fn()
        except redis.ResponseError as exc:  # Redis answered: its data, not its connection, is wrong
            if not self._repair({**{self.prefix + k: t for k, t in SHARED_KEYS.items()}, **keys}):
                raise Malformed(str(exc)) from exc
        return fn()

    def _repair(self, keys: dict) -> bool:
        """Delete each of ``keys`` (key -> Redis type) of the wrong type or value; whether any was deleted."""
        bad = []
        for key, kind in keys.items():
            found = _text(self.redis.type(key))
            if found not in ("none", kind):
                bad.append(key)
            elif key[len(self.prefix):] in COUNTERS and found == "string":
                try:
                    int(self.redis.get(key) or 0)
                except ValueError:
                    bad.append(key)
        for key in bad:
            self._malformed(key[len(self.prefix):].split(":")[0], key)
        return bool(bad)

    def _malformed(self, what: str, key: str) -> None:
        self.malformed += 1
        log.warning("session store %s: malformed %s deleted", self.url, what)
        self._fault("malformed", what)
        self.redis.delete(key)

    def _drop_entry(self, rid: str) -> None:
        self.malformed += 1
        log.warning("session store %s: malformed entry deleted", self.url)
        self._fault("malformed", "entry")
        self._drop(args=[self.prefix, rid, repr(self.ttl_s), KEEP_EXTRA_S])

    # ------------------------------------------------------------------ the store

    def put(self, scope: str, session: str, params: str, stored: Stored) -> None:
        """Store one result (replacing the same key), then enforce the bounds; a failure is logged."""
        stored.created = self.clock()
        meta = EntryMeta(n=stored.n_messages, digest=stored.digest, exact=list(stored.exact),
                         loose=list(stored.loose), size=stored.size, cost=float(stored.cost_s)).model_dump_json()
        group = _id(scope, session, params)
        args = [self.prefix, _id(scope, session, params, stored.digest), group, meta,
                stored.result.model_dump_json(), stored.size, repr(stored.cost_s), stored.n_messages,
                repr(stored.created), repr(self.ttl_s), self.max_bytes, MAX_PER_SESSION, KEEP_EXTRA_S]
        wasted = self._call("put", lambda: float(self._put(args=args)), 0.0, {self.prefix + "g:" + group: "zset"})
        if wasted and self.on_waste is not None:
            self.on_waste(wasted)

    def longest(self, scope: str, session: str, params: str, messages: list) -> Stored | None:
        """The stored entry covering the longest prefix of ``messages`` (:func:`~.store.covers`)."""
        group = _id(scope, session, params)
        return self._call("lookup", lambda: self._longest(group, messages), None, {self.prefix + "g:" + group: "zset"})

    def _longest(self, group: str, messages: list) -> Stored | None:
        from ..result import CompactionResult

        flat = self._candidates(args=[self.prefix, group, len(messages), repr(self.clock() - self.ttl_s)])
        found = []
        for rid, raw in zip(flat[::2], flat[1::2]):
            rid = _text(rid)
            try:
                m = EntryMeta.model_validate_json(raw)
            except ValidationError:
                self._drop_entry(rid)
                continue
            found.append((rid, Stored(None, m.n, m.digest, m.size, m.cost, 0.0, tuple(m.exact), tuple(m.loose))))
        keys = message_keys(messages)
        for rid, s in sorted(found, key=lambda f: -f[1].n_messages):
            if not covers(s, keys, messages):
                continue
            result = self._take(args=[self.prefix, rid])
            if result is None:  # evicted since the candidates were read
                continue
            try:
                s.result, s.used = CompactionResult.model_validate_json(result), True
            except ValidationError:
                self._drop_entry(rid)
                continue
            return s
        return None

    def pick(self, scope: str, session: str) -> dict | None:
        """The ``auto`` pick stored for a session (None: none yet, malformed, or Redis failed)."""
        return self._call("pick lookup", lambda: self._read_pick(self.prefix + "p:" + _id(scope, session)), None)

    def _read_pick(self, key: str) -> dict | None:
        import redis

        try:
            raw = self.redis.get(key)
        except redis.ResponseError:  # not a string
            self._malformed("pick", key)
            return None
        if raw is None:
            return None
        try:
            return PickRecord.model_validate_json(raw).model_dump()
        except ValidationError:
            self._malformed("pick", key)
            return None

    def set_pick(self, scope: str, session: str, choice: dict) -> dict:
        """Keep ``choice`` as the session's pick unless a replica kept one first; the kept one."""
        key = self.prefix + "p:" + _id(scope, session)

        def keep() -> dict:
            if self.redis.set(key, json.dumps(choice), nx=True, ex=max(1, int(self.ttl_s))):
                return choice
            return self._read_pick(key) or choice

        return self._call("pick store", keep, choice)

    def drop_pick(self, scope: str, session: str) -> None:
        """Forget a session's pick (one its request may not run): counted as malformed."""
        key = self.prefix + "p:" + _id(scope, session)
        self._call("pick drop", lambda: self._malformed("pick", key), None)

    def __len__(self) -> int:
        return int(self.redis.zcard(self.prefix + "lru"))

    @property
    def bytes(self) -> int:
        """Bytes stored now, over every replica."""
        return int(self.redis.get(self.prefix + "bytes") or 0)
