"""The read set: each file the agent read or changed, its last read, and whether it changed after (pure).

An agent that lost its context reads its files again, whether or not they
changed.  The read set says which it need not: for each file, the message of
its last read and whether a change came after it -- the agent's own edit
(a file tool's ``wrote``/``edited``/``deleted``, an editor command's file),
or a command that writes it
(a redirection, ``sed -i``, ``rm``, ``mv``, ``cp``, ``touch``, ``tee``,
``create``: :func:`~sgl_speccompact.history.actions.command_files`).  Reads
are file tools' ``read`` entries and the files a reader command names
(``cat``, ``head``, ``tail``, ``nl``, ``open``, ``sed -n``).

It is derived from the merged ledger (:func:`read_set`), in the ledger's
order, which is the order of the latest time each thing happened: a
superseded entry moves to its latest place.  A failed read or change
(a non-zero exit, an error) does not count.  Two spellings of one file
(``src/a.py``, ``/repo/src/a.py``) are one file when one ends with the other
at a ``/``.  The section shows the newest :data:`MAX_LINES` of them, one line
each, after the count lines::

    Read set: last read of each file, and whether it changed since.
    - `src/app.py` read m12, unchanged since
    - `src/app_test.py` read m8, changed m15
    - `notes.md` changed m3, not read

Those lines are read back at the next compaction (:func:`~.ledger.parse_read`), so a
session's read set survives the files' own entries leaving the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..history.actions import command_files
from ..history.identifiers import canonical_path
from ..result import CHANGES, LedgerEntry, ReadFile
from .ledger import READ_SET_LABEL, render_read

MAX_LINES = 24  # files the section shows at most (the newest); the result's read_set holds them all


@dataclass
class _File:
    path: str  # as shown
    last_read: int | None  # message of the last read
    changed_at: int | None  # message of the last change after it
    order: int  # when it last happened (position in the fold)


def same_file(a: str, b: str) -> bool:
    """Whether two spellings name one file: equal, or one ends with the other at a ``/``.

    >>> same_file("src/a.py", "/repo/src/a.py"), same_file("./a.py", "a.py"), same_file("a/x.py", "b/x.py")
    (True, True, False)
    """
    a, b = canonical_path(a), canonical_path(b)
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


class _Fold:
    """The read set being built, event by event, files found by their last path component."""

    def __init__(self) -> None:
        self.files: list[_File] = []
        self.by_name: dict[str, list[_File]] = {}
        self.clock = 0

    def find(self, path: str) -> _File | None:
        for f in self.by_name.get(path.rsplit("/", 1)[-1], ()):
            if same_file(f.path, path):
                return f
        return None

    def add(self, path: str) -> _File:
        f = _File(path, None, None, 0)
        self.files.append(f)
        self.by_name.setdefault(path.rsplit("/", 1)[-1], []).append(f)
        return f

    def read(self, path: str, index: int) -> None:
        f = self.find(path) or self.add(path)
        f.path, f.last_read, f.changed_at = path, index, None
        self.clock += 1
        f.order = self.clock

    def change(self, path: str, index: int | None) -> None:
        f = self.find(path) or self.add(path)
        f.changed_at = index if index is not None else -1
        self.clock += 1
        f.order = self.clock


def read_set(entries: list[LedgerEntry], carried: tuple[ReadFile, ...] = ()) -> list[ReadFile]:
    """Every file read or changed, oldest event first: the previous ledger's read set, then ``entries``
    (merged, in the ledger's order: :func:`~.ledger_budget.merge`).

    >>> es = [LedgerEntry(3, "read", "src/a.py", via="open"), LedgerEntry(4, "edited", "/r/src/a.py", done=True),
    ...       LedgerEntry(6, "ran", "cat b.py", exit="0"), LedgerEntry(7, "ran", "cat a.py", exit="1")]
    >>> [(f.path, f.last_read, f.changed_after, f.changed_at) for f in read_set(es)]
    [('src/a.py', 3, True, 4), ('b.py', 6, False, None)]
    """
    fold = _Fold()
    for f in carried:
        if f.last_read is not None:
            fold.read(f.path, f.last_read)
        if f.changed_after or f.last_read is None:
            fold.change(f.path, f.changed_at)
    for e in entries:
        if e.failed:
            continue
        if e.kind == "read":
            fold.read(e.value, e.index)
        elif e.kind in CHANGES:
            fold.change(e.value, e.index)
        elif e.kind == "ran":
            reads, writes = command_files(e.value)
            writes += [e.at] if e.at else []  # an editor command: the file its result showed open
            for path in reads:
                fold.read(path, e.index)
            for path in writes:
                fold.change(path, e.index)
    files = sorted(fold.files, key=lambda f: f.order)
    return [ReadFile(path=f.path, last_read=f.last_read, changed_after=f.changed_at is not None,
                     changed_at=f.changed_at if f.changed_at is not None and f.changed_at >= 0 else None)
            for f in files]


def lines(files: list[ReadFile]) -> list[str]:
    """The section's read set: the label and the newest :data:`MAX_LINES` files, oldest first; [] for none."""
    shown = [render_read(f) for f in files[-MAX_LINES:]]
    return [READ_SET_LABEL, *shown] if shown else []
