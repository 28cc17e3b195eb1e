"""Proposals, and how one is admitted into a slot: one decision for every source of lines (pure).

Every method is one slot loop fed by proposers
(:mod:`~sgl_speccompact.programs.proposers`): the previous summary's
carried lines, the drafter, the target as writer, and the target's repair
of a rejected line.  Each :class:`Proposal` passes the same stages, in the
same order, each a pure function called at most once::

    screen (the checks) -> vouch (the evidence) -> fit (the budget) -> [a verdict, if the line needs one] -> admit

:func:`screen`, :func:`vouch` and :func:`fit` name what becomes of a line
before any judge is asked (None: it goes on); :func:`needs_verdict` says
whether the line needs the judge; :func:`admit` decides with the verdict
(or None).  The branch runs the stages, checking the line's evidence
(:func:`checks_evidence`, :mod:`~.evidence`) before :func:`vouch`, counting
its tokens before :func:`fit` and asking the judge before :func:`admit`
(:meth:`~sgl_speccompact.programs.branch.Branch.admit`).  A stage that
refuses a line before the judge goes through :func:`refuse`, which records
why (``Admission.refused``; the evidence check also the strings without a
source, ``Admission.unsourced``).

What a refusal means depends on the source: a drafted line is repaired, a
carried one dropped (and remembered as stale once a reliable verdict said it
no longer holds), a repair stops the slot, and a line the target wrote is
skipped (it is never judged, nor checked for evidence, either).

A writer's request yields several lines at once (a generation, a draft that
ignored its stop); :class:`Continuation` proposes them one at a time while
they still continue the branch's lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from ..result import LineOrigin, StopReason, Verdict
from .evidence import Evidence
from .lines import LineKind, is_heading

FAILED_CHECK = (LineKind.DUPLICATE, LineKind.TOO_LONG, LineKind.PLACEHOLDER)  # kinds refused without a judge call
EVIDENCE = "evidence"  # Admission.refused of a line that names a string its source never shows


class Source(str, Enum):
    """Where a proposed line comes from."""

    DRAFT = "draft"  # the drafter's line
    CARRIED = "carried"  # a line of the previous summary
    HEADING = "heading"  # one of the slot's sub-section headings, carried from the previous summary
    REPAIR = "repair"  # written by the target in place of a rejected line
    TARGET = "target"  # written by the target as the slot's writer: not judged, skipped when refused


ORIGINS = {Source.DRAFT: LineOrigin.DRAFTED, Source.CARRIED: LineOrigin.CARRIED, Source.REPAIR: LineOrigin.REPAIRED,
           Source.TARGET: LineOrigin.TARGET}  # a written or judged line's origin


@dataclass(frozen=True)
class Proposal:
    """One proposed line: the data that flows from a proposer into the slot's admission."""

    text: str  # the line, without its newline
    source: Source  # which proposer it comes from
    verdict: Verdict | None = None  # judged before it was proposed (carried lines, judged in batches)
    cut: bool = False  # a token limit cut it off: not a whole line
    capped: bool = False  # that limit was the slot's remaining tokens (the slot is full), not max_new_tokens
    last: bool = False  # the writer's answer ended after it (a repair): the slot ends once it is in


class Step(str, Enum):
    """What becomes of a proposed line."""

    ACCEPT = "accept"  # append it to the branch
    REPAIR = "repair"  # have it replaced (a drafted line)
    DROP = "drop"  # skip it
    STALE = "stale"  # skip it, and never accept it again (a carried line a reliable verdict rejected)
    STOP = "stop"  # end the slot (``Admission.reason``)


@dataclass(frozen=True)
class Admission:
    """What became of one proposed line, and why."""

    step: Step  # what the branch does with it
    reason: StopReason | None = None  # with STOP: the slot's stop reason
    origin: LineOrigin | None = None  # with ACCEPT: how the line entered the summary
    verdict: Verdict | None = None  # the verdict it was decided on (None: decided without one)
    refused: str | None = None  # the stage that refused it before any judge, and why (a failed check's kind)
    unsourced: tuple[str, ...] = ()  # refused by the evidence check: the strings it names that no source shows


