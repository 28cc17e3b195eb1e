r"""Many regexes over one text in one scan: which of them can match it at all, and where matches can start.

Redaction runs some 80 patterns over every text of a history, and the
identifier extractor six more; each ``re`` pass visits every position of
the text.  hyperscan (an optional dependency: the ``fast`` extra) scans a
text once for a whole set of patterns, so the exact ``re`` patterns run only
on the texts, or from the positions, that it flags.  Without hyperscan
every caller runs its ``re`` patterns as before: the same output, slower.

A prefilter may flag too much, never too little.  hyperscan does not speak
Python's regex dialect (Unicode classes, case folding, look-arounds), so a
pattern is not handed to it as written: :func:`superset_expression`
rewrites it into one that matches wherever the Python pattern does, on
:func:`view` of the text:

* every character is one byte: ASCII as it is, any other ``0x80`` if
  Python's ``\w`` matches it, else ``0x81``;
* a one-character item (a literal, a class, ``.``, ``\d``...) becomes the
  explicit set of the ASCII bytes Python's own compiled item matches (so
  ``\s`` keeps ``\x1c``-``\x1f`` and case folding is Python's), plus
  ``0x80`` and ``0x81`` unless it provably matches no non-ASCII character
  (a case-blind ``k`` also matches the Kelvin sign);
* look-arounds, anchors and word boundaries are dropped, possessive and lazy
  repeats become greedy, a back-reference matches anything: each of these
  only widens what matches;
* except the last positive look-behind at the top of the pattern: the text
  before it must match it, and the rest of the pattern follows, so the
  expression is the look-behind's content and then the rest (what came
  before it is dropped).  This keeps ``SECRET_KEY = ...`` (a name that
  *ends* with ``key``) from flagging every assignment.

>>> import re
>>> superset_expression(re.compile(r"(?i)(?<![a-z])ok\b"))
'[\\x4f\\x6f][\\x4b\\x6b\\x80-\\x81]'
>>> view("naïve → ok")
b'na\x80ve \x81 ok'
"""

from __future__ import annotations

import re
import threading
import warnings
from functools import lru_cache
from re import _compiler, _constants as sre, _parser  # type: ignore[attr-defined]
from typing import Callable, Sequence

try:  # optional: without it every caller scans with its re patterns alone
    import hyperscan
except ImportError:  # pragma: no cover - the test extra installs it
    hyperscan = None

# the ASCII letters a non-ASCII character matches case-blind in Python: the dotted and dotless I, long s,
# the Kelvin sign (tests/history/test_prefilter.py checks every code point)
FOLDED_LETTERS = frozenset("ikIKsS")
WORD, OTHER = 0x80, 0x81  # the view's bytes for a non-ASCII character Python's \w matches, and for any other
_NON_ASCII_WORD = re.compile(r"[^\W\x00-\x7f]")
_NON_ASCII_OTHER = re.compile(r"[^\w\x00-\x7f]")
_ONE_CHAR = (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN)
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)
_ZERO_WIDTH = (sre.AT, sre.ASSERT, sre.ASSERT_NOT)
# a prefilter expression: approximate what is too big to compile, report each one once per text
_FLAGS = (hyperscan.HS_FLAG_PREFILTER | hyperscan.HS_FLAG_SINGLEMATCH | hyperscan.HS_FLAG_ALLOWEMPTY
          if hyperscan is not None else 0)
# an expression whose matches' starts are wanted: each end reported once, with its leftmost start
SOM_FLAGS = hyperscan.HS_FLAG_SOM_LEFTMOST if hyperscan is not None else 0


class Untranslatable(ValueError):
    """A pattern construct :func:`superset_expression` has no superset for (its pattern runs on every text)."""


def available() -> bool:
    """Whether hyperscan imported: prefilters scan, else every caller runs all of its patterns."""
    return hyperscan is not None


def view(text: str) -> bytes:
    """``text`` as the bytes a prefilter scans: one per character, :data:`WORD` or :data:`OTHER` for a non-ASCII one.

    Offsets into the view are offsets into ``text``.
    """
    if text.isascii():
        return text.encode("ascii")
    # OTHER first: its replacement is not a word character, so the WORD pass leaves it alone
    return _NON_ASCII_WORD.sub("\x80", _NON_ASCII_OTHER.sub("\x81", text)).encode("latin-1")


