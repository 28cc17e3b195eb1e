"""What the simulated judge and writers get wrong, at stated rates (benchmark policy, pure).

The workload (:mod:`.workload`) plays a perfect judge and perfect writers
unless told otherwise: the judge rejects exactly the lines that do not hold,
the lines that still hold come first in their slot, and a writer that
continues a slot after its carried lines never writes one of them again.
:class:`Mistakes` states how far from that a run is:

* **False accepts and false rejects.**  Each judged line that does not hold
  (a stale carried line, a wrong draft or candidate) is accepted with
  probability ``false_accept``; each line that holds is rejected with
  probability ``false_reject``.  The draw is a seeded hash of the workload's
  seed and the judged line (:func:`flips`), so every method judging the same
  line in the same compaction gets the same verdict, and the layout of the
  prompt never moves it.
* **The evidence check** (``evidence_catch``): before the judge is asked,
  a judged line that does not hold and that no summary ever held (a wrong
  draft or candidate, or such a line carried on: an invented line) is
  refused with probability ``evidence_catch`` -- the share of the judge
  set's contradicted lines the package's check
  (:mod:`sgl_speccompact.core.evidence`) refuses, :data:`EVIDENCE_CATCH` --
  and only a line it lets through gets the judge's false-accept draw.  A
  stale line (true once, no longer) names strings its source showed, so the
  check cannot catch it.  Lines that hold pass the check: it refused none of
  the judge set's supported lines.  The draw is seeded like the judge's,
  from its own hash.  Only the verdict is modelled: the refused line's judge
  request is still sent and charged.
* **Held lines at drawn positions** (``held_positions="drawn"``): the lines
  of the previous summary that still hold sit at drawn places among the new
  ones of their (sub-)section, in their old order (:func:`arrange`), instead
  of first.
* **Writers that follow what is written, not where.**  A writer (the
  drafter, the target continuing a slot, a repair) writes the true lines
  its (sub-)section does not cover yet, in the truth's order
  (:func:`remaining`): a line that holds and was falsely rejected is written
  again (and decoded again); a wrong draft that was accepted covers the true
  line it stood for, which is then lost.  While what is written is the
  truth's own beginning this is the place-by-count rule the workload always
  used, so a run without mistakes makes the same requests as before.
* **Repeats** (``repeat``): writing in the truth's order, a writer passes
  the held lines that sit among the new ones (drawn positions) although
  they were carried already, and writes each of them again with
  probability ``repeat`` (:func:`write_order`, :func:`repeats`); the method
  pays for those tokens and then skips or repairs the duplicate.  Held lines
  that open their section (``held_positions="first"``) are never passed, so
  there ``repeat`` changes nothing.

The truth measures: :func:`truth_kept` counts what of the true summary a
result keeps (retention) and which of its lines the truth does not hold
(staleness: stale carried lines kept, wrong drafts accepted).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from sgl_speccompact.core.ledger import strip_ledger
from sgl_speccompact.emulator.policy import seeded_unit

POSITIONS = ("first", "drawn")  # where held lines sit among the new ones of their (sub-)section
# the share of the judge set's contradicted lines the evidence check refuses (21 of 62; MEASURED on
# bench/evaluation/judge_set.jsonl by bench/evidence.py, bench/results/evidence-judge-set-smollm2.json)
EVIDENCE_CATCH = 21 / 62


@dataclass(frozen=True)
class Mistakes:
    """What the simulated judge and writers get wrong (the defaults: nothing, the perfect judge and writer)."""

    false_accept: float = 0.0  # P(the judge accepts a judged line that does not hold), per line
    false_reject: float = 0.0  # P(the judge rejects a judged line that holds), per line
    held_positions: str = "first"  # "first": held lines open their (sub-)section; "drawn": at drawn places
    repeat: float = 0.0  # P(a writer passing a carried line writes it again), per line (drawn positions only)
    evidence_catch: float = 0.0  # P(the evidence check refuses an invented judged line before the judge), per line

    def __post_init__(self):
        for name in ("false_accept", "false_reject", "repeat", "evidence_catch"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], not {getattr(self, name)}")
        if self.held_positions not in POSITIONS:
            raise ValueError(f"held_positions must be one of {POSITIONS}, not {self.held_positions!r}")

    @property
    def neutral(self) -> bool:
        """Whether nothing is got wrong (today's perfect judge and writers).

        >>> Mistakes().neutral, Mistakes(false_accept=0.05).neutral
        (True, False)
        """
        return self == Mistakes()


def flips(mistakes: Mistakes, seed: int, lines: list[str], bad: bool, invented: bool = False) -> bool:
    """Whether the verdict on ``lines`` comes out wrong (``bad``: the truth does not hold them).

    ``invented``: a bad line no summary ever held, which the evidence check
    refuses at ``mistakes.evidence_catch`` before the judge's draw.

    >>> flips(Mistakes(), 1, ["- a"], True), flips(Mistakes(false_accept=1.0), 1, ["- a"], True)
    (False, True)
    >>> flips(Mistakes(false_accept=1.0), 1, ["- a"], False)  # a line that holds: only false_reject flips it
    False
    >>> caught = Mistakes(false_accept=1.0, evidence_catch=1.0)  # refused before the judge is asked
    >>> flips(caught, 1, ["- a"], True, invented=True), flips(caught, 1, ["- a"], True, invented=False)
    (False, True)
    """
    if bad and invented and caught(mistakes, seed, lines):
        return False
    rate = mistakes.false_accept if bad else mistakes.false_reject
    return rate > 0 and seeded_unit(seed, "judge\x00" + "\x00".join(lines)) < rate


def caught(mistakes: Mistakes, seed: int, lines: list[str]) -> bool:
    """Whether the evidence check refuses the invented ``lines``: a seeded draw at ``mistakes.evidence_catch``.

    >>> caught(Mistakes(evidence_catch=1.0), 0, ["- a"]), caught(Mistakes(), 0, ["- a"])
    (True, False)
    """
    rate = mistakes.evidence_catch
    return rate > 0 and seeded_unit(seed, "evidence\x00" + "\x00".join(lines)) < rate


def arrange(held: list[str], fresh: list[str], positions: str, rng: random.Random) -> list[str]:
    """A (sub-)section's true lines: ``held`` first, or at places drawn from ``rng`` (their order kept).

    >>> arrange(["h1", "h2"], ["f1"], "first", random.Random(0))
    ['h1', 'h2', 'f1']
    >>> out = arrange(["h1", "h2"], ["f1", "f2"], "drawn", random.Random(3))
    >>> sorted(out) == ["f1", "f2", "h1", "h2"] and out.index("h1") < out.index("h2")
    True
    """
    if positions == "first" or not held or not fresh:
        return held + fresh
    n = len(held) + len(fresh)
    at = set(rng.sample(range(n), len(held)))
    h, f = iter(held), iter(fresh)
    return [next(h) if i in at else next(f) for i in range(n)]


def section_of(items: list[str], written: list[str]) -> tuple[int, int, list[str]]:
    """``(first index, end, lines written in it)`` of the (sub-)section ``written`` is in.

    The section starts at the last ``###`` heading written that ``items`` (a
    slot's true lines) has, and ends before its next heading; with no such
    heading it is the whole slot.

    >>> items = ["### Done", "- a", "", "### Blocked", "- b"]
    >>> section_of(items, ["### Done", "- a"]), section_of(items, ["- x"])
    ((0, 3, ['### Done', '- a']), (0, 5, ['- x']))
    """
    heads = [i for i, line in enumerate(written) if line.startswith("### ")]
    if heads and written[heads[-1]] in items:
        start, mine = items.index(written[heads[-1]]), written[heads[-1]:]
        end = next((i for i in range(start + 1, len(items)) if items[i].startswith("### ")), len(items))
        return start, end, mine
    return 0, len(items), list(written)


def remaining(items: list[str], written: list[str], versions: list[str] | None = None) -> list[int]:
    """Indices of ``items`` (a slot's true lines) still to write after ``written``, in order.

    While ``written`` is the truth's own beginning (from its section's
    heading) this is every index from the place reached.  Otherwise each
    written line covers the first uncovered index of its section whose true
    line it is, or whose ``versions`` line it is (a wrong draft stands for the
    true line at its index); a line that is neither (stale, repeated) covers
    nothing, and every uncovered index of the section is still to write.

    >>> items = ["- a", "- b", "- c"]
    >>> remaining(items, ["- a"]), remaining(items, ["- b"]), remaining(items, ["- x"], ["- a", "- x", "- c"])
    ([1, 2], [0, 2], [0, 2])
    >>> items = ["### Done", "- a", "", "### Blocked", "- b"]  # counted from the section's heading
    >>> remaining(items, ["### Blocked"]), remaining(items, ["### Done", "- a", "", "### Blocked"]), remaining(items, [])
    ([4], [4], [0, 1, 2, 3, 4])
    """
    return [i for i, again in write_order(items, written, versions) if not again]


def write_order(items: list[str], written: list[str], versions: list[str] | None = None,
                carried: set[str] = frozenset(), repeat: Callable[[str], bool] = lambda line: False,
                ) -> list[tuple[int, bool]]:
    """What a writer continuing after ``written`` writes, in the truth's order: ``(index, written again)``.

    The indices :func:`remaining` gives, and on the way every carried line
    (in ``carried``: a previous summary's) it passes -- already written, but
    after the first line still to write -- that ``repeat`` says it writes
    again.  Held lines that open their section are never passed.

    >>> items = ["- h1", "- f1", "- h2", "- f2"]
    >>> write_order(items, ["- h1", "- h2"], carried={"- h1", "- h2"}, repeat=lambda line: True)
    [(1, False), (2, True), (3, False)]
    >>> write_order(items, ["- h1", "- h2"], carried={"- h1", "- h2"})
    [(1, False), (3, False)]
    """
    start, end, mine = section_of(items, written)
    if mine == items[start:start + len(mine)]:
        return [(i, False) for i in range(start + len(mine), len(items))]
    covered: set[int] = set()
    for line in mine:
        i = next((i for i in range(start, end) if i not in covered
                  and (items[i] == line or (versions is not None and versions[i] == line))), None)
        if i is not None:
            covered.add(i)
    first = next((i for i in range(start, end) if i not in covered), end)
    order = [(i, i in covered) for i in range(start, end)
             if i not in covered or (i > first and items[i] in carried and repeat(items[i]))]
    return order + [(i, False) for i in range(end, len(items))]


def repeats(mistakes: Mistakes, seed: int) -> Callable[[str], bool]:
    """Whether a writer writes a carried line it passes again: a seeded draw per line at ``mistakes.repeat``.

    >>> repeats(Mistakes(repeat=1.0), 0)("- a"), repeats(Mistakes(), 0)("- a")
    (True, False)
    """
    return lambda line: mistakes.repeat > 0 and seeded_unit(seed, "repeat\x00" + line) < mistakes.repeat


def content_lines(text: str) -> list[str]:
    """The lines of ``text`` that carry content: not blank, not a heading, not an empty marker.

    >>> content_lines("## Goal\\n- a\\n\\n### Done\\n- (none)\\n- b")
    ['- a', '- b']
    """
    out = [x.strip() for x in text.split("\n")]
    return [x for x in out if x and not x.startswith("#") and x.lower() not in ("(none)", "- (none)")]


def truth_kept(truth: list[str], summary: str) -> tuple[int, int, int, int]:
    """``(true content lines, of which the summary keeps, the summary's content lines, of which untrue)``.

    >>> truth_kept(["- a", "- b", "- (none)", "### Done"], "## Goal\\n- a\\n- stale")
    (2, 1, 2, 1)

    The exact ledger is left out: a copy of the history, no model's claim.

    >>> truth_kept(["- a"], "## Goal\\n- a\\n\\n## Exact Ledger\\n- m1 ran `ls`\\n")
    (1, 1, 1, 0)
    """
    true = set(content_lines("\n".join(truth)))
    mine = content_lines(strip_ledger(summary) or "")
    return len(true), sum(1 for x in true if x in set(mine)), len(mine), sum(1 for x in mine if x not in true)
