"""Child processes in tests: readiness by polling, deadlines for hangs only, clean teardown.

A deadline here is how long a hung child may take before the test gives up
(generous: a 2-core CI machine under load can be many times slower than a
quiet one), never an expected time.  Readiness is a poll of the child's
``/health``, which stops early when the child exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable

import httpx
import pytest

READY_S = 600.0  # a child server's start-up, until its /health answers (hang guard, s)
EXIT_S = 120.0  # a child's exit after it was told to stop (hang guard, s)


class ChildExited(AssertionError):
    """The child process ended before it became ready."""


def poll_until(cond: Callable[[], bool], what: str, deadline_s: float = READY_S, every_s: float = 0.1) -> None:
    """Call ``cond`` until it is true; AssertionError naming ``what`` after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what} after {deadline_s:g} s")
        time.sleep(every_s)


def wait_healthy(url: str, proc: subprocess.Popen | None = None, *, statuses: tuple[int, ...] = (200,),
                 deadline_s: float = READY_S, headers: dict | None = None) -> None:
    """Poll ``url/health`` until it answers one of ``statuses``.

    Raises :class:`ChildExited` (with its output when captured) as soon as
    ``proc`` exits first, and AssertionError after ``deadline_s``.
    """
    def ready() -> bool:
        if proc is not None and proc.poll() is not None:
            raise ChildExited(f"{url}: the child exited with {proc.returncode} before it was healthy\n"
                              + output(proc))
        try:
            return httpx.get(url.rstrip("/") + "/health", headers=headers, timeout=10).status_code in statuses
        except httpx.HTTPError:
            return False

    try:
        poll_until(ready, f"{url}/health", deadline_s, every_s=0.2)
    except ChildExited:
        raise
    except AssertionError as exc:
        if proc is not None:
            stop(proc)
            raise AssertionError(f"{exc}\n{output(proc)}") from None
        raise


def output(proc: subprocess.Popen, limit: int = 3000) -> str:
    """What a finished child wrote to its captured stderr and stdout (the tail), for an assertion message.

    Reads only what is there: a grandchild that still holds the pipe cannot block it.
    """
    if proc.poll() is None:
        return "(still running)"
    chunks = []
    for stream in (proc.stderr, proc.stdout):
        if stream is None or stream.closed:
            continue
        fd = stream.fileno()
        os.set_blocking(fd, False)
        try:
            while data := os.read(fd, 1 << 16):
                chunks.append(data)
        except (BlockingIOError, OSError):
            pass
    return b"".join(chunks).decode(errors="replace")[-limit:]


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, exit_s: float = EXIT_S) -> int:
    """Signal ``proc`` (its process group too when it leads one), then SIGKILL after ``exit_s``; its exit code."""
    if proc.poll() is None:
        _signal(proc, sig)
        try:
            proc.wait(timeout=exit_s)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL)
            proc.wait(timeout=exit_s)
    return proc.returncode


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        if os.getpgid(proc.pid) == proc.pid:  # a group leader (start_new_session): its children too
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass


def unavailable(tier: str, reason: str):
    """Fail in CI (``CI`` set), skip elsewhere: a server tier must not vanish silently where it is required."""
    if os.environ.get("CI"):
        pytest.fail(f"{tier} could not run: {reason}", pytrace=False)
    pytest.skip(f"{tier} skipped: {reason}")


def one_worker(tier: str) -> None:
    """Fail when pytest-xdist runs ``tier`` in more than one worker: each worker would start real servers of
    its own (about 5 GB each), more than the 2-core CI machine holds.  The real-server tiers run without -n."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers > 1:
        pytest.fail(f"{tier}: run it without -n: {workers} workers would each start real servers of about 5 GB",
                    pytrace=False)
