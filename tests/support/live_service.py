"""Support for the live-service probes: emulated servers whose drafts wait at a gate, and
``create_app`` served by a real uvicorn in a thread (a TestClient cannot disconnect).
"""

from __future__ import annotations

import threading
import time

import httpx
from tests.support.procs import READY_S

from sgl_speccompact.service.app import ServiceSettings, create_app

# ------------------------------------------------------------------ 2. cancellation end to end
# The real methods against emulated SGLang servers, behind a real uvicorn (a
# TestClient cannot disconnect).  Every draft waits at a gate the test opens.


def wait_for(cond, what: str, limit_s: float = READY_S) -> None:  # the limit is a hang guard
    end = time.monotonic() + limit_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


class GatedServers:
    """Target judges every line positive; each drafter call blocks until the gate opens."""

    def __init__(self, make_emulated_server):
        from sgl_speccompact.emulator import ScriptedPolicy

        self.gate = threading.Event()
        self.entered = 0  # drafter calls that reached the policy
        self.answered = 0  # of which answered (the gate opened)
        self._lock = threading.Lock()
        self.sent = 0  # HTTP requests the endpoints sent, aborts left out
        self.aborts: list[str] = []  # rids the endpoints asked a server to abort (POST /abort_request)
        self.closed = 0  # sessions the endpoints closed (POST /close_session)
        self.target_policy = ScriptedPolicy()
        self.target_policy.judge(".", p_positive=0.9, regex=True)
        self.target_policy.on("", "- a repaired line\n")
        self.drafter_policy = ScriptedPolicy()
        self.drafter_policy.on("", self._draft)
        self.target_srv = make_emulated_server(policy=self.target_policy, model_path="Qwen/Qwen3-8B")
        self.drafter_srv = make_emulated_server(policy=self.drafter_policy, model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])

    def _draft(self, prompt: str) -> str:
        with self._lock:
            self.entered += 1
            n = self.entered
        self.gate.wait(timeout=60)
        with self._lock:
            self.answered += 1
        return f"- drafted line {n} about a.py\n"

    def drained(self) -> bool:
        """Every drafter call that reached the policy has been answered."""
        with self._lock:
            return self.answered == self.entered

    def calls(self) -> int:
        return self.sent

    def endpoint(self, url: str, **kw):
        """A SpecCompactEndpoint whose every HTTP request is counted when it is sent (an abort apart, and
        the close of the block's session: both are how a cancel reaches the server)."""
        import json

        from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

        ep = SpecCompactEndpoint(url, timeout_s=60, **kw)
        send = ep._http.request

        def counted(method, url, *args, **kwargs):
            with self._lock:
                if url.endswith("/abort_request"):
                    self.aborts.append(json.loads(kwargs["data"])["rid"])
                elif url.endswith("/close_session"):
                    self.closed += 1
                else:
                    self.sent += 1
            return send(method, url, *args, **kwargs)

        ep._http.request = counted  # views made by with_cancel share this session
        return ep


class LiveService:
    """create_app served by uvicorn on a free port, in a thread."""

    def __init__(self, app):
        import uvicorn

        from sgl_speccompact.emulator.server import listening_socket

        self.app = app
        sock = listening_socket("127.0.0.1", 0)  # bound now: no other process can take the port
        port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, "uvicorn to start")

    def metric(self, line_prefix: str) -> float | None:
        for line in httpx.get(self.url + "/metrics").text.splitlines():
            if line.startswith(line_prefix + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def live(gated, **limits) -> LiveService:
    target = gated.endpoint(gated.target_srv.url)
    drafter = gated.endpoint(gated.drafter_srv.url, lora_path="drafter")
    return LiveService(create_app(target, drafter, settings=ServiceSettings(**limits, method="speccompact")))


def check_cancelled(svc: LiveService, gated: GatedServers, outcome: str) -> None:
    # the compaction thread is still inside its draft request: it is in flight
    assert svc.metric("speccompact_in_flight") == 1.0
    # each draft in flight, still held at the gate, is aborted on the drafter's server
    wait_for(lambda: gated.aborts, "the drafts in flight to be aborted")
    before = gated.calls()
    gated.gate.set()  # the in-flight drafts answer; the next request of every slot must not be sent
    wait_for(lambda: svc.app.state.compactions.running() == 0, "the compaction thread to end")
    assert svc.metric("speccompact_in_flight") == 0.0
    assert gated.calls() == before, "a request was sent after the cancel"
    wait_for(lambda: gated.closed == 2, "the block's sessions to be closed")
    assert gated.target_srv.stats()["sessions"]["open"] == gated.drafter_srv.stats()["sessions"]["open"] == 0
    assert svc.metric(f'speccompact_compactions_total{{method="speccompact",outcome="{outcome}"}}') == 1.0
    assert svc.metric('speccompact_compactions_total{method="speccompact",outcome="ok"}') is None


def cancel_seen(svc: LiveService) -> bool:
    return all(s.reason for s in svc.app.state.compactions._active.values())
