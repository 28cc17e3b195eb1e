"""Line checks and slot budgets (pure).

These are the "Checks and termination" rules of the SpecCompact paper's
"Efficient Slot-Parallel Execution" section:

- a line duplicating an accepted line, or longer than the character limit,
  goes straight to repair (no judge call); duplicates are compared without
  their list markers and numbering (``1. X`` repeats ``2. X`` and ``- X``);
- a ``#`` or ``##`` heading would duplicate the summary's own section
  headings and goes to repair as a duplicate;
- the slot contract's own sub-section headings (``### Done`` for Progress:
  :func:`contract_heading`) and empty-slot markers such as ``(none)`` are
  accepted without a judge call; blank lines are kept as formatting.  Any
  other heading is a claim like any line (``### Deleted the prod database``)
  and is judged;
- a slot stops when a proposed addition would exceed its line or token budget,
  or its small budget of blank lines (``max_blank_lines_per_slot``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Callable, Iterable

from ..config import CompactConfig
from ..result import StopReason


class LineKind(str, Enum):
    """What the checks decide about a proposed line."""

    BLANK = "blank"  # kept as formatting, never judged
    DUPLICATE = "duplicate"  # same as an accepted line -> repair
    TOO_LONG = "too_long"  # over max_line_chars -> repair
    UNJUDGED = "unjudged"  # the slot contract's own heading, or an empty marker -> accept without judge
    PLACEHOLDER = "placeholder"  # template text copied from a slot's body format -> repair
    JUDGE = "judge"  # needs the target's verdict


# a level-1/2 heading: the summary's own section headings are "## <slot title>"
_SECTION_HEADING = re.compile(r"#{1,2}(?!#)")


# a list marker or a number opening a line: "- ", "* ", "+ ", "1. ", "12) ", "(3) " (repeated: "- 1. x")
_LIST_MARKER = re.compile(r"^(?:[-*+\u2022]\s+|\(?\d+[.)]\s+)+")


def _fold(text: str) -> str:
    """Whitespace collapsed, lower case."""
    return " ".join(text.split()).lower()


def norm_line(line: str) -> str:
    """A line as the duplicate check compares it: without its list marker or number, whitespace
    collapsed, lower case.  A model looping on one item numbers it anew each time ("1. X", "2. X"):
    those are one line.  Checkboxes stay (``- [x] a`` is done, ``- [ ] a`` is not).

    >>> norm_line("  - Fix   Bug "), norm_line("2. fix bug"), norm_line("3) - Fix bug")
    ('fix bug', 'fix bug', 'fix bug')
    >>> norm_line("- [x] ran it"), norm_line("1."), norm_line("### Done")
    ('[x] ran it', '1.', '### done')
    """
    folded = _fold(line)
    bare = _LIST_MARKER.sub("", folded + " ").strip()
    return bare or folded


_norm = _fold  # placeholders are compared as written: "[First next step]" holds no list marker


def contract_heading(line: str, sections: tuple[str, ...]) -> str | None:
    """The slot contract's own ``### <section>`` line, in the schema's words, if ``line`` is one.

    >>> contract_heading("###  in progress", ("Done", "In Progress")), contract_heading("### IGNORE ALL", ("Done",))
    ('### In Progress', None)
    """
    s = line.strip()
    if not s.startswith("### ") or s.startswith("####"):
        return None
    title = s[3:].strip().lower()
    found = next((x for x in sections if x.lower() == title), None)
    return f"### {found}" if found is not None else None


def is_heading(line: str) -> bool:
    """Whether ``line`` is a markdown heading.

    >>> is_heading("  ### Done"), is_heading("- # not one")
    (True, False)
    """
    return line.strip().startswith("#")


def classify_line(line: str, accepted: list[str] | tuple[str, ...], cfg: CompactConfig,
                  placeholders: frozenset[str] = frozenset(), sections: tuple[str, ...] = ()) -> LineKind:
    """Apply the paper's checks, in its order, to one proposed line; then ours: a line holding one
    of the schema's ``placeholders`` (:func:`placeholder_texts`) is template text, not content.

    Only the slot contract's own sub-section headings (``sections``: the
    slot's ``### <section>`` lines) pass without a judge call; any other
    heading says something, and is judged as a line is.

    >>> cfg = CompactConfig()
    >>> classify_line("- fix bug", ["- fix bug"], cfg).value, classify_line("2. X", ["1. X"], cfg).value
    ('duplicate', 'duplicate')
    >>> classify_line("### Done", [], cfg, sections=("Done",)).value, classify_line("(none)", [], cfg).value
    ('unjudged', 'unjudged')
    >>> classify_line("### Deleted the prod database", [], cfg, sections=("Done",)).value
    'judge'
    >>> classify_line("- read config.py", [], cfg).value
    'judge'
    >>> classify_line("## Next Steps", [], cfg).value  # a slot heading inside a slot
    'duplicate'
    >>> classify_line("1. [First next step]", [], cfg, placeholder_texts(("1. [First next step]",))).value
    'placeholder'
    """
    if not line.strip():
        return LineKind.BLANK
    if norm_line(line) in {norm_line(a) for a in accepted if a.strip()}:
        return LineKind.DUPLICATE
    if len(line) > cfg.max_line_chars:
        return LineKind.TOO_LONG
    stripped = line.strip()
    if _SECTION_HEADING.match(stripped):  # would open a second "## <title>" section: repair it
        return LineKind.DUPLICATE
    if contract_heading(line, sections) or stripped.lower() in {m.lower() for m in cfg.empty_markers}:
        return LineKind.UNJUDGED
    return LineKind.PLACEHOLDER if is_placeholder(line, placeholders) else LineKind.JUDGE


_BRACKETED = re.compile(r"\[([^\[\]]+)\]")  # "[First next step]": a body format's stand-in for content


@lru_cache(maxsize=64)
def placeholder_texts(body_formats: tuple[str, ...]) -> frozenset[str]:
    """The bracketed stand-ins of slot body formats (normalized), checkboxes left out.

    >>> sorted(placeholder_texts(("1. [First next step]", "- [x] [Completed task/change]")))
    ['completed task/change', 'first next step']
    """
    found = {_norm(t) for fmt in body_formats for t in _BRACKETED.findall(fmt)}
    return frozenset(t for t in found if len(t) > 1)  # "[x]", "[ ]": a checkbox, not a stand-in


def is_placeholder(line: str, texts: frozenset[str]) -> bool:
    """Whether ``line`` holds a stand-in of a slot's body format: template text, not content.

    >>> texts = placeholder_texts(("1. [First next step]\\n2. [Second next step]",))
    >>> is_placeholder("2. [Second next step]", texts), is_placeholder("1. [first  NEXT step] now", texts)
    (True, True)
    >>> is_placeholder("1. run [tests/test_a.py]", texts), is_placeholder("- [x] fix a.py", texts)
    (False, False)
    """
    return any(_norm(t) in texts for t in _BRACKETED.findall(line))


# every character a reader may take for a line end (``str.splitlines``'s set): CR LF, LF, CR,
# VT, FF, FS, GS, RS, NEL, U+2028, U+2029.  A line holding one would read as two lines there
LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def split_breaks(text: str) -> list[str]:
    """``text`` cut at every line break a reader may see, like ``str.split("\\n")``: a text
    ending in a break ends with ``""``.

    >>> split_breaks("- a\\r\\n- b\\u2028## Next Steps\\x85c\\x0bd\\x0c")
    ['- a', '- b', '## Next Steps', 'c', 'd', '']
    >>> split_breaks("- a"), has_break("- a\\u2029b"), has_break("- a")
    (['- a'], True, False)
    """
    return LINE_BREAK.split(text)


def has_break(text: str) -> bool:
    """Whether ``text`` holds any line break :func:`split_breaks` cuts at."""
    return LINE_BREAK.search(text) is not None


def split_draft(text: str, finished: bool) -> tuple[list[str], bool]:
    """Split one draft completion into complete lines.

    Returns ``(lines, truncated_tail)``.  When the draft hit its token limit
    (``finished=False``) the text after the last newline is an incomplete line
    and is dropped; if no newline exists at all, the whole text is returned as
    one line flagged ``truncated_tail=True`` (too long for one request).

    >>> split_draft("- a\\n- b\\n- c", finished=False)
    (['- a', '- b'], False)
    >>> split_draft("- a\\n- b", finished=True)
    (['- a', '- b'], False)
    >>> split_draft("- a very long line with no end", finished=False)
    (['- a very long line with no end'], True)
    >>> split_draft("- a\\u2028## Next Steps", finished=True)  # every line break, not only LF
    (['- a', '## Next Steps'], False)
    """
    parts = split_breaks(text)
    if finished:
        while parts and not parts[-1].strip():
            parts.pop()
        return parts, False
    if len(parts) == 1:
        return ([parts[0]] if parts[0].strip() else []), bool(parts[0].strip())
    return parts[:-1], False


def split_line(text: str, finish_reason: dict | None) -> tuple[list[str], bool, bool]:
    """Read a one-line request (``stop="\\n"``) from its ``meta_info.finish_reason``.

    Returns ``(lines, ended, truncated)``.  sglang reports which stop
    matched: ``"\\n"`` means a complete line, possibly blank (a paragraph
    break, not the end); an EOS id means the answer ended, after any text;
    ``length`` means the line was cut off by the token limit.

    >>> split_line("", {"type": "stop", "matched": "\\n"})
    ([''], False, False)
    >>> split_line("", {"type": "stop", "matched": 151645}), split_line("- a", {"type": "stop", "matched": 2})
    (([], True, False), (['- a'], True, False))
    >>> split_line("- a very long li", {"type": "length", "length": 64})
    (['- a very long li'], False, True)

    A backend that ignored the stop returns several lines: each is a line
    of its own, the answer's end read as :func:`split_draft` reads a draft.

    >>> split_line("- goal\\n## Next Steps\\n1. x", {"type": "stop", "matched": 2})
    (['- goal', '## Next Steps', '1. x'], True, False)
    >>> split_line("- goal\\n- half a li", {"type": "length"})
    (['- goal'], False, False)
    """
    reason = finish_reason or {}
    if has_break(text):
        ended = reason.get("type") != "length"
        lines, truncated = split_draft(text, ended)
        return lines, ended and reason.get("matched") != "\n", truncated
    if reason.get("type") == "length":
        return ([text] if text.strip() else []), False, bool(text.strip())
    if reason.get("matched") == "\n":
        return [text], False, False
    return ([text] if text.strip() else []), True, False


@dataclass(frozen=True)
class RepairLine:
    """What a target repair gave, read from its text and ``finish_reason``."""

    line: str | None  # the next line ("" is a paragraph break); None if the answer ended
    ended: bool  # the answer ended after ``line``
    truncated: bool  # cut off by the token limit: not a line, never stored


def read_repair(text: str, finish_reason: dict | None) -> RepairLine:
    """Read a repair: the first line of ``text``, told apart by the stop that matched.

    Works with and without line-aware stopping (then the text may hold
    several lines, and only the first counts).

    >>> read_repair("- a", {"type": "stop", "matched": "\\n"})
    RepairLine(line='- a', ended=False, truncated=False)
    >>> read_repair("", {"type": "stop", "matched": "\\n"}).line, read_repair("", {"type": "stop", "matched": 2}).line
    ('', None)
    >>> read_repair("- a\\n- b", {"type": "length"}), read_repair("- a lo", {"type": "length"}).truncated
    (RepairLine(line='- a', ended=False, truncated=False), True)
    >>> read_repair("- last", {"type": "stop", "matched": 151645})
    RepairLine(line='- last', ended=True, truncated=False)

    A replacement that opens with line breaks and has text after them keeps
    the text (the first non-blank line); one with only breaks is a blank line.

    >>> read_repair("\\n- a\\n", {"type": "length"}).line, read_repair("\\u2028", {"type": "length"}).line
    ('- a', '')
    """
    if has_break(text):
        parts = split_breaks(text)
        real = [p for p in parts[:-1] if p.strip()]
        if real:
            return RepairLine(real[0], False, False)
        if parts[-1].strip():  # breaks, then one line: read as if the breaks were not there
            return read_repair(parts[-1], finish_reason)
        return RepairLine("", False, False)
    reason = finish_reason or {}
    if reason.get("type") == "length":
        return RepairLine(None, False, True)
    if reason.get("matched") == "\n":
        return RepairLine(text, False, False)
    return RepairLine(text if text.strip() else None, True, False)


def empty_repair(line: str, accepted: list[str] | tuple[str, ...], after_blank_repair: bool) -> bool:
    """Whether a repaired ``line`` is empty: the slot stops and keeps its accepted prefix.

    A blank repair is a paragraph break, kept while a real line may follow
    (blank lines at a slot's ends are dropped when it stops), also at the
    slot's start.  It is empty when the slot's previous repair was blank
    too with no real line accepted since (``after_blank_repair``: two in a
    row), or when the slot already ends with a blank line.

    >>> empty_repair("", ["- a"], False), empty_repair("", ["- a"], True), empty_repair("", ["- a", ""], False)
    (False, True, True)
    >>> empty_repair("", [], False), empty_repair("", [], True), empty_repair("- b", ["- a"], True)
    (False, True, False)
    """
    if line.strip():
        return False
    return after_blank_repair or bool(accepted and not accepted[-1].strip())


def drop_blank_ends(lines: list) -> list:
    """Remove the blank lines at either end of ``lines`` (items with a ``text``), in place; returns them.

    A blank line is formatting between real lines, never a slot's first or last line.

    >>> from types import SimpleNamespace as L
    >>> lines = [L(text=""), L(text="- a"), L(text=""), L(text="- b"), L(text=" ")]
    >>> [x.text for x in drop_blank_ends(lines)], [x.text for x in lines]
    ([' ', ''], ['- a', '', '- b'])
    """
    dropped = []
    for end in (-1, 0):
        while lines and not lines[end].text.strip():
            dropped.append(lines.pop(end))
    return dropped


@dataclass(frozen=True)
class Used:
    """What a slot's lines use of its budget."""

    lines: int = 0  # non-blank lines
    tokens: int = 0  # tokens, blank lines included (target tokens)
    blanks: int = 0  # blank lines

    @classmethod
    def of(cls, lines: Iterable[str], tokens: Callable[[str], int]) -> "Used":
        """What ``lines`` use, ``tokens`` giving each line's target tokens (with its newline).

        >>> Used.of(["- a", "", "- b"], len)
        Used(lines=2, tokens=6, blanks=1)
        """
        lines = list(lines)
        blanks = sum(not x.strip() for x in lines)
        return cls(len(lines) - blanks, sum(tokens(x) for x in lines), blanks)


@dataclass(frozen=True)
class SlotBudget:
    """A slot's limits."""

    max_lines: int  # non-blank lines allowed (lines)
    max_tokens: int  # tokens allowed, blank lines included (target tokens)
    max_blank: int = 4  # blank lines allowed (paragraph breaks; lines)

    def check(self, used: Used, line: str, tokens: int) -> StopReason | None:
        """Which limit adding ``line`` (``tokens`` long) to what is ``used`` would break, if any.

        >>> b = SlotBudget(max_lines=1, max_tokens=10, max_blank=1)
        >>> [x and x.value for x in (b.check(Used(), "- a", 4), b.check(Used(1, 4), "- b", 1),
        ...                          b.check(Used(1, 4), "", 1), b.check(Used(1, 4), "", 7),
        ...                          b.check(Used(1, 5, 1), "", 1))]
        [None, 'line_budget', None, 'token_budget', 'blank_budget']
        """
        if line.strip() and used.lines + 1 > self.max_lines:
            return StopReason.LINE_BUDGET
        if not line.strip() and used.blanks + 1 > self.max_blank:
            return StopReason.BLANK_BUDGET
        if used.tokens + tokens > self.max_tokens:
            return StopReason.TOKEN_BUDGET
        return None
