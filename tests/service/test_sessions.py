"""Ahead-of-time compaction: prepare, store, reuse, cancellation, isolation."""

import doctest
import threading

import pytest
from fastapi.testclient import TestClient

from sgl_speccompact.service import store as sessions_module
from sgl_speccompact.service.app import ServiceSettings, create_app
from sgl_speccompact.service.store import SessionStore, Stored, message_keys, prefix_digests

from tests.support.service import MESSAGES, FakeRunner
from tests.support.live_service import wait_for
from tests.support.service import MORE, Clock, metric, release_once_decided, service, wait_idle


def test_doctests():
    failed, attempted = doctest.testmod(sessions_module)
    assert failed == 0 and attempted > 0


# ---------------------------------------------------------------- the store


def stored(messages, n, size=10, cost=1.0, created=0.0, summary="S"):
    from sgl_speccompact.result import CompactionResult

    return Stored(CompactionResult(method="m", summary=summary), n, prefix_digests(messages, {n})[n], size, cost,
                  created, *message_keys(messages[:n]))


def test_store_longest_prefix_and_a_rest_that_starts_inside_a_tool_call():
    msgs = MESSAGES + MORE
    store = SessionStore(max_bytes=1000, ttl_s=60, clock=Clock())
    store.put("a", "s", "p", stored(msgs, 2, summary="two"))
    store.put("a", "s", "p", stored(msgs, 3, summary="three"))  # rest would start with the tool result
    store.put("a", "s", "p", stored(msgs, 4, summary="four"))
    assert store.longest("a", "s", "p", msgs).result.summary == "four"
    assert store.longest("a", "s", "p", msgs[:3]).result.summary == "three"
    assert store.longest("a", "s", "p", msgs[:4]).result.summary == "four"
    changed = [*msgs[:3], {**msgs[3], "content": "PASSED"}, *MORE]
    # the 4-prefix differs now; the 3-prefix would leave a tool result without its call
    assert store.longest("a", "s", "p", changed).result.summary == "two"
    for other in (("b", "s", "p"), ("a", "t", "p"), ("a", "s", "q")):
        assert store.longest(*other, msgs) is None


def test_store_bounds_by_bytes_and_age_and_counts_unused_entries_as_waste():
    clock, wasted = Clock(), []
    store = SessionStore(max_bytes=25, ttl_s=10, on_waste=wasted.append, clock=clock)
    store.put("a", "s", "p", stored(MESSAGES, 1, size=10, cost=1.0))
    store.put("a", "s", "p", stored(MESSAGES, 2, size=10, cost=2.0))
    assert store.longest("a", "s", "p", MESSAGES[:2]).n_messages == 2  # used: not waste when dropped
    store.put("a", "s", "p", stored(MESSAGES, 4, size=10, cost=4.0))  # 30 bytes > 25: the oldest goes
    assert len(store) == 2 and store.bytes == 20 and wasted == [1.0]
    clock.now = 11.0
    store.put("a", "s", "p", stored(MESSAGES, 3, size=5, cost=3.0, created=11.0))
    assert len(store) == 1 and wasted == [1.0, 4.0]  # expired: the used one is not waste
    store.put("a", "s", "p", stored(MESSAGES, 2, size=99, cost=7.0, created=11.0))  # never fits
    assert len(store) == 1 and wasted[-1] == 7.0


# ---------------------------------------------------------------- the service


def test_a_compact_after_a_prepare_reuses_it():
    app, runner = service()
    with TestClient(app) as client:
        res = client.post("/v1/compact", json={"messages": MESSAGES, "session": "s1", "mode": "prepare"})
        assert res.status_code == 202 and res.json()["status"] == "preparing"
        wait_idle(app)
        prepared = runner.calls[-1]
        assert prepared["messages"] == MESSAGES
        # nothing after the prefix: the stored result is the answer, no new compaction
        same = client.post("/v1/compact", json={"messages": MESSAGES, "session": "s1"})
        assert same.status_code == 200 and len(runner.calls) == 1
        assert same.json()["session"]["reused_messages"] == len(MESSAGES)
        # new turns: only they are compacted, on the stored summary
        more = client.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s1"})
        assert more.status_code == 200, more.text
        assert runner.calls[-1]["messages"] == MORE
        assert runner.calls[-1]["previous_summary"] == same.json()["summary"]
        assert more.json()["session"]["reused_messages"] == len(MESSAGES)
        assert metric(client, "speccompact_prepares_total") == 1
        assert metric(client, 'speccompact_session_lookups_total{result="hit"}') == 2


