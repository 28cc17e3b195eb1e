"""SIGTERM ends the service process promptly: within 2 s when idle, one more second when busy (inside the deadline).

Before: uvicorn finished 0.3 s after the signal but the process exited 5.5-9.5 s later when idle
(the interpreter collecting sglang's heap at exit) and later still with a compaction stuck in a
stopped upstream.  Both probes wait for the process itself to exit, with a bounded wait.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.support.procs import EXIT_S, READY_S, stop, wait_healthy

IDLE_EXIT_S = 2.0  # the promise for an idle service: exit within this after SIGTERM (s)
DEADLINE_S = 60.0  # --compaction-timeout of the busy probe (s)
BUSY_EXIT_S = IDLE_EXIT_S + 1.0  # busy: the idle bound plus THREAD_GRACE_S, well inside the deadline (s)


def _serve(target_url: str, port: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sgl_speccompact", "serve", "--target-url", target_url,
                             "--no-drafter", "--service-port", str(port), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def _exit_s(proc: subprocess.Popen, bound_s: float) -> float:
    """Seconds from SIGTERM to the process's exit; fails once ``bound_s`` has passed without one."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=bound_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {bound_s:g} s after SIGTERM")
    return time.monotonic() - t0


@pytest.mark.slow
@pytest.mark.parametrize("bound_s", [
    pytest.param(IDLE_EXIT_S, marks=pytest.mark.perf, id="the-2-s-promise"),
    pytest.param(EXIT_S, id="exits"),  # the default run: a clean exit, whatever the machine's load
])
def test_idle_service_exits_within_2_s_of_sigterm(make_emulated_server, bound_s):
    from sgl_speccompact.emulator import ScriptedPolicy, free_port

    target = make_emulated_server(policy=ScriptedPolicy(), model_path="Qwen/Qwen3-8B")
    port = free_port()
    proc = _serve(target.url, port)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        _exit_s(proc, bound_s)
        err = proc.stderr.read()
        assert proc.returncode in (0, 143) and "Traceback" not in err, err[-2000:]
    finally:
        stop(proc, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("deadline_s, bound_s", [
    pytest.param(DEADLINE_S, BUSY_EXIT_S, marks=pytest.mark.perf, id="the-promise"),
    # the default run: a bound far inside a deadline far longer still, whatever the machine's load
    pytest.param(READY_S, EXIT_S, id="before-the-deadline"),
])
def test_busy_service_exits_within_the_compaction_deadline(make_emulated_server, deadline_s, bound_s):
    """A compaction is stuck in an upstream that never answers when the signal arrives."""
    from sgl_speccompact.emulator import ScriptedPolicy, free_port

    gate, hung = threading.Event(), threading.Event()

    def stuck(prompt: str) -> str:
        hung.set()
        gate.wait(READY_S)  # never answers while the test runs
        return "- late\n"

    policy = ScriptedPolicy()
    policy.on("", stuck)
    target = make_emulated_server(policy=policy, model_path="Qwen/Qwen3-8B")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _serve(target.url, port, "--compaction-timeout", str(deadline_s), "--method", "target_self")
    answers: list = []
    try:
        wait_healthy(base, proc)

        def ask() -> None:
            try:
                answers.append(httpx.post(base + "/v1/compact", timeout=EXIT_S,
                                          json={"messages": [{"role": "user", "content": "fix a.py"}]}))
            except httpx.HTTPError as exc:
                answers.append(exc)

        client = threading.Thread(target=ask, daemon=True)
        client.start()
        deadline = time.monotonic() + READY_S
        while not hung.is_set() and proc.poll() is None and time.monotonic() < deadline:
            hung.wait(0.1)
        assert hung.is_set() and proc.poll() is None
        _exit_s(proc, bound_s)
        client.join(timeout=EXIT_S)
        assert answers and getattr(answers[0], "status_code", None) == 503, answers  # told, not dropped
    finally:
        stop(proc, signal.SIGKILL)
        gate.set()