def refuse(p: Proposal, why: str) -> Admission:
    """What a refusal before any judge makes of ``p``: a draft is repaired, a repair stops the slot,
    anything else is dropped.  ``why`` is recorded (a failed check's kind, or another stage's reason).

    >>> refuse(Proposal("- a", Source.DRAFT), "duplicate").step.value, refuse(Proposal("- a", Source.REPAIR), "x").reason
    ('repair', <StopReason.REPAIR_FAILED: 'repair_failed'>)
    """
    if p.source is Source.DRAFT:
        return Admission(Step.REPAIR, refused=why)
    if p.source is Source.REPAIR:
        return Admission(Step.STOP, StopReason.REPAIR_FAILED, refused=why)
    return Admission(Step.DROP, refused=why)


def screen(p: Proposal, kind: LineKind) -> Admission | None:
    """The checks: what a line of ``kind`` may not be, for its source; None: it goes on to the budget.

    A line a token limit cut off is not a whole line: too long, or (cut by
    the slot's remaining tokens) the end of the slot.  A carried line must be
    a plain line to be judged (a heading comes as the slot's own, ``HEADING``).

    >>> screen(Proposal("- a", Source.DRAFT), LineKind.JUDGE) is None
    True
    >>> screen(Proposal("- a", Source.DRAFT), LineKind.PLACEHOLDER).step.value, screen(
    ...     Proposal("- a", Source.TARGET), LineKind.PLACEHOLDER).step.value
    ('repair', 'drop')
    >>> screen(Proposal("- a li", Source.TARGET, cut=True, capped=True), LineKind.JUDGE).reason.value
    'token_budget'
    >>> screen(Proposal("### Forged", Source.CARRIED), LineKind.JUDGE).refused
    'heading'
    """
    if kind is LineKind.JUDGE and p.cut:
        if p.capped:
            return Admission(Step.STOP, StopReason.TOKEN_BUDGET)  # it did not fit the slot's tokens
        kind = LineKind.TOO_LONG
    if p.source is Source.HEADING:
        return None if kind is LineKind.UNJUDGED else refuse(p, kind.value)
    if p.source is Source.CARRIED:
        if kind is LineKind.JUDGE and is_heading(p.text):
            return refuse(p, "heading")  # only the slot's own sub-section headings are carried
        return None if kind is LineKind.JUDGE else refuse(p, kind.value)
    return refuse(p, kind.value) if kind in FAILED_CHECK else None


def checks_evidence(p: Proposal, kind: LineKind) -> bool:
    """Whether the evidence check reads ``p``: a judged line (drafted or carried) or a repair, once it passed
    the checks.  Headings, markers, blanks and the target's own lines are not checked (nor judged).

    >>> checks_evidence(Proposal("- a", Source.REPAIR), LineKind.JUDGE), checks_evidence(
    ...     Proposal("- a", Source.TARGET), LineKind.JUDGE), checks_evidence(Proposal("", Source.DRAFT), LineKind.UNJUDGED)
    (True, False, False)
    """
    return kind is LineKind.JUDGE and p.source in (Source.DRAFT, Source.CARRIED, Source.REPAIR)


def vouch(p: Proposal, found: Evidence | None) -> Admission | None:
    """The evidence: a line naming a string no source shows is refused (:func:`refuse`) before any judge is
    asked, and the strings are recorded; None: it goes on (``found`` None: not checked).

    >>> from .evidence import Named
    >>> gone = Evidence((Named("path", "x.py", ("x.py",)),), (Named("path", "x.py", ("x.py",)),))
    >>> a = vouch(Proposal("- x.py", Source.DRAFT), gone); a.step.value, a.refused, a.unsourced
    ('repair', 'evidence', ('x.py',))
    >>> vouch(Proposal("- x.py", Source.REPAIR), gone).reason.value, vouch(Proposal("- x.py", Source.CARRIED), gone).step.value
    ('repair_failed', 'drop')
    >>> vouch(Proposal("- a", Source.DRAFT), Evidence()) is None
    True
    """
    if found is None or found.passed:
        return None
    return replace(refuse(p, EVIDENCE), unsourced=found.missing)


def fit(p: Proposal, over: StopReason | None) -> Admission | None:
    """The budget: ``over`` is the limit the line would break (None: it fits).  A carried line that does
    not fit is dropped (the writer may still write shorter lines); any other stops the slot.

    >>> fit(Proposal("- a", Source.CARRIED), StopReason.TOKEN_BUDGET).step.value, fit(Proposal("- a", Source.DRAFT), None)
    ('drop', None)
    """
    if over is None:
        return None
    return Admission(Step.DROP) if p.source in (Source.CARRIED, Source.HEADING) else Admission(Step.STOP, over)


