"""``/health`` keeps answering while a 3.6 MB adversarial body is parsed, redacted and rendered, reports
an upstream that is busy but answering as busy (not degraded), ends each probe by its total deadline,
and never waits on the session store.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.support.live_service import LiveService
from tests.support.misbehaving import Answer, Garbage, Hang, Trickle, Upstream, busy_loads

from sgl_speccompact.backends.contract import BackendDefaults
from sgl_speccompact.service.app import ServiceSettings, create_app
from sgl_speccompact.service.runtime import HEALTH_SHARE, http_probe
from sgl_speccompact.service.store import SessionStore

# ------------------------------------------------------------------ /health while a huge body is processed


@pytest.mark.perf
def test_health_answers_while_a_3mb_adversarial_body_is_processed(make_emulated_server):
    """One unauthenticated 200 KB body used to freeze /health for 20 s: the whole processing.  The
    body here is parsed, redacted and rendered for real (the target server is closed once its
    endpoint is made, so the compaction then fails fast); no /health meanwhile may wait more than
    half of the whole processing time, measured in the same run (a loaded machine slows both).  A
    probe blocked by the processing waits all of it; one that is not waits at most for the longest
    single C call that holds the GIL (a regex or hyperscan pass over one message, a JSON parse),
    here about a fifth of the whole on two loaded cores, so the body comes in twelve messages."""
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    server = make_emulated_server(model_path="Qwen/Qwen3-8B")
    target = SpecCompactEndpoint(server.url, timeout_s=5)
    server.close()
    svc = LiveService(create_app(target, None, settings=ServiceSettings(method="target_self"),
                                 health_probe=lambda backend: {"ok": True}))
    try:
        def health_s() -> float:
            t0 = time.perf_counter()
            assert httpx.get(svc.url + "/health", timeout=60).status_code == 200
            return time.perf_counter() - t0

        health_s()
        # Six parts, not one string: a single regex or hyperscan pass over one part holds the GIL
        # until it returns, so the longest probe is bounded by the largest part, not the body.
        parts = [{"role": "user", "content": ("a.a." * 125_001)[:500_000]} for _ in range(6)]  # within max_history_chars
        parts += [{"role": "assistant", "content": "x://" + "a:" * 50_000} for _ in range(6)]
        body = {"messages": parts, "method": "target_self"}
        answers: list = []
        poster = threading.Thread(target=lambda: answers.append(
            httpx.post(svc.url + "/v1/compact", json=body, timeout=600)), daemon=True)
        t0 = time.perf_counter()
        poster.start()
        during = []
        while poster.is_alive():
            during.append(health_s())
        whole = time.perf_counter() - t0
        assert answers and answers[0].status_code in (502, 503, 504), answers
        assert len(during) >= 3, "the body was processed too fast to probe /health meanwhile"
        assert max(during) < whole / 2, (max(during), whole, len(during))
    finally:
        svc.close()


# ------------------------------------------------------------------ a busy upstream is not a degraded one


def probe_app(url: str, health_timeout_s: float = 1.0, health_share: float = HEALTH_SHARE):
    """A service whose one target is the server at ``url``, probed with the real HTTP probe."""
    return create_app(Server(url), None, settings=ServiceSettings(health_timeout_s=health_timeout_s, method="hermes"),
                      runner=Summary(), methods=("hermes",),
                      health_probe=http_probe(timeout_s=health_timeout_s, health_share=health_share))


def patient_app(url: str):
    """``probe_app`` whose hanging /health is given up on at once, and whose follow-up has a minute.

    The verdict then rests on what the upstream answers, never on how fast
    a loaded machine runs the follow-up request.
    """
    return probe_app(url, health_timeout_s=60.0, health_share=0.005)


class Server(BackendDefaults):
    """A target as /health sees it: a server at ``base_url``."""

    def __init__(self, base_url: str):
        self.base_url = base_url


class Summary:
    """``run_method`` stand-in: one line, at once."""

    def __call__(self, method, request, **_):
        from sgl_speccompact.result import CompactionResult

        return CompactionResult(method=method, summary="## Goal\n- done")


def health_of(app) -> tuple[int, dict]:
    with TestClient(app) as client:
        res = client.get("/health")
        return res.status_code, res.json()


def test_an_upstream_busy_but_answering_is_ok_and_marked_busy():
    """SGLang's /health runs a one-token generation: a busy server answers it late.  Its /v1/loads
    (answered without the scheduler) says it is running requests: busy, not degraded.  Until this
    was fixed, the probe's ReadTimeout made the service report 503 degraded."""
    up = Upstream({"/health": Hang(), "/v1/loads": Answer(busy_loads(3, 2))})
    try:
        status, body = health_of(patient_app(up.url))
    finally:
        up.close()
    assert status == 200 and body["status"] == "ok", body
    entry = body["upstreams"]["target"]
    assert entry["ok"] and entry["busy"] and "5 requests running or waiting" in entry["detail"]


