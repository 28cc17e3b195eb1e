"""Ending sglang program states safely: end from the caller, hold until the worker is gone.

Every sglang ``ProgramState`` (a program run, a fork, a copy) has a worker
thread.  sglang 0.5.23 stops a state's worker in ``ProgramState.__del__`` by
putting ``None`` on the worker's queue (``interpreter.py``), and only if the
worker is still alive.  When the cyclic garbage collector happens to run
that ``__del__`` inside the very worker, while the worker holds its queue's
lock in ``queue.get``, the put waits for that lock forever: the thread hangs
and the request it serves is never answered.  A compaction then stalls
until its deadline.

So this package never lets a live state become garbage:

* :func:`retire` ends a state's worker from the calling thread and keeps the
  state until the worker has exited; a later :func:`retire` drops it.  By
  then its ``__del__`` finds no live worker and puts nothing.
* :func:`scratch` is ``s.copy()`` (a 1-way fork that sends nothing of its
  own) retired on the way out.

A second hang comes from the same ``__del__`` through CPython's threading
module (3.11).  A worker thread is a daemon only if the thread that made the
state is one.  Starting a non-daemon thread runs ``_maintain_shutdown_locks``
with the module's ``_shutdown_locks_lock`` held; a collection the garbage
collector starts there can run a state's ``__del__``, whose ``is_alive()``
marks a finished non-daemon worker stopped, and that takes the same lock:
the thread waits for itself, and every thread started after it waits too.
Daemon workers never take that lock, so:

* :func:`on_daemon_thread` runs a program (and everything it forks and
  starts) on a daemon thread, so every state it makes has a daemon worker;
* :func:`run_concurrently` runs a program's branches on daemon threads.

Only sglang's public objects are used: ``stream_executor.end()`` and the
worker thread it runs.
"""

from __future__ import annotations

import threading
import contextvars
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from ..errors import SpecCompactError

_HELD: list = []  # retired states whose worker thread has not exited yet
_HELD_LOCK = threading.Lock()


def _worker_alive(state) -> bool:
    worker = getattr(getattr(state, "stream_executor", None), "worker", None)
    return worker is not None and worker.is_alive()


def retire(states: Iterable) -> None:
    """End each state's worker now and hold the state until the worker exits.

    Safe to call twice on a state and on states already ended (``join`` of a
    fork group ends its states too).

    Examples
    --------
    A state without a worker thread (``use_thread=False``) is not held:

    >>> class Executor:
    ...     worker = None
    ...     def end(self): self.ended = True
    >>> class State:
    ...     stream_executor = Executor()
    >>> s = State(); retire([s]); s.stream_executor.ended, held()
    (True, 0)
    """
    states = list(states)
    for st in states:
        st.stream_executor.end()
    with _HELD_LOCK:
        seen = _HELD + states
        _HELD[:] = [st for st in seen if _worker_alive(st)]
    del seen  # the last references to the others drop here, in the caller's thread, with no worker to hang


def held() -> int:
    """Retired states still held (their worker thread had not exited at the last look)."""
    with _HELD_LOCK:
        return len(_HELD)


@contextmanager
def scratch(s) -> Iterator:
    """``s.copy()``: a 1-way fork of ``s`` to ask on; ``s`` itself is not changed.

    The copy is retired when the block ends, however it ends.
    """
    copies: list = []
    try:
        with s.copy() as v:
            copies.append(v)
            yield v
    finally:
        retire(copies)


def on_daemon_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a new daemon thread, waited for: its result, or its exception raised here.

    The thread runs in a copy of the caller's context variables.

    Examples
    --------
    >>> import threading
    >>> on_daemon_thread(lambda: threading.current_thread().daemon)
    True
    >>> on_daemon_thread(int, "x")
    Traceback (most recent call last):
    ...
    ValueError: invalid literal for int() with base 10: 'x'
    """
    return run_concurrently([lambda: fn(*args)], threading.Event())[0]


def run_concurrently(jobs: list[Callable[[], Any]], cancel: threading.Event) -> list:
    """Run jobs on one daemon thread each; on the first failure set ``cancel`` and, once all end, raise.

    Returns the jobs' results in order.  Every job is waited for, so no job
    outlives the call; then the failures are raised together
    (:func:`together`).

    >>> from sgl_speccompact.errors import BackendError
    >>> def fail(exc):
    ...     raise exc
    >>> try:
    ...     run_concurrently([lambda: 1, lambda: fail(BackendError("a")), lambda: fail(BackendError("b"))],
    ...                      threading.Event())
    ... except BackendError as exc:
    ...     print(exc, [str(e) for e in exc.others])
    a ['b']
    """
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException | None] = [None] * len(jobs)

    def one(i: int) -> None:
        try:
            results[i] = jobs[i]()
        except BaseException as exc:  # noqa: BLE001 - raised in the caller below
            cancel.set()
            errors[i] = exc
    threads = [threading.Thread(target=contextvars.copy_context().run, args=(one, i), daemon=True)
               for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [exc for exc in errors if exc is not None]
    if failed:
        raise together(failed)
    return results


def together(failed: list[BaseException]) -> BaseException:
    """One error for the failures of one concurrent run: the first (in job order), carrying the others.

    A :class:`~sgl_speccompact.errors.SpecCompactError` keeps its type (a
    caller's ``except`` and the service's status still see it) and holds
    the others in ``others``; every error gets a note naming each other one,
    so a traceback shows them all.
    """
    first, rest = failed[0], tuple(failed[1:])
    if rest:
        if isinstance(first, SpecCompactError):
            first.others = rest
        for exc in rest:
            first.add_note(f"also failed in the same run: {type(exc).__name__}: {exc}")
    return first
