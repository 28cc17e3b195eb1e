"""Cancellation and deadlines of one compaction.

A :class:`CancelScope` belongs to one compaction.  The service cancels it
when the client goes away, when the whole-compaction deadline passes, or
when the service stops.  Backends bound to the scope (see
:meth:`SpecCompactEndpoint.with_cancel`) check it before every request they
send, so every slot thread stops at its next request and no further request
reaches a server; the requests in flight are aborted on their servers
(sglang's ``POST /abort_request``, registered with :meth:`CancelScope.on_cancel`),
and end at the latest when the deadline does, because their timeout is
capped by the time left.

Nothing here is specific to HTTP: the CLI and library callers can bind a
scope in the same way.

>>> scope = CancelScope(deadline_s=None)
>>> scope.check()
>>> scope.cancel("cancelled")
True
>>> scope.check()
Traceback (most recent call last):
...
sgl_speccompact.errors.CompactionCancelledError: compaction cancelled
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from ..backends.contract import Backend
from ..errors import CompactionCancelledError, CompactionTimeoutError, ServiceStoppingError


class CancelScope:
    """A cancel flag plus an optional deadline, shared by every thread of one compaction.

    Parameters
    ----------
    deadline_s : float or None
        Seconds from ``since`` after which the compaction counts as timed
        out; None for no deadline.
    since : float, optional
        When the deadline's clock started (``time.monotonic()``; default:
        now).  A compact that first waited for a prepare passes its arrival.
    """

    def __init__(self, deadline_s: float | None = None, since: float | None = None):
        self.deadline_s = deadline_s  # whole-compaction limit (seconds), None = none
        start = time.monotonic() if since is None else since
        self._deadline = None if deadline_s is None else start + deadline_s  # monotonic clock
        self._event = threading.Event()  # set once cancelled or timed out
        self._lock = threading.Lock()  # orders cancel() against finish()
        self.reason: str | None = None  # "cancelled" | "timeout" once set
        self.finished = False  # the compaction ended before any cancel
        self._on_cancel: list[Callable[[], None]] = []  # called once, when cancelled (see on_cancel)

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once when the scope is cancelled (at once if it already is).

        Callbacks run on the thread that cancels, which may be the event
        loop's: they must not block (an endpoint's abort starts a thread).
        """
        with self._lock:
            if not self._event.is_set():
                self._on_cancel.append(callback)
                return
        callback()

    def cancel(self, reason: str = "cancelled") -> bool:
        """Cancel (first reason wins); every later :meth:`check` raises, and the
        :meth:`on_cancel` callbacks run.

        Returns False when the compaction had already finished (or was
        already cancelled), so the caller knows its result stands.
        """
        with self._lock:
            if self.finished or self._event.is_set():
                return False
            self.reason = reason
            self._event.set()
            callbacks, self._on_cancel = self._on_cancel, []
        for callback in callbacks:
            callback()
        return True

    def finish(self) -> bool:
        """Mark the compaction done; False if it was cancelled first."""
        with self._lock:
            if self._event.is_set():
                return False
            self.finished = True
            self._on_cancel = []
            return True

    @property
    def cancelled(self) -> bool:
        """True once cancelled or past the deadline."""
        if not self._event.is_set() and self._deadline is not None and time.monotonic() >= self._deadline:
            self.cancel("timeout")  # no-op once finished
        return self._event.is_set()

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None without one, never below 0)."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def timeout(self, per_request_s: float) -> float:
        """A request's timeout: ``per_request_s`` capped by the time left (at least 1 ms)."""
        left = self.remaining()
        return per_request_s if left is None else max(0.001, min(per_request_s, left))

    def error(self) -> Exception:
        """The typed error that stands for this scope's end."""
        if self.reason == "timeout":
            return CompactionTimeoutError(f"the compaction did not finish within {self.deadline_s:g} s")
        if self.reason == "shutdown":
            return ServiceStoppingError("compaction cancelled: the service is stopping")
        return CompactionCancelledError("compaction cancelled")

    def check(self) -> None:
        """Raise the scope's error if it is cancelled or past its deadline."""
        if self.cancelled:
            raise self.error()

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds or until cancelled; True if cancelled."""
        return self._event.wait(timeout)


def bind(backend: Backend | None, scope: CancelScope) -> Backend | None:
    """``backend``'s view bound to ``scope`` (``with_cancel``); None for no backend.

    An in-process stand-in's view is itself (no request to stop); the
    service still answers at the deadline, but that backend keeps running
    until its compaction returns.
    """
    return backend.with_cancel(scope) if backend is not None else None
