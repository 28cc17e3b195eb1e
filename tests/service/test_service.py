"""The HTTP service with an injected runner (no SGLang server needed)."""

from __future__ import annotations

import copy
import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from tests.support.stream_replay import assert_stream_shows_the_result
from tests.support.runner_calls import call_fields
from sgl_speccompact.errors import BackendTimeoutError, BackendUnavailableError
from sgl_speccompact.methods.names import METHODS
from sgl_speccompact.service.app import ServiceSettings, create_app
from tests.support.service import Backend, FakeRunner, LayoutRunner, MESSAGES, RoutedBackend, endpoints, make_client


@pytest.mark.parametrize("method", METHODS)
def test_round_trip_each_method(method):
    client, runner = make_client()
    body = {"messages": MESSAGES, "method": method, "previous_summary": "earlier", "source_judge": True,
            "config": {"eta": 0.8}}
    res = client.post("/v1/compact", json=body)
    assert res.status_code == 200, res.text
    out = res.json()
    assert out["method"] == method
    assert out["summary"] == "## Goal\n- Fix the failing test in a.py"
    assert out["stats"]["acceptance_rate"] == 0.5
    call = runner.calls[0]
    assert call["messages"] == MESSAGES and call["previous_summary"] == "earlier" and call["source_judge"]
    assert call["config"].eta == 0.8 and call["target"].name == "t" and call["drafter"].name == "d"


