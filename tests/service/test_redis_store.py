"""The Redis store: the in-memory store's keys, bounds and matching, shared by replicas and kept across restarts;
and failing small: every key and field poisoned with each wrong value, a stopped (SIGSTOP) and a killed
redis-server, every key with a TTL after each fault run.

Each test module run starts its own ``redis-server`` on a free loopback port
(no persistence, killed at teardown).  Without ``redis-server`` or the
``redis`` package the tests fail under CI (``CI=true``) and skip otherwise,
with the reason.
"""

import os
import shutil
import socket
import subprocess
import threading
import time
import uuid

import pytest
from fastapi.testclient import TestClient

from sgl_speccompact.errors import ConfigError
from sgl_speccompact.result import CompactionResult
from sgl_speccompact.service.app import ServiceSettings, make_store
from sgl_speccompact.service.store import DUPLICATE_OUTPUT, MAX_PER_SESSION, SessionStore, make_stored

from tests.support.service import MESSAGES
from tests.support.service import MORE, Clock, service, wait_idle

START_S = 10.0  # longest wait for redis-server to answer (seconds)


def unavailable(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: CI must run the Redis store tests")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(tmp_path) -> tuple[subprocess.Popen, str]:
    """A redis-server on a free loopback port, answering PING; (process, URL)."""
    exe = shutil.which("redis-server")
    if exe is None:
        unavailable("redis-server is not installed (apt-get install -y redis-server)")
    try:
        import redis
    except ImportError:
        unavailable("the redis package is not installed (pip install 'sgl-speccompact[redis]')")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url, end = f"redis://127.0.0.1:{port}/0", time.monotonic() + START_S
    while True:
        try:
            redis.Redis.from_url(url, socket_timeout=1).ping()
            return proc, url
        except redis.RedisError:
            if proc.poll() is not None or time.monotonic() > end:
                stop(proc)
                pytest.fail(f"redis-server on port {port} did not answer within {START_S:g} s")
            time.sleep(0.05)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    proc, url = start_redis(tmp_path_factory.mktemp("redis"))
    yield url
    stop(proc)


@pytest.fixture
def clean_redis(redis_url):
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    return redis_url


def make(kind: str, url: str | None, **kw):
    from sgl_speccompact.service.redis_store import RedisStore

    if kind == "memory":
        return SessionStore(**kw)
    return RedisStore(url, prefix=f"test:{uuid.uuid4().hex}:", **kw)


@pytest.fixture(params=["memory", "redis"])
def store_kind(request):
    if request.param == "redis":
        return "redis", request.getfixturevalue("redis_url")
    return "memory", None


def entry(messages, summary="S", cost=1.0):
    return make_stored(CompactionResult(method="m", summary=summary), messages, cost)


# ---------------------------------------------------------------- the same store, in Redis


def test_both_stores_find_the_longest_prefix_and_keep_scopes_apart(store_kind):
    store = make(*store_kind, max_bytes=10**6, ttl_s=60)
    msgs = MESSAGES + MORE
    for n, name in ((2, "two"), (3, "three"), (4, "four")):
        store.put("a", "s", "p", entry(msgs[:n], name))
    assert store.longest("a", "s", "p", msgs).result.summary == "four"
    changed = [*msgs[:3], {**msgs[3], "content": "PASSED"}, *MORE]  # 3 would leave a result without its call
    assert store.longest("a", "s", "p", changed).result.summary == "two"
    for other in (("b", "s", "p"), ("a", "t", "p"), ("a", "s", "q")):
        assert store.longest(*other, msgs) is None


def test_both_stores_reuse_a_prefix_whose_older_tool_output_became_a_back_reference(store_kind):
    store = make(*store_kind, max_bytes=10**6, ttl_s=60)
    store.put("a", "s", "p", entry(MESSAGES))
    later = [*MESSAGES[:3], {**MESSAGES[3], "content": DUPLICATE_OUTPUT}, *MORE]
    assert store.longest("a", "s", "p", later).n_messages == len(MESSAGES)
    renamed = [*MESSAGES[:3], {**MESSAGES[3], "content": DUPLICATE_OUTPUT, "name": "other"}, *MORE]
    assert store.longest("a", "s", "p", renamed) is None  # only the content may have changed


def test_both_stores_bound_bytes_age_and_entries_per_session_and_count_waste(store_kind):
    kind, url = store_kind
    clock, wasted = Clock(), []
    one = entry(MESSAGES[:1]).size
    store = make(kind, url, max_bytes=3 * one, ttl_s=10, clock=clock)
    store.on_waste = wasted.append
    for session, cost in (("s", 1.0), ("t", 2.0)):
        store.put("a", session, "p", entry(MESSAGES[:1], cost=cost))
    assert store.longest("a", "t", "p", MESSAGES[:1]) is not None  # used: not waste when dropped
    store.put("a", "u", "p", entry(MESSAGES[:1], cost=4.0))
    store.put("a", "v", "p", entry(MESSAGES[:1], cost=8.0))  # over the bound: the oldest goes
    assert len(store) == 3 and store.bytes == 3 * one and wasted == [1.0]
    clock.now = 11.0
    store.put("a", "w", "p", entry(MESSAGES[:1], cost=16.0))
    assert len(store) == 1 and sum(wasted) == 1.0 + 4.0 + 8.0  # expired unused: waste; the used one not
    wide = make(kind, url, max_bytes=10**6, ttl_s=60)
    long_history = [{"role": "user", "content": f"turn {i}"} for i in range(MAX_PER_SESSION + 3)]
    for n in range(1, len(long_history) + 1):
        wide.put("a", "s", "p", entry(long_history[:n]))
    assert len(wide) == MAX_PER_SESSION  # the shortest prefixes went first
    assert wide.longest("a", "s", "p", long_history).n_messages == len(long_history)


def test_both_stores_keep_the_first_auto_pick_of_a_session(store_kind):
    store = make(*store_kind, max_bytes=10**6, ttl_s=60)
    assert store.pick("a", "s") is None
    assert store.set_pick("a", "s", {"method": "speccompact"}) == {"method": "speccompact"}
    assert store.set_pick("a", "s", {"method": "hermes"}) == {"method": "speccompact"}
    assert store.pick("a", "s") == {"method": "speccompact"} and store.pick("b", "s") is None


# ---------------------------------------------------------------- replicas and restarts


def redis_service(url, runner=None):
    return service(runner, settings=ServiceSettings(session_store=url))


def test_two_replicas_reuse_each_others_prepare_and_a_restart_keeps_it(clean_redis):
    one, runner_one = redis_service(clean_redis)
    two, runner_two = redis_service(clean_redis)
    with TestClient(one) as a, TestClient(two) as b:
        assert a.post("/v1/compact", json={"messages": MESSAGES, "session": "s", "mode": "prepare"}
                      ).status_code == 202
        wait_idle(one)
        res = b.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s"}).json()
        assert res["session"]["reused_messages"] == len(MESSAGES)  # prepared on one, reused on two
        assert runner_two.calls[-1]["messages"] == MORE and len(runner_one.calls) == 1
        assert b.post("/v1/compact", json={"messages": MESSAGES, "session": "s", "mode": "prepare"}
                      ).json()["status"] == "ready"
    restarted, runner = redis_service(clean_redis)
    with TestClient(restarted) as c:
        res = c.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s"}).json()
        assert res["session"]["reused_messages"] == len(MESSAGES) and runner.calls[-1]["messages"] == MORE
        other_key = c.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s"},
                           headers={"Authorization": "Bearer someone-else"}).json()
        assert other_key["session"]["reused_messages"] == 0  # scopes hold in Redis too


