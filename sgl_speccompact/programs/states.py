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

Only sglang's public objects are used: ``stream_executor.end()`` and the
worker thread it runs.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterable, Iterator

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