@pytest.mark.parametrize("loads, words", [(Answer(busy_loads(0)), "stuck"), (Garbage(), "not a load answer"),
                                          (Answer({"detail": "boom"}, status=500), "HTTP 500"),
                                          (Hang(), "")])  # either its ReadTimeout or the probe's deadline
def test_an_upstream_whose_health_hangs_and_that_is_not_busy_is_degraded(loads, words):
    up = Upstream({"/health": Hang(), "/v1/loads": loads})
    try:  # a hanging /v1/loads can only end by the probe's deadline: the short one
        status, body = health_of(probe_app(up.url) if isinstance(loads, Hang) else patient_app(up.url))
    finally:
        up.close()
    assert status == 503 and body["status"] == "degraded", body
    assert not body["upstreams"]["target"]["ok"] and words in body["upstreams"]["target"]["detail"]


def test_a_server_without_v1_loads_that_answers_is_busy_and_one_that_answers_nothing_is_degraded():
    up = Upstream({"/health": Hang()})  # /v1/loads: 404, /get_model_info answers
    try:
        status, body = health_of(patient_app(up.url))
    finally:
        up.close()
    assert status == 200 and body["upstreams"]["target"]["busy"], body
    up = Upstream({"/health": Hang(), "/get_model_info": Hang()})
    try:
        status, body = health_of(probe_app(up.url))
    finally:
        up.close()
    assert status == 503, body


def test_a_trickling_health_answer_ends_at_the_probes_total_deadline():
    """A /health body at one byte per 0.2 s never trips a per-read timeout (0.6 s) and would take
    100 s in full; the probe's total deadline ends it, and /health answers degraded."""
    up = Upstream({"/health": Trickle(b" " * 500, every_s=0.2)})
    try:
        with TestClient(probe_app(up.url)) as client:
            res = client.get("/health")
            assert up.finished["/health"] == 0  # it answered while the trickle was still going
            # the probe's thread still reads the trickle, and the app's shutdown waits for it: end the trickle
            up.close()
        status, body = res.status_code, res.json()
        assert status == 503 and "did not end within 1.5 s" in body["upstreams"]["target"]["detail"], body
    finally:
        up.close()


# ------------------------------------------------------------------ /health never waits on the session store


class BlockedStore(SessionStore):
    """A store whose lookups wait on the network (``blocking``) and block until ``release`` is set."""

    blocking = True

    def __init__(self):
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def longest(self, *args):
        self.entered.set()
        self.release.wait(60)
        return super().longest(*args)

    def health(self) -> dict:
        return {"kind": "blocked", "circuit": "closed"}


def test_health_and_a_compact_without_a_session_answer_while_a_store_call_is_blocked():
    """A session's lookup is known to be blocked (its event is not set) while /health and a compact
    without a session are asked; before the store ran off the event loop both waited for it.  The
    60 s client timeouts are hang guards, not measurements."""
    app = probe_app("", health_timeout_s=1.0)
    sessions = app.state.sessions
    store = sessions.store = BlockedStore()
    sessions.store_deadline_s = 3600.0  # the lookup stays blocked: only the event ends it
    svc = LiveService(app)
    body = {"messages": [{"role": "user", "content": "fix a.py"}, {"role": "assistant", "content": "done"}]}
    try:
        answers: list = []
        waiting = threading.Thread(target=lambda: answers.append(httpx.post(
            svc.url + "/v1/compact", json={**body, "session": "s"}, timeout=60)), daemon=True)
        waiting.start()
        assert store.entered.wait(60)
        health = httpx.get(svc.url + "/health", timeout=60)
        plain = httpx.post(svc.url + "/v1/compact", json=body, timeout=60)
        assert not store.release.is_set() and not answers  # the session's compact still waits on the store
        assert health.status_code == 200 and health.json()["session_store"] == {"kind": "blocked", "circuit": "closed"}
        assert plain.status_code == 200, plain.text
    finally:
        store.release.set()
        waiting.join(60)
        svc.close()
    assert answers and answers[0].status_code == 200


def test_a_store_call_past_its_deadline_is_a_miss_and_the_session_request_goes_on():
    app = probe_app("", health_timeout_s=1.0)
    sessions = app.state.sessions
    store = sessions.store = BlockedStore()
    sessions.store_deadline_s = 0.05  # injected: the blocked lookup is abandoned, the request goes on
    body = {"messages": [{"role": "user", "content": "fix a.py"}], "session": "s"}
    try:
        with TestClient(app) as client:
            res = client.post("/v1/compact", json=body)
            assert res.status_code == 200 and res.json()["session"]["reused_messages"] == 0
            assert not store.release.is_set()  # it answered while the store call was still blocked
            faults = [l for l in client.get("/metrics").text.splitlines()
                      if l.startswith('speccompact_session_store_faults_total{kind="deadline",what="lookup"}')]
            assert faults and float(faults[0].rsplit(" ", 1)[1]) >= 1.0
    finally:
        store.release.set()
