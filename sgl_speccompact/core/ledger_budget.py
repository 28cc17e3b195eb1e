"""The exact ledger across compactions and within its budget: merge, rank, fit (pure).

**Merge** (:func:`merge`).  The previous summary's entries come first, then
this history's, in message order.  An entry whose key a later one shares
(:attr:`~sgl_speccompact.history.ledger_entries.LedgerEntry.key`: a file
read or changed again, a command run again, the same action, error or
identifier named again) is superseded: the later one takes its place at the
end, and the references add up.  A ``path`` or ``command`` identifier that
names a file entry's file or a ``ran`` entry's command is one more reference
to that entry, not an entry of its own.

**Rank** (:func:`rank`).  Over budget, the ledger keeps what an agent most
likely needs.  Each entry scores its recency (its position, from 1/n for
the oldest to 1 for the newest), plus 1 for a side effect or a failure
(a file written, an action done, a command that failed), plus 0.5 when more
than one message named it.

**Fit** (:func:`fit`).  Entries are taken in rank order while their lines fit
the budget (a longer one that does not fit is skipped, a shorter one after
it may still fit), then shown in their own order.  What is left out becomes
count lines, one per kind ("+14 more paths under `src`"), with the previous
summary's counts added.  The section's exact token count is checked last;
while it is over budget the lowest-ranked shown entries go, so the budget
always holds.  A budget too small for the heading and the counts gives no
section at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from ..history.ledger_entries import FILE_KINDS, KINDS, LedgerEntry
from .ledger import HEADING, NOTE, PATH_KINDS, LedgerSection, common_folder, count_line, render

Counter = Callable[[list[str]], list[int]]  # texts -> length in target tokens
MIN_LINE_TOKENS = 4  # no entry line is shorter ("- m1 id `x`"): bounds how many lines are ever counted
SIDE_EFFECT_BONUS = 1.0  # rank bonus of a side effect or a failure
REFERENCED_BONUS = 0.5  # rank bonus of an entry more than one message named
MAX_REFITS = 8  # exact re-counts before the section is dropped whole (each removes entries, so it ends sooner)


@dataclass(frozen=True)
class Fitted:
    """A ledger section within its budget."""

    lines: list[str] = field(default_factory=list)  # heading, note, entries, count lines; [] when nothing fits
    shown: list[LedgerEntry] = field(default_factory=list)  # the entries it lists, in order
    counted: dict[str, int] = field(default_factory=dict)  # kind -> entries it only counts
    tokens: int = 0  # its length in target tokens (the section as text, one line each)

    @property
    def text(self) -> str:
        """The section as summary text (one line each, ending in a newline; ``""`` when empty)."""
        return "".join(line + "\n" for line in self.lines)


def merge(carried: tuple[LedgerEntry, ...] | list[LedgerEntry], new: list[LedgerEntry]) -> list[LedgerEntry]:
    """``carried`` then ``new``, each key once, at its latest place, references added up.

    >>> old = [LedgerEntry(3, "ran", "pytest", exit="1", carried=True), LedgerEntry(4, "id", "HAT136", carried=True)]
    >>> new = [LedgerEntry(2, "ran", "pytest", exit="0"), LedgerEntry(5, "path", "pytest")]
    >>> [(e.index, e.value, e.exit, e.refs, e.carried) for e in merge(old, new)]
    [(4, 'HAT136', '', 1, True), (2, 'pytest', '0', 2, False), (5, 'pytest', '', 1, False)]
    """
    order: dict[tuple, LedgerEntry] = {}
    named: dict[tuple[str, str], tuple] = {}  # (path|command, value) -> key of the file or ran entry for it
    for entry in (*carried, *new):
        alias = ("path" if entry.kind in FILE_KINDS else "command" if entry.kind == "ran" else None, entry.value)
        target = named.get((entry.kind, entry.value))
        if target is not None and target in order:  # a mention of a listed file or command
            order[target] = replace(order[target], refs=order[target].refs + entry.refs)
            continue
        old = order.pop(entry.key, None)
        if alias[0] is not None:
            mention = order.pop((alias[0], entry.value), None)  # named before it was touched: now a reference
            entry = replace(entry, refs=entry.refs + (mention.refs if mention else 0))
            named[alias] = entry.key
        order[entry.key] = replace(entry, refs=entry.refs + old.refs) if old else entry
    return list(order.values())


def rank(entries: list[LedgerEntry]) -> list[int]:
    """Positions of ``entries`` (oldest first), the one to keep first first (see the module docstring).

    >>> es = [LedgerEntry(1, "wrote", "a.py", done=True), LedgerEntry(2, "id", "X12"), LedgerEntry(3, "id", "Y12")]
    >>> rank(es)
    [0, 2, 1]
    """
    n = len(entries)

    def score(p: int) -> tuple[float, int]:
        e = entries[p]
        bonus = SIDE_EFFECT_BONUS * (e.done or e.failed) + REFERENCED_BONUS * (e.refs > 1)
        return (p + 1) / n + bonus, p

    return sorted(range(n), key=score, reverse=True)


def count_lines(left: list[LedgerEntry], carried: LedgerSection) -> tuple[list[str], dict[str, int]]:
    """The count lines standing for ``left`` (and the previous summary's counts), one per kind in kind order."""
    by_kind: dict[str, list[LedgerEntry]] = {}
    for e in left:
        by_kind.setdefault(e.kind, []).append(e)
    lines, counted = [], {}
    for kind in KINDS:
        n = len(by_kind.get(kind, ())) + carried.counts.get(kind, 0)
        if not n:
            continue
        folders = [e.value for e in by_kind.get(kind, ())] + ([carried.prefixes[kind] + "/"]
                                                             if carried.prefixes.get(kind) else [])
        prefix = common_folder(folders) if kind in PATH_KINDS and (kind not in carried.counts
                                                                   or carried.prefixes.get(kind)) else ""
        lines.append(count_line(kind, n, prefix))
        counted[kind] = n
    return lines, counted


def fit(entries: list[LedgerEntry], carried: LedgerSection, budget: int, count: Counter) -> Fitted:
    """The section listing as much of ``entries`` as ``budget`` target tokens allow (see the module docstring).

    Parameters
    ----------
    entries : list of LedgerEntry
        Merged entries, oldest first (:func:`merge`).
    carried : LedgerSection
        The previous summary's section, for its count lines.
    budget : int
        Target tokens the section may take (heading to last count line).
    count : callable
        Texts -> their lengths in target tokens.

    Returns
    -------
    Fitted
        Its ``tokens`` never exceed ``budget``.
    """
    if budget <= 0 or not (entries or carried.counts):
        return Fitted()
    head = [HEADING, NOTE]
    ranked = rank(entries)[:max(0, budget // MIN_LINE_TOKENS)]
    lines = {p: render(entries[p]) for p in ranked}
    # one tokenizer call: every candidate line, then the heading with every count line (the reserve)
    *measured, reserve = count([lines[p] + "\n" for p in ranked] + ["\n".join(head + count_lines(entries, carried)[0])
                                                                     + "\n"])
    sizes = dict(zip(ranked, measured))
    used, shown = reserve, []
    for p in ranked:
        if used + sizes[p] <= budget:
            shown.append(p)
            used += sizes[p]
    for _ in range(MAX_REFITS):
        fitted = _section(entries, carried, sorted(shown), lines, count)
        if fitted.tokens <= budget:
            return fitted
        if not shown:
            break  # the heading and the counts alone are over budget
        excess, drop = fitted.tokens - budget, 0
        while shown and drop < excess:  # the lowest-ranked shown entries, until their lines cover the excess
            drop += sizes[shown.pop()]
    return Fitted()


def _section(entries: list[LedgerEntry], carried: LedgerSection, shown: list[int], lines: dict[int, str],
             count: Counter) -> Fitted:
    """The section showing the entries at ``shown`` (in order) and counting the rest, measured."""
    keep = set(shown)
    counts, counted = count_lines([e for p, e in enumerate(entries) if p not in keep], carried)
    out = [HEADING, NOTE] + [lines[p] for p in shown] + counts
    text = "".join(line + "\n" for line in out)
    return Fitted(out, [entries[p] for p in shown], counted, count([text])[0])
