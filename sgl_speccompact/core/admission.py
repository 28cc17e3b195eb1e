"""How a proposed line is admitted into a slot: one decision for every source of lines.

A slot stream proposes lines from six sources (:class:`Source`): the
drafter's buffer, the previous summary (a line, or one of the slot's
sub-section headings), the target's repair, a drafter candidate and, in
Target-delta, the target's own writing.  Each
goes through the same stages, in the same order::

    checks (kind) -> budget -> judge -> claim (across the slot's branches) -> accept

:func:`admit` is that order as a pure function: given what is known so far
about the line, it names the next step.  The stream performs the step (counts
the line's tokens, asks the target, claims the line in the slot's shared
set) and asks again with the answer, until the line is accepted or refused.
What a refusal means depends on the source: a drafted line is repaired, a
carried one dropped (and remembered as stale once the target judged it), a
repair stops the slot, a candidate leaves the repair to the target, and a
line the target wrote in Target-delta is skipped (it is never judged either).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .lines import LineKind


FAILED_CHECK = (LineKind.DUPLICATE, LineKind.TOO_LONG, LineKind.PLACEHOLDER)  # kinds repaired without a judge call


class Source(str, Enum):
    """Where a proposed line comes from."""

    DRAFT = "draft"  # the drafter's buffer
    CARRIED = "carried"  # a line of the previous summary
    HEADING = "heading"  # one of the slot's sub-section headings, carried from the previous summary
    REPAIR = "repair"  # written by the target in place of a rejected line
    CANDIDATE = "candidate"  # a drafter sample, judged in a batch with the others
    TARGET = "target"  # written by the target in Target-delta: not judged, skipped when refused


class Step(str, Enum):
    """What the stream does next with a proposed line."""

    MEASURE = "measure"  # count its tokens and check the budget, then ask again
    JUDGE = "judge"  # ask the target, then ask again with the verdict
    CLAIM = "claim"  # claim it in the slot's shared set, then ask again with the outcome
    ACCEPT = "accept"  # append it to the branch
    REPAIR = "repair"  # have it replaced (a drafted line)
    DROP = "drop"  # skip it
    STALE = "stale"  # skip it, and never accept it again (a carried line the target judged)
    STOP = "stop"  # end the slot (``Admission.reason``)


@dataclass(frozen=True)
class Admission:
    """The next step for one proposed line."""

    step: Step  # what the stream does next
    reason: str | None = None  # with STOP: the slot's stop reason


def admit(source: Source, kind: LineKind, over: str | None = None, judged: bool | None = None,
          claimed: bool | None = None) -> Admission:
    """The next step for a line of ``kind`` from ``source``.

    ``over`` is None until the budget is checked, then the limit the line
    breaks or ``""``; ``judged`` is None until the target judged it, then its
    verdict; ``claimed`` is None until it is claimed, then whether no other
    branch of the slot had it.

    >>> admit(Source.DRAFT, LineKind.JUDGE).step.value
    'measure'
    >>> admit(Source.DRAFT, LineKind.JUDGE, over="").step.value
    'judge'
    >>> admit(Source.DRAFT, LineKind.JUDGE, over="", judged=True).step.value
    'claim'
    >>> admit(Source.DRAFT, LineKind.JUDGE, over="", judged=True, claimed=False).step.value
    'repair'
    >>> admit(Source.REPAIR, LineKind.DUPLICATE)
    Admission(step=<Step.STOP: 'stop'>, reason='repair_failed')
    >>> admit(Source.CARRIED, LineKind.JUDGE, over="token_budget").step.value
    'drop'
    >>> admit(Source.DRAFT, LineKind.PLACEHOLDER).step.value, admit(Source.CANDIDATE, LineKind.PLACEHOLDER).step.value
    ('repair', 'drop')
    >>> admit(Source.TARGET, LineKind.DUPLICATE).step.value, admit(Source.TARGET, LineKind.JUDGE, over="").step.value
    ('drop', 'claim')
    """
    refused = _refused(source, kind)
    if refused is not None:
        return refused
    if over is None:
        return Admission(Step.MEASURE)
    if over:  # a carried line does not fit what is left: the drafter may still write shorter lines
        return Admission(Step.DROP) if source in (Source.CARRIED, Source.HEADING) else Admission(Step.STOP, over)
    if kind is not LineKind.JUDGE:  # a heading, a marker or a blank: accepted unjudged, never claimed
        return Admission(Step.ACCEPT)
    if source not in (Source.REPAIR, Source.TARGET):  # the target wrote it itself: it is not judged again
        if judged is None:
            return Admission(Step.JUDGE)
        if not judged:
            return _lost(source)
    if claimed is None:
        return Admission(Step.CLAIM)
    return Admission(Step.ACCEPT) if claimed else _lost(source)


def _refused(source: Source, kind: LineKind) -> Admission | None:
    """The checks: what a line of ``kind`` from ``source`` may not be (None: it may go on)."""
    if source is Source.DRAFT:
        return Admission(Step.REPAIR) if kind in FAILED_CHECK else None
    if source is Source.REPAIR:
        return Admission(Step.STOP, "repair_failed") if kind in FAILED_CHECK else None
    if source is Source.TARGET:
        return Admission(Step.DROP) if kind in FAILED_CHECK else None
    wanted = LineKind.UNJUDGED if source is Source.HEADING else LineKind.JUDGE
    return None if kind is wanted else Admission(Step.DROP)


def _lost(source: Source) -> Admission:
    """A line the target rejected, or another branch of the slot claimed first."""
    return {Source.DRAFT: Admission(Step.REPAIR), Source.CARRIED: Admission(Step.STALE),
            Source.REPAIR: Admission(Step.STOP, "repair_failed")}.get(source, Admission(Step.DROP))