@pytest.mark.parametrize("other", [
    {"session": "s2"},  # another session
    {"headers": {"Authorization": "Bearer key-2"}},  # another API key
    {"headers": {}},  # no key at all
    {"body": {"focus": "tests"}},  # a request the summary was not made for
])
def test_a_stored_summary_never_crosses_sessions_or_api_keys(other):
    app, runner = service()
    mine = {"Authorization": "Bearer key-1"}
    with TestClient(app) as client:
        client.post("/v1/compact", json={"messages": MESSAGES, "session": "s1", "mode": "prepare"}, headers=mine)
        wait_idle(app)
        body = {"messages": MESSAGES + MORE, "session": other.get("session", "s1"), **other.get("body", {})}
        res = client.post("/v1/compact", json=body, headers=other.get("headers", mine))
        assert res.status_code == 200
        assert runner.calls[-1]["messages"] == MESSAGES + MORE  # compacted from scratch
        assert runner.calls[-1]["previous_summary"] is None
        assert res.json()["session"]["reused_messages"] == 0
        assert metric(client, 'speccompact_session_lookups_total{result="miss"}') == 1
        # the owner still finds it
        own = client.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s1"}, headers=mine)
        assert own.json()["session"]["reused_messages"] == len(MESSAGES)


def test_with_auth_the_scope_is_the_key_and_a_wrong_key_is_refused():
    app, runner = service(api_key="secret")
    with TestClient(app) as client:
        ok = {"Authorization": "Bearer secret"}
        client.post("/v1/compact", json={"messages": MESSAGES, "session": "s", "mode": "prepare"}, headers=ok)
        wait_idle(app)
        bad = client.post("/v1/compact", json={"messages": MESSAGES, "session": "s"},
                          headers={"Authorization": "Bearer other"})
        assert bad.status_code == 401 and "summary" not in bad.text
        assert client.post("/v1/compact", json={"messages": MESSAGES, "session": "s"},
                           headers=ok).json()["session"]["reused_messages"] == len(MESSAGES)


@pytest.mark.parametrize("body, field", [
    ({"mode": "prepare"}, "session"),
    ({"mode": "prepare", "session": "s", "stream": True}, "stream"),
    ({"session": "bad\nid"}, "session"),
    ({"session": "x" * 257}, "session"),
    ({"session": ""}, "session"),
    ({"mode": "later", "session": "s"}, "mode"),
])
def test_bad_session_fields(body, field):
    app, _ = service()
    res = TestClient(app).post("/v1/compact", json={"messages": MESSAGES, **body})
    assert res.status_code == 422 and res.json()["error"]["field"] == field