def test_a_redis_that_stops_answering_turns_lookups_into_misses(tmp_path):
    proc, url = start_redis(tmp_path)
    try:
        app, runner = redis_service(url)
        with TestClient(app) as client:
            client.post("/v1/compact", json={"messages": MESSAGES, "session": "s", "mode": "prepare"})
            wait_idle(app)
            stop(proc)
            res = client.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s"})
            assert res.status_code == 200 and res.json()["session"]["reused_messages"] == 0
            assert runner.calls[-1]["messages"] == MESSAGES + MORE and app.state.sessions.store.failures >= 1
    finally:
        if proc.poll() is None:
            stop(proc)


def test_an_unreachable_redis_at_start_is_a_config_error():
    with pytest.raises(ConfigError, match=r"--session-store: cannot reach redis://:\*\*\*@127\.0\.0\.1"):
        make_store(ServiceSettings(session_store=f"redis://:pw@127.0.0.1:{free_port()}/0"))
    with pytest.raises(ConfigError, match="must be memory or a redis"):
        make_store(ServiceSettings(session_store="mysql://x"))


def test_the_store_flag_reaches_the_service_and_its_password_stays_out_of_the_plan():
    from sgl_speccompact.launch.command_line import build_parser
    from sgl_speccompact.launch.plan import build_plan, service_config

    plan = build_plan(build_parser("x").parse_args(
        ["--target-url", "http://127.0.0.1:1", "--no-drafter", "--session-store", "redis://:hunter2@10.0.0.2:6379/1"]))
    assert plan.service.session_store == "redis://:hunter2@10.0.0.2:6379/1"
    shown = service_config(plan)["service"]["session_store"]
    assert shown == "redis://:***@10.0.0.2:6379/1"
    with pytest.raises(ConfigError, match="--session-store: must be memory or a redis"):  # before any server starts
        build_plan(build_parser("x").parse_args(["--no-drafter", "--session-store", "mysql://db/0"]))


