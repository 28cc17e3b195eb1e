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

Puts and lookups are Lua scripts, so the bounds hold with several
replicas writing at once.  The scripts name keys built inside them, which a
single Redis server (with or without replicas) runs; Redis Cluster does not.
Ages use the replicas' wall clocks (``time.time``): keep them in sync.

A Redis that stops answering never fails a compaction: a lookup is then a
miss and a put is skipped, each logged; an unreachable Redis at start is a
:class:`~sgl_speccompact.errors.ConfigError`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import urllib.parse
from typing import Any, Callable

from ..errors import ConfigError
from .store import MAX_PER_SESSION, Stored, covers, message_keys

log = logging.getLogger(__name__)

PREFIX = "sgl_speccompact:v1:"  # every key of the store starts with this
SOCKET_TIMEOUT_S = 2.0  # a Redis request taking longer counts as a failure (seconds): the event loop waits on it
KEEP_EXTRA_S = 60  # Redis expires an entry this long after its TTL, should no put sweep it first (seconds)

_DROP = """
local function drop(p, x, acc)
  local e = p .. 'e:' .. x
  local used, c = redis.call('HGET', e, 'used'), redis.call('HGET', e, 'cost')
  if used ~= '1' and c then acc.wasted = acc.wasted + tonumber(c) end
  local g = redis.call('HGET', p .. 'groups', x)
  if g then redis.call('ZREM', p .. 'g:' .. g, x) end
  local s = redis.call('HGET', p .. 'sizes', x)
  if s then redis.call('DECRBY', p .. 'bytes', s) end
  redis.call('DEL', e)
  redis.call('HDEL', p .. 'sizes', x)
  redis.call('HDEL', p .. 'groups', x)
  redis.call('ZREM', p .. 'lru', x)
  redis.call('ZREM', p .. 'ages', x)
end
"""

# ARGV: prefix, id, group, meta, result, size, cost, n, now, ttl, max_bytes, per_session -> wasted seconds
PUT = _DROP + """
local p, id, gid, meta, result = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local size, cost, n = tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8])
local now, ttl, max, per = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local keep = math.ceil(ttl) + tonumber(ARGV[13])
local acc = {wasted = 0}
for _, x in ipairs(redis.call('ZRANGEBYSCORE', p .. 'ages', '-inf', '(' .. (now - ttl))) do drop(p, x, acc) end
if redis.call('ZSCORE', p .. 'lru', id) then drop(p, id, acc) end
if size > max then return tostring(acc.wasted + tonumber(cost)) end
local e, g = p .. 'e:' .. id, p .. 'g:' .. gid
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
return tostring(acc.wasted)
"""

# ARGV: prefix, group, most messages, oldest stored-at kept -> flat [id, meta, id, meta, ...]
CANDIDATES = """
local p, gid, n, cutoff = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {}
for _, x in ipairs(redis.call('ZRANGEBYSCORE', p .. 'g:' .. gid, '-inf', n)) do
  local at = redis.call('ZSCORE', p .. 'ages', x)
  local meta = redis.call('HGET', p .. 'e:' .. x, 'meta')
  if at and tonumber(at) >= cutoff and meta then table.insert(out, x) table.insert(out, meta) end
end
return out
"""


def _id(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


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
    """

    def __init__(self, url: str, max_bytes: int = 64 * 2**20, ttl_s: float = 1800.0, *,
                 prefix: str = PREFIX, clock: Callable[[], float] = time.time, client: Any = None):
        self.url = safe_url(url)  # for messages: no password
        self.max_bytes = max_bytes  # bound on stored bytes, shared
        self.ttl_s = ttl_s  # entries older than this are dropped (seconds)
        self.prefix = prefix  # key prefix: stores with different prefixes share nothing
        self.clock = clock  # wall-clock seconds
        self.on_waste: Callable[[float], None] | None = None  # cost of entries dropped unused (seconds)
        self.failures = 0  # Redis requests that failed (each logged)
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
        self._candidates = self.redis.register_script(CANDIDATES)

    def _failed(self, what: str, exc: Exception) -> None:
        self.failures += 1
        log.warning("session store %s: %s failed (%s: %s); treated as a miss", self.url, what,
                    exc.__class__.__name__, exc)

    def put(self, scope: str, session: str, params: str, stored: Stored) -> None:
        """Store one result (replacing the same key), then enforce the bounds; a failure is logged."""
        stored.created = self.clock()
        meta = json.dumps({"n": stored.n_messages, "digest": stored.digest, "exact": stored.exact,
                           "loose": stored.loose, "size": stored.size, "cost": stored.cost_s})
        group = _id(scope, session, params)
        try:
            wasted = float(self._put(args=[
                self.prefix, _id(scope, session, params, stored.digest), group, meta,
                stored.result.model_dump_json(), stored.size, repr(stored.cost_s), stored.n_messages,
                repr(stored.created), repr(self.ttl_s), self.max_bytes, MAX_PER_SESSION, KEEP_EXTRA_S]))
        except Exception as exc:  # noqa: BLE001 - the store is a cache: never fail the compaction
            self._failed("put", exc)
            return
        if wasted and self.on_waste is not None:
            self.on_waste(wasted)

    def longest(self, scope: str, session: str, params: str, messages: list) -> Stored | None:
        """The stored entry covering the longest prefix of ``messages`` (:func:`~.store.covers`)."""
        from ..result import CompactionResult

        try:
            flat = self._candidates(args=[self.prefix, _id(scope, session, params), len(messages),
                                          repr(self.clock() - self.ttl_s)])
            found = []
            for rid, raw in zip(flat[::2], flat[1::2]):
                m = json.loads(raw)
                found.append((rid, Stored(None, m["n"], m["digest"], m["size"], m["cost"], 0.0,
                                          tuple(m["exact"]), tuple(m["loose"]))))
            keys = message_keys(messages)
            for rid, s in sorted(found, key=lambda f: -f[1].n_messages):
                if not covers(s, keys, messages):
                    continue
                entry = self.prefix + "e:" + (rid.decode() if isinstance(rid, bytes) else rid)
                result = self.redis.hget(entry, "result")
                if result is None:  # evicted since the candidates were read
                    continue
                self.redis.hset(entry, "used", "1")
                s.result, s.used = CompactionResult.model_validate_json(result), True
                return s
        except Exception as exc:  # noqa: BLE001 - the store is a cache: a failure is a miss
            self._failed("lookup", exc)
        return None

    def pick(self, scope: str, session: str) -> dict | None:
        """The ``auto`` pick stored for a session (None: none yet, or Redis failed)."""
        try:
            raw = self.redis.get(self.prefix + "p:" + _id(scope, session))
        except Exception as exc:  # noqa: BLE001 - the store is a cache: a failure is a miss
            self._failed("pick lookup", exc)
            return None
        return json.loads(raw) if raw else None

    def set_pick(self, scope: str, session: str, choice: dict) -> dict:
        """Keep ``choice`` as the session's pick unless a replica kept one first; the kept one."""
        key = self.prefix + "p:" + _id(scope, session)
        try:
            if self.redis.set(key, json.dumps(choice), nx=True, ex=max(1, int(self.ttl_s))):
                return choice
            raw = self.redis.get(key)
        except Exception as exc:  # noqa: BLE001 - the store is a cache: a failure is a miss
            self._failed("pick store", exc)
            return choice
        return json.loads(raw) if raw else choice

    def __len__(self) -> int:
        return int(self.redis.zcard(self.prefix + "lru"))

    @property
    def bytes(self) -> int:
        """Bytes stored now, over every replica."""
        return int(self.redis.get(self.prefix + "bytes") or 0)
