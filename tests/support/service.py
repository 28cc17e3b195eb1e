"""The compaction service with a fake runner: the app, its client, a fake clock and waits on its state."""

from __future__ import annotations

import threading
import time
from fastapi.testclient import TestClient
from tests.support.runner_calls import call_fields
from sgl_speccompact.backends.contract import BackendDefaults
from sgl_speccompact.result import CompactionResult, LineOrigin, SlotResult, SummaryLine
from sgl_speccompact.methods.names import METHODS
from sgl_speccompact.service.app import create_app

MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test in a.py"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"pytest\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "bash", "content": "FAILED a.py::test_x"},
]
MORE = [{"role": "assistant", "content": "The test fails on an import."},
        {"role": "user", "content": "Then fix the import in a.py"}]


class Backend(BackendDefaults):
    """Stands in for an SGLang endpoint (the contract's no-ops; the runner is faked)."""

    def __init__(self, name: str, base_url: str | None = None):
        self.name = name
        self.base_url = base_url


class FakeRunner:
    """``run_method`` stand-in: one line per slot, summary names the request."""

    def __init__(self, fail_with: Exception | None = None, barrier: threading.Barrier | None = None):
        self.fail_with = fail_with
        self.barrier = barrier
        self.calls: list[dict] = []
        self._lock = threading.Lock()

    def __call__(self, method, messages, *, target, drafter=None, config=None, **given):
        call = call_fields(messages, method=method, target=target, drafter=drafter, config=config, **given)
        on_event = call.pop("on_event", None)
        with self._lock:
            self.calls.append(call)
        if self.barrier is not None:
            self.barrier.wait(timeout=30)  # every request must be in flight at once
        goal = f"- {call['messages'][1]['content']}"
        if on_event:
            on_event({"type": "line", "slot": "goal", "text": goal, "origin": "drafted_accepted"})
        if self.fail_with is not None:
            raise self.fail_with
        if on_event:
            on_event({"type": "slot_done", "slot": "goal", "stop_reason": "complete"})
        slot = SlotResult(name="goal", title="Goal", stop_reason="complete",
                          lines=[SummaryLine(text=goal, origin=LineOrigin.DRAFTED, score=0.9)])
        res = CompactionResult(method=method, summary=f"## Goal\n{goal}", summary_tokens=7, slots=[slot])
        res.stats.proposed_lines, res.stats.accepted_lines = 2, 1
        return res


def make_client(runner=None, **kw) -> tuple[TestClient, FakeRunner]:
    runner = runner or FakeRunner()
    kw.setdefault("methods", METHODS)
    app = create_app(kw.pop("target", Backend("t")), kw.pop("drafter", Backend("d")), runner=runner, **kw)
    return TestClient(app), runner


def endpoints(target_srv, drafter_srv, timeout_s: float = 60.0):
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    return (SpecCompactEndpoint(target_srv.url, timeout_s=timeout_s),
            SpecCompactEndpoint(drafter_srv.url, lora_path="drafter", timeout_s=timeout_s))


class LayoutRunner(FakeRunner):
    """Records the layout arguments the service passes on."""

    def __call__(self, method, messages, **kw):
        call = call_fields(messages)
        self.layout_args = {**{k: call.get(k) for k in ("layout", "tools", "chat_template", "chat_template_kwargs")},
                            "target": kw["target"]}
        return super().__call__(method, messages, **kw)


class RoutedBackend(Backend):
    routing_key = None

    def with_routing_key(self, key):
        other = RoutedBackend(self.name, self.base_url)
        other.routing_key = key
        return other

    def with_cancel(self, scope):
        return self


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def wait_idle(app, timeout=20.0):
    end = time.monotonic() + timeout
    while app.state.sessions.running or app.state.compactions.running():
        assert time.monotonic() < end, "prepare did not finish"
        time.sleep(0.02)


def service(runner=None, **kw):
    runner = runner or FakeRunner()
    app = create_app(Backend("t"), Backend("d"), runner=runner, methods=("speccompact", "hermes"), **kw)
    return app, runner


def metric(client, name):
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def release_once_decided(app, runner, elapsed_s: float | None = None) -> None:
    """Release ``runner`` (its ``release`` event) once the session decided whether a compact waits for its
    running prepare, so the prepare is still running when the decision is made.

    ``elapsed_s``: how long the decision sees the prepare has run (a fake clock); None: the real time.
    """
    sessions = app.state.sessions
    decide = sessions._should_wait

    def decided(elapsed, *args):
        wait = decide(elapsed if elapsed_s is None else elapsed_s, *args)
        runner.release.set()
        return wait

    sessions._should_wait = decided
