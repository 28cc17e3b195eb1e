"""The exact ledger across compactions and within its budget: merge, rank, fit (pure).

**Merge** (:func:`merge`).  The previous summary's entries come first, then
this history's, in message order.  An entry whose key a later one shares
(:attr:`~sgl_speccompact.result.LedgerEntry.key`: a file
read or changed again, a command run again, the same action, error or
identifier named again) is superseded: the later one takes its place at the
end, the references add up, and it keeps the better provenance of the two
(the agent's own over a tool's; boilerplate only when both are).  A ``path``
or ``command`` identifier that names a file entry's file or a ``ran``
entry's command is one more reference to that entry, not an entry of its own.

**Rank** (:func:`rank`).  Over budget, the ledger keeps what an agent most
likely needs, by provenance first (:func:`tier`), never by how often a tool
printed a string:

0. what the agent did: the commands it ran, the files it wrote, edited or
   deleted, the actions it took and the calls it made (failures and side
   effects first, then the newest);
1. the files it read and the errors it hit (named by a result that shows a
   failure; the newest first: the oldest successful reads go first);
2. the identifiers it wrote in its own calls and commands (the newest first);
3. the identifiers only tool output or a prompt showed, the most specific
   first (:func:`~sgl_speccompact.history.provenance.specificity`: a hash or
   a booking code before ``10 lines``);
4. boilerplate (markup namespaces and DTDs, hex dump and disassembly lines,
   system listings and paths: :mod:`~sgl_speccompact.history.provenance`)
   and a prompt's example commands, the most specific first.

**Fit** (:func:`fit`).  Entries are taken in rank order while their lines fit
the budget (a longer one that does not fit is skipped, a shorter one of the
same tier after it may still fit, nothing of a lower tier does), then shown
in their own order.  What is left out becomes
count lines, one per kind ("+14 more paths under `src`"), with the previous
summary's counts added; the read set (:mod:`~.read_set`) follows them: its
files are taken after what the agent did and before the rest, the newest
first.  The section's exact token count is checked last; while it
is over budget the lowest-ranked shown entries go, then read-set files, so
the budget always holds.  A budget too small for the heading and the counts
gives no section at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from ..history.provenance import CALL, is_noise_value, specificity
from ..result import ACTIONS, CHANGES, EXAMPLE, FILE_KINDS, KINDS, LedgerEntry
from .ledger import HEADING, NOTE, PATH_KINDS, LedgerSection, common_folder, count_line, render

Counter = Callable[[list[str]], list[int]]  # texts -> length in target tokens
MIN_LINE_TOKENS = 4  # no entry line is shorter ("- m1 id `x`"): bounds how many lines are ever counted
SIDE_EFFECT_BONUS = 1.0  # rank bonus of a side effect or a failure within what the agent did (tier 0)
TIERS = 5  # provenance tiers, 0 kept first (module docstring)
MAX_REFITS = 8  # exact re-counts before the section is dropped whole (each removes entries, so it ends sooner)


@dataclass(frozen=True)
class Fitted:
    """A ledger section within its budget."""

    lines: list[str] = field(default_factory=list)  # heading, note, entries, counts, read set; [] if none fits
    shown: list[LedgerEntry] = field(default_factory=list)  # the entries it lists, in order
    counted: dict[str, int] = field(default_factory=dict)  # kind -> entries it only counts
    tokens: int = 0  # its length in target tokens (the section as text, one line each)
    read_lines: int = 0  # read-set files it shows

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
        order[entry.key] = _superseding(old, entry) if old else entry
    return list(order.values())


def _superseding(old: LedgerEntry, new: LedgerEntry) -> LedgerEntry:
    """``new`` in ``old``'s place: references added up, the better provenance of the two kept."""
    source = CALL if CALL in (old.source, new.source) else new.source or old.source
    return replace(new, refs=new.refs + old.refs, source=source, noise=old.noise and new.noise,
                   hit=old.hit or new.hit)


def tier(entry: LedgerEntry) -> int:
    """The entry's provenance tier, 0 kept first (module docstring).

    >>> [tier(LedgerEntry(1, k, v, source=s)) for k, v, s in (("ran", "ls", "call"), ("read", "a.py", "call"),
    ...  ("id", "HAT136", "call"), ("id", "HAT136", "result"), ("url", "http://www.w3.org/1999/xhtml", "result"),
    ...  ("example", "sed -i s/a/b/ f.py", "prompt"))]
    [0, 1, 2, 3, 4, 4]
    """
    if entry.kind in CHANGES or entry.kind in ACTIONS:
        return 0
    if entry.kind in FILE_KINDS or (entry.kind == "error" and (entry.hit or not entry.source)):
        return 1
    if entry.kind == EXAMPLE or entry.noise or (entry.source != CALL and is_noise_value(entry.kind, entry.value)):
        return 4
    return 2 if entry.source == CALL else 3


