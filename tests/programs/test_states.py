"""programs.states: a live sglang state never becomes garbage (its __del__ would hang its own worker).

sglang 0.5.23's ``ProgramState.__del__`` puts ``None`` on the state's worker queue while the worker
is alive; run by the cyclic GC inside that worker, holding the queue's lock, it hangs the thread.
These tests build real sglang states whose worker is busy in a request, in a reference cycle, and
look at what the collector would find.
"""

from __future__ import annotations

import gc
import threading

import pytest
import sglang as sgl
from sglang.lang.backend.base_backend import BaseBackend
from sglang.lang.interpreter import ProgramState

from sgl_speccompact.programs import states


class Blocking(BaseBackend):
    """A backend whose generate waits for ``release``: the state's worker stays busy."""

    def __init__(self):
        super().__init__()
        self.release, self.entered = threading.Event(), threading.Event()

    def generate(self, s, sampling_params):
        self.entered.set()
        self.release.wait(30)
        return "done", {}


@sgl.function
def one_gen(s):
    s += "q" + sgl.gen("a", max_tokens=1)


@pytest.fixture
def saved_garbage():
    """Collected cycles go to gc.garbage instead of being freed (no __del__ runs)."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.garbage.clear()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()


def busy_state(backend: Blocking):
    """A finished program run (sglang ended its executor) whose worker is still in its request."""
    state = one_gen.run(backend=backend)
    assert backend.entered.wait(30)
    state.cycle = state  # freed only by the cyclic collector, in whatever thread it runs
    return state, state.stream_executor.worker


def live_garbage() -> list:
    gc.collect()
    return [o for o in gc.garbage if isinstance(o, ProgramState) and o.stream_executor.worker.is_alive()]


def test_without_retire_a_dropped_state_is_garbage_while_its_worker_runs(saved_garbage):
    backend = Blocking()
    state, worker = busy_state(backend)
    del state
    try:
        assert len(live_garbage()) == 1  # the hazard: collected in that worker, its __del__ would hang it
    finally:
        backend.release.set()
        worker.join(30)


def test_retire_holds_the_state_until_its_worker_exits(saved_garbage):
    backend = Blocking()
    state, worker = busy_state(backend)
    states.retire([state])
    del state
    assert live_garbage() == []  # held, so never collected while the worker runs
    assert states.held() >= 1
    backend.release.set()
    worker.join(30)
    assert not worker.is_alive()
    states.retire([])  # the next retire drops it: collectable now, with no worker to hang
    gc.collect()
    assert any(isinstance(o, ProgramState) and o.stream_executor.worker is worker for o in gc.garbage)
    assert live_garbage() == []


def test_scratch_retires_its_copy_and_leaves_the_branch_unchanged():
    state = one_gen.run(backend=Done())
    before = state.text()
    with states.scratch(state) as v:
        v += " more"
        worker = v.stream_executor.worker
        assert v.text() == before + " more"
    assert state.text() == before
    worker.join(30)
    assert not worker.is_alive()
    states.retire([state])


class Done(BaseBackend):
    def generate(self, s, sampling_params):
        return "x", {}


def test_the_package_copies_states_only_through_scratch():
    from pathlib import Path

    root = Path(states.__file__).resolve().parents[1]
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "states.py" and ".copy() as " in p.read_text()]
    assert offenders == []


def started_threads(monkeypatch) -> list[threading.Thread]:
    """Every thread started from now on (``Thread.start`` recorded, then run as usual)."""
    started: list[threading.Thread] = []
    start = threading.Thread.start

    def recording(self):
        started.append(self)
        start(self)
    monkeypatch.setattr(threading.Thread, "start", recording)
    return started


@pytest.mark.parametrize("method", ["speccompact", "target_self"])
def test_a_compaction_from_a_non_daemon_thread_starts_only_daemon_threads(monkeypatch, method):
    # a non-daemon sglang worker whose state the garbage collector finalizes while another thread
    # starts a non-daemon thread deadlocks CPython's threading module (states.py); daemon ones cannot
    from sgl_speccompact.methods import run_method
    from tests.support.programs import MESSAGES, backends

    assert not threading.current_thread().daemon
    target, drafter = backends()
    started = started_threads(monkeypatch)
    run_method(method, MESSAGES, target=target, drafter=drafter)
    assert len(started) > 1  # the program's state and its forks each have a worker
    assert all(t.daemon for t in started), [t.name for t in started if not t.daemon]


def test_on_daemon_thread_raises_the_callees_exception_in_the_caller():
    def fails():
        raise KeyError("inside")
    with pytest.raises(KeyError, match="inside"):
        states.on_daemon_thread(fails)


def test_run_concurrently_sets_cancel_and_waits_for_every_job_before_raising():
    cancel, release, ended = threading.Event(), threading.Event(), []

    def fails():
        raise ValueError("first")

    def waits():
        release.wait(60)  # hang guard
        ended.append(True)
    watcher = threading.Thread(target=lambda: (cancel.wait(60), release.set()), daemon=True)
    watcher.start()
    with pytest.raises(ValueError, match="first"):
        states.run_concurrently([fails, waits], cancel)
    assert cancel.is_set() and ended == [True]


def test_concurrent_failures_are_raised_together():
    # before: the first failure was raised and the others were dropped
    from sgl_speccompact.errors import BackendTimeoutError, BackendUnavailableError

    def fail(exc):
        raise exc

    down, slow = BackendUnavailableError("target down"), BackendTimeoutError("drafter slow")
    cancel = threading.Event()
    with pytest.raises(BackendUnavailableError) as got:  # the first keeps its type: callers' excepts still match
        states.run_concurrently([lambda: "ok", lambda: fail(down), lambda: fail(slow)], cancel)
    assert got.value is down and got.value.others == (slow,) and cancel.is_set()
    assert any("drafter slow" in note for note in got.value.__notes__)
    # one failure alone is raised as it was, carrying nothing
    with pytest.raises(BackendTimeoutError) as one:
        states.run_concurrently([lambda: fail(BackendTimeoutError("alone"))], threading.Event())
    assert one.value.others == ()
