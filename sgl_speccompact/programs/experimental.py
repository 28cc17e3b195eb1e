"""Lockstep rounds across slot branches (the ``lockstep_branches`` switch).

Six branches that send their drafts, judgements and repairs whenever they are
ready seldom share a forward pass: each server decodes them at a batch of
about one.  With lockstep on, a branch's blocking request waits at a
:class:`Lockstep` until every live branch is waiting at it, and then all of
them go at once: the drafts of one round batch on the drafter, the
judgements and repairs on the target.  The price is idle time: a round lasts
as long as its slowest request.

Only the order of requests changes, never what a branch asks or decides, so
the summary is the same with and without it (``tests/methods/test_switches.py``).
A prefetched draft (pipelined drafting) is not gated: it runs beside the
judgement its branch waits for.
"""

from __future__ import annotations

import threading


class Lockstep:
    """A barrier for a shrinking set of branches.

    Parameters
    ----------
    parties : int
        The branches that start; each calls :meth:`leave` once when it ends.

    Examples
    --------
    Two branches: the first to arrive waits for the second.

    >>> gate, order = Lockstep(2), []
    >>> t = threading.Thread(target=lambda: (gate.wait(), order.append("first")))
    >>> t.start()
    >>> order.append("second"); gate.wait(); t.join()
    >>> order, gate.rounds
    (['second', 'first'], 1)

    A branch that ends no longer holds the others back:

    >>> gate.leave(); gate.wait(); gate.rounds
    2
    """

    def __init__(self, parties: int):
        if parties < 1:
            raise ValueError(f"a lockstep needs at least one branch, got {parties}")
        self.live = parties  # branches that have not left
        self.waiting = 0  # branches waiting in the current round
        self.rounds = 0  # rounds released so far
        self.cond = threading.Condition()

    def wait(self) -> None:
        """Wait until every live branch waits here; then all go at once."""
        with self.cond:
            this = self.rounds
            self.waiting += 1
            if self.waiting >= self.live:
                self._release()
                return
            while self.rounds == this:
                self.cond.wait()

    def leave(self) -> None:
        """The branch ends: later rounds go without it (this one may go now)."""
        with self.cond:
            self.live -= 1
            if self.waiting and self.waiting >= self.live:
                self._release()

    def _release(self) -> None:
        self.waiting = 0
        self.rounds += 1
        self.cond.notify_all()
