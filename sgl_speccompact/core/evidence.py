"""Evidence before verdict: the exact strings a summary line names, and which of them its source never shows (pure).

A judge reads a line and says whether it holds; a lenient judge accepts a
line that names a file, an id or a command the history never showed.  Those
strings can be looked up exactly, for almost nothing, before any judge is
asked.  Three steps:

1. :func:`named_strings`: the exact strings a line names (:class:`Named`);
2. :meth:`SourceIndex.build`: the source, indexed once per compaction (the
   redacted history as every prompt embeds it; for a carried line also the
   previous summary's exact ledger, :func:`ledger_source`);
3. :func:`check`: the line's :class:`Evidence`, whose ``unsourced`` names
   the strings no source shows (empty: the line passes).

What a line names, in the order the kinds claim text:

``code`` / ``command``
    Every inline code span (`` `...` ``): a writer puts exact text in
    backticks.  A span whose first word is a known program
    (:data:`~sgl_speccompact.history.identifiers.PROGRAMS`) and that has an
    argument is a ``command``.  A span that is one identifier as a whole
    takes that identifier's kind and key (`` `decrypt.py:5` `` is the path
    ``decrypt.py``).  ``...`` or ``…`` in a span marks an elision: each
    piece is looked up on its own.
``url``, ``path``, ``error``, ``hash``, ``id``, ``number``
    The identifier extractor's kinds
    (:func:`~sgl_speccompact.history.identifiers.extract`) outside code
    spans.  A path is looked up without its line number (``decrypt.py line 5``
    and ``decrypt.py:5`` name ``decrypt.py``); a number with a unit (``10
    lines``, ``3.5 s``, ``80%``, ``$522``) is looked up as a number, without
    the unit.
``path`` (directories), ``id`` (code words)
    Also outside code spans: a directory written with its trailing slash
    (``src/``, ``src/marshmallow/``), and a word in code style, snake_case
    or dunder (``has_close_elements``, ``TASK_COMPLETE``, ``__main__``),
    which prose never writes.

Not named: prose words, quoted prose, bare numbers (list numbering, counts
the writer made up from what it read: ``four reservations``), CamelCase
words that are not error names (product names: ``GitHub``).

When a string has a source: it occurs in the source text at word boundaries
(no letter, digit or ``_`` right before or after it), once both are
normalised as a careful reader reads them (:func:`normalize`): every quote
character is one, JSON escapes are undone, whitespace runs are one space,
``./`` and ``/./`` are dropped.  A code span or a path may end in
punctuation the source does not have (``fields.py.``); a span may be quoted.
A path must start and end at path boundaries (``/testbed`` is not in
``/repo/testbed``, ``x.py`` not in ``my-x.py``; ``missing_colon.py`` is in
``repo/tests/missing_colon.py``).  A hash may be the start of a longer one (a
short commit id).  A number is any number of the source, thousands
separators and trailing zeros aside (``1,200.50`` is ``1200.5``).

So the check catches invented strings: a wrong path, id, error name, hash,
URL, command or code.  It cannot catch what exact strings do not show: a
wrong outcome (``failed`` for ``passed``), order, negation, a number or unit
that occurs elsewhere in the source, a string that exists but is attached
to the wrong fact.

Cost: the index is one pass over the source (every word and its positions,
the numbers, the long hex words); a lookup starts from the rarest word of the
string and compares in place, so a line's check does not read the source
again.  ``bench/evidence.py`` measures both.

>>> index = SourceIndex.build('[tool call bash]\\n{"command":"python ./decrypt.py"}\\nTypeError at decrypt.py')
>>> check("- decrypt.py line 5 raised `TypeError`", index).passed
True
>>> [n.text for n in check("- Ran `python solve.py`; see chall.py", index).unsourced]
['python solve.py', 'chall.py']
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_left
from dataclasses import dataclass, field

from ..history.identifiers import PROGRAMS, extract
from ..history.ledger_entries import LedgerEntry
from ..history.untrusted import JOINER
from .ledger import render

KINDS = ("code", "command", "url", "path", "error", "hash", "id", "number")  # Named.kind values
PUNCTUATION = ".,;:!?"  # trailing characters a named string may have that its source need not
ELLIPSES = ("...", "\u2026")  # an elision inside a code span: its pieces are looked up one by one

_WORD = re.compile(r"\w+")
_ESCAPE = re.compile(r"\\[\"'nrt]")  # JSON and shell escapes as a rendered tool call shows them
_QUOTES = re.compile("[\"'`\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u00ab\u00bb]")
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")  # an inline code span: n backticks, text, n backticks
_DIRECTORY = re.compile(r"(?<![\w./@+~-])((?:[\w.@+-]++/)++)(?![\w/@+~-]|\.[\w/])")  # possessive: linear
_CODE_WORD = re.compile(r"(?<![\w./@+~#-])(_*+[A-Za-z][A-Za-z0-9]*+(?:_++[A-Za-z0-9]++)++_*+|__[A-Za-z0-9]++__)"
                        r"(?![\w/@+~-]|\.\w)")
_NAME = re.compile(r"[A-Za-z_]")  # a directory's every segment holds one (``1/2/`` is no directory)
_DIGITS = re.compile(r"\d[\d,.]*")  # a number as a source writes it, separators and all
_LEADING_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_HEX = re.compile(r"[0-9a-f]{7,}")
_PATH_CHARS = frozenset("._@+~-")  # beside word characters: what a path's name may hold
LINE_NUMBER = re.compile(r":\d+$")  # a path value's line number, as the extractor appends it


@dataclass(frozen=True)
class Named:
    """One exact string a line names."""

    kind: str  # one of KINDS: what the string is, which says how it is looked up
    text: str  # as the line writes it (the provenance shows this)
    keys: tuple[str, ...]  # normalised forms looked up: the string has a source if one of them occurs


@dataclass(frozen=True)
class Evidence:
    """What the evidence check found for one line: admission records ``missing`` as the line's provenance."""

    named: tuple[Named, ...] = ()  # every exact string the line names, in line order
    unsourced: tuple[Named, ...] = ()  # those no source shows, in line order (empty: the line passes)

    @property
    def passed(self) -> bool:
        """True when every named string has a source (a line that names nothing passes)."""
        return not self.unsourced

    @property
    def missing(self) -> tuple[str, ...]:
        """The strings without a source, as the line writes them: what a line's provenance lists."""
        return tuple(n.text for n in self.unsourced)


