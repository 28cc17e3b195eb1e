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