class Gated(FakeRunner):
    """A runner that holds its first compaction (the prepare) until released."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()
        self.started = threading.Event()

    def __call__(self, method, messages, **kw):
        if not self.started.is_set():
            self.started.set()
            assert self.release.wait(20)
        return super().__call__(method, messages, **kw)


def test_a_compact_waits_for_a_prepare_that_has_run_long_enough():
    runner = Gated()
    app, _ = service(runner)
    with TestClient(app) as client:
        client.post("/v1/compact", json={"messages": MESSAGES, "session": "s", "mode": "prepare"})
        assert runner.started.wait(10)
        app.state.sessions.expected.seconds = 0.0  # any elapsed time is past the fixed share
        release_once_decided(app, runner)
        res = client.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s"})
        info = res.json()["session"]
        assert info["prepare"] == "waited" and info["reused_messages"] == len(MESSAGES)
        assert runner.calls[-1]["messages"] == MORE


def test_a_compact_cancels_a_young_prepare_and_starts_fresh():
    runner = Gated()
    app, _ = service(runner)
    with TestClient(app) as client:
        client.post("/v1/compact", json={"messages": MESSAGES, "session": "s", "mode": "prepare"})
        assert runner.started.wait(10)
        app.state.sessions.expected.seconds = 3600.0  # the prepare has barely begun
        res = client.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s"})
        runner.release.set()  # the cancelled prepare returns now; its result is discarded
        info = res.json()["session"]
        assert info["prepare"] == "cancelled" and info["reused_messages"] == 0
        assert runner.calls[-1]["messages"] == MESSAGES + MORE
        wait_idle(app)
        assert len(app.state.sessions.store) == 0  # the cancelled prepare stored nothing
        assert metric(client, "speccompact_prepare_wasted_seconds_total") > 0


PREVIOUS = {"previous_summary": "## Goal\n- fix the failing test"}  # sizes the prepared summary: 9 tokens


def compact_during_a_prepare(app, runner, elapsed_s: float | None = None) -> dict:
    """Start a prepare of MESSAGES, compact MESSAGES + MORE while it runs (``elapsed_s``: how long the
    decision sees it has run; None: the real time); the ``session`` entry."""
    with TestClient(app) as client:
        client.post("/v1/compact", json={"messages": MESSAGES, "session": "s", "mode": "prepare", **PREVIOUS})
        assert runner.started.wait(10)
        release_once_decided(app, runner, elapsed_s)
        info = client.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s", **PREVIOUS}
                           ).json()["session"]
        runner.release.set()
        wait_idle(app)
        return info


@pytest.mark.parametrize("fixed, choice", [
    # waiting costs the fixed part again and the prepared summary's tokens, less the 0.5 s the prepare has
    # run: sooner when the fixed part is small, later when it dominates
    (0.0, "waited"),
    (10.0, "cancelled"),
])
def test_the_cost_models_prediction_decides_wait_or_cancel(fixed, choice):
    runner = Gated()
    app, _ = service(runner)
    sizes = []

    def predict(method, tokens):
        sizes.append(tokens)
        return fixed + 1e-4 * tokens

    app.state.sessions.predict = predict
    # the moving average alone would choose the other way: the prediction overrides it
    app.state.sessions.expected.seconds = 3600.0 if choice == "waited" else 0.0
    info = compact_during_a_prepare(app, runner, elapsed_s=0.5)
    assert info["prepare"] == choice, sizes
    assert info["reused_messages"] == (len(MESSAGES) if choice == "waited" else 0)
    prefix, rest, whole = sizes
    assert 0 < rest < prefix < whole  # prefix, rest (on the previous summary), whole: each at its own size


def test_without_a_prediction_the_moving_average_decides():
    runner = Gated()
    app, _ = service(runner)
    app.state.sessions.predict = lambda method, tokens: None  # e.g. a method the cost model does not know
    app.state.sessions.expected.seconds = 0.0
    assert compact_during_a_prepare(app, runner)["prepare"] == "waited"


def test_a_known_deployment_predicts_with_the_cost_model():
    from sgl_speccompact.methods.auto import Deployment, predict

    runner = Gated()
    app, _ = service(runner, deployment=Deployment.named(target="qwen3-32b", gpus=2))
    # a few short messages: the cost model's time is almost all fixed cost, so a young prepare is cancelled
    # although the moving average (0 s: any prepare is old enough) would wait
    app.state.sessions.expected.seconds = 0.0
    dep = Deployment.named(target="qwen3-32b", gpus=2)
    assert app.state.sessions.predict("speccompact", 500) == predict("speccompact", dep, 500, 0.7)
    assert compact_during_a_prepare(app, runner, elapsed_s=0.0)["prepare"] == "cancelled"


def test_restart_loses_the_store_and_nothing_breaks():
    app, runner = service()
    with TestClient(app) as client:
        client.post("/v1/compact", json={"messages": MESSAGES, "session": "s", "mode": "prepare"})
        wait_idle(app)
    app2, runner2 = service()
    with TestClient(app2) as client:
        res = client.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s"})
        assert res.status_code == 200 and res.json()["session"]["reused_messages"] == 0
        assert runner2.calls[-1]["messages"] == MESSAGES + MORE


# ---------------------------------------------------------------- on the emulator


def test_a_prepare_cancelled_by_a_newer_one_stops_its_upstream_requests(make_emulated_server, monkeypatch):
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.backends.http import HttpEndpoint
    from sgl_speccompact.emulator import ScriptedPolicy

    lock, gate = threading.Lock(), threading.Event()  # the first prepare's later answers wait at the gate
    arrived = {"ALPHA": 0, "BETA": 0}  # requests each prepare got to a server
    in_flight: dict = {}  # cancel scope -> requests sent through it and not answered yet
    scopes = []  # the scopes, in the order of their first request

    def answer(prompt):
        who = "ALPHA" if "ALPHA" in prompt else "BETA"
        with lock:
            arrived[who] += 1
            hold = who == "ALPHA" and arrived[who] >= 3  # the first prepare is still running at the cancel
        if hold and not gate.wait(60):
            raise AssertionError("the gate never opened")
        return "- a line about the task\n"

    send = HttpEndpoint._request

    def counted(self, *args, **kw):
        scope = self.cancel_scope
        with lock:
            if scope is not None and scope not in in_flight:
                in_flight[scope] = 0
                scopes.append(scope)
            if scope is not None:
                in_flight[scope] += 1
        try:
            return send(self, *args, **kw)
        finally:
            if scope is not None:
                with lock:
                    in_flight[scope] -= 1

    monkeypatch.setattr(HttpEndpoint, "_request", counted)

    def policy():
        p = ScriptedPolicy()
        p.on("", answer)
        p.judge(".", p_positive=0.9, regex=True)
        return p

    target = SpecCompactEndpoint(make_emulated_server(policy=policy(), model_path="Qwen/Qwen3-8B").url, timeout_s=30)
    drafter = SpecCompactEndpoint(make_emulated_server(policy=policy(), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"]).url,
                                  lora_path="drafter", timeout_s=30)
    app = create_app(target, drafter, settings=ServiceSettings())

    def history(tag):
        return [{"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": f"Finish task {tag} in the repository"}]

    try:
        with TestClient(app) as client:
            client.post("/v1/compact", json={"messages": history("ALPHA"), "session": "s", "mode": "prepare"})
            wait_for(lambda: arrived["ALPHA"] >= 3, "the first prepare to be under way")
            res = client.post("/v1/compact", json={"messages": history("BETA"), "session": "s", "mode": "prepare"})
            assert res.status_code == 202
            alpha = scopes[0]
            wait_for(lambda: alpha.reason is not None, "the first prepare to be cancelled")
            with lock:  # what reached a server, plus what was already on its way
                bound = arrived["ALPHA"] + in_flight[alpha]
            gate.set()
            wait_idle(app, timeout=60)
            assert arrived["ALPHA"] <= bound  # no request of the first prepare was sent after its cancel
            assert arrived["BETA"] > 0
            assert len(app.state.sessions.store) == 1  # only the newer prepare's result
            assert metric(client, "speccompact_prepare_wasted_seconds_total") > 0
            got = client.post("/v1/compact", json={"messages": history("BETA"), "session": "s"}).json()
            assert got["session"]["reused_messages"] == 2
    finally:
        gate.set()


def test_store_flags_reach_the_service_config():
    from sgl_speccompact.launch.command_line import build_parser
    from sgl_speccompact.launch.plan import build_plan

    base = ["--target-url", "http://127.0.0.1:1", "--no-drafter"]
    plan = build_plan(build_parser("x").parse_args(base + ["--session-store-mb", "2", "--session-ttl", "60"]))
    assert (plan.service.session_store_mb, plan.service.session_ttl_s) == (2.0, 60.0)
    default = build_plan(build_parser("x").parse_args(base)).service
    assert (default.session_store_bytes, default.session_ttl_s) == (
        ServiceSettings().session_store_bytes, ServiceSettings().session_ttl_s)


def test_e2e_a_compact_after_a_prepare_sends_only_the_new_turns(make_emulated_server):
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.emulator import ScriptedPolicy

    prompts = []

    def policy():
        p = ScriptedPolicy()
        p.on("", lambda prompt: prompts.append(prompt) or "- a line about the task\n")
        p.judge(".", p_positive=0.9, regex=True)
        return p

    target = SpecCompactEndpoint(make_emulated_server(policy=policy(), model_path="Qwen/Qwen3-8B").url, timeout_s=30)
    drafter = SpecCompactEndpoint(make_emulated_server(policy=policy(), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"]).url,
                                  lora_path="drafter", timeout_s=30)
    first = [{"role": "system", "content": "You are a coding agent."},
             {"role": "user", "content": "Fix PREFIX-ONLY-MARKER in a.py"}]
    rest = [{"role": "assistant", "content": "Done with the marker."},
            {"role": "user", "content": "Now handle REST-ONLY-MARKER"}]
    app = create_app(target, drafter)
    with TestClient(app) as client:
        assert client.post("/v1/compact", json={"messages": first, "session": "s", "mode": "prepare"}).status_code == 202
        wait_idle(app, timeout=60)
        assert any("PREFIX-ONLY-MARKER" in p for p in prompts)
        prepared = len(prompts)
        res = client.post("/v1/compact", json={"messages": first + rest, "session": "s"})
        assert res.status_code == 200, res.text
        assert res.json()["session"]["reused_messages"] == 2
        later = prompts[prepared:]
        assert later and any("REST-ONLY-MARKER" in p for p in later)
        assert not any("PREFIX-ONLY-MARKER" in p for p in later)  # the prefix was not compacted again
