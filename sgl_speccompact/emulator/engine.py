"""The HTTP emulator's scheduler thread: :class:`~.scheduler.Scheduler` on real time.

One loop, as SGLang's scheduler process: while requests wait or run, form
the next batch, run its forward pass, settle it.  With a cost model every
forward pass also advances this server's own simulated clock and sleeps
``time_scale`` real seconds per simulated second, and finished requests
report ``simulated_latency_s`` (SIMULATED; a per-server clock, for the
HTTP-faithful layer only: one-clock latency figures come from
:mod:`~bench.sim.simulator`).
"""

from __future__ import annotations

import threading
import time

from .cost import CostModel
from .jobs import Job, LogprobRecord, LogprobRequest, Stats  # noqa: F401 - re-exported
from .model import EmulatedModel
from .radix import RadixTree
from .scheduler import Scheduler


class Engine:
    """Scheduler thread running jobs through an :class:`EmulatedModel`.

    Parameters
    ----------
    model
        Policy + tokenizer.
    tree
        The radix cache.
    cost
        Optional cost model; with it every forward pass takes simulated time
        (scaled real sleeps) and finished requests report
        ``simulated_latency_s``.
    max_prefill_tokens
        Uncached prompt tokens per prefill batch (SGLang's default 16384).
    chunked_prefill_size, schedule_policy
        See :class:`~.scheduler.Scheduler` (default: no chunking, ``fcfs``).
    """

    def __init__(self, model: EmulatedModel, tree: RadixTree, cost: CostModel | None = None,
                 max_prefill_tokens: int = 16384, chunked_prefill_size: int | None = None,
                 schedule_policy: str = "fcfs"):
        self.model = model
        self.tree = tree
        self.cost = cost
        self.sched = Scheduler(model, tree, max_prefill_tokens=max_prefill_tokens,
                               chunked_prefill_size=chunked_prefill_size, schedule_policy=schedule_policy,
                               request_overhead_s=cost.request_overhead_s if cost else 0.0)
        self._cv = threading.Condition()
        self._in_flight = 0  # jobs taken out of the queues by the current pass
        self._passing: list = []  # the jobs of the pass under way (an abort reaches them at their next step)
        self._stop = False
        self._thread: threading.Thread | None = None
        self._sim = 0.0  # simulated clock at the end of the last forward, s
        self._fwd = None  # (sim start, sim end, real start) of the forward in progress

    # ----------------------------------------------------------------- control

    def start(self) -> None:
        """Start the scheduler thread."""
        self._thread = threading.Thread(target=self._loop, name="emulator-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the scheduler thread (pending jobs are dropped)."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def submit(self, jobs: list[Job]) -> None:
        """Queue ``jobs`` together, so they can share one prefill batch."""
        with self._cv:
            now = self.sim_now()
            for job in jobs:
                job.sim_arrival = now
            self.sched.add(jobs)
            self._cv.notify_all()

    def abort(self, rid: str, abort_all: bool = False) -> int:
        """``POST /abort_request`` (:meth:`~.scheduler.Scheduler.abort`); the requests finished at once."""
        with self._cv:
            done = self.sched.abort(rid, abort_all, self._passing, self._sim if self.cost is not None else None)
            self._cv.notify_all()
            return len(done)

    def idle(self) -> bool:
        """No waiting or running request (``Scheduler.is_fully_idle``)."""
        with self._cv:
            return not (self.sched.busy() or self._in_flight)

    def flush(self) -> bool:
        """Empty the radix cache if idle; False otherwise (``Scheduler.flush_cache``)."""
        with self._cv:
            return not self._in_flight and self.sched.flush()

    def sim_now(self) -> float:
        """The simulated clock now, s (advances only during forward passes)."""
        if self._fwd is None or self.cost is None or self.cost.time_scale <= 0:
            return self._sim
        start, end, real = self._fwd
        return min(end, start + (time.perf_counter() - real) / self.cost.time_scale)

    def reset_stats(self) -> None:
        """Zero every counter."""
        with self._cv:
            self.sched.reset_stats()

    def loads(self) -> dict:
        """Requests running (a prefill in progress included) and waiting, as sglang's load snapshot counts them."""
        with self._cv:
            return {"num_running_reqs": len(self.sched.running) + self._in_flight,
                    "num_waiting_reqs": len(self.sched.waiting) + (self.sched.chunked is not None)}

    def stats(self) -> dict:
        """Counters: per LoRA namespace, totals, and radix-tree size."""
        with self._cv:
            return self.sched.stats()

    # -------------------------------------------------------------------- loop

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not (self.sched.busy() or self._stop):
                    self._cv.wait()
                if self._stop:
                    return
                gather = bool(self.sched.waiting) and not self.sched.running
            if gather and self.cost is not None and self.cost.batch_window_s > 0:
                time.sleep(self.cost.batch_window_s)  # let concurrent arrivals join
            self._round()

    def _round(self) -> None:
        # Queues and tree change only under the lock; policy calls (which may
        # be slow or block in tests) run outside it, between the two phases.
        with self._cv:
            batch = self.sched.next_batch()
            if batch is None:
                return
            self._in_flight = len(batch.jobs) if batch.kind == "prefill" else 0
            self._passing = list(batch.jobs)
        self._forward(batch.shapes)
        self.sched.run(batch)
        with self._cv:
            self._in_flight, self._passing = 0, []
            self.sched.settle(batch, self._sim if self.cost is not None else None)

    def _forward(self, shapes: list[tuple[int, int]]) -> None:
        """Account (and sleep, scaled) one forward pass of the cost model."""
        if self.cost is None or not shapes:
            return
        dt = self.cost.forward_s(shapes)
        self._fwd = (self._sim, self._sim + dt, time.perf_counter())
        if self.cost.time_scale > 0:
            time.sleep(dt * self.cost.time_scale)
        self._sim += dt
        self._fwd = None
        self.sched.counters["simulated_busy_s"] += dt
