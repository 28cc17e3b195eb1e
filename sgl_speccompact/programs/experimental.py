"""Experimental levers that measured as losses, kept off the hot path (both off by default).

Each lever is one flag of :class:`~sgl_speccompact.config.CompactConfig` and
one hook here; the engine calls the hook only when the flag is on, so with
the flags off (the default) nothing of this module runs.  Their recorded
runs stay in ``bench/results/latency-lever-*.json`` (``bench/levers.py``
tabulates them; docs/benchmarks/archive/latency-2026-12-01.md reads them).

``lockstep_branches`` (hook: a :class:`Lockstep` the branches share): six branches that send their
drafts, judgements and repairs whenever they are ready seldom share a
forward pass.  With the flag on, a branch's blocking request waits at a
:class:`Lockstep` until every live branch is waiting at it, and then all of
them go at once.  The price is idle time: a round lasts as long as its
slowest request; raced, it lost (0.79x-0.94x).  Only the order of requests
changes, never what a branch asks or decides, so the summary is the same
(``tests/methods/test_switches.py``).  A prefetched draft (pipelined
drafting) is not gated: it runs beside the judgement its branch waits for.

``drafter_digest`` (hook :func:`drafter_history`): the drafter reads the
history with every tool output longer than ``2 * drafter_digest_tokens``
tokens cut to its head and tail around a marker saying how much was cut::

    [... 812 tokens of tool output clipped for the drafter ...]

Every other turn is kept whole.  The target still reads, judges and repairs
against the whole history, so the digest costs acceptance, never
correctness; at an acceptance penalty of 0.1 it lost (0.88x-0.94x).  The
caller's turns are only read; clipped turns are copies.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Callable, Sequence

from ..config import CompactConfig
from ..history.messages import Turn, render_history

MARKER = "\n[... {n} tokens of tool output clipped for the drafter ...]\n"


# ---------------------------------------------------------------- drafter_digest's hook


def drafter_history(turns: Sequence[Turn], cfg: CompactConfig, count: Callable[[list[str]], list[int]]) -> str:
    """The history as the drafter reads it with ``drafter_digest`` on: :func:`drafter_digest`, rendered."""
    return render_history(drafter_digest(turns, cfg.drafter_digest_tokens, count))


# ---------------------------------------------------------------- lockstep_branches


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


# ---------------------------------------------------------------- drafter_digest


def clip_text(text: str, tokens: int, keep: int) -> str:
    """``text`` (``tokens`` long) cut to about ``keep`` tokens at each end.

    Characters per token are estimated from the whole text, so the cut is
    in characters; a text of at most ``2 * keep`` tokens is returned whole.

    >>> clip_text("a" * 100, 10, 2)
    'aaaaaaaaaaaaaaaaaaaa\\n[... 6 tokens of tool output clipped for the drafter ...]\\naaaaaaaaaaaaaaaaaaaa'
    >>> clip_text("short", 3, 2)
    'short'
    """
    if tokens <= 2 * keep or not text:
        return text
    chars = max(1, round(len(text) * keep / tokens))
    return text[:chars] + MARKER.format(n=tokens - 2 * keep) + text[-chars:]


def drafter_digest(turns: Sequence[Turn], keep: int, count: Callable[[list[str]], list[int]]) -> tuple[Turn, ...]:
    """The turns with every tool output longer than ``2 * keep`` tokens clipped (:func:`clip_text`).

    ``count`` gives the length of each text in tokens (one call for all
    tool outputs).

    >>> t = (Turn("user", "fix a.py"), Turn("tool", "x" * 400, tool_call_id="c1"))
    >>> out = drafter_digest(t, 10, lambda texts: [len(x) // 4 for x in texts])
    >>> out[0] is t[0], len(out[1].content) < 400, "clipped" in out[1].content, len(t[1].content)
    (True, True, True, 400)
    """
    tools = [i for i, t in enumerate(turns) if t.role == "tool" and t.content]
    sizes = dict(zip(tools, count([turns[i].content for i in tools]))) if tools else {}
    return tuple(replace(t, content=clip_text(t.content, sizes[i], keep)) if i in sizes else t
                 for i, t in enumerate(turns))
