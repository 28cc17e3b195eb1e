"""Regression tests of the abuse probes: what an operator or an attacker would try.

Each test names the probe it keeps.  Service probes use the injected
runner of test_service; the cancellation, shutdown and injection probes run
the real methods against emulated SGLang servers.
"""

from __future__ import annotations

import copy
import json

import pytest
from procs import EXIT_S, READY_S, stop, wait_healthy
from test_service import MESSAGES, Backend, FakeRunner, make_client

from sgl_speccompact.errors import BackendUnavailableError, ConfigError, LabelTokenError
from sgl_speccompact.service import ServiceLimits, create_app, resolve_api_key

# ------------------------------------------------------------------ 1. clients cannot raise limits


@pytest.mark.parametrize("field,value", [
    ("max_history_messages", "100"), ("max_history_messages", 100.0), ("max_history_messages", True),
    ("max_history_chars", "99999999"), ("max_history_chars", 1e9),
])
def test_probe_limit_raised_by_coercion_is_refused(field, value):
    client, runner = make_client(default_config={"max_history_messages": 5, "max_history_chars": 10_000})
    res = client.post("/v1/compact", json={"messages": MESSAGES + MESSAGES[1:3], "config": {field: value}})
    assert res.status_code == 422, res.text
    assert res.json()["error"]["field"] == f"config.{field}"
    assert runner.calls == []


@pytest.mark.parametrize("field", ["max_new_tokens", "monolithic_max_tokens", "max_summary_tokens",
                                   "max_lines_per_slot", "max_tokens_per_slot"])
def test_probe_every_max_limit_can_only_go_down(field):
    client, runner = make_client()
    res = client.post("/v1/compact", json={"messages": MESSAGES, "config": {field: 10**15}})
    assert res.status_code == 422 and res.json()["error"]["field"] == f"config.{field}"
    ok = client.post("/v1/compact", json={"messages": MESSAGES, "config": {field: 8}})
    assert ok.status_code == 200 and getattr(runner.calls[0]["config"], field) == 8


@pytest.mark.parametrize("config,field", [
    ({"eta": "0.8"}, "config.eta"), ({"eta": True}, "config.eta"), ({"max_new_tokens": "32"}, "config.max_new_tokens"),
    ({"positive_label": 1}, "config.positive_label"), ({"empty_markers": "none"}, "config.empty_markers"),
])
def test_probe_no_string_or_bool_coerced_into_config(config, field):
    client, runner = make_client()
    res = client.post("/v1/compact", json={"messages": MESSAGES, "config": config})
    assert res.status_code == 422 and res.json()["error"]["field"] == field, res.text
    assert runner.calls == []


def test_config_arrays_and_ints_for_floats_still_work():
    client, runner = make_client()
    res = client.post("/v1/compact", json={"messages": MESSAGES, "config": {"eta": 1, "empty_markers": ["(none)"]}})
    assert res.status_code == 200, res.text
    assert runner.calls[0]["config"].eta == 1.0 and runner.calls[0]["config"].empty_markers == ("(none)",)


# ------------------------------------------------------------------ 5/7. typed errors, right field


@pytest.mark.parametrize("body,field", [
    ({"messages": MESSAGES, "method": ""}, "method"),
    ({"messages": MESSAGES, "source_judge": 1}, "source_judge"),
    ({"messages": MESSAGES, "stream": "true"}, "stream"),
    ({"messages": MESSAGES, "previous_summary": 7}, "previous_summary"),
    ({"messages": MESSAGES, "config": []}, "config"),
    ({"messages": MESSAGES, "session": 7}, "session"),
    ({"messages": MESSAGES, "session": ""}, "session"),
    ({"messages": MESSAGES, "session": "a b"}, "session"),
    ({"messages": MESSAGES, "session": "s" * 257}, "session"),
    ({"messages": MESSAGES, "session": "caf\u00e9"}, "session"),
])
def test_probe_strict_body_fields(body, field):
    client, runner = make_client()
    res = client.post("/v1/compact", json=body)
    assert res.status_code == 422 and res.json()["error"]["field"] == field, res.text
    assert runner.calls == []


def test_session_id_is_accepted_for_ahead_of_time_compaction():
    """Agents' plugins (OpenClaw's) send their session id; a 422 here would break every compaction."""
    client, runner = make_client()
    res = client.post("/v1/compact", json={"messages": MESSAGES, "session": "agent:main:explicit:s-1"})
    assert res.status_code == 200, res.text
    assert len(runner.calls) == 1


