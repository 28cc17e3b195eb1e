"""Benchmark commands run in a few worker processes, each importing the stack once.

A benchmark command (``python -m bench.session ...``) spends about 9 s of
CPU importing sglang, torch and transformers and 2 s loading the tokenizer
before its first row.  :func:`execute` runs many commands in ``workers``
long-lived processes instead (``spawn``: nothing of the parent's state is
inherited): each worker imports the stack once (:func:`warm`), then calls
each command's ``main(argv)`` in turn, its output sent to a log file.  A
command's results do not depend on what ran before it in the same worker:
each ``main`` builds its own simulations, clients and caches (what the
process keeps, such as the tokenizer and the simulator's encode memos,
changes CPU time only).

What a command costs is measured in its worker (``time.process_time``
around it: every thread of the worker) and in wall time; the caller gets a
:class:`Done` for each, as it finishes.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import resource
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Job:
    """One benchmark command."""

    name: str  # what it is for: a run and its part, a check cell
    script: str  # the bench module (``session``, ``latency``, ``figures``)
    args: tuple[str, ...]  # its command line (``--out`` included)
    weight: float = 1.0  # its expected cost (any unit): heavier jobs start first
    call: str = "main"  # the module's function: ``main(argv)``, or ``check()`` (figures)
    log: str | None = None  # where its output goes (None: discarded)


@dataclass
class Done:
    """A finished job."""

    job: Job  # what ran
    cpu_s: float  # CPU time of its worker while it ran (every thread), s
    wall_s: float  # its wall time, s
    error: str | None = None  # the traceback or the exit status, when it failed
    result: object = None  # what its function returned (``check()``'s list)


def warm() -> None:
    """A worker's start: the slow imports and the default tokenizer, once."""
    import warnings

    warnings.filterwarnings("ignore", message="Only CUDA")  # sglang's quantization modules, on a CPU-only machine
    from sgl_speccompact.emulator import frontend
    from sgl_speccompact.emulator.qwen3 import default_tokenizer

    from bench.harness.runs import loaded_tokenizer

    frontend.preload()
    loaded_tokenizer(default_tokenizer()[0])
    importlib.import_module("bench.session")
    importlib.import_module("bench.latency")


def run_job(job: Job) -> Done:
    """Run ``job`` in this process (a worker): its module's function, output to its log."""
    t0, c0 = time.perf_counter(), time.process_time()
    error, result = None, None
    sink = open(job.log, "w", encoding="utf-8") if job.log else open(os.devnull, "w")
    with sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        try:
            module = importlib.import_module(f"bench.{job.script}")
            if job.call == "main":
                result = module.main(list(job.args))
                if result:
                    error = f"exit status {result}"
            else:
                result = getattr(module, job.call)()
        except BaseException:  # noqa: BLE001 - reported to the parent, which decides
            error = traceback.format_exc()
            print(error)
    return Done(job, time.process_time() - c0, time.perf_counter() - t0, error, result)


def execute(jobs: list[Job], workers: int, on_done: Callable[[Done], None],
            initializer: Callable[[], None] | None = warm) -> list[Done]:
    """Run ``jobs`` in ``workers`` worker processes, heaviest first; ``on_done`` as each one ends.

    The workers import ``bench`` and the package from this checkout
    (``PYTHONPATH`` is set to it), whatever else is installed, and start
    with ``initializer`` (:func:`warm`).
    """
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), str(REPO / "integrations" / "hermes"),
                                                             os.environ.get("PYTHONPATH")]))
    out: list[Done] = []
    if not jobs:
        return out
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=ctx, initializer=initializer) as pool:
        order = {pool.submit(run_job, job): i for i, job in enumerate(sorted(jobs, key=lambda j: -j.weight))}
        pending = set(order)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(finished, key=order.__getitem__):  # found together: in the order they started
                done = future.result()
                out.append(done)
                on_done(done)
    return out


def children_cpu_s() -> float:
    """CPU seconds of this process's finished child processes (the workers, once :func:`execute` returned)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu_s() -> float:
    """CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
