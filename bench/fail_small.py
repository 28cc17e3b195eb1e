#!/usr/bin/env python
"""The shared store and the load gate failing small, measured on this machine (wall clock, CPU only).

Four scenarios, each against real processes on loopback: a ``redis-server``
started here, the service served by uvicorn in a thread, and a misbehaving
HTTP upstream (``tests/support/misbehaving.py``) standing in for SGLang's
``/v1/loads`` and ``/generate``.  The compaction itself is a stand-in that
sleeps ``--work-s`` per request (no model runs), so the figures measure the
service's waiting, not a summary's cost.

1. ``sigstop``: Redis stopped with SIGSTOP, 20 concurrent session requests
   (10 compacts, 10 prepares); the time of ``/health`` and of a compact
   without a session asked meanwhile, and of the slowest session request.
2. ``poison``: every store key and hash field overwritten with garbage, a JSON
   list, a JSON string and ``{}`` in turn; 5xx answers, and whether the next
   compact of the session answered 200 with the value counted as a miss.
3. ``trickle``: ``/v1/loads`` at 1 byte/s, ``--compaction-timeout 10``,
   ``--prepare-workers 2``, 10 prepares; how long each prepare outlived its
   deadline, and the queue at the end.
4. ``busy``: every ``/v1/loads`` answer says "busy" and takes 1.8 s,
   ``--prepare-yield-s 2``; the mean hold per held request.

Usage::

    python -m bench.fail_small            # all four
    python -m bench.fail_small busy trickle
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HISTORY = [{"role": "user", "content": "Fix the failing test in a.py"},
           {"role": "assistant", "content": "I will read a.py first."}]
LATER = HISTORY + [{"role": "user", "content": "Then fix the import."}]
POISONS = [b"\xff\x00garbage", b"[1, 2]", b'"a string"', b"{}"]


def runner_sleeping(work_s: float, generate: bool = False, lifetimes: list | None = None):
    """``run_method`` stand-in: sleeps ``work_s`` (and sends 5 target requests when ``generate``)."""
    from sgl_speccompact.result import CompactionResult

    def run(method, request, *, target, **_):
        t0 = time.monotonic()
        try:
            if generate:
                for _ in range(5):
                    target._generate({"text": "x", "sampling_params": {"max_new_tokens": 1}})
            time.sleep(work_s)
            return CompactionResult(method=method, summary="## Goal\n- done")
        finally:
            if lifetimes is not None:
                lifetimes.append(time.monotonic() - t0)

    return run


def start_redis(folder: str) -> tuple[subprocess.Popen, str]:
    import redis

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", folder], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(200):
        try:
            redis.Redis.from_url(url, socket_timeout=1).ping()
            return proc, url
        except redis.RedisError:
            time.sleep(0.05)
    raise SystemExit("redis-server did not start")


def idle(app, limit_s: float = 600.0) -> None:
    end = time.monotonic() + limit_s
    while app.state.sessions.running or app.state.compactions.running():
        if time.monotonic() > end:
            raise SystemExit("the service did not go idle")
        time.sleep(0.02)


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def sigstop(args) -> None:
    import httpx

    from tests.support.live_service import LiveService
    from sgl_speccompact.service.app import ServiceSettings, create_app

    with tempfile.TemporaryDirectory() as folder:
        proc, url = start_redis(folder)
        try:
            app = create_app(object(), None, runner=runner_sleeping(args.work_s), methods=("hermes",),
                             health_probe=lambda b: {"ok": True},
                             settings=ServiceSettings(session_store=url, compaction_timeout_s=60.0, method="hermes"))
            svc = LiveService(app)
            http = httpx.Client(timeout=600, limits=httpx.Limits(max_connections=64))  # one client: no per-call setup
            try:
                plain_s, _ = timed(lambda: http.post(svc.url + "/v1/compact", json={"messages": LATER}))
                os.kill(proc.pid, signal.SIGSTOP)
                results: list = []

                def send(body):
                    results.append(timed(lambda: http.post(svc.url + "/v1/compact", json=body)))

                bodies = [{"messages": LATER, "session": f"c{i}"} for i in range(10)]
                bodies += [{"messages": LATER, "session": f"p{i}", "mode": "prepare"} for i in range(10)]
                threads = [threading.Thread(target=send, args=(b,)) for b in bodies]
                t0 = time.perf_counter()
                for t in threads:
                    t.start()
                health_s, health = timed(lambda: http.get(svc.url + "/health"))
                during_s, during = timed(lambda: http.post(svc.url + "/v1/compact", json={"messages": LATER}))
                for t in threads:
                    t.join()
                batch_s = time.perf_counter() - t0
                idle(app)
                store = app.state.sessions.store
                codes = sorted(r.status_code for _, r in results)
                print(f"sigstop: 20 session requests answered {codes.count(200)}x200 {codes.count(202)}x202 "
                      f"(other: {[c for c in codes if c not in (200, 202)]}); batch {batch_s:.2f} s, slowest "
                      f"{max(s for s, _ in results):.2f} s; /health {health_s:.3f} s (HTTP {health.status_code}, "
                      f"circuit {health.json()['session_store']['circuit']}); compact without a session "
                      f"{during_s:.3f} s during vs {plain_s:.3f} s before (HTTP {during.status_code}); Redis requests "
                      f"that failed {store.failures}, breaker opened {store.breaker.trips}x")
            finally:
                http.close()
                svc.close()
        finally:
            os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
            proc.wait(10)


def poison(args) -> None:
    import redis
    from fastapi.testclient import TestClient

    from sgl_speccompact.service.app import ServiceSettings, create_app

    with tempfile.TemporaryDirectory() as folder:
        proc, url = start_redis(folder)
        try:
            r = redis.Redis.from_url(url)
            app = create_app(object(), None, runner=runner_sleeping(0.0), methods=("hermes",),
                             health_probe=lambda b: {"ok": True},
                             settings=ServiceSettings(session_store=url, method="hermes"))
            prefix = app.state.sessions.store.prefix
            tried = five = ok = missed = 0
            with TestClient(app) as client:
                def prepare():
                    r.flushdb()
                    client.post("/v1/compact", json={"messages": HISTORY, "session": "s", "mode": "prepare"})
                    idle(app)

                prepare()
                targets = []
                for key in sorted(k.decode() for k in r.scan_iter(match=prefix + "*")):
                    targets.append((key, None))
                    if r.type(key) == b"hash":
                        targets += [(key, f.decode()) for f in r.hkeys(key)]
                for value in POISONS:
                    for key, fld in targets:
                        prepare()
                        if fld is None:
                            r.delete(key)
                            r.set(key, value)
                        else:
                            r.hset(key, fld, value)
                        res = client.post("/v1/compact", json={"messages": LATER, "session": "s"})
                        tried += 1
                        five += res.status_code >= 500
                        ok += res.status_code == 200
                        missed += res.status_code == 200 and res.json()["session"]["reused_messages"] == 0
                no_ttl = [k for k in r.scan_iter(match=prefix + "*") if r.ttl(k) < 0]
            print(f"poison: {len(targets)} keys and fields x {len(POISONS)} values = {tried} compacts: {five} 5xx, "
                  f"{ok} answered 200 ({missed} of them a miss; the others hit an intact entry), malformed values "
                  f"deleted {app.state.sessions.store.malformed}; keys without a TTL after the run: {len(no_ttl)}")
        finally:
            proc.terminate()
            proc.wait(10)


def gated_service(routes: dict, limits, lifetimes: list):
    from fastapi.testclient import TestClient
    from tests.support.misbehaving import Answer, Upstream

    from sgl_speccompact.backends.http import HttpEndpoint
    from sgl_speccompact.service.app import create_app

    up = Upstream({**routes, "/generate": Answer({"text": "x"})})
    app = create_app(HttpEndpoint(up.url, timeout_s=60, token_ids=False), None, methods=("hermes",),
                     runner=runner_sleeping(0.0, True, lifetimes), settings=replace(limits, method="hermes"),
                     health_probe=lambda b: {"ok": True})
    return up, app, TestClient(app)


def trickle(args) -> None:
    from tests.support.misbehaving import Trickle

    from sgl_speccompact.service.app import ServiceSettings

    lifetimes: list = []
    limits = ServiceSettings(compaction_timeout_s=10.0, prepare_workers=2, prepare_yield_s=2.0)
    up, app, client = gated_service({"/v1/loads": Trickle(b" " * 600, every_s=1.0)}, limits, lifetimes)
    try:
        with client:
            t0 = time.perf_counter()
            for i in range(10):
                client.post("/v1/compact", json={"messages": [*HISTORY, {"role": "user", "content": str(i)}],
                                                  "session": f"s{i}", "mode": "prepare"})
            idle(app)
            sessions = app.state.sessions
            print(f"trickle: 10 prepares, deadline 10 s, 2 workers: all ended after {time.perf_counter() - t0:.1f} s; "
                  f"longest prepare {max(lifetimes):.2f} s (outlived its deadline by "
                  f"{max(0.0, max(lifetimes) - 10.0):.2f} s), stored {len(sessions.store)}, "
                  f"running {sessions.n_running}, waiting {sessions.n_waiting}; /v1/loads answers finished "
                  f"{up.finished['/v1/loads']} of {up.started['/v1/loads']} asked")
    finally:
        up.close()


def busy(args) -> None:
    from tests.support.misbehaving import Answer, busy_loads

    from sgl_speccompact.service.app import ServiceSettings

    lifetimes: list = []
    up, app, client = gated_service({"/v1/loads": Answer(busy_loads(1), delay_s=1.8)},
                                    ServiceSettings(prepare_yield_s=2.0, prepare_workers=2), lifetimes)
    try:
        with client:
            for i in range(3):
                client.post("/v1/compact", json={"messages": [*HISTORY, {"role": "user", "content": str(i)}],
                                                  "session": f"s{i}", "mode": "prepare"})
            idle(app)
            gate = next(iter(app.state.service.gates.values()))
            print(f"busy: /v1/loads answers 'busy' after 1.8 s, bound 2 s: {gate.held} held requests, mean hold "
                  f"{gate.held_s / max(1, gate.held):.3f} s, {gate.loads_asked} /v1/loads requests; prepares of 5 "
                  f"target requests took {statistics.mean(lifetimes):.2f} s on average")
    finally:
        up.close()


SCENARIOS = {"sigstop": sigstop, "poison": poison, "trickle": trickle, "busy": busy}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenarios", nargs="*", help=f"some of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--work-s", type=float, default=0.2, help="seconds one stand-in compaction takes")
    args = parser.parse_args(argv)
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {', '.join(SCENARIOS)}")
    print(f"MEASURED (CPU), loopback, {os.cpu_count()} cores, Python {sys.version.split()[0]}; "
          f"compactions are stand-ins sleeping {args.work_s:g} s")
    for name in args.scenarios or SCENARIOS:
        SCENARIOS[name](args)


if __name__ == "__main__":
    main()