@pytest.mark.parametrize("raw", [
    b'{"messages": ' + b"[" * 1200 + b"]" * 1200 + b"}",
    b'{"messages": [{"role": "user", "content": "x", "name": ' + b'{"a":' * 1100 + b"1" + b"}" * 1100 + b"}]}",
    b'{"messages": [], "config": {"max_new_tokens": ' + b"9" * 5000 + b"}}",
    b'{"messages": [], "config": {"eta": 1e999}}',
    b'{"messages": [], "config": {"eta": NaN}}',
    b'{"messages": "\xff\xfe"}',
])
def test_probe_hostile_json_is_a_typed_400(raw):
    client, runner = make_client()
    res = client.post("/v1/compact", content=raw, headers={"content-type": "application/json"})
    assert res.status_code == 400, res.text
    assert res.json()["error"]["type"] == "malformed_json" and res.json()["error"]["field"] == "body"
    text = client.get("/metrics").text
    assert 'speccompact_compactions_total{method="-",outcome="rejected"} 1.0' in text


def test_deep_strings_are_not_nesting():
    client, _ = make_client()
    msgs = [{"role": "user", "content": "[" * 5000 + "{" * 5000 + " 1" + "9" * 500}]
    assert client.post("/v1/compact", json={"messages": MESSAGES[:1] + msgs}).status_code == 200


@pytest.mark.parametrize("raw,field", [
    (b'{"messages": [{"role": "user", "content": "a \\ud800 b"}]}', "messages[0].content"),
    (b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}',
     "messages[0].content[0].text"),
    (b'{"messages": [{"role": "user", "content": "x"}], "previous_summary": "\\ud83d"}', "previous_summary"),
])
def test_probe_lone_surrogate_is_422_naming_the_field(raw, field):
    client, runner = make_client()
    res = client.post("/v1/compact", content=raw, headers={"content-type": "application/json"})
    assert res.status_code == 422, res.text
    assert res.json()["error"]["field"] == field
    assert runner.calls == []


def test_probe_previous_summary_has_its_own_limit():
    client, runner = make_client(limits=ServiceLimits(max_previous_summary_chars=1000))
    res = client.post("/v1/compact", json={"messages": MESSAGES, "previous_summary": "x" * 1001})
    assert res.status_code == 413 and res.json()["error"]["field"] == "previous_summary"
    assert client.post("/v1/compact", json={"messages": MESSAGES, "previous_summary": "x" * 1000}).status_code == 200


def test_probe_label_token_error_names_the_field():
    client, _ = make_client(FakeRunner(fail_with=LabelTokenError("no single token", field="config.positive_label")))
    res = client.post("/v1/compact", json={"messages": MESSAGES})
    assert res.status_code == 422 and res.json()["error"]["field"] == "config.positive_label"


def test_label_token_error_from_the_resolver_names_the_label():
    from sgl_speccompact.judge import resolve_label_tokens

    ids = {"yes": [5], " yes": [6], "Yes": [7], " Yes": [8]}
    with pytest.raises(LabelTokenError) as info:
        resolve_label_tokens("yes", "nope", lambda form: ids.get(form, [1, 2]))
    assert info.value.field == "config.negative_label"


# ------------------------------------------------------------------ 9. operator surface


def test_probe_empty_api_key_is_an_error(monkeypatch):
    with pytest.raises(ConfigError):
        create_app(Backend("t"), Backend("d"), api_key="", runner=FakeRunner(), methods=("speccompact",))
    with pytest.raises(ConfigError):
        resolve_api_key("  ")
    monkeypatch.setenv("SGL_SPECCOMPACT_API_KEY", "")
    with pytest.raises(ConfigError):
        resolve_api_key(None)
    monkeypatch.setenv("SGL_SPECCOMPACT_API_KEY", "k")
    assert resolve_api_key(None) == "k"


def test_probe_error_bodies_name_upstreams_by_role():
    url = "http://10.1.2.3:30000"
    failing = FakeRunner(fail_with=BackendUnavailableError(
        f"{url}/generate unreachable: HTTPConnectionPool(host='10.1.2.3', port=30000) http://other:9/x"))
    client, _ = make_client(failing, target=Backend("t", url))
    body = client.post("/v1/compact", json={"messages": MESSAGES}).json()
    msg = body["error"]["message"]
    assert "10.1.2.3" not in msg and "30000" not in msg and "other:9" not in msg
    assert msg.startswith("target/generate unreachable")
    detailed, _ = make_client(FakeRunner(fail_with=BackendUnavailableError(f"{url}/generate down")),
                              target=Backend("t", url), limits=ServiceLimits(expose_upstream_urls=True))
    assert url in detailed.post("/v1/compact", json={"messages": MESSAGES}).json()["error"]["message"]


