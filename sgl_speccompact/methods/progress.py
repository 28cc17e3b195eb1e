"""Progress with totals: block i of n, slots done of the block's, judged lines and tokens so far.

The events a compaction sends while it runs (``line`` and ``slot_written``,
from the slot threads) say what was just written, not how far along the
compaction is.  :class:`Tracker` turns them into :class:`Progress` reports
for ``MethodRequest.on_progress``: one after every event, read from the
stats recorded so far (the blocks already done plus the running block's
recorder), and one when a block ends, read from the stats that block's
result carries.  So the last report of a compaction holds exactly the
numbers of the result's stats, and a chunked history reports its blocks
one by one (``block 3 of 18``).  The CLI draws the reports on one line, the
service logs them for long compactions (:func:`describe` words both).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from ..result import CompactionResult, CompactionStats, StatsRecorder
from .assembly import LEDGER_SLOT


@dataclass(frozen=True)
class Progress:
    """How far one compaction is, with totals."""

    block: int  # the block being compacted, from 1
    blocks: int  # blocks the history is compacted in (1 unless it is chunked)
    slots_done: int  # this block's slots that have finished
    slots: int  # this block's slots (the schema's; a one-shot method's sections once written)
    judged_lines: int  # lines judged so far, every block (stats.proposed_lines)
    accepted_lines: int  # of which accepted (stats.accepted_lines)
    tokens: int  # prompt and generated tokens of every request so far, both servers
    block_done: bool = False  # the block has ended: the counts are its result's stats


def tokens(stats: CompactionStats) -> int:
    """Prompt plus generated tokens of every request in ``stats``.

    >>> from sgl_speccompact.result import RequestCount
    >>> tokens(CompactionStats(requests={"target": {"judge": RequestCount(prompt_tokens=90, completion_tokens=1)}}))
    91
    """
    return sum(stats.totals(server).prompt_tokens + stats.totals(server).completion_tokens
               for server in stats.requests)


def describe(p: Progress) -> str:
    """One line for people.

    >>> describe(Progress(3, 18, 4, 6, 187, 132, 52113))
    'block 3 of 18: 4 of 6 slots, 132 of 187 judged lines accepted, 52,113 tokens'
    >>> describe(Progress(1, 1, 6, 6, 0, 0, 900, block_done=True))
    'block 1 of 1: 6 of 6 slots, 900 tokens'
    """
    judged = f", {p.accepted_lines} of {p.judged_lines} judged lines accepted" if p.judged_lines else ""
    return f"block {p.block} of {p.blocks}: {p.slots_done} of {p.slots} slots{judged}, {p.tokens:,} tokens"


class Tracker:
    """The :class:`Progress` of one compaction, reported to ``report`` as it changes."""

    def __init__(self, report: Callable[[Progress], None], blocks: int, slots: int):
        self.report = report  # the caller's on_progress
        self.blocks = blocks  # blocks planned
        self.slots = slots  # slots per block
        self.finished = CompactionStats()  # stats of the blocks already done, added up
        self.blocks_done = 0  # blocks already done
        self.slots_done = 0  # slots of the running block that have finished
        self._lock = threading.Lock()  # events arrive from the slot threads

    def watch(self, on_event: Callable[[dict], None] | None,
              recorder: StatsRecorder) -> Callable[[dict], None]:
        """``on_event`` that also reports progress, counting from ``recorder`` (the running block's)."""
        def seen(event: dict) -> None:
            if on_event is not None:
                on_event(event)
            with self._lock:
                self.slots_done += event.get("type") == "slot_written"
                judged, accepted, used = recorder.read(lambda s: (s.proposed_lines, s.accepted_lines, tokens(s)))
                done = self.finished
                self.report(Progress(self.blocks_done + 1, self.blocks, self.slots_done,
                                     max(self.slots, self.slots_done), done.proposed_lines + judged,
                                     done.accepted_lines + accepted, tokens(done) + used))
        return seen

    def block_done(self, total: CompactionStats, result: CompactionResult) -> None:
        """A block ended: ``total`` is every block's stats so far, ``result`` the block's."""
        with self._lock:
            self.finished = total.model_copy(deep=True)
            self.blocks_done += 1
            self.slots_done = 0
            slots = sum(s.name != LEDGER_SLOT for s in result.slots) or self.slots  # the ledger is no slot
            self.report(Progress(self.blocks_done, self.blocks, slots, slots, total.proposed_lines,
                                 total.accepted_lines, tokens(total), block_done=True))