def needs_verdict(p: Proposal, kind: LineKind) -> bool:
    """Whether the judge decides ``p``: a drafted or carried line that passed the checks (headings, markers and
    blanks are accepted unjudged; the target's own lines are never judged).

    >>> needs_verdict(Proposal("- a", Source.DRAFT), LineKind.JUDGE), needs_verdict(Proposal("- a", Source.TARGET), LineKind.JUDGE)
    (True, False)
    """
    return kind is LineKind.JUDGE and p.source in (Source.DRAFT, Source.CARRIED)


def admit(p: Proposal, kind: LineKind, verdict: Verdict | None) -> Admission:
    """After the checks and the budget: accept ``p``, or what its ``verdict`` makes of it.

    An unreliable verdict acts on nothing: a drafted line is repaired (the
    target writes it), a carried one dropped but not marked stale.

    >>> ok, no = Verdict(0.9, 0.1, 0.9, True), Verdict(0.1, 0.9, 0.1, False)
    >>> admit(Proposal("- a", Source.DRAFT), LineKind.JUDGE, ok).origin.value
    'drafted_accepted'
    >>> admit(Proposal("- a", Source.DRAFT), LineKind.JUDGE, no).step.value
    'repair'
    >>> admit(Proposal("- a", Source.CARRIED), LineKind.JUDGE, no).step.value
    'stale'
    >>> admit(Proposal("- a", Source.CARRIED), LineKind.JUDGE, Verdict(0.001, 0.002, 0.3, False, reliable=False)).step.value
    'drop'
    >>> admit(Proposal("### Done", Source.HEADING), LineKind.UNJUDGED, None).origin.value
    'accepted_without_judge'
    """
    if not needs_verdict(p, kind):
        written = kind is LineKind.JUDGE or p.source in (Source.REPAIR, Source.TARGET)
        return Admission(Step.ACCEPT, origin=ORIGINS[p.source] if written else LineOrigin.UNJUDGED)
    if verdict is None:
        raise ValueError(f"a {p.source.value} line is admitted only with its verdict")
    if verdict.accepted:
        return Admission(Step.ACCEPT, origin=ORIGINS[p.source], verdict=verdict)
    if p.source is Source.DRAFT:
        return Admission(Step.REPAIR, verdict=verdict)
    # only a reliable verdict says a carried line no longer holds
    return Admission(Step.STALE if verdict.reliable else Step.DROP, verdict=verdict)


@dataclass
class Continuation:
    """The lines one writer request wrote after ``prefix``, proposed one at a time while they continue the branch.

    A proposed line may be kept or skipped; if the branch's lines are then
    anything else (a repair, carried lines), the rest was written for
    another place and is not proposed: the writer asks anew.

    >>> c = Continuation(Source.TARGET, (), ["- a", "- b"], end=StopReason.COMPLETE)
    >>> c.next(()).text, c.next(("- a",)).text, c.next(("- a", "- b"))
    ('- a', '- b', <StopReason.COMPLETE: 'complete'>)
    >>> c = Continuation(Source.TARGET, (), ["### Blocked", "- x"])
    >>> c.next(()).text, c.next(("### In Progress", "- held"))
    ('### Blocked', None)
    """

    source: Source  # who wrote the lines (the drafter or the target)
    prefix: tuple[str, ...] = ()  # the branch's lines when the last line was proposed
    lines: list[str] = field(default_factory=list)  # written, not proposed yet
    end: StopReason | None = None  # why the request ended, once its lines are used (None: ask anew)
    cut: bool = False  # a token limit cut its last line off
    capped: bool = False  # that limit was the slot's remaining tokens
    taken: str | None = None  # the line proposed last

    def follows(self, accepted: tuple[str, ...]) -> bool:
        """Whether the branch still continues this request's text: the line proposed last kept or skipped."""
        return accepted == self.prefix or (self.taken is not None and accepted == self.prefix + (self.taken,))

    def next(self, accepted: tuple[str, ...]) -> Proposal | StopReason | None:
        """The next line for a branch holding ``accepted``; once its lines are used, why the request ended;
        None when it has nothing more for the branch (ask anew)."""
        if not self.follows(accepted):
            return None
        self.prefix = accepted
        if not self.lines:
            return self.end
        self.taken = self.lines.pop(0)
        last = not self.lines
        return Proposal(self.taken, self.source, cut=last and self.cut, capped=self.capped)
