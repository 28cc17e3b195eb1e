"""An emulator whose forward passes run only when a test lets them: steps counted, never seconds."""

from __future__ import annotations

import threading

import requests


class Steps:
    """Gates an emulator's forward passes: each waits until the test allows it."""

    def __init__(self, srv):
        self.allowed = threading.Semaphore(0)
        self.done = 0  # passes finished
        self.cond = threading.Condition()
        forward = srv.engine._forward

        def gated(shapes):
            self.allowed.acquire()
            forward(shapes)
            with self.cond:
                self.done += 1
                self.cond.notify_all()

        srv.engine._forward = gated

    def run(self, n: int = 1) -> None:
        """Let ``n`` passes run and wait until they did."""
        with self.cond:
            target = self.done + n
        for _ in range(n):
            self.allowed.release()
        with self.cond:
            assert self.cond.wait_for(lambda: self.done >= target, timeout=60), "a pass did not run"

    def open(self) -> None:
        for _ in range(10_000):
            self.allowed.release()


def loads(srv) -> tuple[int, int]:
    """``(running, waiting)`` requests of an emulator, from its ``/v1/loads`` (as sglang counts them)."""
    got = requests.get(srv.url + "/v1/loads", params={"include": "core"}, timeout=10).json()["loads"][0]
    return got["num_running_reqs"], got["num_waiting_reqs"]


def all_told_to_stop(srv) -> bool:
    """Every request the emulator holds has taken an abort: none waits, each one running will stop at its
    next step (``to_finish``); at least one was running."""
    engine = srv.engine
    with engine._cv:
        holding = engine._passing + engine.sched.running
        return not engine.sched.waiting and bool(holding) and all(
            j.to_finish is not None or j.finished_reason is not None for j in holding)


def held(srv) -> list:
    """The requests the emulator holds now: waiting, in the pass under way, or running."""
    engine = srv.engine
    with engine._cv:
        return list(engine.sched.waiting) + list(engine._passing) + list(engine.sched.running)


def each_aborted(jobs: list) -> bool:
    """Every one of ``jobs`` has taken an abort: ended in the waiting queue, or told to end at its next step."""
    return all(j.to_finish is not None or (j.finished_reason or {}).get("type") == "abort" for j in jobs)


def every_held_told_to_stop(srv) -> bool:
    """No request waits and every one the emulator holds has taken an abort (true when it holds none)."""
    engine = srv.engine
    with engine._cv:
        holding = engine._passing + engine.sched.running
        return not engine.sched.waiting and all(j.to_finish is not None or j.finished_reason is not None
                                                 for j in holding)


def aborted_outliving_a_step(srv, steps: Steps, wait_for, limit: int = 50) -> list[str]:
    """Until the emulator is idle: wait (``wait_for``, a hang guard) until every request it holds has
    taken an abort, run one pass, and note each told-to-stop request that still runs after it.

    A request sent as its compaction was cancelled can reach the server after the first aborts (the
    client sends them again until it answers): it too must be aborted, then end at its next step.
    Returns the rids that outlived the step after their abort (none: each ended at it).
    """
    engine, outlived = srv.engine, []
    for _ in range(limit):
        if loads(srv) == (0, 0):
            return outlived
        wait_for(lambda: every_held_told_to_stop(srv), "every request the server holds to be aborted")
        with engine._cv:
            told = [j for j in engine._passing + engine.sched.running if j.to_finish is not None]
        steps.run(1)
        with engine._cv:
            still = engine._passing + engine.sched.running
            outlived += [j.rid for j in told if any(j is k for k in still)]
    raise AssertionError(f"the server still held requests after {limit} steps")