def test_probe_health_names_upstreams_by_role():
    client, _ = make_client(target=Backend("t", "http://127.0.0.1:9"), drafter=Backend("d"),
                            limits=ServiceLimits(health_timeout_s=2))
    res = client.get("/health")
    assert res.status_code == 503
    assert "127.0.0.1" not in res.text and ":9" not in res.text
    assert set(res.json()["upstreams"]) == {"target", "drafter"}
    detailed, _ = make_client(target=Backend("t", "http://127.0.0.1:9"), drafter=Backend("d"),
                              limits=ServiceLimits(health_timeout_s=2, expose_upstream_urls=True))
    assert detailed.get("/health").json()["upstreams"]["target"]["url"] == "http://127.0.0.1:9/health"


def test_probe_input_is_never_mutated_by_rejections():
    client, _ = make_client(default_config={"max_history_messages": 2})
    sent = copy.deepcopy(MESSAGES)
    client.post("/v1/compact", content=json.dumps({"messages": sent}).encode())
    assert sent == MESSAGES


# ------------------------------------------------------------------ 2. cancellation end to end
# The real methods against emulated SGLang servers, behind a real uvicorn (a
# TestClient cannot disconnect).  Every draft waits at a gate the test opens.

import threading  # noqa: E402
import time  # noqa: E402

import httpx  # noqa: E402


def _wait_for(cond, what: str, limit_s: float = READY_S) -> None:  # the limit is a hang guard
    end = time.monotonic() + limit_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


class GatedServers:
    """Target judges every line positive; each drafter call blocks until the gate opens."""

    def __init__(self, make_emulated_server):
        from sgl_speccompact.testing import ScriptedPolicy

        self.gate = threading.Event()
        self.entered = 0  # drafter calls that reached the policy
        self._lock = threading.Lock()
        self.sent = 0  # HTTP requests the endpoints sent
        self.target_policy = ScriptedPolicy()
        self.target_policy.judge(".", p_positive=0.9, regex=True)
        self.target_policy.on("", "- a repaired line\n")
        self.drafter_policy = ScriptedPolicy()
        self.drafter_policy.on("", self._draft)
        self.target_srv = make_emulated_server(policy=self.target_policy, model_path="Qwen/Qwen3-8B")
        self.drafter_srv = make_emulated_server(policy=self.drafter_policy, model_path="Qwen/Qwen3-0.6B")

    def _draft(self, prompt: str) -> str:
        with self._lock:
            self.entered += 1
            n = self.entered
        self.gate.wait(timeout=60)
        return f"- drafted line {n} about a.py\n"

    def calls(self) -> int:
        return self.sent

    def endpoint(self, url: str, **kw):
        """A SpecCompactEndpoint whose every HTTP request is counted when it is sent."""
        from sgl_speccompact.endpoint import SpecCompactEndpoint

        ep = SpecCompactEndpoint(url, timeout_s=60, **kw)
        send = ep._http.request

        def counted(*args, **kwargs):
            with self._lock:
                self.sent += 1
            return send(*args, **kwargs)

        ep._http.request = counted  # views made by with_cancel share this session
        return ep


