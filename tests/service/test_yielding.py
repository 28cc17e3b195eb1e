"""Prepares yield to foreground work on the target: the rule, the gate (fake clocks), the 404 fallback,
the service holding a prepare's requests while the emulator reports foreground load, and a slow,
hanging, trickling or garbage /v1/loads costing at most the bound (and never past the deadline)."""

from __future__ import annotations

import logging
import threading

import httpx
import pytest
from fastapi.testclient import TestClient

from sgl_speccompact.backends.contract import BackendDefaults
from sgl_speccompact.backends.http import http_error
from sgl_speccompact.service.app import ServiceSettings, create_app
from sgl_speccompact.service.yielding import Unsupported, YieldGate, yield_delay

from tests.support.live_service import wait_for
from tests.support.misbehaving import Answer, Trickle, Upstream
from tests.support.service import MESSAGES, wait_idle


class FakeClock:
    """``clock`` and ``sleep`` of a gate: time moves only when the gate sleeps."""

    def __init__(self):
        self.now, self.sleeps = 100.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def loads(running: int, waiting: int = 0) -> dict:
    return {"loads": [{"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": waiting}]}


def gate_over(answers, bound_s=2.0, **kw):
    clock, asked = FakeClock(), []

    def fetch():
        asked.append(clock.now)
        return answers(len(asked)) if callable(answers) else answers

    kw.setdefault("spawn", inline)
    gate = YieldGate(fetch, bound_s, poll_s=0.05, clock=clock, sleep=clock.sleep, **kw)
    return gate, clock, asked


def inline(fn) -> None:
    """A gate's ``spawn`` that runs its /v1/loads request in the holding thread (deterministic tests)."""
    fn()


def test_the_rule_waits_only_while_foreground_runs_and_never_past_the_bound():
    assert yield_delay(2, 0.0, 2.0, 0.05) == 0.05
    assert yield_delay(1, 1.99, 2.0, 0.05) == pytest.approx(0.01)
    assert yield_delay(1, 2.0, 2.0, 0.05) == 0.0  # at the bound it goes
    assert yield_delay(0, 0.0, 2.0, 0.05) == 0.0  # a free server: at once
    assert yield_delay(None, 0.0, 2.0, 0.05) == 0.0  # an unknown load never holds


def test_a_request_waits_while_the_agent_runs_and_goes_when_it_ends():
    gate, clock, asked = gate_over(lambda n: loads(1) if n <= 3 else loads(0, 0))
    waited = gate.hold()
    assert len(clock.sleeps) == 3 and waited == pytest.approx(0.15)
    assert (gate.held, gate.at_bound, gate.loads_asked) == (1, 0, 4)


def test_the_wait_is_bounded_even_when_the_server_never_frees():
    gate, clock, _ = gate_over(loads(3, 2), bound_s=0.2)
    assert gate.hold() == pytest.approx(0.2)
    assert len(clock.sleeps) == 4 and sum(clock.sleeps) == pytest.approx(0.2)
    assert (gate.held, gate.at_bound) == (1, 1)


def test_the_services_own_background_requests_are_not_foreground():
    gate, clock, _ = gate_over(loads(2, 1))
    with gate.sending({"text": ["a", "b", "c"], "sampling_params": {"max_new_tokens": 1}}):
        assert gate.own() == 3
        assert gate.hold() == 0.0  # 3 on the server, all of them ours
    assert gate.own() == 0 and clock.sleeps == []


def test_one_loads_answer_serves_every_check_within_its_ttl():
    gate, clock, asked = gate_over(loads(0))
    assert [gate.foreground() for _ in range(5)] == [0] * 5
    assert len(asked) == 1
    clock.now += 0.05
    gate.foreground()
    assert len(asked) == 2