# ---------------------------------------------------------------- replica processes behind one address


class RoundRobin:
    """One address in front of ``backends``: each request goes to the next one in turn (a load balancer)."""

    def __init__(self, backends: list[str]):
        import http.server
        import itertools
        import threading

        import httpx

        turn, lock, self.sent_to = itertools.cycle(range(len(backends))), threading.Lock(), []
        outer = self

        class Forward(http.server.BaseHTTPRequestHandler):
            def _forward(self):
                with lock:
                    i = next(turn)
                    outer.sent_to.append((i, self.command, self.path))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                res = httpx.request(self.command, backends[i] + self.path, content=body or None, timeout=600,
                                    headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
                self.send_response(res.status_code)
                for k, v in res.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(res.content)))
                self.end_headers()
                self.wfile.write(res.content)

            do_GET = do_POST = _forward

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.e2e  # service processes, emulated servers and a redis-server
def test_two_replica_processes_behind_one_address_and_a_restart_reuse_a_prepare(clean_redis, make_emulated_server):
    import sys

    import httpx

    from tests.support.procs import output, stop as stop_child, wait_healthy
    from sgl_speccompact.emulator import ControlledAcceptancePolicy

    target = make_emulated_server(policy=ControlledAcceptancePolicy(), model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(policy=ControlledAcceptancePolicy(), model_path="Qwen/Qwen3-0.6B",
                                   lora_paths=["drafter"])

    def replica() -> tuple[subprocess.Popen, str]:
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "sgl_speccompact", "serve", "--target-url", target.url,
                                 "--drafter-url", drafter.url, "--service-port", str(port),
                                 "--session-store", clean_redis, "--method", "hermes"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        return proc, f"http://127.0.0.1:{port}"

    history = MESSAGES + [{"role": "assistant", "content": f"Step {i}: read module_{i}.py and ran its tests."}
                          for i in range(6)]
    later = history + MORE
    procs = []
    try:
        procs = [replica(), replica()]
        lb = RoundRobin([url for _, url in procs])
        try:
            def post(body):
                return httpx.post(f"{lb.url}/v1/compact", json=body, timeout=600)

            first = post({"messages": history, "session": "s", "mode": "prepare"})
            assert first.status_code == 202, first.text
            # polls alternate between the replicas; "ready" from either means the store holds it
            statuses = []
            for _ in range(600):
                statuses.append(post({"messages": history, "session": "s", "mode": "prepare"}).json()["status"])
                if statuses[-1] == "ready" and lb.sent_to[-1][0] == 1:
                    break
                time.sleep(0.1)
            assert statuses[-1] == "ready", statuses[-5:]
            httpx.get(f"{lb.url}/health", timeout=600)  # replica 0's turn: the compact goes to replica 1
            res = post({"messages": later, "session": "s"})
            assert lb.sent_to[0][0] == 0 and lb.sent_to[-1][0] == 1, lb.sent_to  # prepared on 0, compacted on 1
            body = res.json()
            assert res.status_code == 200 and body["session"]["reused_messages"] == len(history), body
            assert body["summary"].strip()
        finally:
            lb.close()
        for proc, _ in procs:
            stop_child(proc)
        procs = [replica()]  # every earlier process is gone; only Redis holds the prepare
        res = httpx.post(f"{procs[0][1]}/v1/compact", json={"messages": later, "session": "s"}, timeout=600)
        assert res.status_code == 200 and res.json()["session"]["reused_messages"] == len(history), res.text
    except AssertionError as exc:
        for proc, _ in procs:
            if proc.poll() is None:
                stop_child(proc)
        raise AssertionError("\n".join([str(exc), *(output(p) for p, _ in procs)])) from None
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                stop_child(proc)


# ---------------------------------------------------------------- failing small: poisoned, stopped, killed

POISONS = [b"\xff\x00garbage", b"[1, 2]", b'"a string"', b"{}"]  # each wrong value a key or field gets
LATER = MESSAGES + MORE


def every_key_expires(url: str, prefix: str = "sgl_speccompact:v1:") -> list[str]:
    """The keys under ``prefix`` without a TTL (none may be left)."""
    import redis

    r = redis.Redis.from_url(url)
    return [k.decode() for k in r.scan_iter(match=prefix + "*") if r.ttl(k) < 0]


def faults(client, kind: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in client.get("/metrics").text.splitlines()
               if line.startswith(f'speccompact_session_store_faults_total{{kind="{kind}"'))


def prepared(client, app, messages=MESSAGES, session="s") -> None:
    res = client.post("/v1/compact", json={"messages": messages, "method": "hermes", "session": session,
                                           "mode": "prepare"})
    assert res.status_code == 202, res.text
    wait_idle(app)


def poison_targets(r, prefix: str) -> list[tuple[str, str | None]]:
    """(key, field) of every key under ``prefix`` and every field of its hashes (field None: the whole key)."""
    out = []
    for key in sorted(k.decode() for k in r.scan_iter(match=prefix + "*")):
        out.append((key, None))
        if r.type(key) == b"hash":
            out += [(key, f.decode()) for f in r.hkeys(key)]
    return out


# a poisoned value the next compact must not reuse (the rest is bookkeeping: a hit or a miss is fine)
SPOILS_THE_ENTRY = ("e:", "g:", "ages")


@pytest.mark.parametrize("poison", POISONS, ids=["garbage", "list", "string", "object"])
def test_every_key_and_field_poisoned_is_a_miss_deleted_counted_and_the_store_heals(clean_redis, poison):
    import redis

    r = redis.Redis.from_url(clean_redis)
    app, runner = redis_service(clean_redis)
    prefix = app.state.sessions.store.prefix
    with TestClient(app) as client:
        prepared(client, app)
        targets = poison_targets(r, prefix)
        assert {t[0][len(prefix):].split(":")[0] for t in targets} >= {"e", "g", "lru", "ages", "sizes", "groups",
                                                                      "bytes", "seq"}
        for key, fld in targets:
            r.flushdb()
            prepared(client, app)
            before = faults(client, "malformed")
            if fld is None:
                r.delete(key)
                r.set(key, poison)  # a string where a hash or sorted set belongs, or a counter that is not one
            else:
                r.hset(key, fld, poison)
            res = client.post("/v1/compact", json={"messages": LATER, "method": "hermes", "session": "s"})
            assert res.status_code == 200, (key, fld, res.text)
            name = key[len(prefix):]
            if name.startswith(SPOILS_THE_ENTRY) and fld in (None, "meta", "result"):
                assert res.json()["session"]["reused_messages"] == 0, (key, fld)
                assert faults(client, "malformed") > before, (key, fld)
            prepared(client, app, LATER)  # a put after the poison stores again
            again = client.post("/v1/compact", json={"messages": LATER, "method": "hermes", "session": "s"})
            assert again.status_code == 200 and again.json()["session"]["reused_messages"] == len(LATER), (key, fld)
            assert every_key_expires(clean_redis) == [], (key, fld)
        assert app.state.sessions.store.breaker.trips == 0  # Redis answered every time: no failure


@pytest.mark.parametrize("poison", [*POISONS, b'{"method": "rm -rf"}', b'{"method": "speccompact"}', None],
                         ids=["garbage", "list", "string", "object", "unknown-method", "not-allowed", "a-hash"])
def test_a_poisoned_auto_pick_is_dropped_counted_and_picked_afresh(clean_redis, poison):
    import redis

    from sgl_speccompact.service.metrics import Metrics
    from sgl_speccompact.service.redis_store import RedisStore, _id
    from sgl_speccompact.service.sessions import Sessions

    store = RedisStore(clean_redis)
    sessions = Sessions(store, Metrics())
    key = store.prefix + "p:" + _id("a", "s")
    r = redis.Redis.from_url(clean_redis)
    if poison is None:
        r.hset(key, "method", "hermes")  # the wrong Redis type
    else:
        r.set(key, poison, ex=60)
    picked = sessions.auto_pick("a", "s", lambda held: {"method": "hermes"}, allowed=("hermes", "openclaw"))
    assert picked == {"method": "hermes"} and store.malformed == 1
    assert sessions.auto_pick("a", "s", lambda held: {"method": "openclaw"}, allowed=("hermes", "openclaw")) == {
        "method": "hermes", "session_pick": "kept"}  # the fresh pick was kept, with a TTL
    assert 0 < r.ttl(key) and store.breaker.trips == 0


def test_an_entry_dropped_by_another_replica_during_a_lookup_is_not_recreated(clean_redis):
    """Between reading the candidates and reading the result, another replica drops the entry: the
    lookup is a miss and leaves no key behind (an HSET of `used` used to re-create it without a TTL)."""
    import redis

    store = make("redis", clean_redis, max_bytes=10**6, ttl_s=60)
    store.put("a", "s", "p", entry(MESSAGES))
    r = redis.Redis.from_url(clean_redis)
    (e,) = [k for k in r.scan_iter(match=store.prefix + "e:*")]
    take = store._take

    def dropped_first(args):
        r.delete(e)  # the other replica's drop
        return take(args=args)

    store._take = dropped_first
    assert store.longest("a", "s", "p", MESSAGES) is None
    assert not r.exists(e) and every_key_expires(clean_redis, store.prefix) == []


def test_sigstopped_redis_under_20_session_requests_costs_one_breaker_not_the_service(tmp_path):
    """Redis is stopped with SIGSTOP while 10 compacts and 10 prepares of sessions arrive at once.
    Structure, not time: at most one store call per store thread waits on the stopped server (its
    socket timeout) before the breaker opens, and every later call is a miss at once; /health
    answers (while those calls are known to be stuck: the server cannot answer) and shows the
    circuit open; a compact without a session answers.  Before, every call waited 2 s in turn on
    the event loop.  The only clock here is Redis's socket timeout (0.5 s), inherent to a server
    that does not answer; the breaker's clock is injected."""
    import signal

    from sgl_speccompact.service.redis_store import BREAKER_OPEN_S
    from sgl_speccompact.service.sessions import STORE_THREADS

    proc, url = start_redis(tmp_path)
    try:
        app, runner = redis_service(url)
        store, now = app.state.sessions.store, [0.0]
        store.breaker.clock = lambda: now[0]
        with TestClient(app) as client:
            for i in range(10):
                prepared(client, app, session=f"c{i}")
            os.kill(proc.pid, signal.SIGSTOP)
            answers: list = []

            def send(body):
                answers.append(client.post("/v1/compact", json={**body, "method": "hermes"}))

            bodies = [{"messages": LATER, "session": f"c{i}"} for i in range(10)]
            bodies += [{"messages": LATER, "session": f"p{i}", "mode": "prepare"} for i in range(10)]
            threads = [threading.Thread(target=send, args=(b,), daemon=True) for b in bodies]
            for t in threads:
                t.start()
            health = client.get("/health")
            plain = client.post("/v1/compact", json={"messages": LATER, "method": "hermes"})
            for t in threads:
                t.join(120)  # a hang guard
            wait_idle(app, timeout=120)
            assert sorted(a.status_code for a in answers) == [200] * 10 + [202] * 10, [a.text for a in answers]
            assert all(a.json()["session"]["reused_messages"] == 0 for a in answers if a.status_code == 200)
            assert health.status_code == 200 and plain.status_code == 200
            after = client.get("/health").json()["session_store"]
            assert after["circuit"] == "open" and after["failures"] == store.failures
            assert 1 <= store.failures <= STORE_THREADS and store.breaker.trips == 1
            assert faults(client, "skipped") >= 20 - STORE_THREADS
            os.kill(proc.pid, signal.SIGCONT)
            now[0] += BREAKER_OPEN_S  # the circuit closes: the store is asked again
            prepared(client, app, session="back")
            res = client.post("/v1/compact", json={"messages": LATER, "method": "hermes", "session": "back"})
            assert res.json()["session"]["reused_messages"] == len(MESSAGES)
            assert client.get("/health").json()["session_store"]["circuit"] == "closed"
        assert every_key_expires(url) == []
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        stop(proc)


def test_a_killed_redis_opens_the_circuit_and_health_says_so(tmp_path):
    proc, url = start_redis(tmp_path)
    try:
        app, runner = redis_service(url)
        with TestClient(app) as client:
            prepared(client, app)
            stop(proc)
            for _ in range(3):
                res = client.post("/v1/compact", json={"messages": LATER, "method": "hermes", "session": "s"})
                assert res.status_code == 200 and res.json()["session"]["reused_messages"] == 0
            health = client.get("/health").json()["session_store"]
            assert health["circuit"] == "open" and "ConnectionError" in health["last_error"]
            assert app.state.sessions.store.failures == 1 and faults(client, "skipped") >= 2
    finally:
        if proc.poll() is None:
            stop(proc)