def rank(entries: list[LedgerEntry]) -> list[int]:
    """Positions of ``entries`` (oldest first), the one to keep first first (see the module docstring).

    >>> es = [LedgerEntry(1, "wrote", "a.py", done=True, source="call"), LedgerEntry(2, "id", "X12", source="call"),
    ...       LedgerEntry(3, "id", "Y12", source="result"), LedgerEntry(4, "read", "b.py", source="call")]
    >>> rank(es)
    [0, 3, 1, 2]
    """
    n = len(entries)

    def score(p: int) -> tuple[int, float, int]:
        e = entries[p]
        t = tier(e)
        if t == 0:
            return -t, (p + 1) / n + SIDE_EFFECT_BONUS * (e.done or e.failed), p
        if t >= 3:
            return -t, specificity(e.kind, e.value), p
        return -t, (p + 1) / n, p

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


def fit(entries: list[LedgerEntry], carried: LedgerSection, budget: int, count: Counter,
        read: list[str] | None = None) -> Fitted:
    """The section listing as much of ``entries`` as ``budget`` target tokens allow (see the module docstring).

    Parameters
    ----------
    entries : list of LedgerEntry
        Merged entries, oldest first (:func:`merge`).
    carried : LedgerSection
        The previous summary's section, for its count lines.
    budget : int
        Target tokens the section may take (heading to its last line).
    count : callable
        Texts -> their lengths in target tokens.
    read : list of str, optional
        The read set's lines, its label first, then its files oldest first (:func:`~.read_set.lines`).
        They come after what the agent did (tier 0) and before everything else: the newest first.

    Returns
    -------
    Fitted
        Its ``tokens`` never exceed ``budget``.
    """
    read = list(read or [])
    if budget <= 0 or not (entries or carried.counts or read):
        return Fitted()
    head = [HEADING, NOTE]
    ranked = rank(entries)[:max(0, budget // MIN_LINE_TOKENS)]
    lines = {p: render(entries[p]) for p in ranked}
    # one tokenizer call: every candidate line, the heading with every count line (the reserve), the read set
    measured = count([lines[p] + "\n" for p in ranked] + ["\n".join(head + count_lines(entries, carried)[0]) + "\n"]
                     + [line + "\n" for line in read])
    sizes = {("e", p): n for p, n in zip(ranked, measured)}
    reserve, read_sizes = measured[len(ranked)], measured[len(ranked) + 1:]
    sizes.update({("r", k): n + (read_sizes[0] if k == len(read) - 1 else 0)  # the newest file brings the label
                  for k, n in enumerate(read_sizes) if k})
    tiers = {("e", p): tier(entries[p]) for p in ranked} | {("r", k): 0.5 for k in range(1, len(read))}
    candidates = sorted([("e", p) for p in ranked] + [("r", k) for k in range(len(read) - 1, 0, -1)],
                        key=lambda c: tiers[c])  # stable: rank order within a tier, the newest file first
    used, chosen, skipped = reserve, [], float("inf")
    for c in candidates:
        if tiers[c] > skipped:
            break  # nothing of a lower tier is shown while one of a higher tier is left out
        if used + sizes[c] <= budget:
            chosen.append(c)
            used += sizes[c]
        else:
            skipped = min(skipped, tiers[c])
    for _ in range(MAX_REFITS):
        fitted = _section(entries, carried, chosen, lines, read, count)
        if fitted.tokens <= budget:
            return fitted
        if not chosen:
            break  # the heading and the counts alone are over budget
        excess, drop = fitted.tokens - budget, 0
        while chosen and drop < excess:  # the lowest-ranked shown lines, until their sizes cover the excess
            drop += sizes[chosen.pop()]
    return Fitted()


def _section(entries: list[LedgerEntry], carried: LedgerSection, chosen: list[tuple[str, int]],
             lines: dict[int, str], read: list[str], count: Counter) -> Fitted:
    """The section showing the chosen entries and read-set files (each in order), counting the other
    entries, measured."""
    shown = sorted(p for kind, p in chosen if kind == "e")
    files = sorted(k for kind, k in chosen if kind == "r")
    keep = set(shown)
    counts, counted = count_lines([e for p, e in enumerate(entries) if p not in keep], carried)
    out = [HEADING, NOTE] + [lines[p] for p in shown] + counts + ([read[0]] + [read[k] for k in files] if files else [])
    text = "".join(line + "\n" for line in out)
    return Fitted(out, [entries[p] for p in shown], counted, count([text])[0], len(files))
