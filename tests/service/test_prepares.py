"""The prepare protocol: join, rolling, the deadline of a compact that waits, the bounded queue,
growth-stable matching, the auto pick per session and acceptance per API key."""

import threading
import time
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from sgl_speccompact.backends.contract import BackendDefaults
from sgl_speccompact.methods.autopick import AutoPicker
from sgl_speccompact.service.app import PARSE_WORKERS, ServiceSettings, create_app
from sgl_speccompact.service.store import DUPLICATE_OUTPUT

from tests.support.runner_calls import call_fields
from tests.support.service import MESSAGES, FakeRunner
from tests.support.service import MORE, metric, release_once_decided, service, wait_idle

from speccompact_hermes import prune as hermes_prune


class Held(FakeRunner):
    """A runner that holds every compaction until ``release`` is set (``started`` counts arrivals)."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()
        self.arrived = threading.Semaphore(0)
        self.arrivals = []  # the messages of each compaction, as it arrives

    def __call__(self, method, messages, **kw):
        self.arrivals.append(call_fields(messages)["messages"])
        self.arrived.release()
        assert self.release.wait(60)
        return super().__call__(method, messages, **kw)


def prepare(client, messages, session="s", **extra):
    return client.post("/v1/compact", json={"messages": messages, "session": session, "mode": "prepare", **extra})


# ---------------------------------------------------------------- join


def test_twenty_identical_prepares_join_one_and_nothing_is_cancelled():
    runner = Held()
    app, _ = service(runner)
    with TestClient(app) as client:
        answers = [prepare(client, MESSAGES) for _ in range(20)]
        assert runner.arrived.acquire(timeout=30)
        assert [a.status_code for a in answers] == [202] * 20
        assert [a.json()["joined"] for a in answers] == [False] + [True] * 19
        runner.release.set()
        wait_idle(app)
        assert len(runner.calls) == 1 and len(app.state.sessions.store) == 1
        assert metric(client, "speccompact_prepares_joined_total") == 19
        assert metric(client, "speccompact_prepare_wasted_seconds_total") == 0
        assert prepare(client, MESSAGES).json()["status"] == "ready"  # once stored: nothing runs


# ---------------------------------------------------------------- rolling


def test_a_longer_prepare_waits_behind_the_running_one_and_compacts_only_its_new_turns():
    runner = Held()
    app, _ = service(runner)
    with TestClient(app) as client:
        assert prepare(client, MESSAGES).json()["status"] == "preparing"
        assert runner.arrived.acquire(timeout=30)
        longer = prepare(client, MESSAGES + MORE).json()
        assert longer["status"] == "queued" and not longer["joined"]
        assert len(runner.arrivals) == 1  # behind the running one, not beside it
        runner.release.set()
        wait_idle(app)
        first, second = runner.calls
        assert first["messages"] == MESSAGES and second["messages"] == MORE  # incremental on the first
        assert second["previous_summary"] == "## Goal\n- Fix the failing test in a.py"
        assert metric(client, "speccompact_prepare_wasted_seconds_total") == 0
        res = client.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s"}).json()
        assert res["session"]["reused_messages"] == len(MESSAGES + MORE) and len(runner.calls) == 2


def test_a_newer_waiting_prepare_replaces_the_older_waiting_one():
    runner = Held()
    app, _ = service(runner)
    third = MORE + [{"role": "assistant", "content": "Fixed."}, {"role": "user", "content": "Run it again"}]
    with TestClient(app) as client:
        prepare(client, MESSAGES)
        assert runner.arrived.acquire(timeout=30)
        assert prepare(client, MESSAGES + MORE).json()["status"] == "queued"
        assert prepare(client, MESSAGES + third).json()["status"] == "queued"
        assert app.state.sessions.n_waiting == 1
        runner.release.set()
        wait_idle(app)
        assert [c["messages"] for c in runner.calls] == [MESSAGES, third]


# ---------------------------------------------------------------- the deadline


@dataclass
class Scoped(BackendDefaults):
    """A backend that records the cancel scope a compaction binds it to."""

    name: str
    scopes: list
    base_url: str | None = None

    def with_cancel(self, scope):
        self.scopes.append(scope)
        return self


def test_a_compact_waiting_for_a_prepare_ends_at_its_own_deadline():
    runner = Held()
    app, _ = service(runner, settings=ServiceSettings(compaction_timeout_s=1.0))
    with TestClient(app) as client:
        prepare(client, MESSAGES)
        assert runner.arrived.acquire(timeout=30)
        app.state.sessions.expected.seconds = 0.0  # any prepare is old enough to wait for
        res = client.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s"})
        assert res.status_code == 504, res.text
        err = res.json()["error"]
        assert err["type"] == "compaction_timeout" and "waited for a prepare" in err["message"]
        streamed = client.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s", "stream": True})
        assert streamed.status_code == 200 and "event: error" in streamed.text
        assert "compaction_timeout" in streamed.text and "[DONE]" not in streamed.text
        assert len(runner.arrivals) == 1  # neither compact started a compaction of its own
        runner.release.set()
        wait_idle(app)


def test_the_compaction_after_a_wait_gets_only_what_is_left_of_the_deadline(monkeypatch):
    runner, scopes = Held(), []
    app = create_app(Scoped("t", scopes), Scoped("d", []), runner=runner, methods=("speccompact", "hermes"),
                     settings=ServiceSettings(compaction_timeout_s=30.0))
    with TestClient(app) as client:
        sessions = app.state.sessions
        prepare(client, MESSAGES)
        assert runner.arrived.acquire(timeout=30)
        sessions.expected.seconds = 0.0
        deadlines, resolve = [], sessions.resolve

        async def seen_resolve(scope, req, method, deadline=None, *args, **kw):
            deadlines.append(deadline)  # the compact's deadline, counted from its arrival
            return await resolve(scope, req, method, deadline, *args, **kw)

        monkeypatch.setattr(sessions, "resolve", seen_resolve)
        release_once_decided(app, runner)  # the prepare ends only after the compact decided to wait for it
        res = client.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s"})
        assert res.json()["session"]["prepare"] == "waited"
        own = scopes[-1]  # the compact's own compaction of the new turns
        now = time.monotonic()
        # its deadline is the compact's (a fresh one would leave more than what was left at the arrival)
        assert own.deadline_s == 30.0 and len(deadlines) == 1 and own.remaining() <= deadlines[0] - now


# ---------------------------------------------------------------- bounds


def test_beyond_the_queue_a_prepare_gets_429_with_retry_after():
    runner = Held()
    app, _ = service(runner, settings=ServiceSettings(prepare_workers=1, prepare_queue=2))
    with TestClient(app) as client:
        codes = [prepare(client, MESSAGES, session=f"s{i}").status_code for i in range(3)]
        assert runner.arrived.acquire(timeout=30)
        refused = prepare(client, MESSAGES, session="s3")
        assert codes == [202, 202, 202] and refused.status_code == 429
        assert int(refused.headers["Retry-After"]) >= 1 and refused.json()["error"]["type"] == "busy"
        assert prepare(client, MESSAGES, session="s1").status_code == 202  # a join is never refused
        runner.release.set()
        wait_idle(app)
        assert len(app.state.sessions.store) == 3


def test_beyond_the_queued_bytes_a_prepare_gets_429():
    runner = Held()
    big = [{**MESSAGES[0], "content": "x" * 5000}, *MESSAGES[1:]]
    app, _ = service(runner, settings=ServiceSettings(prepare_workers=1, prepare_queue=50, prepare_queue_mb=12000 / 2**20))
    with TestClient(app) as client:
        assert prepare(client, big, session="run").status_code == 202  # starts: its bytes are not queued
        assert runner.arrived.acquire(timeout=30)
        assert [prepare(client, big, session=f"q{i}").status_code for i in range(3)] == [202, 202, 429]
        assert app.state.sessions.queued_bytes <= 12000
        runner.release.set()
        wait_idle(app)


def test_a_thousand_prepares_leave_threads_and_queued_bytes_bounded():
    runner = Held()
    limits = ServiceSettings(prepare_workers=2, prepare_queue=16, prepare_queue_mb=1.0)
    app, _ = service(runner, settings=limits)
    with TestClient(app) as client:
        prepare(client, MESSAGES, session="warm")  # the app's own threads exist before counting
        assert runner.arrived.acquire(timeout=30)
        before = threading.active_count()
        codes = [prepare(client, MESSAGES + [{"role": "user", "content": f"turn {i}"}], session=f"s{i}").status_code
                 for i in range(1000)]
        sessions = app.state.sessions
        assert threading.active_count() <= before + limits.prepare_workers + PARSE_WORKERS  # not one per prepare
        assert sessions.n_running <= limits.prepare_workers and sessions.n_waiting <= limits.prepare_queue
        assert sessions.queued_bytes <= limits.prepare_queue_bytes
        assert codes.count(202) == limits.prepare_queue + 1 and codes.count(429) == 1000 - codes.count(202)
        runner.release.set()
        wait_idle(app, timeout=60)
        assert len(sessions.store) == limits.prepare_queue + 2 and sessions.queued_bytes == 0


# ---------------------------------------------------------------- stable under growth


def tool_turn(call_id: str, output: str) -> list[dict]:
    call = {"id": call_id, "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
    return [{"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": output}]


def test_the_held_session_prefix_is_reused_after_pruning_marks_an_older_duplicate():
    """Hermes's pruning turns the older copy of a repeated tool output into a back-reference as the
    history grows: the prepared prefix still holds the full copy, and it is reused."""
    assert hermes_prune.DUPLICATE == DUPLICATE_OUTPUT  # the service matches the plugin's wording
    source = "def main():\n    return 1\n" * 20
    at_prepare = MESSAGES[:2] + tool_turn("c1", source) + [{"role": "user", "content": "now test it"}]
    grown = at_prepare + tool_turn("c2", "1 passed") + tool_turn("c3", source)  # the same file read again
    keep_all = {"tail_tokens": 10**6, "tail_count": 1}  # only the duplicate rule applies
    prepared, _ = hermes_prune.prune(at_prepare, **keep_all)
    sent, n_pruned = hermes_prune.prune(grown, **keep_all)
    assert n_pruned == 1 and sent[3]["content"] == DUPLICATE_OUTPUT and prepared == at_prepare
    app, runner = service()
    with TestClient(app) as client:
        prepare(client, prepared)
        wait_idle(app)
        res = client.post("/v1/compact", json={"messages": sent, "session": "s"}).json()
        assert res["session"]["reused_messages"] == len(prepared)
        assert runner.calls[-1]["messages"] == sent[len(prepared):]
        changed = [*sent[:3], {**sent[3], "content": "another output"}, *sent[4:]]  # not a back-reference
        other = client.post("/v1/compact", json={"messages": changed, "session": "s"}).json()
        assert other["session"]["reused_messages"] == 0


# ---------------------------------------------------------------- auto, per session and per key


@dataclass
class SizePicker(AutoPicker):
    """Picks by history length: speccompact below five messages, hermes from five on."""

    def pick(self, messages, methods, previous_summary=None, held=None):
        method = "speccompact" if len(messages) < 5 else "hermes"
        return {"requested": "auto", "method": method, "p_accept": self.acceptance.get(self.pair)}


@dataclass
class HeldPicker(AutoPicker):
    """Picks by what still holds: speccompact once half the previous summary held, hermes before."""

    def pick(self, messages, methods, previous_summary=None, held=None):
        method = "speccompact" if held is not None and held >= 0.5 else "hermes"
        return {"requested": "auto", "method": method, "held": held}


def test_a_session_picks_again_with_the_share_its_last_compaction_kept():
    app, runner = service(auto=HeldPicker(None, "test"))
    goal = f"- {MESSAGES[1]['content']}"  # the fake runner's summary line
    with TestClient(app) as client:
        body = {"messages": MESSAGES, "session": "s", "previous_summary": f"## Goal\n{goal}\n- a stale line"}
        first = client.post("/v1/compact", json=body).json()
        assert first["stats"]["auto"]["method"] == "hermes" and first["stats"]["auto"]["held"] is None
        again = client.post("/v1/compact", json={**body, "messages": MESSAGES + MORE}).json()
        assert again["stats"]["auto"]["method"] == "speccompact"  # half of the previous summary still held
        assert again["stats"]["auto"]["held"] == 0.5 and again["stats"]["auto"]["session_pick"] == "held share"
        other = client.post("/v1/compact", json={**body, "session": "t"}).json()  # another session: nothing known
        assert other["stats"]["auto"]["method"] == "hermes"


def test_the_auto_pick_is_made_once_per_session():
    app, runner = service(auto=SizePicker(None, "test"))
    with TestClient(app) as client:
        prepare(client, MESSAGES)
        wait_idle(app)
        res = client.post("/v1/compact", json={"messages": MESSAGES + MORE, "session": "s"}).json()
        assert res["stats"]["auto"]["method"] == "speccompact" and res["stats"]["auto"]["session_pick"] == "kept"
        assert res["session"]["reused_messages"] == len(MESSAGES)  # the prepare's params still match
        assert runner.calls[-1]["method"] == "speccompact"
        alone = client.post("/v1/compact", json={"messages": MESSAGES + MORE}).json()  # no session: picks again
        assert alone["stats"]["auto"]["method"] == "hermes"


def test_one_keys_acceptance_never_moves_another_keys_auto_estimate():
    app, _ = service(auto=SizePicker(None, "test"))
    a, b = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}
    with TestClient(app) as client:
        for _ in range(3):  # key a compacts with its own eta; the fake's acceptance rate is 0.5
            assert client.post("/v1/compact", json={"messages": MESSAGES, "method": "speccompact",
                                                    "config": {"eta": 0.95}}, headers=a).status_code == 200

        def p_accept(headers):
            return client.post("/v1/compact", json={"messages": MESSAGES}, headers=headers).json()["stats"]["auto"][
                "p_accept"]
        assert p_accept(b) == 0.7 and p_accept({}) == 0.7  # the prior: untouched by key a
        assert p_accept(a) == pytest.approx(0.7 + (0.5 - 0.7) * (1 - 0.8 ** 3))
        gauge = metric(client, 'speccompact_observed_acceptance{pair="unknown|none"}')
        assert gauge < 0.7  # the service-wide gauge still sees every compaction

