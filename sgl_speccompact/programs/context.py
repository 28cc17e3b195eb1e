"""What a slot-parallel program is asked (:class:`SlotContext`, built before it runs) and the
little that changes while it runs (:class:`SlotRun`: its shared text and cancel flag).

:mod:`~sgl_speccompact.methods` builds the context from a job; the programs
(:mod:`~.slots`, :mod:`~sgl_speccompact.methods.baselines`) wrap it in a run
and pass the run to every step and slot stream.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..config import CompactConfig
from ..core.evidence import LineSources
from ..core.judging import Judge
from ..core.lines import placeholder_texts
from ..result import StatsRecorder
from ..schema import Slot

Carried = Mapping[str, tuple[str, ...]]  # slot name -> the previous summary's lines for it (core/carried.py)


@dataclass(frozen=True)
class Proposers:
    """A slot method as a choice of proposers (:mod:`~.proposers`); the loop is the same for all."""

    carried: bool  # the previous summary's lines are proposed first, judged in bounded batches
    drafter: bool  # new lines come from the drafter, judged and repaired; else the target writes them


TARGET_SELF = Proposers(carried=False, drafter=False)  # the target writes every line
TARGET_DELTA = Proposers(carried=True, drafter=False)  # carried lines kept, the target writes the rest
SPECCOMPACT = Proposers(carried=True, drafter=True)  # carried lines kept, the drafter drafts, the target repairs


@dataclass(frozen=True)
class SlotContext:
    """What a slot-parallel program is asked: one per compaction, built before the program runs.

    Immutable; what changes while the program runs (the cancel flag) is its
    :class:`SlotRun`'s.
    """

    cfg: CompactConfig  # budgets, threshold, labels, switches
    slots: tuple[Slot, ...]  # the schema, in summary order
    drafter: Any  # sglang backend of the drafter (None for target-only programs)
    drafter_context: str  # Figure 5 text before the slot request (the same for all slots)
    count_tokens: Callable[[list[str]], list[int]]  # texts -> their lengths in target tokens
    recorder: StatsRecorder  # this compaction's stats (the recorder accumulates; the reference is fixed)
    target_prefix: str = ""  # opens every target assistant turn (an empty think block for Qwen3)
    drafter_prefix: str = ""  # the same for the drafter
    has_previous: bool = False  # a previous summary is part of the source (the slot and judge prompts say so)
    on_event: Callable[[dict], None] | None = None  # progress callback (called from slot threads)
    target: Any = None  # sglang backend of the target; None: the backend the program runs on
    chat_prefix: bool = False  # the shared text is chat-templated, ending inside a user turn (agent layout)
    carried: Carried = field(default_factory=dict)  # lines each slot proposes from the previous summary (carried.py)
    proposers: Proposers = SPECCOMPACT  # the method: where the slots' lines come from
    judge: Judge | None = None  # turns questions into verdicts; None: the config's judge on ``target`` (judges.py)
    record: str = ""  # the plain-text context the decision judge's input starts with (judge "decisions")
    evidence: LineSources | None = None  # the evidence check's sources, indexed on first use; None: no check

    @property
    def placeholders(self) -> frozenset[str]:
        """The bracketed stand-ins of the schema's body formats: a line holding one is template text."""
        return placeholder_texts(tuple(s.body_format for s in self.slots))

    def emit(self, **event) -> None:
        """Send a progress event to ``on_event``, if any."""
        if self.on_event is not None:
            self.on_event(event)


@dataclass(frozen=True)
class SlotRun:
    """One run of a slot-parallel program: its spec and the little that changes while it runs."""

    ctx: SlotContext  # what the program is asked (immutable)
    shared: str  # the target's shared text (the program's ``shared`` argument)
    cancel: threading.Event = field(default_factory=threading.Event)  # set when any branch fails