class LiveService:
    """create_app served by uvicorn on a free port, in a thread."""

    def __init__(self, app):
        import uvicorn

        from sgl_speccompact.testing.server import listening_socket

        self.app = app
        sock = listening_socket("127.0.0.1", 0)  # bound now: no other process can take the port
        port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        _wait_for(lambda: self.server.started, "uvicorn to start")

    def metric(self, line_prefix: str) -> float | None:
        for line in httpx.get(self.url + "/metrics").text.splitlines():
            if line.startswith(line_prefix + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def gated(make_emulated_server):
    pytest.importorskip("sgl_speccompact.methods")
    servers = GatedServers(make_emulated_server)
    yield servers
    servers.gate.set()


def _live(gated, **limits) -> LiveService:
    target = gated.endpoint(gated.target_srv.url)
    drafter = gated.endpoint(gated.drafter_srv.url, lora_path="drafter")
    return LiveService(create_app(target, drafter, limits=ServiceLimits(**limits)))


def _check_cancelled(svc: LiveService, gated: GatedServers, outcome: str) -> None:
    # the compaction thread is still inside its draft request: it is in flight
    assert svc.metric("speccompact_in_flight") == 1.0
    before = gated.calls()
    gated.gate.set()  # the in-flight drafts answer; the next request of every slot must not be sent
    _wait_for(lambda: svc.app.state.compactions.running() == 0, "the compaction thread to end")
    assert svc.metric("speccompact_in_flight") == 0.0
    assert gated.calls() == before, "a request was sent after the cancel"
    assert svc.metric(f'speccompact_compactions_total{{method="speccompact",outcome="{outcome}"}}') == 1.0
    assert svc.metric('speccompact_compactions_total{method="speccompact",outcome="ok"}') is None


def _cancel_seen(svc: LiveService) -> bool:
    return all(s.reason for s in svc.app.state.compactions._active.values())


@pytest.mark.slow
def test_probe_nonstream_client_gives_up_cancels_the_compaction(gated):
    import http.client
    from urllib.parse import urlsplit

    svc = _live(gated)
    try:
        where = urlsplit(svc.url)
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=READY_S)
        conn.request("POST", "/v1/compact", body=json.dumps({"messages": MESSAGES}),
                     headers={"Content-Type": "application/json"})
        _wait_for(lambda: gated.entered >= 1, "a draft request", limit_s=READY_S)
        conn.close()  # every draft waits at the gate: the client gives up before any answer
        _wait_for(lambda: _cancel_seen(svc), "the disconnect to be seen")
        _check_cancelled(svc, gated, "cancelled")
    finally:
        svc.close()


@pytest.mark.slow
def test_probe_stream_dropped_cancels_the_compaction(gated):
    svc = _live(gated)
    try:
        with httpx.stream("POST", svc.url + "/v1/compact", json={"messages": MESSAGES, "stream": True},
                          timeout=30) as res:
            assert res.status_code == 200
            _wait_for(lambda: gated.entered >= 1, "a draft request")
        # the client closed the stream before any result
        _wait_for(lambda: _cancel_seen(svc), "the disconnect to be seen")
        _check_cancelled(svc, gated, "cancelled")
    finally:
        svc.close()


@pytest.mark.slow
def test_probe_whole_compaction_deadline(gated):
    svc = _live(gated, compaction_timeout_s=1.0)
    try:
        res = httpx.post(svc.url + "/v1/compact", json={"messages": MESSAGES}, timeout=30)
        assert res.status_code == 504, res.text
        assert res.json()["error"]["type"] == "compaction_timeout"
        assert gated.entered >= 1
        # the draft in flight is cut at the deadline too: the thread ends with the gate still shut
        _wait_for(lambda: svc.app.state.compactions.running() == 0, "the compaction thread to end")
        assert svc.metric("speccompact_in_flight") == 0.0
        before = gated.calls()
        gated.gate.set()
        time.sleep(0.5)  # room for a stray request to arrive (none may)
        assert gated.calls() == before
        assert svc.metric('speccompact_compactions_total{method="speccompact",outcome="timeout"}') == 1.0
    finally:
        svc.close()


# ------------------------------------------------------------------ 8. CLI


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    """Run the CLI in a thread so a hang fails the test instead of blocking it."""
    from test_cli import URLS, Recorder, fake_connect

    from sgl_speccompact import cli

    out: list = []
    t = threading.Thread(target=lambda: out.append(cli.main([*argv, *URLS], connect=fake_connect,
                                                            runner=Recorder())), daemon=True)
    t.start()
    t.join(timeout=60)
    assert out, "the CLI hung"
    return out[0], capsys.readouterr().err


