"""The service's log for people: one line per compaction, and progress lines of the long ones.

At the default level (``info``, :mod:`sgl_speccompact.service.logs`) each finished
compaction writes one line::

    [service] speccompact: ~2,140 history tokens, 1.84 s, 61 requests, acceptance 71% (32 of 45 judged lines), complete

(``prepare`` before a background one, ``in N blocks`` after a chunked one,
``TRUNCATED`` when the summary is incomplete; the history's tokens are the
estimate ``auto`` sizes histories with).  A compaction still running after
:data:`PROGRESS_EVERY_S` logs its progress with totals, at most that often
(:func:`~sgl_speccompact.methods.progress.describe`).  Failures are logged
where they are turned into typed errors (:mod:`~sgl_speccompact.service.runtime`).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ..methods.progress import Progress, describe
from ..result import CompactionResult

PROGRESS_EVERY_S = 5.0  # a compaction running longer than this logs its progress, at most this often (seconds)


def compaction_line(method: str, history_tokens: int, result: CompactionResult, background: bool = False) -> str:
    """The one line a finished compaction writes.

    >>> from sgl_speccompact.result import CompactionStats, RequestCount
    >>> st = CompactionStats(requests={"target": {"verify": RequestCount(requests=45)}}, proposed_lines=45,
    ...                      accepted_lines=32, total_wall_s=1.84)
    >>> compaction_line("speccompact", 2140, CompactionResult(method="speccompact", summary="s", stats=st))
    'speccompact: ~2,140 history tokens, 1.84 s, 45 requests, acceptance 71% (32 of 45 judged lines), complete'
    >>> compaction_line("hermes", 90, CompactionResult(method="hermes", summary="s", truncated=True, chunks=2), True)
    'prepare hermes: ~90 history tokens in 2 blocks, 0.00 s, 0 requests, no judged lines, TRUNCATED'
    """
    st = result.stats
    requests = sum(st.totals(server).requests for server in st.requests)
    rate = st.acceptance_rate
    judged = ("no judged lines" if rate is None else
              f"acceptance {100 * rate:.0f}% ({st.accepted_lines} of {st.proposed_lines} judged lines)")
    blocks = f" in {result.chunks} blocks" if result.chunks > 1 else ""
    return (f"{'prepare ' if background else ''}{method}: ~{history_tokens:,} history tokens{blocks}, "
            f"{st.total_wall_s:.2f} s, {requests} requests, {judged}, {'TRUNCATED' if result.truncated else 'complete'}")


class ProgressLog:
    """A compaction's ``on_progress``: a log line once it has run :data:`PROGRESS_EVERY_S`, then at most that often."""

    def __init__(self, label: str, log: logging.Logger, clock: Callable[[], float] | None = None,
                 every_s: float = PROGRESS_EVERY_S):
        self.label = label  # what the line starts with: the method (and "prepare")
        self.log = log  # where the lines go
        self.clock = clock or time.monotonic  # seconds; tests pass a fake one
        self.every_s = every_s  # seconds between lines, and before the first
        self.started = self.last = self.clock()  # when the compaction started; when a line was last written

    def __call__(self, progress: Progress) -> None:
        now = self.clock()
        if now - self.last < self.every_s:
            return
        self.last = now
        self.log.info("%s: %s (%.0f s so far)", self.label, describe(progress), now - self.started)


def history_tokens(request: Any) -> int:
    """The estimated tokens of a request's messages and previous summary (as ``auto`` estimates them)."""
    from ..methods.autopick import estimate_tokens

    return estimate_tokens(request.messages, request.previous_summary)