# ---------------------------------------------------------------- normalising


def normalize(text: str) -> str:
    """``text`` as the check compares it: one quote character, escapes undone, one space, no ``./``.

    Applied alike to the source and to every named string, so the same text
    written two ways compares equal.

    >>> normalize('cat  "./a/./b.py" \\\\n echo \\\\"hi\\\\" \u2019x\u2019')
    'cat "a/b.py" echo "hi" "x"'

    The word joiners :func:`~sgl_speccompact.history.untrusted.neutralise` puts into
    the rendered history are invisible, so they are dropped: a line that copies
    ``<|im_end|>`` as the agent saw it finds it.
    """
    if JOINER in text:
        text = text.replace(JOINER, "")
    text = _QUOTES.sub('"', _unescape(text))
    if "./" in text:
        text = _drop_dot_slash(text)
    return " ".join(text.split())


def _drop_dot_slash(text: str) -> str:
    """``text`` without ``/./`` and without ``./`` at a path's start (``../`` and ``a./`` stay)."""
    while "/./" in text:
        text = text.replace("/./", "/")
    parts = text.split("./")
    out = [parts[0]]
    for i in range(1, len(parts)):
        before = parts[i - 1][-1:] or ("/" if i > 1 else " ")  # the character before this "./" in ``text``
        out.append("./" + parts[i] if before.isalnum() or before in "_.~-" else parts[i])
    return "".join(out)