def test_a_server_without_v1_loads_is_never_waited_on_and_the_log_says_so_once(caplog):
    def missing():
        raise Unsupported("HTTP 404")

    calls = []
    gate = YieldGate(lambda: calls.append(1) or missing(), 2.0, sleep=lambda s: pytest.fail("slept"), spawn=inline)
    with caplog.at_level(logging.WARNING, logger="sgl_speccompact.service.yielding"):
        assert [gate.hold() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert len(calls) == 1 and not gate.supported
    assert len([r for r in caplog.records if "no /v1/loads" in r.getMessage()]) == 1


class NoLoads(BackendDefaults):
    """A target whose server answers 404 to /v1/loads (an older SGLang, or a router)."""

    base_url = "http://127.0.0.1:9"

    def loads(self):
        raise http_error(self.base_url + "/v1/loads?include=core", 404, '{"detail":"Not Found"}')


def test_the_service_maps_a_404_to_no_yielding():
    app = create_app(BackendDefaults(), None, settings=ServiceSettings(prepare_yield_s=2.0))
    gate = app.state.service.gate(NoLoads())
    gate.hold()  # waits (within its bound) for the first answer: the 404
    assert not gate.supported and gate.hold() == 0.0
    assert app.state.service.gate(NoLoads()) is gate  # one gate per server


# ------------------------------------------------------------------ the service on an emulator


class Foreground:
    """The agent's turn on the emulated target: its request stays in the scheduler until ``done`` is set."""

    MARK = "AGENT-TURN-IN-FLIGHT"

    def __init__(self, policy):
        self.entered, self.done = threading.Event(), threading.Event()
        policy.on(self.MARK, self._turn)

    def _turn(self, prompt: str) -> str:
        self.entered.set()
        self.done.wait(60)
        return "ok"

    def start(self, url: str) -> threading.Thread:
        body = {"text": f"<|im_start|>user\n{self.MARK}<|im_end|>\n", "sampling_params": {"max_new_tokens": 2}}
        t = threading.Thread(target=lambda: httpx.post(url + "/generate", json=body, timeout=60), daemon=True)
        t.start()
        assert self.entered.wait(30)
        return t


def counted_endpoint(url: str, sent: list):
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    ep = SpecCompactEndpoint(url, timeout_s=60)
    send = ep._http.request

    def counted(method, target_url, *a, **kw):
        if target_url.endswith("/generate"):
            sent.append(target_url)
        return send(method, target_url, *a, **kw)

    ep._http.request = counted  # every view shares this session
    return ep


def test_a_prepare_waits_for_the_agents_turn_and_a_compact_does_not(make_emulated_server, scripted_policy):
    scripted_policy.judge(".", p_positive=0.9, regex=True)
    agent = Foreground(scripted_policy)
    scripted_policy.on("", "- a summarized line\n")
    srv = make_emulated_server(policy=scripted_policy, model_path="Qwen/Qwen3-8B")
    sent: list = []
    app = create_app(counted_endpoint(srv.url, sent), None, settings=ServiceSettings(prepare_yield_s=60.0))
    state = app.state.service
    body = {"messages": MESSAGES, "method": "target_self"}
    with TestClient(app) as client:
        turn = agent.start(srv.url)
        assert srv.engine.loads()["num_running_reqs"] == 1
        assert client.post("/v1/compact", json={**body, "session": "s", "mode": "prepare"}).status_code == 202
        wait_for(lambda: state.gates and next(iter(state.gates.values())).loads_asked >= 3, "the prepare to look")
        gate = next(iter(state.gates.values()))
        assert sent == [] and gate.own() == 0  # held: not one /generate of the prepare went out
        answers = []
        fg = threading.Thread(target=lambda: answers.append(client.post("/v1/compact", json=body)), daemon=True)
        fg.start()
        wait_for(lambda: sent, "the compact's first request")  # sent at once, beside the agent's turn
        assert gate.own() == 0 and gate.held == 0  # ... while the prepare is still held
        agent.done.set()
        turn.join(30)
        fg.join(60)
        wait_idle(app, timeout=60)
    assert answers and answers[0].status_code == 200
    assert gate.held >= 1 and gate.at_bound == 0
    assert len(state.sessions.store) == 1  # the prepare finished and was stored


# ------------------------------------------------------------------ a slow, hanging or trickling /v1/loads


class Later:
    """A gate's ``spawn`` on a fake clock: each /v1/loads request answers ``after_s`` later on that clock.

    Its ``sleep`` moves the clock and runs the requests due, each at its own time.
    """

    def __init__(self, clock: FakeClock, after_s: float):
        self.clock, self.after_s, self.due = clock, after_s, []

    def __call__(self, fn) -> None:
        self.due.append((self.clock.now + self.after_s, fn))

    def sleep(self, s: float) -> None:
        end = self.clock.now + s
        while self.due and self.due[0][0] <= end:
            self.clock.now, fn = self.due.pop(0)
            fn()
        self.clock.now = end


def test_a_slow_busy_answer_is_stamped_on_arrival_and_the_mean_hold_stays_within_the_bound():
    """A "busy" /v1/loads answer takes 1.8 s on the fake clock.  Stamped when it arrives, it is
    fresh on arrival; held requests share the request in flight and each hold, the wait for the
    answer included, ends at the 2 s bound.  Stamped before the fetch, every answer was stale on
    arrival, each held request fetched again, and holds averaged 3.36 s."""
    clock = FakeClock()
    later = Later(clock, 1.8)
    gate = YieldGate(lambda: loads(1), 2.0, poll_s=0.05, clock=clock, sleep=later.sleep, spawn=later)
    holds = [gate.hold() for _ in range(14)]
    assert max(holds) <= 2.0 + 1e-9 and sum(holds) / len(holds) <= 2.0 + 0.2, holds
    assert holds == [pytest.approx(2.0)] * 14 and gate.at_bound == 14  # busy all along: each goes at the bound
    assert gate.loads_asked <= 2 * 14  # at most one request per answer's time (1.8 s), never one per poll (40)


def test_holds_share_one_fetch_in_flight_and_a_hanging_v1_loads_costs_at_most_the_bound():
    """The fetch hangs (an event the test sets); holds on a fake clock never wait in it: each goes
    at its bound, and one /v1/loads request serves them all.  The answer is stamped when it arrives."""
    clock, release = FakeClock(), threading.Event()

    def hanging():
        release.wait(60)
        return loads(0)

    gate = YieldGate(hanging, 2.0, poll_s=0.05, clock=clock, sleep=clock.sleep,
                     on_hold=lambda s: None)
    assert [gate.hold() for _ in range(3)] == [pytest.approx(2.0)] * 3
    assert gate.loads_asked == 1  # one request in flight, shared
    clock.now = 500.0
    release.set()
    wait_for(lambda: gate.foreground() == 0, "the answer to arrive")
    assert gate._cached == (500.0, 0) and gate.hold() == 0.0  # stamped on arrival: fresh, the server free


def test_a_cancelled_scope_ends_every_hold_while_v1_loads_hangs():
    from sgl_speccompact.errors import CompactionCancelledError
    from sgl_speccompact.service.cancel import CancelScope

    release = threading.Event()
    gate = YieldGate(lambda: release.wait(60) and loads(0), 3600.0)
    scopes, outcomes = [CancelScope() for _ in range(4)], []

    def held(scope):
        try:
            gate.hold(scope)
        except CompactionCancelledError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=held, args=(s,), daemon=True) for s in scopes]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: gate.loads_asked == 1 and not release.is_set(), "the shared request")
        for s in scopes:
            s.cancel()
        for t in threads:
            t.join(60)
        assert len(outcomes) == 4 and gate.loads_asked == 1  # every hold ended; still one request
    finally:
        release.set()