def test_focus_and_tools_reach_the_runner_only_when_given():
    client, runner = make_client()
    tools = [{"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}}]
    assert client.post("/v1/compact", json={"messages": MESSAGES, "focus": "the db schema",
                                            "tools": tools}).status_code == 200
    assert client.post("/v1/compact", json={"messages": MESSAGES}).status_code == 200
    assert runner.calls[0]["focus"] == "the db schema" and runner.calls[0]["tools"] == tools
    assert "focus" not in runner.calls[1] and "tools" not in runner.calls[1]
    bad = client.post("/v1/compact", json={"messages": MESSAGES, "focus": ["not", "text"]})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "focus"


def test_default_method_and_default_config():
    client, runner = make_client(settings=ServiceSettings(method="hermes"), default_config={"eta": 0.9})
    assert client.post("/v1/compact", json={"messages": MESSAGES}).status_code == 200
    assert runner.calls[0]["method"] == "hermes" and runner.calls[0]["config"].eta == 0.9


def _sse_events(text: str) -> list[tuple[str, str]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith(":")]  # keep-alive pings
        if not lines:
            continue
        fields = dict(line.split(": ", 1) for line in lines)
        out.append((fields.get("event", "message"), fields["data"]))
    return out


def test_stream_order_lines_then_result_then_done():
    client, _ = make_client()
    with client.stream("POST", "/v1/compact", json={"messages": MESSAGES, "stream": True}) as res:
        assert res.status_code == 200
        assert res.headers["content-type"].startswith("text/event-stream")
        events = _sse_events(res.read().decode())
    assert [e for e, _ in events] == ["line", "slot_done", "result", "message"]
    assert json.loads(events[0][1])["text"] == "- Fix the failing test in a.py"
    assert json.loads(events[2][1])["summary"].startswith("## Goal")
    assert events[3][1] == "[DONE]"


def test_stream_error_event_and_no_result():
    client, _ = make_client(FakeRunner(fail_with=BackendTimeoutError("target too slow")))
    with client.stream("POST", "/v1/compact", json={"messages": MESSAGES, "stream": True}) as res:
        events = _sse_events(res.read().decode())
    assert [e for e, _ in events] == ["line", "error"]
    err = json.loads(events[1][1])
    assert err["status"] == 504 and err["error"]["type"] == "backend_timeout"


def test_stream_validation_errors_are_plain_responses():
    client, _ = make_client()
    res = client.post("/v1/compact", json={"messages": [{"content": "x"}], "stream": True})
    assert res.status_code == 422 and res.json()["error"]["field"] == "messages[0].role"


def test_auth_on():
    client, runner = make_client(api_key="s3cret")
    assert client.post("/v1/compact", json={"messages": MESSAGES}).status_code == 401
    res = client.post("/v1/compact", json={"messages": MESSAGES}, headers={"Authorization": "Bearer wrong"})
    assert res.status_code == 401 and res.json()["error"]["type"] == "unauthorized"
    assert res.headers["www-authenticate"] == "Bearer"
    ok = client.post("/v1/compact", json={"messages": MESSAGES}, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and len(runner.calls) == 1


def test_auth_off():
    client, _ = make_client(api_key=None)
    assert client.post("/v1/compact", json={"messages": MESSAGES}).status_code == 200


def test_oversized_body_is_413():
    client, runner = make_client(settings=ServiceSettings(max_body_mb=200 / 2**20))
    res = client.post("/v1/compact", json={"messages": MESSAGES})
    assert res.status_code == 413 and res.json()["error"]["field"] == "body"
    # no Content-Length: the limit still holds while reading
    res = client.post("/v1/compact", content=iter([b'{"messages": [', b" " * 300, b"]}"]),
                      headers={"content-type": "application/json"})
    assert res.status_code == 413
    assert runner.calls == []


def test_history_limits_413_and_request_may_not_raise_them():
    client, _ = make_client(default_config={"max_history_messages": 3, "max_history_chars": 10_000})
    res = client.post("/v1/compact", json={"messages": MESSAGES})
    assert res.status_code == 413
    assert res.json()["error"] == {"type": "history_too_long", "field": "messages",
                                   "message": "messages: has 4 messages, limit is 3"}
    res = client.post("/v1/compact", json={"messages": MESSAGES[:2], "config": {"max_history_messages": 50}})
    assert res.status_code == 422 and res.json()["error"]["field"] == "config.max_history_messages"
    res = client.post("/v1/compact", json={"messages": MESSAGES[:2], "config": {"max_history_chars": 20}})
    assert res.status_code == 413  # lowering is allowed and applies


@pytest.mark.parametrize("messages,field", [
    ([{"content": "no role"}], "messages[0].role"),
    ([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "zz", "content": "r"}],
     "messages[1].tool_call_id"),
    ([{"role": "user", "content": 42}], "messages[0].content"),
    ([], "messages"),
    ("not a list", "messages"),
])
def test_malformed_messages_name_the_field(messages, field):
    client, runner = make_client()
    res = client.post("/v1/compact", json={"messages": messages})
    assert res.status_code == 422, res.text
    assert res.json()["error"]["field"] == field
    assert runner.calls == []


@pytest.mark.parametrize("body,status,field", [
    ({"messages": MESSAGES, "temperature": 1}, 422, "temperature"),
    ({"messages": MESSAGES, "method": "magic"}, 422, "method"),
    ({"messages": MESSAGES, "stream": "yes"}, 422, "stream"),
    ({"messages": MESSAGES, "config": {"eta": 2.0}}, 422, "config.eta"),
    ({"messages": MESSAGES, "config": {"nope": 1}}, 422, "config.nope"),
    ({}, 422, "messages"),
    ([1], 422, "body"),
])
def test_bad_request_fields(body, status, field):
    client, _ = make_client()
    res = client.post("/v1/compact", json=body)
    assert res.status_code == status, res.text
    assert res.json()["error"]["field"] == field


def test_malformed_json_is_400():
    client, _ = make_client()
    res = client.post("/v1/compact", content=b'{"messages": [', headers={"content-type": "application/json"})
    assert res.status_code == 400 and res.json()["error"] == {
        "type": "malformed_json", "field": "body", "message": res.json()["error"]["message"]}


def test_speccompact_without_drafter_is_refused():
    client, _ = make_client(drafter=None)
    res = client.post("/v1/compact", json={"messages": MESSAGES, "method": "speccompact"})
    assert res.status_code == 422 and res.json()["error"]["field"] == "method"
    assert client.post("/v1/compact", json={"messages": MESSAGES, "method": "hermes"}).status_code == 200


@pytest.mark.parametrize("exc,status,kind", [
    (BackendUnavailableError("target down"), 502, "backend_unavailable"),
    (BackendTimeoutError("target slow"), 504, "backend_timeout"),
    (ConnectionRefusedError("refused"), 502, "backend_unavailable"),
    (TimeoutError("timed out"), 504, "backend_timeout"),
    (RuntimeError("bug"), 500, "speccompact_error"),
])
def test_upstream_failure_mid_compaction(exc, status, kind):
    client, runner = make_client(FakeRunner(fail_with=exc))
    sent = copy.deepcopy(MESSAGES)
    res = client.post("/v1/compact", json={"messages": sent})
    assert res.status_code == status
    body = res.json()
    assert set(body) == {"error"} and body["error"]["type"] == kind  # no partial summary
    assert sent == MESSAGES and runner.calls[0]["messages"] == MESSAGES


def test_concurrent_compactions_get_their_own_summaries():
    n = 8
    client, runner = make_client(FakeRunner(barrier=threading.Barrier(n)))

    def one(i):
        msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": f"task number {i}"}]
        return i, client.post("/v1/compact", json={"messages": msgs}).json()

    with client, ThreadPoolExecutor(n) as ex:
        results = list(ex.map(one, range(n)))
    for i, out in results:
        assert out["summary"] == f"## Goal\n- task number {i}"


def test_several_targets_round_robin():
    targets = [Backend("a"), Backend("b")]
    client, runner = make_client(target=targets)
    for _ in range(4):
        client.post("/v1/compact", json={"messages": MESSAGES})
    assert [c["target"].name for c in runner.calls] == ["a", "b", "a", "b"]


def test_health_reports_each_upstream():
    status = {"t": True, "d": True}

    def probe(b):
        return {"ok": status[b.name], "url": None, "detail": "fake"}

    client, _ = make_client(health_probe=probe)
    res = client.get("/health")
    assert res.status_code == 200 and res.json()["status"] == "ok"
    assert set(res.json()["upstreams"]) == {"target", "drafter"}
    status["d"] = False
    res = client.get("/health")
    assert res.status_code == 503 and res.json()["upstreams"]["drafter"]["ok"] is False


def test_health_http_probe_against_dead_url():
    client, _ = make_client(target=Backend("t", "http://127.0.0.1:9"), drafter=Backend("d"),
                            settings=ServiceSettings(health_timeout_s=2))
    res = client.get("/health")
    assert res.status_code == 503
    assert res.json()["upstreams"]["target"]["ok"] is False
    assert res.json()["upstreams"]["drafter"]["ok"] is True  # in-process backend


def test_metrics_count_outcomes_and_are_per_app():
    client, _ = make_client()
    client.post("/v1/compact", json={"messages": MESSAGES, "method": "hermes"})
    client.post("/v1/compact", json={"messages": [{"content": "x"}]})
    text = client.get("/metrics").text
    assert 'speccompact_compactions_total{method="hermes",outcome="ok"} 1.0' in text
    assert 'speccompact_compactions_total{method="-",outcome="rejected"} 1.0' in text
    assert 'speccompact_acceptance_rate_count{method="hermes"} 1.0' in text
    assert "speccompact_in_flight 0.0" in text
    assert "speccompact_compaction_seconds_bucket" in text
    assert 'speccompact_host_cpu_seconds_count{method="hermes"} 1.0' in text
    other, _ = make_client()
    assert 'outcome="ok"} 1.0' not in other.get("/metrics").text

    failing, _ = make_client(FakeRunner(fail_with=BackendUnavailableError("x")))
    failing.post("/v1/compact", json={"messages": MESSAGES, "method": "openclaw"})
    assert 'speccompact_compactions_total{method="openclaw",outcome="upstream_error"} 1.0' in failing.get(
        "/metrics").text


# ------------------------------------------------- end to end: real methods, SGLang-API emulator
# The real run_method drives SpecCompactEndpoint over HTTP against emulated SGLang servers.


@pytest.fixture
def methods():
    from sgl_speccompact import methods

    return methods


@pytest.fixture
def emulated_pair(make_emulated_server):
    """(target server, drafter server) of the emulator with the benchmark policy."""
    from sgl_speccompact.emulator import ControlledAcceptancePolicy

    target = make_emulated_server(policy=ControlledAcceptancePolicy(seed=1), model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(policy=ControlledAcceptancePolicy(seed=2), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    return target, drafter


class Recording:
    """Wraps the real run_method and keeps the messages object it was given."""

    def __init__(self, run_method):
        self.run_method = run_method
        self.seen: list = []

    def __call__(self, method, messages, **kw):
        self.seen.append(call_fields(messages)["messages"])
        return self.run_method(method, messages, **kw)


def test_e2e_every_method_round_trip(methods, emulated_pair):
    target, drafter = endpoints(*emulated_pair)
    client = TestClient(create_app(target, drafter))
    for method in methods.METHODS:
        res = client.post("/v1/compact", json={"messages": MESSAGES * 3, "method": method})
        assert res.status_code == 200, (method, res.text)
        out = res.json()
        assert out["method"] == method and out["summary"].strip()
        assert out["stats"]["requests"]["target"], method
    # default: auto, which on the default deployment (one shared H200, p_accept prior 0.7) picks Target-self
    picked = client.post("/v1/compact", json={"messages": MESSAGES * 3}).json()
    assert picked["method"] == picked["stats"]["auto"]["method"] == "target_self"
    sjc = client.post("/v1/compact", json={"messages": MESSAGES * 3, "source_judge": True, "method": "speccompact",
                                           "previous_summary": "## Goal\n- fix a.py"})
    assert sjc.status_code == 200 and sjc.json()["source_judge"] is not None
    assert sjc.json()["stats"]["requests"]["drafter"] and sjc.json()["stats"]["auto"] is None
    assert client.get("/health").json()["status"] == "ok"
    assert 'speccompact_compactions_total{method="speccompact",outcome="ok"} 2.0' in client.get("/metrics").text


def test_e2e_stream_lines_then_result_then_done(methods, emulated_pair):
    target, drafter = endpoints(*emulated_pair)
    client = TestClient(create_app(target, drafter))
    with client.stream("POST", "/v1/compact", json={"messages": MESSAGES * 3, "stream": True}) as res:
        assert res.status_code == 200
        events = _sse_events(res.read().decode())
    kinds = [e for e, _ in events]
    assert kinds[-2:] == ["result", "message"] and events[-1][1] == "[DONE]"
    assert "line" in kinds and "slot_done" in kinds
    assert set(kinds[:-2]) <= {"line", "slot_written", "retract", "slot_done"}
    result = json.loads(events[-2][1])
    # MESSAGES * 3 repeats every fact: lines later slots copy are shown, then retracted as duplicates
    assert_stream_shows_the_result([json.loads(d) for e, d in events[:-2]], result["slots"])


def test_e2e_target_dies_mid_compaction_is_502(methods, make_emulated_server):
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, ScriptedPolicy

    target_srv = make_emulated_server(policy=ControlledAcceptancePolicy(), model_path="Qwen/Qwen3-8B")
    killed = threading.Event()

    def draft_then_kill_target(prompt):
        if not killed.is_set():  # the target already prefilled the shared prefix; now it goes away
            killed.set()
            closer = threading.Thread(target=target_srv.close)
            closer.start()
            closer.join(timeout=60)  # closed before this draft is answered
            assert not closer.is_alive(), "the target did not close"
        return "- a drafted line about a.py\n"

    drafter_policy = ScriptedPolicy()
    drafter_policy.on("", draft_then_kill_target)
    drafter_srv = make_emulated_server(policy=drafter_policy, model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    target, drafter = endpoints(target_srv, drafter_srv, timeout_s=10)
    runner = Recording(methods.run_method)
    client = TestClient(create_app(target, drafter, runner=runner, methods=methods.METHODS))
    sent = copy.deepcopy(MESSAGES)
    res = client.post("/v1/compact", json={"messages": sent, "method": "speccompact"})
    assert killed.is_set()
    assert res.status_code == 502, res.text
    assert set(res.json()) == {"error"} and res.json()["error"]["type"] == "backend_unavailable"
    assert runner.seen[0] == MESSAGES  # the runner left the request's messages as they were
    assert client.get("/health").status_code == 503


def test_e2e_slow_target_is_504(methods, make_emulated_server):
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, ScriptedPolicy

    answer = threading.Event()  # the target answers only once the test is over: it never answers in time
    slow = ScriptedPolicy()
    slow.on("", lambda prompt: answer.wait(60) and "- late\n")
    target_srv = make_emulated_server(policy=slow, model_path="Qwen/Qwen3-8B")
    drafter_srv = make_emulated_server(policy=ControlledAcceptancePolicy(), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    target, drafter = endpoints(target_srv, drafter_srv, timeout_s=0.5)
    runner = Recording(methods.run_method)
    client = TestClient(create_app(target, drafter, runner=runner, methods=methods.METHODS))
    method = "hermes" if "hermes" in methods.METHODS else methods.METHODS[0]
    try:
        res = client.post("/v1/compact", json={"messages": MESSAGES, "method": method})
    finally:
        answer.set()
    assert res.status_code == 504, res.text
    assert res.json()["error"]["type"] == "backend_timeout"
    assert runner.seen[0] == MESSAGES


def test_e2e_concurrent_compactions_do_not_cross_talk(methods, make_emulated_server):
    from sgl_speccompact.emulator import ScriptedPolicy

    def policy():
        p = ScriptedPolicy()
        # every line names the task of the conversation it was written for
        p.on("", lambda prompt: "- work on TASK-%s\n" % re.findall(r"TASK-(\d+)", prompt)[-1])
        p.judge(".", p_positive=0.9, regex=True)
        return p

    target, drafter = endpoints(make_emulated_server(policy=policy(), model_path="Qwen/Qwen3-8B"),
                                make_emulated_server(policy=policy(), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"]))
    client = TestClient(create_app(target, drafter))
    n = 4

    def one(i):
        msgs = [{"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": f"Please finish TASK-{i} in the repository today."}]
        return i, client.post("/v1/compact", json={"messages": msgs, "method": "speccompact"}).json()

    with client, ThreadPoolExecutor(n) as ex:
        results = list(ex.map(one, range(n)))
    for i, out in results:
        found = set(re.findall(r"TASK-(\d+)", out["summary"]))
        assert found == {str(i)}, out
        assert out["stats"]["requests"]["drafter"]["draft"]["requests"] >= 1


def test_layout_fields_reach_the_runner():
    runner = LayoutRunner()
    client, _ = make_client(runner=runner, target=RoutedBackend("t"), chat_template="Qwen/Qwen3-8B")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {"messages": MESSAGES, "tools": tools, "layout": "agent", "chat_template_kwargs": {"enable_thinking": False},
            "routing_key": "session-1"}
    res = client.post("/v1/compact", json=body)
    assert res.status_code == 200, res.text
    got = runner.layout_args
    assert got["layout"] == "agent" and got["tools"] == tools and got["chat_template"] == "Qwen/Qwen3-8B"
    assert got["chat_template_kwargs"] == {"enable_thinking": False}
    assert got["target"].routing_key == "session-1"
    assert client.post("/v1/compact", json={"messages": MESSAGES, "layout": "agentic"}).status_code == 422


# ------------------------------------------------------------------ method="auto"

def _picker(gpus=1, prior=0.9, fits=None):
    from sgl_speccompact.methods.autopick import AcceptanceEstimate, deployment_for

    return deployment_for("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", gpus=gpus, drafter_shares_gpu=gpus == 1, fits=fits,
                          acceptance=AcceptanceEstimate(prior=prior))


def test_auto_is_the_default_and_its_pick_follows_the_deployment():
    # the same history and acceptance (0.7): Target-self when the drafter shares the target's GPU
    # (SpecCompact predicted 2.60 s against 1.76 s), SpecCompact when it has its own (1.61 s)
    picks = {}
    for gpus in (1, 2):
        client, runner = make_client(auto=_picker(gpus, prior=0.7))
        out = client.post("/v1/compact", json={"messages": MESSAGES}).json()
        auto = out["stats"]["auto"]
        assert runner.calls[0]["method"] == out["method"] == auto["method"]
        assert auto["requested"] == "auto" and auto["deployment"]["gpus"] == gpus
        assert auto["method"] == min(auto["predicted_s"], key=auto["predicted_s"].get)
        assert auto["p_accept"] == 0.7 and auto["p_accept_source"] == "prior"
        assert auto["history_tokens"] > 0 and auto["history_tokens_source"].startswith("estimate")
        assert "profile:H200" in auto["cost_model"] and auto["method"] in auto["reason"]
        picks[gpus] = out["method"]
    assert picks == {1: "target_self", 2: "speccompact"}


def test_auto_pick_changes_with_a_calibrated_slower_drafter():
    from dataclasses import replace

    from sgl_speccompact.core.calibration import profile_fit

    # an L40S's numbers for the drafter, as a calibration on a slow drafter GPU would give
    slow = replace(profile_fit("Qwen/Qwen3-0.6B", "L40S"), source="calibrated", gpu="H200")
    fast_out = make_client(auto=_picker(2, prior=0.7))[0].post("/v1/compact", json={"messages": MESSAGES}).json()
    slow_out = make_client(auto=_picker(2, prior=0.7, fits={"drafter": slow}))[0].post(
        "/v1/compact", json={"messages": MESSAGES}).json()
    assert (fast_out["method"], slow_out["method"]) == ("speccompact", "target_self")
    assert "drafter: calibrated" in slow_out["stats"]["auto"]["cost_model"]
    assert slow_out["stats"]["auto"]["predicted_s"]["speccompact"] > fast_out["stats"]["auto"]["predicted_s"][
        "speccompact"]


def test_an_explicit_method_wins_over_auto():
    client, runner = make_client(auto=_picker(2))
    for method in ("hermes", "target_self", "speccompact"):
        out = client.post("/v1/compact", json={"messages": MESSAGES, "method": method}).json()
        assert out["method"] == method and out["stats"]["auto"] is None
    assert [c["method"] for c in runner.calls] == ["hermes", "target_self", "speccompact"]
    assert "speccompact_auto_picks_total" not in _samples(client)


def test_auto_without_a_drafter_never_picks_speccompact():
    client, runner = make_client(auto=_picker(2, prior=1.0), drafter=None)
    out = client.post("/v1/compact", json={"messages": MESSAGES}).json()
    assert out["method"] == "target_self" and "speccompact" not in out["stats"]["auto"]["predicted_s"]


def test_observed_acceptance_moves_the_estimate_and_the_pick():
    # FakeRunner reports acceptance 0.5; from the prior 0.8 the estimate falls by the EMA (weight 0.2):
    # 0.8, 0.74, 0.692, 0.6536, 0.62288, and below about 0.64 Target-self is predicted faster on two GPUs
    client, _ = make_client(auto=_picker(2, prior=0.8))
    seen = [client.post("/v1/compact", json={"messages": MESSAGES}).json()["stats"]["auto"] for _ in range(5)]
    # stats.auto reports the estimate to 4 decimals, /metrics to full precision
    assert [a["p_accept"] for a in seen] == pytest.approx([0.8, 0.74, 0.692, 0.6536, 0.62288], abs=5e-5)
    assert [a["method"] for a in seen] == ["speccompact"] * 4 + ["target_self"]
    assert seen[1]["p_accept_source"] == "observed over 1 compactions"
    text = client.get("/metrics").text
    pair = 'pair="Qwen/Qwen3-8B|Qwen/Qwen3-0.6B"'
    assert f"speccompact_observed_acceptance{{{pair}}} 0.62288" in text
    assert 'speccompact_auto_picks_total{method="speccompact"} 4.0' in text
    assert 'speccompact_auto_picks_total{method="target_self"} 1.0' in text
    # a Target-self compaction judges no drafts: the estimate stays
    client.post("/v1/compact", json={"messages": MESSAGES})
    assert f"speccompact_observed_acceptance{{{pair}}} 0.62288" in client.get("/metrics").text


def _samples(client) -> str:
    return "\n".join(l for l in client.get("/metrics").text.splitlines() if not l.startswith("#"))


def test_auto_on_emulators_runs_the_pick(methods, emulated_pair):
    # two GPUs and a high observed acceptance: SpecCompact runs, drafting on the drafter emulator,
    # every body checked by the emulator against sglang's own request classes
    target, drafter = endpoints(*emulated_pair)
    client = TestClient(create_app(target, drafter, auto=_picker(2, prior=0.95)))
    out = client.post("/v1/compact", json={"messages": MESSAGES * 3}).json()
    assert out["method"] == out["stats"]["auto"]["method"] == "speccompact"
    assert out["stats"]["requests"]["drafter"]["draft"]["requests"] >= 1
    assert out["stats"]["auto"]["p_accept"] == 0.95
    # the observed acceptance of that run replaced part of the prior
    again = client.post("/v1/compact", json={"messages": MESSAGES * 3}).json()["stats"]["auto"]
    rate = out["stats"]["acceptance_rate"]
    assert again["p_accept"] == pytest.approx(0.8 * 0.95 + 0.2 * rate, abs=1e-4)


def test_the_ledger_reaches_clients_as_data_in_the_response_and_the_stream_result():
    """The typed ledger report (entries, read set, counts) is the JSON response's and the result event's."""
    from sgl_speccompact.methods.registry import run_method
    from tests.support.methods import baseline_target

    def runner(method, messages, *, target, drafter=None, config=None, **given):
        return run_method("openclaw", messages, target=baseline_target(None), config=config, **given)

    messages = [{"role": "user", "content": "fix a.py"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "r", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
                {"role": "tool", "tool_call_id": "r", "content": "x = 1"}]
    client, _ = make_client(runner)
    out = client.post("/v1/compact", json={"messages": messages}).json()
    want = [{"path": "a.py", "last_read": 1, "changed_after": False, "changed_at": None}]
    assert out["ledger"]["read_set"] == want
    assert [(e["index"], e["kind"], e["value"], e["via"]) for e in out["ledger"]["entries"]] == [
        (1, "read", "a.py", "read_file")]
    assert out["ledger"]["counted"] == {} and 0 < out["ledger"]["tokens"] <= out["ledger"]["budget"]
    with client.stream("POST", "/v1/compact", json={"messages": messages, "stream": True}) as res:
        events = _sse_events(res.read().decode())
    (result,) = [json.loads(data) for event, data in events if event == "result"]
    assert result["ledger"] == out["ledger"]