def _unescape(text: str) -> str:
    """``text`` with ``\\"`` and ``\\'`` as quotes and ``\\n``, ``\\r``, ``\\t`` as spaces."""
    if "\\" not in text:
        return text
    return _ESCAPE.sub(lambda m: '"' if m.group(0)[1] in "\"'" else " ", text)


def canonical_number(number: str) -> str:
    """A number without thousands separators or trailing zeros after its point.

    >>> canonical_number("1,200.50"), canonical_number("3.0"), canonical_number("80")
    ('1200.5', '3', '80')
    """
    number = number.replace(",", "")
    return number.rstrip("0").rstrip(".") if "." in number else number


# ---------------------------------------------------------------- what a line names


def named_strings(line: str) -> tuple[Named, ...]:
    """The exact strings ``line`` names, each once, in line order.

    Parameters
    ----------
    line : str
        One summary line, as a slot holds it.

    Returns
    -------
    tuple of Named
        Empty when the line names nothing the check can look up.

    >>> [(n.kind, n.keys) for n in named_strings("- Fixed `tests/a.py:7` in src/ (see b.py line 3, 2 tests)")]
    [('path', ('tests/a.py',)), ('path', ('src',)), ('path', ('b.py',)), ('number', ('2',))]
    """
    found: list[tuple[int, Named]] = []
    prose, at = [], 0  # the line with its spans blanked: they are not read again as prose
    for m in _SPAN.finditer(line):
        named = _span(m.group(2))
        if named is not None:
            found.append((m.start(), named))
        prose += [line[at:m.start()], " " * (m.end() - m.start())]
        at = m.end()
    found.extend(_prose("".join(prose) + line[at:]))
    found.sort(key=lambda p: p[0])
    return tuple(dict.fromkeys(n for _, n in found))


def _span(content: str) -> Named | None:
    """The string one code span names (None: nothing to look up)."""
    text = content.strip()
    if not _WORD.search(text):
        return None
    found = extract(text)
    if len(found) == 1 and found[0].text == text and found[0].kind != "command":
        return _identifier(found[0].kind, found[0].value, text)
    words = text.split()
    kind = "command" if len(words) > 1 and words[0] in PROGRAMS else "code"
    pieces = [text]
    for mark in ELLIPSES:
        pieces = [p for piece in pieces for p in piece.split(mark)]
    keys = tuple(normalize(p) for p in pieces if _WORD.search(p))
    return Named(kind, text, keys) if keys else None


def _identifier(kind: str, value: str, text: str) -> Named | None:
    """One extracted identifier as a named string (None: a kind the check does not look up)."""
    if kind == "path":
        return Named("path", text, (normalize(LINE_NUMBER.sub("", value)),))
    if kind == "number":
        return Named("number", text, (_LEADING_NUMBER.match(value).group(0),))
    if kind in ("url", "error", "hash", "id", "command"):
        return Named(kind, text, (normalize(value),))
    return None


def _prose(text: str) -> list[tuple[int, Named]]:
    """What ``text`` (a line, code spans blanked) names, with offsets: identifiers, directories, code words."""
    text = _unescape(text)  # a copied JSON string: ``\\ntd_field`` names ``td_field``, as the source reads it
    out, at = [], 0
    for i in extract(text):  # in order of first appearance: each is found from the one before
        named = _identifier(i.kind, i.value, i.text)
        found = text.find(i.text, at)
        at = found if found >= 0 else at
        if named is not None:
            out.append((at, named))
    taken = {k for _, n in out for k in n.keys}
    for m in _DIRECTORY.finditer(text):
        key = normalize(m.group(1)).rstrip("/")
        if key not in taken and all(_NAME.search(part) for part in key.split("/")):
            out.append((m.start(), Named("path", m.group(1), (key,))))
            taken.add(key)
    for m in _CODE_WORD.finditer(text):
        if m.group(1) not in taken:  # an id the extractor named already (``ivan_rossi_8555``) is not named twice
            out.append((m.start(), Named("id", m.group(1), (m.group(1),))))
    return out


