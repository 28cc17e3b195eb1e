"""Exact quiescence of a set of Python threads: is every one of them blocked?

The one-clock simulator (:mod:`.simulator`) may advance virtual time only
when no client thread can make progress on its own.  This module decides
that from the threads' current frames (``sys._current_frames()``, read under
the GIL, so one snapshot is one instant).  A tracked thread counts as
BLOCKED only in one of these states; anything else counts as running (a
wrong "running" only delays the simulator, it cannot change its results):

* ``threading.Condition.wait`` at one of its blocking ``waiter.acquire``
  lines with its waiter lock still in the condition's ``_waiters``.
  ``notify`` removes the waiter from ``_waiters`` before releasing it, so a
  notified thread is never taken for a blocked one.  This covers
  ``Event.wait``, ``queue.Queue.get``/``join`` (sglang's ``StreamExecutor``
  worker and ``sync``), ``Future.result`` and ``concurrent.futures.wait``
  (``run_concurrently``), and the simulator's own response wait.
* ``Thread.join`` (``_wait_for_tstate_lock``) of a thread that still runs
  Python code (it has a frame: a thread releases its tstate lock only after
  its last frame is gone).
* A ``ThreadPoolExecutor`` worker idle in ``work_queue.get`` with its queue
  empty (C ``SimpleQueue.get`` pops the item only after re-taking the GIL,
  so an item handed over but not yet taken still shows in ``qsize``).

A thread being started (``threading._limbo``: ``start()`` returned to the
C level, the new thread has no Python frame yet) makes the set not
quiescent.  The last rule above needs one more condition: a worker that has just popped its
item must not lose the GIL before it leaves the ``get`` line.  CPython
switches threads at its eval-breaker checks only when another thread asks
for the GIL after waiting ``sys.getswitchinterval()``; :class:`ThreadWatch`
raises that interval (:data:`SWITCH_INTERVAL_S`) while it is active, so a
thread that returns from a blocking call keeps the GIL until it blocks
again.  A thread that holds the GIL cannot be observed at all; the watcher
runs only when every other thread has released it.

:meth:`ThreadWatch.progress` says whether threads that are not quiescent are
still getting anywhere: the CPU time the tracked threads have used (per
thread, from ``/proc``), so a run that is slow because the machine is busy
is told apart from one blocked in a call the rules above do not know.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import time
import traceback
from concurrent.futures import thread as _futures_thread
from dataclasses import dataclass

SWITCH_INTERVAL_S = 1000.0  # GIL switch interval while watching, s (forced switches effectively off)


def _lines(func, needle: str, after: str | None = None) -> frozenset[int]:
    """Line numbers in ``func``'s source that contain ``needle`` (after the line with ``after``)."""
    src, start = inspect.getsourcelines(func)
    seen = after is None
    out = set()
    for i, line in enumerate(src):
        if after is not None and after in line:
            seen = True
        elif seen and needle in line:
            out.add(start + i)
    return frozenset(out)


_COND_WAIT = threading.Condition.wait.__code__
_COND_LINES = (_lines(threading.Condition.wait, "waiter.acquire()", "_release_save")
               | _lines(threading.Condition.wait, "waiter.acquire(True, timeout)"))
_JOIN = threading.Thread._wait_for_tstate_lock.__code__
_JOIN_LINES = _lines(threading.Thread._wait_for_tstate_lock, "lock.acquire(block, timeout)")
_WORKER = _futures_thread._worker.__code__
_WORKER_LINES = _lines(_futures_thread._worker, "work_queue.get(block=True)")
if not (_COND_LINES and _JOIN_LINES and _WORKER_LINES):  # a Python whose stdlib reads differently
    raise ImportError("quiescence: cannot locate the blocking lines of threading / concurrent.futures")


@dataclass(frozen=True)
class Snapshot:
    """One instant of the tracked threads."""

    quiescent: bool  # every tracked thread is blocked
    running: tuple[str, ...]  # names of tracked threads not blocked
    threads: int  # tracked threads alive

    def __bool__(self) -> bool:
        return self.quiescent