def _one_clear_line(err: str, *words: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and all(w in lines[0] for w in words), err


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\x00\x00\x00", b'[{"role": "user", "content": "caf\xe9"}]'])
def test_probe_cli_binary_or_invalid_utf8_history(tmp_path, capsys, content):
    f = tmp_path / "h.json"
    f.write_bytes(content)
    rc, err = _cli([str(f)], capsys)
    assert rc == 1
    _one_clear_line(err, "UTF-8", str(f))


def test_probe_cli_binary_previous_summary(tmp_path, capsys):
    f, prev = tmp_path / "h.json", tmp_path / "prev.txt"
    f.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    prev.write_bytes(b"\xff\xfe\x00summary")
    rc, err = _cli([str(f), "--previous-summary", str(prev)], capsys)
    assert rc == 1
    _one_clear_line(err, "--previous-summary", "UTF-8")


@pytest.mark.parametrize("which", ["history", "previous"])
def test_probe_cli_fifo_does_not_hang(tmp_path, capsys, which):
    import os

    f, fifo = tmp_path / "h.json", tmp_path / "pipe"
    f.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    os.mkfifo(fifo)  # nobody ever writes to it
    argv = [str(fifo)] if which == "history" else [str(f), "--previous-summary", str(fifo)]
    rc, err = _cli(argv, capsys)
    assert rc == 1
    _one_clear_line(err, "not a regular file")


@pytest.mark.parametrize("item,words", [
    ("eta=2", ["--set eta", "less than or equal to 1"]),
    ('eta="0.8x"', ["--set eta"]),
    ("nope=1", ["--set nope", "unknown config field"]),
    ("max_new_tokens=-5", ["--set max_new_tokens"]),
    ("positive_label=negative", ["--set", "must differ"]),
])
def test_probe_cli_set_errors_are_one_line(tmp_path, capsys, item, words):
    f = tmp_path / "h.json"
    f.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    rc, err = _cli([str(f), "--set", item], capsys)
    assert rc == 1
    _one_clear_line(err, *words)


# ------------------------------------------------------------------ 3. clean shutdown, no thread leak


def _failing_servers(make_emulated_server):
    """Target fine; every draft fails with an upstream error once the target forked its slots."""
    from sgl_speccompact.testing import ScriptedPolicy

    def broken(prompt):
        raise RuntimeError("drafter crashed")

    drafter_policy = ScriptedPolicy()
    drafter_policy.on("", broken)
    target_policy = ScriptedPolicy()
    target_policy.judge(".", p_positive=0.9, regex=True)
    return (make_emulated_server(policy=target_policy, model_path="Qwen/Qwen3-8B"),
            make_emulated_server(policy=drafter_policy, model_path="Qwen/Qwen3-0.6B"))


def _non_daemon_threads() -> int:
    return sum(1 for t in threading.enumerate() if not t.daemon and t.is_alive())


@pytest.mark.slow
def test_probe_fifty_failing_compactions_leak_no_threads(make_emulated_server):
    pytest.importorskip("sgl_speccompact.methods")
    from fastapi.testclient import TestClient

    from sgl_speccompact.endpoint import SpecCompactEndpoint

    target_srv, drafter_srv = _failing_servers(make_emulated_server)
    app = create_app(SpecCompactEndpoint(target_srv.url, timeout_s=30),
                     SpecCompactEndpoint(drafter_srv.url, lora_path="drafter", timeout_s=30))
    with TestClient(app) as client:
        def fail_once():
            res = client.post("/v1/compact", json={"messages": MESSAGES})
            assert res.status_code == 502, res.text
        for _ in range(3):  # warm up: connection pools, the loop's executor
            fail_once()
        _wait_for(lambda: app.state.compactions.running() == 0, "warm-up threads to end")
        baseline, total = _non_daemon_threads(), threading.active_count()
        for _ in range(50):
            fail_once()
        _wait_for(lambda: app.state.compactions.running() == 0, "compaction threads to end")
        _wait_for(lambda: _non_daemon_threads() <= baseline, "sglang worker threads to end", limit_s=EXIT_S)
        assert threading.active_count() <= total + 2
        text = client.get("/metrics").text
    assert 'speccompact_compactions_total{method="speccompact",outcome="upstream_error"} 53.0' in text
    assert "speccompact_in_flight 0.0" in text


@pytest.mark.slow
def test_probe_sigterm_stops_the_service_after_failures_and_a_hung_request(make_emulated_server):
    import os
    import signal
    import subprocess
    import sys

    pytest.importorskip("sgl_speccompact.methods")
    from sgl_speccompact.testing import ScriptedPolicy
    from sgl_speccompact.testing.server import free_port

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
    drafter_srv = make_emulated_server(policy=policy, model_path="Qwen/Qwen3-0.6B")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "sgl_speccompact", "serve", "--target-url", target_srv.url,
                             "--drafter-url", drafter_srv.url, "--service-port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})

    try:
        wait_healthy(base, proc, statuses=(200, 503))  # 503: an upstream is down, the service is up
        for _ in range(10):
            assert httpx.post(base + "/v1/compact", json={"messages": MESSAGES}, timeout=READY_S).status_code == 502
        failing.clear()  # now a request gets stuck inside an upstream call while the signal arrives
        answers: list = []

        def ask() -> None:
            try:
                answers.append(httpx.post(base + "/v1/compact", json={"messages": MESSAGES}, timeout=READY_S))
            except httpx.HTTPError as exc:  # kept, so a failure says what the client saw
                answers.append(exc)

        client = threading.Thread(target=ask, daemon=True)
        client.start()
        _wait_for(lambda: hung.is_set() or proc.poll() is not None, "the hung draft", limit_s=READY_S)
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
