"""Prepares yield to foreground work on the target: the rule, the gate (fake clocks), the 404 fallback,
and the service holding a prepare's requests while the emulator reports foreground load."""

from __future__ import annotations

import logging
import threading

import httpx
import pytest
from fastapi.testclient import TestClient

from sgl_speccompact.backends.http import http_error
from sgl_speccompact.service.app import ServiceLimits, create_app
from sgl_speccompact.service.yielding import Unsupported, YieldGate, yield_delay

from tests.support.live_service import wait_for
from tests.support.service import MESSAGES
from tests.support.service import wait_idle


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

    gate = YieldGate(fetch, bound_s, poll_s=0.05, ttl_s=0.04, clock=clock, sleep=clock.sleep, **kw)
    return gate, clock, asked


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
    gate = YieldGate(lambda: calls.append(1) or missing(), 2.0, sleep=lambda s: pytest.fail("slept"))
    with caplog.at_level(logging.WARNING, logger="sgl_speccompact.service.yielding"):
        assert [gate.hold() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert len(calls) == 1 and not gate.supported
    assert len([r for r in caplog.records if "no /v1/loads" in r.getMessage()]) == 1


class NoLoads:
    """A target whose server answers 404 to /v1/loads (an older SGLang, or a router)."""

    base_url = "http://127.0.0.1:9"

    def loads(self):
        raise http_error(self.base_url + "/v1/loads?include=core", 404, '{"detail":"Not Found"}')


def test_the_service_maps_a_404_to_no_yielding():
    app = create_app(object(), None, limits=ServiceLimits(prepare_yield_s=2.0))
    gate = app.state.service.gate(NoLoads())
    assert gate.hold() == 0.0 and not gate.supported
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
    app = create_app(counted_endpoint(srv.url, sent), None, limits=ServiceLimits(prepare_yield_s=60.0))
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