# ---------------------------------------------------------------- the source


@dataclass(frozen=True, eq=False)
class SourceIndex:
    """A source text, normalised and indexed once, for exact lookups (read-only once built; shared by threads)."""

    text: str  # the normalised source (:func:`normalize` of the texts joined by newlines)
    words: dict[str, list[int]] = field(repr=False)  # each word (a \\w+ run) -> its start offsets in ``text``
    numbers: frozenset[str] = field(repr=False)  # every number of ``text``, canonical (:func:`canonical_number`)
    hexes: tuple[str, ...] = field(repr=False)  # the lower-case hex words of 7+ characters, sorted

    @classmethod
    def build(cls, *texts: str) -> "SourceIndex":
        """Index ``texts`` (the redacted history; for carried lines, also the previous ledger) as one source.

        Parameters
        ----------
        *texts : str
            The source's texts; a string has a source if it occurs in any of
            them (they are joined by newlines, so none runs into the next).

        Returns
        -------
        SourceIndex

        >>> SourceIndex.build("ran pytest", "").has("pytest", "code"), SourceIndex.build().text
        (True, '')
        """
        text = normalize("\n".join(texts))
        words: dict[str, list[int]] = {}
        for m in _WORD.finditer(text):
            words.setdefault(m.group(), []).append(m.start())
        numbers = _numbers(text)
        hexes = tuple(sorted(w for w in words if len(w) >= 7 and _HEX.fullmatch(w)))
        return cls(text, words, numbers, hexes)

    def has(self, key: str, kind: str) -> bool:
        """Whether the normalised string ``key`` of ``kind`` occurs in this source (module docstring: when).

        >>> index = SourceIndex.build("see /repo/tests/a.py and commit 9fceb02d0ae5 (3.50 s)")
        >>> [index.has(k, kind) for k, kind in (("tests/a.py", "path"), ("/tests/a.py", "path"),
        ...                                      ("9fceb02", "hash"), ("3.5", "number"), ("a.py and", "code"))]
        [True, False, True, True, True]
        """
        if kind == "number":
            return key in self.numbers
        if kind == "hash" and self._hash_prefix(key):
            return True
        return self._occurs(key, path=kind == "path")

    def _hash_prefix(self, key: str) -> bool:
        at = bisect_left(self.hexes, key)
        return at < len(self.hexes) and self.hexes[at].startswith(key)

    def _occurs(self, key: str, path: bool) -> bool:
        """``key`` in the text at word (or path) boundaries, found from its rarest word's offsets."""
        rarest, offset = None, 0
        for m in _WORD.finditer(key):
            at = self.words.get(m.group())
            if at is None:
                return False  # a word the source never has: nothing to compare
            if rarest is None or len(at) < len(rarest):
                rarest, offset = at, m.start()
        if rarest is None:
            return False
        text, end = self.text, len(key)
        for p in rarest:
            start = p - offset
            if start >= 0 and text.startswith(key, start) and self._bounded(start, start + end, key, path):
                return True
        return False

    def _bounded(self, start: int, end: int, key: str, path: bool) -> bool:
        """Whether ``key``, found at ``start:end``, begins and ends at a boundary of the text."""
        text = self.text
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if path:
            if before.isalnum() or before in _PATH_CHARS or (before == "/" and key[0] == "/"):
                return False
            return not (after.isalnum() or after in "_@+~-")
        if (key[0].isalnum() or key[0] == "_") and (before.isalnum() or before == "_"):
            return False
        return not ((key[-1].isalnum() or key[-1] == "_") and (after.isalnum() or after == "_"))


