"""Proposals, and how one is admitted into a slot: one decision for every source of lines.

Every method is one slot loop fed by proposers
(:mod:`~sgl_speccompact.programs.proposers`): the previous summary's
carried lines, the drafter, the target as writer, and the target's repair
of a rejected line.  Each :class:`Proposal` goes through the same stages, in
the same order::

    checks (kind) -> budget -> judge -> claim (across the slot's branches) -> accept

:func:`admit` is that order as a pure function: given what is known so far
about the line, it names the next step.  The branch performs the step
(counts the line's tokens, asks the judge, claims the line in the slot's
shared set) and asks again with the answer, until the line is accepted or
refused.  What a refusal means depends on the source: a drafted line is
repaired, a carried one dropped (and remembered as stale once a reliable
verdict said it no longer holds), a repair stops the slot, and a line the
target wrote is skipped (it is never judged either).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..result import StopReason
from .judge import Verdict
from .lines import LineKind

FAILED_CHECK = (LineKind.DUPLICATE, LineKind.TOO_LONG, LineKind.PLACEHOLDER)  # kinds refused without a judge call


class Source(str, Enum):
    """Where a proposed line comes from."""

    DRAFT = "draft"  # the drafter's line
    CARRIED = "carried"  # a line of the previous summary
    HEADING = "heading"  # one of the slot's sub-section headings, carried from the previous summary
    REPAIR = "repair"  # written by the target in place of a rejected line
    TARGET = "target"  # written by the target as the slot's writer: not judged, skipped when refused


@dataclass(frozen=True)
class Proposal:
    """One proposed line: the data that flows from a proposer into the slot's admission."""

    text: str  # the line, without its newline
    source: Source  # which proposer it comes from
    verdict: Verdict | None = None  # judged before it was proposed (carried lines, judged in batches)
    cut: bool = False  # a token limit cut it off: not a whole line
    capped: bool = False  # that limit was the slot's remaining tokens (the slot is full), not max_new_tokens


class Step(str, Enum):
    """What the branch does next with a proposed line."""

    MEASURE = "measure"  # count its tokens and check the budget, then ask again
    JUDGE = "judge"  # ask the judge, then ask again with the verdict
    CLAIM = "claim"  # claim it in the slot's shared set, then ask again with the outcome
    ACCEPT = "accept"  # append it to the branch
    REPAIR = "repair"  # have it replaced (a drafted line)
    DROP = "drop"  # skip it
    STALE = "stale"  # skip it, and never accept it again (a carried line a reliable verdict rejected)
    STOP = "stop"  # end the slot (``Admission.reason``)


@dataclass(frozen=True)
class Admission:
    """The next step for one proposed line."""

    step: Step  # what the branch does next
    reason: StopReason | None = None  # with STOP: the slot's stop reason


def admit(source: Source, kind: LineKind, over: StopReason | None | str = None, judged: bool | None = None,
          claimed: bool | None = None, reliable: bool = True) -> Admission:
    """The next step for a line of ``kind`` from ``source``.

    ``over`` is None until the budget is checked, then the limit the line
    breaks or ``""``; ``judged`` is None until the target judged it, then its
    verdict (``reliable``: whether that verdict may act); ``claimed`` is None
    until it is claimed, then whether no other branch of the slot had it.

    >>> admit(Source.DRAFT, LineKind.JUDGE).step.value
    'measure'
    >>> admit(Source.DRAFT, LineKind.JUDGE, over="").step.value
    'judge'
    >>> admit(Source.DRAFT, LineKind.JUDGE, over="", judged=True).step.value
    'claim'
    >>> admit(Source.DRAFT, LineKind.JUDGE, over="", judged=True, claimed=False).step.value
    'repair'
    >>> admit(Source.REPAIR, LineKind.DUPLICATE).reason.value
    'repair_failed'
    >>> admit(Source.CARRIED, LineKind.JUDGE, over=StopReason.TOKEN_BUDGET).step.value
    'drop'
    >>> admit(Source.CARRIED, LineKind.JUDGE, over="", judged=False).step.value
    'stale'
    >>> admit(Source.CARRIED, LineKind.JUDGE, over="", judged=False, reliable=False).step.value
    'drop'
    >>> admit(Source.DRAFT, LineKind.PLACEHOLDER).step.value, admit(Source.TARGET, LineKind.PLACEHOLDER).step.value
    ('repair', 'drop')
    >>> admit(Source.TARGET, LineKind.DUPLICATE).step.value, admit(Source.TARGET, LineKind.JUDGE, over="").step.value
    ('drop', 'claim')
    """
    refused = _refused(source, kind)
    if refused is not None:
        return refused
    if over is None:
        return Admission(Step.MEASURE)
    if over:  # a carried line does not fit what is left: the writer may still write shorter lines
        return Admission(Step.DROP) if source in (Source.CARRIED, Source.HEADING) else Admission(Step.STOP,
                                                                                                  StopReason(over))
    if kind is not LineKind.JUDGE:  # a heading, a marker or a blank: accepted unjudged, never claimed
        return Admission(Step.ACCEPT)
    if source not in (Source.REPAIR, Source.TARGET):  # the target wrote it itself: it is not judged again
        if judged is None:
            return Admission(Step.JUDGE)
        if not judged:
            return _lost(source, reliable)
    if claimed is None:
        return Admission(Step.CLAIM)
    return Admission(Step.ACCEPT) if claimed else _lost(source)


def _refused(source: Source, kind: LineKind) -> Admission | None:
    """The checks: what a line of ``kind`` from ``source`` may not be (None: it may go on)."""
    if source is Source.DRAFT:
        return Admission(Step.REPAIR) if kind in FAILED_CHECK else None
    if source is Source.REPAIR:
        return Admission(Step.STOP, StopReason.REPAIR_FAILED) if kind in FAILED_CHECK else None
    if source is Source.TARGET:
        return Admission(Step.DROP) if kind in FAILED_CHECK else None
    wanted = LineKind.UNJUDGED if source is Source.HEADING else LineKind.JUDGE
    return None if kind is wanted else Admission(Step.DROP)


def _lost(source: Source, reliable: bool = True) -> Admission:
    """A line the target rejected, or another branch of the slot claimed first."""
    if source is Source.DRAFT:
        return Admission(Step.REPAIR)
    if source is Source.CARRIED:  # only a reliable verdict says a carried line no longer holds
        return Admission(Step.STALE if reliable else Step.DROP)
    if source is Source.REPAIR:
        return Admission(Step.STOP, StopReason.REPAIR_FAILED)
    return Admission(Step.DROP)
