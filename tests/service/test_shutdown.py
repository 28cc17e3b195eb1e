"""Clean shutdown: failing compactions leak no threads, SIGTERM stops the service after failures
and a hung request, and open streams end with an error event.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from tests.support.live_service import wait_for
from tests.support.procs import EXIT_S, READY_S, stop, wait_healthy
from tests.support.service import MESSAGES

from sgl_speccompact.service.app import ServiceSettings, create_app

# ------------------------------------------------------------------ 3. clean shutdown, no thread leak


# SpecCompact by name: its drafts are what fail here, and auto picks Target-self on a shared GPU.
SPECCOMPACT_BODY = {"messages": MESSAGES, "method": "speccompact"}


def _failing_servers(make_emulated_server):
    """Target fine; every draft fails with an upstream error once the target forked its slots."""
    from sgl_speccompact.emulator import ScriptedPolicy

    def broken(prompt):
        raise RuntimeError("drafter crashed")

    drafter_policy = ScriptedPolicy()
    drafter_policy.on("", broken)
    target_policy = ScriptedPolicy()
    target_policy.judge(".", p_positive=0.9, regex=True)
    return (make_emulated_server(policy=target_policy, model_path="Qwen/Qwen3-8B"),
            make_emulated_server(policy=drafter_policy, model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"]))


def _non_daemon_threads() -> int:
    return sum(1 for t in threading.enumerate() if not t.daemon and t.is_alive())


@pytest.mark.slow
def test_fifty_failing_compactions_leak_no_threads(make_emulated_server):
    from fastapi.testclient import TestClient

    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    target_srv, drafter_srv = _failing_servers(make_emulated_server)
    app = create_app(SpecCompactEndpoint(target_srv.url, timeout_s=30),
                     SpecCompactEndpoint(drafter_srv.url, lora_path="drafter", timeout_s=30))
    with TestClient(app) as client:
        def fail_once():
            res = client.post("/v1/compact", json=SPECCOMPACT_BODY)
            assert res.status_code == 502, res.text
        for _ in range(3):  # warm up: connection pools, the loop's executor
            fail_once()
        wait_for(lambda: app.state.compactions.running() == 0, "warm-up threads to end")
        baseline, total = _non_daemon_threads(), threading.active_count()
        for _ in range(50):
            fail_once()
        wait_for(lambda: app.state.compactions.running() == 0, "compaction threads to end")
        wait_for(lambda: _non_daemon_threads() <= baseline, "sglang worker threads to end", limit_s=EXIT_S)
        assert threading.active_count() <= total + 2
        text = client.get("/metrics").text
    assert 'speccompact_compactions_total{method="speccompact",outcome="upstream_error"} 53.0' in text
    assert "speccompact_in_flight 0.0" in text


@pytest.mark.slow
def test_sigterm_stops_the_service_after_failures_and_a_hung_request(make_emulated_server):
    import os
    import signal
    import subprocess
    import sys

    from sgl_speccompact.emulator import ScriptedPolicy
    from sgl_speccompact.emulator.server import free_port

    target_srv, _ = _failing_servers(make_emulated_server)
    gate, failing, hung = threading.Event(), threading.Event(), threading.Event()
    failing.set()

    def draft(prompt):
        if failing.is_set():
            raise RuntimeError("drafter crashed")
        hung.set()
        gate.wait(READY_S)  # hangs until the test ends
        return "- late\n"

    policy = ScriptedPolicy()
    policy.on("", draft)
    drafter_srv = make_emulated_server(policy=policy, model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "sgl_speccompact", "serve", "--target-url", target_srv.url,
                             "--drafter-url", drafter_srv.url, "--service-port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})

    try:
        wait_healthy(base, proc, statuses=(200, 503))  # 503: an upstream is down, the service is up
        for _ in range(10):
            assert httpx.post(base + "/v1/compact", json=SPECCOMPACT_BODY, timeout=READY_S).status_code == 502
        failing.clear()  # now a request gets stuck inside an upstream call while the signal arrives
        answers: list = []

        def ask() -> None:
            try:
                answers.append(httpx.post(base + "/v1/compact", json=SPECCOMPACT_BODY, timeout=READY_S))
            except httpx.HTTPError as exc:  # kept, so a failure says what the client saw
                answers.append(exc)

        client = threading.Thread(target=ask, daemon=True)
        client.start()
        wait_for(lambda: hung.is_set() or proc.poll() is not None, "the hung draft", limit_s=READY_S)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=EXIT_S)  # a hang guard, not a timing claim
        assert proc.returncode in (0, 143), err[-2000:]
        assert "Traceback" not in err, err[-2000:]
        client.join(timeout=EXIT_S)
        assert answers and getattr(answers[0], "status_code", None) == 503, answers  # told, not dropped
        assert answers[0].json()["error"]["type"] == "service_stopping"
    finally:
        stop(proc, signal.SIGKILL)
        gate.set()


# ------------------------------------------------------------------ shutdown ends streams cleanly


@pytest.mark.slow
def test_sigterm_ends_open_streams_with_an_error_event(make_emulated_server):
    # before: the stream was cut mid-chunk (httpx.RemoteProtocolError), no error event
    import os
    import signal
    import subprocess
    import sys

    from sgl_speccompact.emulator import ScriptedPolicy
    from sgl_speccompact.emulator.server import free_port

    gate, hung = threading.Event(), threading.Event()

    def draft(prompt):
        hung.set()
        gate.wait(READY_S)
        return "- late\n"

    target_policy = ScriptedPolicy()
    target_policy.judge(".", p_positive=0.9, regex=True)
    drafter_policy = ScriptedPolicy()
    drafter_policy.on("", draft)
    target_srv = make_emulated_server(policy=target_policy, model_path="Qwen/Qwen3-8B")
    drafter_srv = make_emulated_server(policy=drafter_policy, model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "sgl_speccompact", "serve", "--target-url", target_srv.url,
                             "--drafter-url", drafter_srv.url, "--service-port", str(port), "--method", "speccompact"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    got: list = []

    def listen() -> None:
        try:
            with httpx.stream("POST", base + "/v1/compact", json={"messages": MESSAGES, "stream": True},
                              timeout=READY_S) as res:
                got.extend(res.iter_lines())
            got.append("<clean end>")
        except httpx.HTTPError as exc:  # kept, so a failure says what the client saw
            got.append(exc)

    try:
        wait_healthy(base, proc)
        client = threading.Thread(target=listen, daemon=True)
        client.start()
        wait_for(lambda: hung.is_set() or proc.poll() is not None, "the hung draft")
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=EXIT_S)
        assert proc.returncode in (0, 143), err[-2000:]
        client.join(timeout=EXIT_S)
        assert got and got[-1] == "<clean end>", got
        events = [ln for ln in got if isinstance(ln, str) and ln.startswith(("event:", "data:"))]
        assert "event: error" in events, got
        data = json.loads(events[events.index("event: error") + 1].removeprefix("data:"))
        assert data["error"]["type"] == "service_stopping" and data["status"] == 503
        assert "event: result" not in events and "data: [DONE]" not in events
    finally:
        stop(proc, signal.SIGKILL)
        gate.set()


@pytest.mark.slow
def test_server_stop_ends_streams_without_a_signal(gated):
    # the launcher's server cancels compactions as shutdown begins, so a stop that is no signal (a dying
    # SGLang child sets should_exit) ends streams the same way; before: no such server, streams were cut
    import uvicorn

    from sgl_speccompact.launch.run import service_server
    from sgl_speccompact.emulator.server import listening_socket

    app = create_app(gated.endpoint(gated.target_srv.url), gated.endpoint(gated.drafter_srv.url, lora_path="drafter"),
                     settings=ServiceSettings(method="speccompact"))
    sock = listening_socket("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = service_server(app, log_level="warning", timeout_graceful_shutdown=3)
    assert isinstance(server, uvicorn.Server)
    runner = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    runner.start()
    wait_for(lambda: server.started, "uvicorn to start")
    got: list = []

    def listen() -> None:
        try:
            with httpx.stream("POST", url + "/v1/compact", json={"messages": MESSAGES, "stream": True},
                              timeout=READY_S) as res:
                got.extend(res.iter_lines())
            got.append("<clean end>")
        except httpx.HTTPError as exc:
            got.append(exc)

    client = threading.Thread(target=listen, daemon=True)
    client.start()
    wait_for(lambda: gated.entered >= 1, "a draft request")
    server.should_exit = True
    runner.join(timeout=EXIT_S)
    client.join(timeout=EXIT_S)
    assert got and got[-1] == "<clean end>", got
    assert "event: error" in got and any('"service_stopping"' in ln for ln in got if isinstance(ln, str)), got
