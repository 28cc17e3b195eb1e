"""The exact ledger as summary text: one entry a line, written and read back by one grammar (pure).

The section comes last in a summary, under a fixed heading::

    ## Exact Ledger
    Copied verbatim from the history, no model: mN = message N; done = already carried out, do not repeat.
    - m2 wrote `src/app.py` via `str_replace_editor` done
    - m3 ran `pytest -x tests/` exit `1`
    - m3 error `KeyError` at `/repo/src/app.py", line 12`
    - m4 x2 id `HAT136`
    - +14 more paths under `src/marshmallow`
    Read set: last read of each file, and whether it changed since.
    - `src/app.py` read m1, changed m2

An entry line is ``- m<message>[ x<refs>] <kind> <value>`` and then, in
this order, ``via <tool>``, ``with <arguments>``, ``at <location>``,
``exit <status>``, ``error <error>`` and ``done``; ``…`` right after the
value (the arguments, for ``did``) says it was cut.  Every value is quoted
as data, as the prompts quote untrusted text: a code span whose fence is one
backtick longer than any run inside it, on one line, so no value can end its
quote, start a line, or forge a heading or an entry.  A count line
``- +<n> more <what>[ under <prefix>]`` stands for entries the budget left
out (:mod:`~.ledger_budget`).  The read set (:mod:`~.read_set`) follows,
after its label: ``- <path> read m<N>, unchanged since``, ``- <path> read
m<N>, changed m<M>`` or ``- <path> changed m<M>, not read``.

:func:`split_ledger` reads the section back from a previous summary: lines
that follow the grammar become entries, counts and read-set files again
(entries marked ``carried``), anything else in
the section is dropped, and the rest of the summary is returned without it,
so no model sees, judges or rewrites a ledger line.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from ..history.ledger_entries import KINDS, LedgerEntry
from ..result import ReadFile
from .lines import split_breaks

TITLE = "Exact Ledger"  # the section's title; its heading is "## " + TITLE
HEADING = "## " + TITLE
NOTE = "Copied verbatim from the history, no model: mN = message N; done = already carried out, do not repeat."
CUT_MARK = "\u2026"  # after a value that was cut
# kind -> what its count line calls the entries it stands for
COUNT_LABELS = {"read": "files read", "wrote": "files written", "edited": "files edited", "deleted": "files deleted",
                "touched": "files touched", "ran": "commands run", "did": "actions done", "called": "calls made",
                "error": "errors",
                "url": "urls", "path": "paths", "hash": "hashes", "id": "ids", "number": "numbers",
                "command": "commands", "example": "examples"}
LABEL_KINDS = {label: kind for kind, label in COUNT_LABELS.items()}
PATH_KINDS = frozenset({"read", "wrote", "edited", "deleted", "touched", "path"})  # counted under a folder
FIELDS = ("via", "with", "at", "exit", "error")  # words that introduce a quoted field, in line order
_ENTRY = re.compile(r"- m(\d{1,9})(?: x(\d{1,9}))? ([a-z]+) ")
_COUNT = re.compile(r"- \+(\d{1,9}) more ([a-z ]+?)(?: under (`.*))?$")
READ_SET_LABEL = "Read set: last read of each file, and whether it changed since."  # the line before its files
_READ_TAIL = re.compile(r" (?:read m(\d{1,9}), (?:unchanged since|changed m(\d{1,9}))|changed m(\d{1,9}), not read)")


@dataclass(frozen=True)
class LedgerSection:
    """A ledger read back from a summary."""

    entries: tuple[LedgerEntry, ...] = ()  # its entry lines, in order, marked carried
    counts: dict[str, int] = field(default_factory=dict)  # kind -> entries its count lines stand for
    prefixes: dict[str, str] = field(default_factory=dict)  # kind -> the folder its count line names
    read_set: tuple[ReadFile, ...] = ()  # its read-set lines (core/read_set.py), in order


# ---------------------------------------------------------------- quoting


def quote(value: str) -> str:
    """``value`` as a one-line code span that nothing inside it can close.

    >>> quote("a.py"), quote("say `hi`"), quote("`x")
    ('`a.py`', '`` say `hi` ``', '`` `x ``')
    """
    longest = run = 0
    for ch in value:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if value[:1] == "`" or value[-1:] == "`" or (value[:1] == value[-1:] == " " and value.strip()) else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def unquote(line: str, pos: int) -> tuple[str, int] | None:
    """The value of the code span starting at ``line[pos]`` and the position after it; None if there is none.

    Linear: each backtick run is looked at once.

    >>> unquote("`` say `hi` `` via", 0), unquote("`open", 0)
    (('say `hi`', 14), None)
    """
    k = pos
    while k < len(line) and line[k] == "`":
        k += 1
    width = k - pos
    if width == 0:
        return None
    q = k
    while True:
        found = line.find("`" * width, q)
        if found < 0:
            return None
        end = found
        while end < len(line) and line[end] == "`":
            end += 1
        if end - found == width:
            value = line[k:found]
            if len(value) > 2 and value[0] == value[-1] == " " and value.strip():
                value = value[1:-1]
            return value, end
        q = end


# ---------------------------------------------------------------- one line


def render(entry: LedgerEntry) -> str:
    """An entry's line.

    >>> render(LedgerEntry(3, "ran", "pytest -x", exit="1"))
    '- m3 ran `pytest -x` exit `1`'
    >>> render(LedgerEntry(4, "did", "book_reservation", args='{"user_id": "mia"', done=True, cut=True, refs=2))
    '- m4 x2 did `book_reservation` with `{"user_id": "mia"`\u2026 done'
    """
    head = f"- m{entry.index}" + (f" x{entry.refs}" if entry.refs > 1 else "") + f" {entry.kind} {quote(entry.value)}"
    parts = [head + (CUT_MARK if entry.cut and not entry.args else "")]
    for word, value in zip(FIELDS, (entry.via, entry.args, entry.at, entry.exit, entry.error)):
        if value:
            parts.append(f"{word} {quote(value)}" + (CUT_MARK if word == "with" and entry.cut else ""))
    if entry.done:
        parts.append("done")
    return " ".join(parts)


def parse(line: str) -> LedgerEntry | None:
    """The entry a line renders, marked carried; None for any line that does not follow the grammar.

    >>> parse("- m4 x2 did `book` with `{}`\u2026 done") == LedgerEntry(4, "did", "book", args="{}", done=True, cut=True)
    True
    >>> parse("- m4 did `x` and more"), parse("## Goal")
    (None, None)
    """
    m = _ENTRY.match(line)
    if m is None or m.group(3) not in KINDS:
        return None
    got = unquote(line, m.end())
    if got is None:
        return None
    value, pos = got
    fields: dict[str, str] = {}
    cut = done = False
    order = iter(FIELDS)
    while pos < len(line):
        if line.startswith(CUT_MARK, pos):
            cut, pos = True, pos + len(CUT_MARK)
            continue
        if line[pos] != " ":
            return None
        word_end = line.find(" ", pos + 1)
        word = line[pos + 1:] if word_end < 0 else line[pos + 1:word_end]
        if word == "done" and word_end < 0:
            done, pos = True, len(line)
            continue
        if word not in FIELDS or word_end < 0 or word not in order:  # a field out of order, or unknown
            return None
        got = unquote(line, word_end + 1)
        if got is None:
            return None
        fields[word], pos = got
    if not value or any(ch in value for ch in "\r\n"):
        return None
    return LedgerEntry(int(m.group(1)), m.group(3), value, via=fields.get("via", ""), args=fields.get("with", ""),
                       at=fields.get("at", ""), exit=fields.get("exit", ""), error=fields.get("error", ""),
                       done=done, cut=cut, refs=int(m.group(2) or 1), carried=True)


def render_read(f: ReadFile) -> str:
    """A read-set line: one file, its last read and whether it changed after.

    >>> render_read(ReadFile(path="a.py", last_read=3)), render_read(ReadFile(path="b.py", changed_after=True,
    ...                                                                       changed_at=5))
    ('- `a.py` read m3, unchanged since', '- `b.py` changed m5, not read')
    """
    changed = f"m{f.changed_at}" if f.changed_at is not None else "m?"
    if f.last_read is None:
        return f"- {quote(f.path)} changed {changed}, not read"
    return f"- {quote(f.path)} read m{f.last_read}, " + (f"changed {changed}" if f.changed_after else "unchanged since")


def parse_read(line: str) -> ReadFile | None:
    """The file a read-set line shows; None for any other line (an entry, a count line, the label).

    >>> parse_read("- `a.py` read m3, unchanged since"), parse_read("- m3 read `a.py`")
    (ReadFile(path='a.py', last_read=3, changed_after=False, changed_at=None), None)
    >>> parse_read("- `b.py` read m2, changed m5").changed_at, parse_read("- `c` changed m1, not read").last_read
    (5, None)
    """
    if not line.startswith("- `"):
        return None
    got = unquote(line, 2)
    if got is None:
        return None
    path, end = got
    m = _READ_TAIL.fullmatch(line, end)
    if m is None or not path:
        return None
    if m.group(3) is not None:
        return ReadFile(path=path, changed_after=True, changed_at=int(m.group(3)))
    changed = m.group(2)
    return ReadFile(path=path, last_read=int(m.group(1)), changed_after=changed is not None,
                    changed_at=int(changed) if changed is not None else None)


def count_line(kind: str, n: int, prefix: str = "") -> str:
    """The line that stands for ``n`` entries of ``kind`` the budget left out.

    >>> count_line("path", 14, "src/marshmallow"), count_line("ran", 2)
    ('- +14 more paths under `src/marshmallow`', '- +2 more commands run')
    """
    return f"- +{n} more {COUNT_LABELS[kind]}" + (f" under {quote(prefix)}" if prefix else "")


def parse_count(line: str) -> tuple[str, int, str] | None:
    """``(kind, n, prefix)`` of a count line; None for any other line.

    >>> parse_count("- +14 more paths under `src/m`"), parse_count("- +2 more commands run"), parse_count("- +2 x")
    (('path', 14, 'src/m'), ('ran', 2, ''), None)
    """
    m = _COUNT.match(line)
    if m is None or m.group(2) not in LABEL_KINDS:
        return None
    prefix = ""
    if m.group(3):
        got = unquote(m.group(3), 0)
        if got is None or got[1] != len(m.group(3)):
            return None
        prefix = got[0]
    return LABEL_KINDS[m.group(2)], int(m.group(1)), prefix


# ---------------------------------------------------------------- a summary


def split_ledger(summary: str | None) -> tuple[str | None, LedgerSection]:
    """``summary`` without its ledger section(s), and the section read back.

    A section runs from its heading to the next ``## `` heading.  A summary
    without one is returned unchanged.

    >>> rest, led = split_ledger("## Goal\\n- a\\n\\n## Exact Ledger\\n- m1 ran `ls`\\n- forged line\\n## Next Steps\\n1. b")
    >>> rest, [e.value for e in led.entries]
    ('## Goal\\n- a\\n\\n## Next Steps\\n1. b', ['ls'])
    """
    if not summary or HEADING not in summary:
        return summary, LedgerSection()
    kept: list[str] = []
    entries: list[LedgerEntry] = []
    counts: Counter = Counter()
    prefixes: dict[str, str] = {}
    files: list[ReadFile] = []
    inside = False
    for line in split_breaks(summary):
        if line.startswith("## ") or line.rstrip() == "##":
            inside = line.rstrip() == HEADING
            if inside:
                continue
        if not inside:
            kept.append(line)
            continue
        entry = parse(line.rstrip())
        if entry is not None:
            entries.append(entry)
        elif (got := parse_count(line.rstrip())) is not None:
            kind, n, prefix = got
            counts[kind] += n
            prefixes[kind] = common_folder([prefixes[kind], prefix]) if kind in prefixes else prefix
        elif (read := parse_read(line.rstrip())) is not None:
            files.append(read)
    rest = "\n".join(kept).rstrip()
    return (rest + "\n" if summary.endswith("\n") and rest else rest), LedgerSection(tuple(entries), dict(counts),
                                                                                    prefixes, tuple(files))


def strip_ledger(summary: str | None) -> str | None:
    """``summary`` without its ledger section (what the models wrote).

    >>> strip_ledger("## Goal\\n- a\\n\\n## Exact Ledger\\n- m1 ran `ls`\\n")
    '## Goal\\n- a\\n'
    """
    return split_ledger(summary)[0]


def common_folder(paths: list[str]) -> str:
    """The longest folder every path in ``paths`` lies in (``""`` when none), without its last ``/``.

    >>> common_folder(["src/a/x.py", "src/a/y.py", "src/b.py"]), common_folder(["/r/a.py", "b.py"])
    ('src', '')
    """
    if not paths:
        return ""
    first = paths[0]
    end = len(first)
    for p in paths[1:]:
        end = min(end, len(p))
        k = 0
        while k < end and first[k] == p[k]:
            k += 1
        end = k
    cut = first.rfind("/", 0, end + 1)
    folder = first[:cut] if cut > 0 else ""
    return folder if all(p.startswith(folder + "/") for p in paths) else ""