# ---------------------------------------------------------------- Python pattern -> hyperscan superset


def superset_expression(rx: re.Pattern) -> str:
    """A hyperscan expression that matches :func:`view` of every text ``rx`` matches (and maybe more).

    Raises
    ------
    Untranslatable
        For a construct with no superset here (a conditional group), or a
        parse this module does not read (``re``'s parser is internal).
    """
    try:
        parsed = _parser.parse(rx.pattern, rx.flags)
        items, flags = list(parsed.data), parsed.state.flags
        for k in range(len(items) - 1, -1, -1):
            behind = _lookbehinds(*items[k])
            if behind:
                # the text just before item k matches one of them, and the rest of the pattern follows it;
                # what comes before is not needed for a necessary condition (``name(?<=token)=`` -> ``token=``)
                return "(?:" + "|".join(_sequence(b, flags) for b in behind) + ")" + _sequence(items[k + 1:], flags)
        return _sequence(items, flags)
    except (AttributeError, TypeError, KeyError, IndexError, re.error) as e:
        # re's parser is internal: where another Python reads a pattern otherwise, the pattern runs everywhere
        raise Untranslatable(f"re's parser gave what this module does not read: {e!r}") from e


def _lookbehinds(op, av) -> list | None:
    """The contents of a positive look-behind, or of a group whose every alternative is one; else None."""
    if op is sre.ASSERT and av[0] == -1:
        return [av[1]]
    if op is sre.SUBPATTERN and not av[1] and not av[2] and len(av[3]) == 1:
        return _lookbehinds(*av[3][0])
    if op is sre.BRANCH:
        out = []
        for items in av[1]:
            inner = _lookbehinds(*items[0]) if len(items) == 1 else None
            if inner is None:
                return None
            out += inner
        return out
    return None


def _sequence(items, flags: int) -> str:
    return "".join(_item(op, av, flags) for op, av in items)


def _item(op, av, flags: int) -> str:
    if op in _ONE_CHAR:
        return _byte_class(_bytes_matched(op, tuple(av) if op is sre.IN else av, flags))
    if op in _ZERO_WIDTH:
        return ""  # dropping a condition only widens the match
    if op is sre.SUBPATTERN:
        _group, add, remove, items = av
        return _group_of(_sequence(items, (flags | add) & ~remove))
    if op is sre.ATOMIC_GROUP:
        return _group_of(_sequence(av, flags))
    if op is sre.BRANCH:
        return "(?:" + "|".join(_sequence(items, flags) for items in av[1]) + ")"
    if op in _REPEATS:
        low, high, items = av
        inner = _sequence(items, flags)
        if not inner:
            return ""
        return _group_of(inner) + ("{%d,}" % low if high == sre.MAXREPEAT else "{%d,%d}" % (low, high))
    if op is sre.GROUPREF:
        return "[\\x00-\\x81]*"  # whatever the group matched
    raise Untranslatable(f"no superset for {op}")


def _group_of(inner: str) -> str:
    return f"(?:{inner})" if inner else ""


@lru_cache(maxsize=None)
def _bytes_matched(op, av, flags: int) -> frozenset[int]:
    """The view bytes one character item can match: ASCII by asking Python's compiled item, the rest by its shape."""
    state = _parser.State()
    state.flags = flags
    one = _compiler.compile(_parser.SubPattern(state, [(op, list(av) if op is sre.IN else av)]), flags)
    out = {b for b in range(WORD) if one.fullmatch(chr(b))}
    if _may_match_non_ascii(op, av, flags):
        out |= {WORD, OTHER}
    return frozenset(out)


def _may_match_non_ascii(op, av, flags: int) -> bool:
    """False only where no non-ASCII character can match: ASCII literals and sets, case-blind only
    when they hold none of :data:`FOLDED_LETTERS`."""
    if op is sre.LITERAL:
        items = [(op, av)]
    elif op is sre.IN:
        items = list(av)
    else:
        return True  # ., a negated literal
    for kind, value in items:
        if kind is sre.LITERAL:
            chars = [value]
        elif kind is sre.RANGE:
            chars = range(value[0], value[1] + 1)
        else:
            return True  # a negation or a category (\d, \w, \s are Unicode)
        for c in chars:
            if c >= WORD or (flags & re.IGNORECASE and chr(c) in FOLDED_LETTERS):
                return True
    return False