@pytest.mark.parametrize("garbage", [{"loads": "busy"}, {"loads": [{"num_running_reqs": -3}]}, ["x"],
                                     {"loads": [{"num_running_reqs": "many"}]}])
def test_a_garbage_v1_loads_answer_never_holds_a_request(garbage):
    gate, clock, _ = gate_over(garbage)
    assert gate.hold() == 0.0 and clock.sleeps == []


def test_v1_loads_has_a_total_deadline_against_a_trickling_body():
    """Each byte of the body comes within the per-read timeout, and the whole would take 30 s: the
    total deadline (0.5 s) ends it.  Before, the request only ended when the body did."""
    from sgl_speccompact.backends.http import HttpEndpoint
    from sgl_speccompact.errors import BackendTimeoutError

    body = b'{"loads": [{"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 0}]}'
    up = Upstream({"/v1/loads": Trickle(body + b" " * 300, every_s=0.1)})
    try:
        endpoint = HttpEndpoint(up.url, timeout_s=60)
        with pytest.raises(BackendTimeoutError, match="did not answer within 0.5 s"):
            endpoint.loads(timeout_s=0.5)
        assert up.finished["/v1/loads"] == 0
    finally:
        up.close()


def test_a_prepare_holding_on_a_trickling_v1_loads_ends_at_its_deadline_and_the_pool_drains():
    """--compaction-timeout 1, --prepare-workers 2, a /v1/loads that trickles (30 s in full) and a
    60 s yield bound: the prepares holding while the first /v1/loads request is in flight end at
    their deadline (a timeout, their /generate never sent); once that request hits its own total
    deadline the load is unknown and the later ones go.  No /v1/loads answer ever finished, and the
    queue drains.  Before, a prepare sat in the fetch until the body ended, and the queue grew
    behind two stuck workers."""
    from sgl_speccompact.backends.http import HttpEndpoint

    up = Upstream({"/v1/loads": Trickle(b" " * 300, every_s=0.1), "/generate": Answer({"text": "x"})})
    generated = []

    def runner(method, request, *, target, **_):
        from sgl_speccompact.result import CompactionResult

        generated.append(target._generate({"text": "x", "sampling_params": {"max_new_tokens": 1}}))
        return CompactionResult(method=method, summary="## Goal\n- done")

    limits = ServiceSettings(compaction_timeout_s=1.0, prepare_workers=2, prepare_yield_s=60.0)
    app = create_app(HttpEndpoint(up.url, timeout_s=60, token_ids=False), None, settings=limits, runner=runner, methods=("hermes",))
    try:
        with TestClient(app) as client:
            for i in range(5):
                res = client.post("/v1/compact", json={"messages": [*MESSAGES, {"role": "user", "content": str(i)}],
                                                       "method": "hermes", "session": f"s{i}", "mode": "prepare"})
                assert res.status_code == 202, res.text
            wait_idle(app, timeout=120)  # a hang guard: five 1 s deadlines, two at a time
            sessions = app.state.sessions
            assert (sessions.n_running, sessions.n_waiting) == (0, 0) and up.finished["/v1/loads"] == 0
            outcomes = {l.split('outcome="')[1].split('"')[0]: float(l.rsplit(" ", 1)[1])
                        for l in client.get("/metrics").text.splitlines()
                        if l.startswith('speccompact_compactions_total{method="hermes"')}
            assert set(outcomes) <= {"ok", "timeout"} and sum(outcomes.values()) == 5.0, outcomes
            assert outcomes["timeout"] >= 2 and len(generated) == len(sessions.store) == outcomes.get("ok", 0)
    finally:
        up.close()