class ThreadWatch:
    """Tracks the threads started after it was created, plus ``extra`` idents.

    Use as a context manager: it raises the GIL switch interval on entry and
    restores it on exit.
    """

    def __init__(self, extra: tuple[int, ...] = ()):
        self.before = set(threading.enumerate())  # Thread objects: idents of dead threads are reused
        self.extra = set(extra)
        self._saved_interval: float | None = None
        self._waits = WaitCache()  # the condition and waiter of each thread's current wait, read once per wait
        self._last_running: int | None = None  # ident of the thread :meth:`quiescent` last found running

    def __enter__(self) -> "ThreadWatch":
        self._saved_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        return self

    def __exit__(self, *exc) -> None:
        if self._saved_interval is not None:
            sys.setswitchinterval(self._saved_interval)

    def track(self, ident: int) -> None:
        """Also watch the thread ``ident`` (e.g. one that existed before)."""
        self.extra.add(ident)

    def tracked(self, frames: dict) -> list[threading.Thread]:
        """Tracked threads that still run Python code."""
        me, before, extra = threading.get_ident(), self.before, self.extra
        return [t for t in threading.enumerate()
                if (i := t.ident) in frames and i != me and (t not in before or i in extra)]

    def snapshot(self) -> Snapshot:
        """Whether every tracked thread is blocked right now."""
        frames = sys._current_frames()
        threads = self.tracked(frames)
        check = self._waits.blocked
        running = tuple(t.name for t in threads if not check(t.ident, frames))
        running += tuple(f"{t.name} (starting)" for t in list(threading._limbo.values()))
        self._waits.keep(frames)
        return Snapshot(not running, running, len(threads))

    def quiescent(self) -> bool:
        """``bool(self.snapshot())``, stopping at the first thread that runs.

        The simulator asks this each time a client thread blocks, so it is
        asked about as often as there are threads, until every one of them
        is blocked: the thread found running last time is looked at first
        (it is most often still running), and a full pass happens only when
        the answer is yes.
        """
        if threading._limbo:
            return False
        frames = sys._current_frames()
        check, last = self._waits.blocked, self._last_running
        if last in frames and last != threading.get_ident() and not check(last, frames):
            return False
        for t in self.tracked(frames):
            if not check(t.ident, frames):
                self._last_running = t.ident
                return False
        self._waits.keep(frames)
        return not threading._limbo

    def progress(self) -> tuple:
        """A token that changes whenever a tracked thread used CPU, started or ended.

        Compare two tokens taken some real time apart: equal tokens mean no
        tracked thread ran in between (on a loaded machine a runnable thread
        still gets some CPU time every few scheduler periods).
        """
        threads = self.tracked(sys._current_frames())
        return tuple(sorted((t.ident, thread_cpu_ns(t)) for t in threads)) + (len(threading._limbo),)

    def cpu_s(self) -> float:
        """CPU seconds used so far by the tracked threads alive now."""
        return sum(thread_cpu_ns(t) for t in self.tracked(sys._current_frames())) / 1e9

    def describe(self) -> str:
        """Every tracked thread's state and stack (for a stall error)."""
        frames = sys._current_frames()
        parts = []
        for t in self.tracked(frames):
            state = "blocked" if blocked(frames[t.ident], frames) else "RUNNING"
            stack = "".join(traceback.format_stack(frames[t.ident], limit=8))
            parts.append(f"--- thread {t.name} ({state})\n{stack}")
        return "\n".join(parts) or "(no tracked threads)"


def thread_cpu_ns(thread: threading.Thread) -> int:
    """CPU time ``thread`` has used, in ns (0 once it has ended).

    Linux: the kernel's per-thread runtime (``/proc/self/task/<tid>/schedstat``,
    else ``stat``'s utime + stime in clock ticks).  Elsewhere the whole
    process's CPU time stands in for it.
    """
    tid = thread.native_id
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            ns = int(f.read().split()[0])
        if ns:
            return ns
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 10**9 // os.sysconf("SC_CLK_TCK")
    except FileNotFoundError:
        return 0 if os.path.isdir("/proc/self/task") else time.process_time_ns()
    except (OSError, ValueError, IndexError):
        return time.process_time_ns()


def blocked(frame, frames: dict) -> bool:
    """Whether a thread whose innermost frame is ``frame`` is blocked (see module doc)."""
    code, line = frame.f_code, frame.f_lineno
    if code is _COND_WAIT and line in _COND_LINES:
        cond, waiter = _cond_wait(frame)
        return cond is not None and waiter is not None and waiter in cond._waiters
    if code is _JOIN and line in _JOIN_LINES:
        target = frame.f_locals.get("self")
        return target is not None and target.ident in frames
    if code is _WORKER and line in _WORKER_LINES:
        queue = frame.f_locals.get("work_queue")
        return queue is not None and queue.qsize() == 0
    return False


def _cond_wait(frame) -> tuple:
    """``(condition, waiter lock)`` of a ``Condition.wait`` frame (its locals, read once)."""
    local = frame.f_locals
    return local.get("self"), local.get("waiter")


class WaitCache:
    """:func:`blocked` for a snapshot's threads, reading a waiting frame's locals once per wait.

    A thread in ``Condition.wait`` stays in the same frame object until the
    wait returns, and the frame's ``self`` and ``waiter`` never change in
    it, so they are read once (``f_locals`` copies every local) and the
    frame is kept beside them: while it is kept its memory is not reused,
    so ``is`` tells the same wait from a later one.  Whether the thread is
    still blocked is looked at every time (its waiter still in the
    condition's ``_waiters``).
    """

    def __init__(self):
        self._seen: dict[int, tuple] = {}  # thread ident -> (frame, condition, waiter)

    def blocked(self, ident: int, frames: dict) -> bool:
        frame = frames[ident]
        if frame.f_code is not _COND_WAIT or frame.f_lineno not in _COND_LINES:
            return blocked(frame, frames)
        hit = self._seen.get(ident)
        if hit is None or hit[0] is not frame:
            hit = self._seen[ident] = (frame, *_cond_wait(frame))
        _, cond, waiter = hit
        return cond is not None and waiter is not None and waiter in cond._waiters

    def keep(self, frames: dict) -> None:
        """Forget threads that have ended or left their wait (their frames are released)."""
        seen = self._seen
        for ident in [i for i, hit in seen.items() if frames.get(i) is not hit[0]]:
            del seen[ident]