def _numbers(text: str) -> frozenset[str]:
    """Every number of ``text``, canonical; ``1,2,3`` is a list, so its parts count too (and ``123``: lenient)."""
    out = set()
    for token in set(_DIGITS.findall(text)):
        token = token.rstrip(",.")
        out.add(canonical_number(token))
        if "," in token:
            out.update(canonical_number(part) for part in token.split(",") if part)
    return frozenset(out)


def ledger_source(entries: tuple[LedgerEntry, ...]) -> str:
    """The text of a previous summary's exact ledger entries: a carried line's second source.

    >>> ledger_source((LedgerEntry(3, "ran", "pytest -x", exit="1"),))
    '- m3 ran `pytest -x` exit `1`'
    """
    return "\n".join(render(e) for e in entries)


# ---------------------------------------------------------------- the check


def sourced(named: Named, *sources: SourceIndex) -> bool:
    """Whether one of ``sources`` shows ``named`` (as written, without trailing punctuation, or unquoted).

    >>> sourced(Named("code", "x", ('"ok",',)), SourceIndex.build("said ok"))
    True
    """
    for key in named.keys:
        forms = dict.fromkeys((key, key.rstrip(PUNCTUATION), key.strip('"'), key.rstrip(PUNCTUATION).strip('"')))
        if not any(f and any(s.has(f, named.kind) for s in sources) for f in forms):
            return False
    return True


def check(line: str, *sources: SourceIndex) -> Evidence:
    """The evidence check of one line: the strings it names that none of ``sources`` shows.

    Parameters
    ----------
    line : str
        A summary line (a drafted, repaired or carried line, or an SJC entry).
    *sources : SourceIndex
        Where the line's strings may come from: the compaction's redacted
        history; for a carried line, also the previous summary's ledger.

    Returns
    -------
    Evidence
        ``passed`` when every named string has a source; ``missing`` lists
        the others as the line writes them.

    >>> history = SourceIndex.build("ls: cannot access 'src/x.py': No such file or directory")
    >>> check("- Read src/x.py and tests/", history).missing
    ('tests/',)
    """
    named = named_strings(line)
    return Evidence(named, tuple(n for n in named if not sourced(n, *sources)))


# ---------------------------------------------------------------- one compaction's sources


class LineSources:
    """The sources of one compaction's judged lines, each text indexed on its first use, once (thread-safe).

    A compaction that judges nothing never builds an index; one whose lines
    name nothing the check looks up never indexes either.

    Parameters
    ----------
    history : str
        The redacted history, as every prompt embeds it.
    previous_summary : str
        The previous summary's sections, as the prompts embed them (a source
        of a new line, never of a carried one: it is the carried line's origin).
    ledger : str
        The previous summary's exact ledger (:func:`ledger_source`): a source
        of every line.

    >>> sources = LineSources("ran `pytest -x`", previous_summary="- edited a.py", ledger="- m1 read `b.py`")
    >>> sources.check("- a.py and b.py").passed, sources.check("- a.py and b.py", carried=True).missing
    (True, ('a.py',))
    """

    def __init__(self, history: str, previous_summary: str = "", ledger: str = ""):
        self.texts = {"history": history, "previous": previous_summary, "ledger": ledger}  # name -> source text
        self.built: dict[str, SourceIndex] = {}  # name -> its index, once built
        self.lock = threading.Lock()  # the slots of a compaction check lines from their own threads

    def index(self, name: str) -> SourceIndex:
        """The index of the text ``name`` (``history``, ``previous``, ``ledger``), built on the first call."""
        with self.lock:
            if name not in self.built:
                self.built[name] = SourceIndex.build(self.texts[name])
            return self.built[name]

    def check(self, line: str, carried: bool = False) -> Evidence:
        """:func:`check` of ``line`` against its sources: a ``carried`` line's are the history and the ledger."""
        named = named_strings(line)
        if not named:
            return Evidence()
        names = ("history", "ledger") if carried else ("history", "previous", "ledger")
        indices = [self.index(n) for n in names if self.texts[n]]
        return Evidence(named, tuple(n for n in named if not sourced(n, *indices)))
