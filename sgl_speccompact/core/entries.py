"""Summary entries: the deletable units of a summary, found and removed (pure).

Entries are list items (with their indented continuation lines and fenced
code blocks) and plain lines under a heading.  Headings, blank lines,
horizontal rules, bare labels ("Done:") and empty markers such as
``(none)`` are structure: never judged, never deleted.  Order is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from ..result import SlotResult
from .prompts import INCOMPLETE

LIST_ITEM = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s+")
FENCE = re.compile(r"^\s*(?:```|~~~)")
RULE = re.compile(r"^\s*(?:[-*_]\s*){3,}$")
# a line that only names what follows: "**Done**", "__Blocked:__", "In Progress:"
LABEL = re.compile(r"^(?:\*\*|__)[^*_]+(?:\*\*|__):?$|^(?:\*\*|__)?[A-Za-z][\w &/()'-]{0,60}:(?:\*\*|__)?$")


@dataclass(frozen=True)
class Entry:
    """One deletable unit of a summary."""

    start: int  # index of its first line in ``summary.split("\\n")``
    end: int  # one past its last line
    text: str  # its lines joined with newlines, verbatim
    section: str  # title of the nearest heading above it ("" before any heading)


def is_structure(line: str, empty_markers: Iterable[str] = ()) -> bool:
    """Whether a line is formatting that is never judged or deleted.

    >>> [is_structure(x, ["(none)"]) for x in ["## Goal", "", "- (none)", "Done:", "- fix a.py"]]
    [True, True, True, True, False]
    """
    s = line.strip()
    if not s or s.startswith("#") or RULE.match(s):
        return True
    markers = {m.lower() for m in (*empty_markers, INCOMPLETE)}
    if s.lower() in markers or LIST_ITEM.sub("", s).lower() in markers:
        return True
    return bool(LABEL.match(s))


def split_entries(summary: str, empty_markers: Iterable[str] = ()) -> list[Entry]:
    """The entries of a summary, in order.

    A list item owns the indented non-item lines after it; a fenced code
    block is one entry (with the item it follows directly, if any); each
    other content line is an entry of its own.

    >>> s = "## Goal\\n- fix a.py\\n  in /repo\\n\\n## Next Steps\\n(none)\\n1. run tests"
    >>> [(e.text, e.section) for e in split_entries(s, ["(none)"])]
    [('- fix a.py\\n  in /repo', 'Goal'), ('1. run tests', 'Next Steps')]
    """
    markers = tuple(empty_markers)
    lines = summary.split("\n")
    spans: list[list] = []  # [start, end, section]
    section, current, fence = "", None, False
    for i, line in enumerate(lines):
        if fence:
            current[1] = i + 1
            fence = not FENCE.match(line)
            continue
        if FENCE.match(line):
            if current is None:  # not directly under an entry: an entry of its own
                current = [i, i + 1, section]
                spans.append(current)
            current[1], fence = i + 1, True
            continue
        if is_structure(line, markers):
            if line.strip().startswith("#"):
                section = line.strip().lstrip("#").strip()
            current = None
            continue
        if current is not None and _continues(line, lines[i - 1]):
            current[1] = i + 1
            continue
        current = [i, i + 1, section]
        spans.append(current)
    return [Entry(a, b, "\n".join(lines[a:b]), sec) for a, b, sec in spans]


def _continues(line: str, previous: str) -> bool:
    """An indented non-item line, or a quote line after a quote line, extends the entry above."""
    if line[:1].isspace() and not LIST_ITEM.match(line):
        return True
    return line.lstrip().startswith(">") and previous.lstrip().startswith(">")


def drop_entries(summary: str, entries: list[Entry], keep: list[bool]) -> str:
    """``summary`` without the entries whose ``keep`` is False (everything else untouched).

    >>> s = "## Goal\\n- a\\n- b\\n"
    >>> drop_entries(s, split_entries(s), [True, False])
    '## Goal\\n- a\\n'
    """
    gone = {i for e, k in zip(entries, keep) if not k for i in range(e.start, e.end)}
    return "\n".join(line for i, line in enumerate(summary.split("\n")) if i not in gone)


def prune_slots(slots: list[SlotResult], lines: list[str], gone: set[int],
                count: Callable[[list[str]], list[int]]) -> list[SlotResult]:
    """Remove from ``slots`` the summary lines whose index is in ``gone``.

    Summary lines are matched to slot lines in order under each ``## Title``
    heading (lines before any heading: the ``Preamble`` or ``Summary``
    slot); slots that lost lines get their token count redone.
    """
    by_title = {s.title: s for s in slots}
    drop: dict[str, set[int]] = {}
    # text before any heading is the section a monolithic summary reports as Preamble / Summary
    current, pos = by_title.get("Preamble") or by_title.get("Summary"), 0
    for i, line in enumerate(lines):
        if line.startswith("## ") and line[3:].strip() in by_title:
            current, pos = by_title[line[3:].strip()], 0
            continue
        if current is None:
            continue
        j = next((k for k in range(pos, len(current.lines)) if current.lines[k].text == line), None)
        if j is None:
            continue
        pos = j + 1
        if i in gone:
            drop.setdefault(current.name, set()).add(j)
    out = []
    for s in slots:
        if s.name in drop:
            kept = [line for k, line in enumerate(s.lines) if k not in drop[s.name]]
            tokens = sum(count([line.text + "\n" for line in kept])) if kept else 0
            s = s.model_copy(update={"lines": kept, "tokens": tokens})
        out.append(s)
    return out