def _byte_class(members: frozenset[int]) -> str:
    if not members:
        raise Untranslatable("a character class that matches nothing")
    runs, out = sorted(members), []
    start = prev = runs[0]
    for b in runs[1:] + [None]:
        if b is not None and b == prev + 1:
            prev = b
            continue
        out.append(f"\\x{start:02x}" if start == prev else f"\\x{start:02x}-\\x{prev:02x}")
        if b is not None:
            start = prev = b
    return "[" + "".join(out) + "]"


# ---------------------------------------------------------------- a compiled set of expressions


class Database:
    """hyperscan expressions compiled once per process, on first use, scanned with a scratch per thread.

    ``expressions`` are ``(expression, hyperscan flags)``; a match reports
    the expression's index plus ``first_id``.  Without hyperscan, or where
    it cannot compile them (a warning says so), :meth:`scan` returns False
    and the caller scans with its own patterns.
    """

    def __init__(self, expressions: Sequence[tuple[str, int]], first_id: int = 0):
        self.expressions = tuple(expressions)  # (hyperscan expression, flags) per id
        self.first_id = first_id  # the id the first expression reports
        self._db = None  # the compiled database once compiled; False if hyperscan could not compile it
        self._lock = threading.Lock()  # one compilation, however many threads ask first
        self._local = threading.local()  # each thread's scratch (a scan writes to it)

    def _compiled(self):
        if self._db is None:
            with self._lock:
                if self._db is None:
                    self._db = self._compile()
        return self._db

    def _compile(self):
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        try:
            db.compile(expressions=[e.encode("ascii") for e, _ in self.expressions],
                       ids=list(range(self.first_id, self.first_id + len(self.expressions))),
                       flags=[f for _, f in self.expressions])
        except hyperscan.error as e:  # slower, never wrong: the caller's patterns run everywhere
            warnings.warn(f"hyperscan could not compile a prefilter ({e}); its patterns scan every text",
                          RuntimeWarning, stacklevel=3)
            return False
        return db

    def scan(self, data: bytes, on_match: Callable[[int, int, int, int, object], None], context: object) -> bool:
        """Calls ``on_match(id, start, end, flags, context)`` for each match in ``data``; False without a database."""
        if hyperscan is None:
            return False
        db = self._compiled()
        if db is False:
            return False
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(db)
        db.scan(data, match_event_handler=on_match, context=context, scratch=scratch)
        return True


def _found(expression_id: int, _start: int, _end: int, _flags: int, found: set) -> None:
    found.add(expression_id)


class Prefilter:
    """Which of a list of ``re`` patterns can match a text, in one scan.

    ``patterns[i]`` is None for a pattern that must run on every text. A
    pattern :func:`superset_expression` cannot translate runs on every text too.

    >>> import re
    >>> pf = Prefilter([re.compile("sk-[a-z]+"), re.compile(r"(?i)token\\s*="), None])
    >>> pf.hits("a TOKEN = x") == ({1, 2} if available() else {0, 1, 2})
    True
    """

    def __init__(self, patterns: Sequence[re.Pattern | None]):
        expressions, self.always = [], []  # always: indices run on every text
        self.ids: list[int] = []  # pattern index per expression id
        for i, rx in enumerate(patterns):
            try:
                if rx is None:
                    raise Untranslatable("no pattern")
                expressions.append((superset_expression(rx), _FLAGS))
                self.ids.append(i)
            except Untranslatable:
                self.always.append(i)
        self.size = len(patterns)  # how many patterns it answers for
        self.database = Database(expressions)

    def hits(self, text: str) -> set[int]:
        """Indices of the patterns that may match ``text`` (all of them without hyperscan)."""
        found: set[int] = set()
        if not self.database.scan(view(text), _found, found):
            return set(range(self.size))
        return {self.ids[e] for e in found}.union(self.always)
