"""A deterministic identifier extractor: the exact strings a summary must not lose or invent.

``extract(text)`` returns the identifiers of a text, each as an
:class:`Identifier` ``(kind, value)`` where ``value`` is a canonical form, so
the same thing written two ways compares equal.  Kinds, in the order they
claim text (a span taken by an earlier kind is not looked at again):

``url``
    ``http(s)://`` up to whitespace or a closing bracket/quote; trailing
    ``.,;:`` dropped.
``path``
    A file path: a token of ``[\\w.@+-]`` segments joined by ``/`` that starts
    with ``/``, ``./``, ``../`` or ``~/`` (not after ``<``: closing tags), or
    ends in a file extension; or a bare file name with a known extension
    (:data:`EXTENSIONS`).  A line number written ``path:N``, ``path:N:C``,
    ``"path", line N`` (tracebacks) or ``path line N`` becomes
    ``path:N``.  ``/./`` and a leading ``./`` are dropped; all-digit
    segments (dates such as ``07/17/2024``) are not paths.
``error``
    Exception and error class names (``...Error``, ``...Exception``,
    ``...Warning``, ``...Exit``, ``...Interrupt``), canonical without the
    module (``marshmallow.exceptions.ValidationError`` -> ``ValidationError``),
    and POSIX errno names (:data:`ERRNO`).
``hash``
    Lower-case hex of 7 or more characters with at least one digit and one
    letter a-f (git commits, digests).
``id``
    UUIDs; ISO dates (``2024-05-15``); ``#123`` references; upper-case codes of 5+ letters and digits
    with 2+ of each (``HAT136``, ``ZFA04Y``); and words joined by ``_`` or
    ``-`` with 2+ digits in all (``mia_li_3668``, ``marshmallow-1867``).
``number``
    A number with a unit (:data:`UNITS`, e.g. ``5 MB``, ``3.5s``, ``10 lines``,
    ``80%``) or a ``$`` amount, not right after ``:`` or ``,`` (clock times,
    ranges) nor right before ``/`` (``1s/a/b/``: a sed expression); canonical is the number without thousands
    separators or trailing zeros plus the unit's canonical name
    (``$1,200.50`` -> ``1200.5usd``, ``10 lines`` -> ``10line``).
``command``
    A shell command: a line starting ``$ ``; a line of a fenced code block,
    or an inline ```code``` span with at least one argument, whose first
    word is a known program (:data:`PROGRAMS`).  Whitespace is collapsed;
    at most 160 characters.

Examples
--------
>>> [(i.kind, i.value) for i in extract('File "/src/app/./main.py", line 12: KeyError; took 3.50 s')]
[('path', '/src/app/main.py:12'), ('error', 'KeyError'), ('number', '3.5s')]
>>> [(i.kind, i.value) for i in extract("Run `pytest -x tests/` then see https://x.org/a.")]
[('url', 'https://x.org/a'), ('command', 'pytest -x tests/')]

Speed: each kind's pattern would visit every position of a text.  With
hyperscan installed, one scan of the text (:class:`~.prefilter.Database`)
finds every position where a path, error, hash, id or number can start
(:data:`STARTS`, a superset: each expression's comment says why nothing is
missed), and each pattern is matched only there, exactly as ``finditer``
would have found it.  Without hyperscan every pattern scans the whole text:
the same identifiers, slower.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Iterator

from . import prefilter

KINDS = ("url", "path", "error", "hash", "id", "number", "command")
EXTENSIONS = (
    "py pyi pyx ipynb js mjs cjs ts tsx jsx json jsonl yaml yml toml cfg ini conf env md rst txt log csv tsv xml "
    "html htm css scss sh bash zsh c h cc cpp cxx hpp go rs java kt scala rb php pl lua r sql proto lock "
    "traj patch diff png jpg jpeg gif svg pdf zip tar gz tgz whl so dll exe"
).split()
ERRNO = ("ENOENT EACCES EPERM EEXIST ENOTDIR EISDIR ENOTEMPTY ECONNREFUSED ECONNRESET ETIMEDOUT EADDRINUSE "
         "ENOSPC EPIPE EAGAIN ENOMEM EBADF EINVAL").split()
# unit as written (lower case) -> canonical unit
UNITS = {
    **dict.fromkeys(["ns"], "ns"), **dict.fromkeys(["us", "µs"], "us"), **dict.fromkeys(["ms"], "ms"),
    **dict.fromkeys(["s", "sec", "secs", "second", "seconds"], "s"),
    **dict.fromkeys(["min", "mins", "minute", "minutes"], "min"),
    **dict.fromkeys(["h", "hr", "hrs", "hour", "hours"], "h"),
    **dict.fromkeys(["day", "days"], "day"), **dict.fromkeys(["week", "weeks"], "week"),
    **dict.fromkeys(["month", "months"], "month"), **dict.fromkeys(["year", "years"], "year"),
    **dict.fromkeys(["byte", "bytes"], "byte"),
    **{u: u for u in ("kb", "mb", "gb", "tb", "kib", "mib", "gib", "tib")},
    "%": "%", "usd": "usd", "eur": "eur", "gbp": "gbp",
    **dict.fromkeys(["line", "lines"], "line"), **dict.fromkeys(["token", "tokens"], "token"),
    **dict.fromkeys(["file", "files"], "file"), **dict.fromkeys(["test", "tests"], "test"),
    **dict.fromkeys(["passenger", "passengers"], "passenger"), **dict.fromkeys(["bag", "bags"], "bag"),
    **dict.fromkeys(["night", "nights"], "night"), **dict.fromkeys(["mile", "miles"], "mile"),
    **{u: u for u in ("km", "kg", "lb", "lbs", "ghz", "mhz")},
}
PROGRAMS = frozenset((
    "python python3 pip pip3 pytest git ls cat grep rg find cd sed awk echo curl wget npm npx yarn node make "
    "cmake cargo go docker kubectl bash sh chmod chown mkdir rm mv cp touch head tail diff patch tox uv poetry "
    "nl wc sort uniq xargs tar unzip pwd export source conda apt apt-get brew ruby java javac gcc g++ mvn gradle "
    "open edit create goto scroll_down scroll_up search_dir search_file find_file submit str_replace_editor"
).split())
MAX_COMMAND = 160  # characters kept of a command

_URL = re.compile(r"https?://[^\s<>()\[\]{}\"'`]+")
_PATH = re.compile(r"(?<![\w/.@+~<-])((?:~|\.{1,2})?/?(?:[\w.@+-]++/)+[\w.@+-]++|/[\w.@+-]*[A-Za-z_][\w.@+-]*"
                   r"|[\w@+-][\w.@+-]*\.[A-Za-z0-9]{1,5})"
                   r"(?:(?::(\d+)(?::\d+)?)|(?:\"?,? line (\d+)))?")
_EXT = re.compile(r"\.([A-Za-z0-9]{1,5})$")
_ERROR = re.compile(r"(?<![\w.])(?:[A-Za-z_]\w*+\.)*([A-Z][A-Za-z0-9]*(?:Error|Exception|Warning|Exit|Interrupt))\b"
                    r"|\b(" + "|".join(ERRNO) + r")\b")
# every error name holds one of these: a text without any has none (scanned at memory speed, before _ERROR)
_ERROR_HINT = re.compile("Error|Exception|Warning|Exit|Interrupt|" + "|".join(ERRNO))
_HASH = re.compile(r"(?=[0-9a-f])(?<![\w-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,}(?![\w-])")
# ``#123`` first: it starts with "#", the others at a word start, so no position can match both and
# the word-start check is made once per position for the rest (in their order: uuid, date, code, words)
_ID = re.compile(
    r"(?<![\w#&])#\d+\b"
    r"|\b(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
    r"|\d{4}-\d{2}-\d{2}\b"
    r"|(?=(?:[A-Z0-9]*\d){2})(?=(?:[A-Z0-9]*[A-Z]){2})[A-Z0-9]{5,}\b"
    r"|(?P<words>[A-Za-z][A-Za-z0-9]*+(?:[_-][A-Za-z0-9]++)+\b))")  # 2+ digits: checked in _ids
_UNIT_ALT = "|".join(sorted((re.escape(u) for u in UNITS), key=len, reverse=True))
_EXTENSIONS = frozenset(EXTENSIONS)
# every match starts with a digit or "$": that cheap test comes first, the look-behind after it
_NUMBER = re.compile(r"(?=[\d$])(?<![\w.$:,])(\$)?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?:\s?(" + _UNIT_ALT
                     + r"))?(?![\w%/])", re.IGNORECASE)
_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_BACKTICK = re.compile("`")
_PROMPT = re.compile(r"^[^\S\n]*\$ (.+)$", re.MULTILINE)

# Where a match of each kind can start, as hyperscan expressions on prefilter.view (one byte per character:
# 0x80 a non-ASCII word character, 0x81 any other non-ASCII one), reported with their leftmost start.
_W = r"0-9A-Za-z_\x80"  # Python's \w on the view
_D = r"[0-9\x80]"  # Python's \d (a non-ASCII digit is a word character)
_RUN = rf"[{_W}.@+~/-]"  # a path's characters: a path starts where a run of them starts (its look-behind)
# the units, case-blind; a letter of prefilter.FOLDED_LETTERS may also be a non-ASCII one (the Kelvin sign for
# k), and "µ" is non-ASCII: each of those is a word character, 0x80
_UNITS_VIEW = "|".join("".join(f"[{c}\\x80]" if c in prefilter.FOLDED_LETTERS else re.escape(c) if c.isascii()
                               else "\\x80" for c in unit) for unit in sorted(UNITS, key=len, reverse=True))
# a letter-led word joined to the next by _ or -, after a word boundary, reported from the character before it
# (so a_b_c is one report, not one per "_"); _starts adds the position after each, the word itself
_WORDS = rf"(?:^|[^{_W}])[A-Za-z][A-Za-z0-9]*[_-][A-Za-z0-9]"
STARTS: tuple[tuple[str, str], ...] = (
    # a path holds "/" or ".<alnum>" within one run, from the run's start; one report per run (at its end)
    ("path", rf"{_RUN}*(?:/|\.[A-Za-z0-9]){_RUN}*(?:[^{_W}.@+~/-]|\z)"),
    # an error name is the end of a run of [\w.] that starts the match; errno names are themselves
    ("error", rf"[{_W}.]*(?:Error|Exception|Warning|Exit|Interrupt)"),
    ("error", "|".join(ERRNO)),
    # a hash is a whole run of lower-case hex (it is neither preceded nor followed by [\w-])
    ("hash", r"[0-9a-f]{7,}(?:[^0-9a-f]|\z)"),
    # ids: "#" and a digit; a UUID's first group; a date; a run of 5+ capitals and digits; a joined word
    ("id", rf"#{_D}"),
    ("id", r"[0-9a-fA-F]{8}-"),
    ("id", rf"{_D}{{4}}-{_D}{{2}}-{_D}{{2}}"),
    ("id", r"[A-Z0-9]{5,}(?:[^A-Z0-9]|\z)"),
    ("id", _WORDS),
    # numbers worth keeping: "$" and a digit, or digits (",", "." and digits) and a unit, from the run's
    # first digit (a bare number is dropped, and no match can start inside one, so it needs no start);
    # the one with a unit last: it has a database of its own
    ("number", rf"\${_D}"),
    ("number", rf"{_D}[0-9\x80,]*(?:\.{_D}+)?[\t-\r\x1c-\x20\x81]?(?i:{_UNITS_VIEW})"),
)
# the numbers with a unit apart: compiled with the others, start-of-match tracking for their units takes
# hyperscan about 1.7 s of CPU instead of 0.05 s
_STARTS_DBS = (prefilter.Database([(e, prefilter.SOM_FLAGS) for _, e in STARTS[:-1]]),
               prefilter.Database([(STARTS[-1][1], prefilter.SOM_FLAGS)], first_id=len(STARTS) - 1))
_WORD_STARTS = [e for _, e in STARTS].index(_WORDS)  # its reports are one character early (but at 0)
_SCANNED = ("path", "error", "hash", "id", "number")  # the kinds whose patterns run from STARTS


@dataclass(frozen=True)
class Identifier:
    """One identifier found in a text."""

    kind: str  # one of KINDS
    value: str  # canonical form: what equality compares
    text: str = field(default="", compare=False)  # as written at its first occurrence


def extract(text: str) -> list[Identifier]:
    """The identifiers of ``text``, each once, in order of first appearance (commands last).

    >>> [i.value for i in extract("see tests/test_a.py:7 and tests/test_a.py line 7; commit 9fceb02")]
    ['tests/test_a.py:7', '9fceb02']
    """
    taken = bytearray(len(text))  # 1 where an earlier kind claimed the character
    found: list[tuple[int, Identifier]] = []
    starts = _starts(text)
    for kind, finder in _FINDERS:
        if starts is not None and kind in starts and not starts[kind]:
            continue  # nothing of this kind can start anywhere in the text
        for start, end, ident in finder(text, starts):
            if ident is not None and taken.find(1, start, end) < 0:
                found.append((start, ident))
                taken[start:end] = b"\x01" * (end - start)
    found.sort(key=lambda p: p[0])
    out = [i for _, i in found] + commands(text)
    return list(dict.fromkeys(out))


Starts = dict[str, list[int]] | None  # kind -> the positions its matches can start at; None: scan everywhere


def _starts(text: str) -> Starts:
    """Where each kind's matches can start (sorted), or None without hyperscan."""
    found: list[list[int]] = [[] for _ in STARTS]
    data = prefilter.view(text)
    if not all([db.scan(data, _start_found, found) for db in _STARTS_DBS]):
        return None
    out: dict[str, list[int]] = {kind: [] for kind in _SCANNED}
    for (kind, _), positions in zip(STARTS, found):
        out[kind] += positions
    # a joined word starts one after the character before it (at 0, where it starts the text, as found)
    out["id"] += [p + 1 for p in found[_WORD_STARTS]]
    return {kind: sorted(set(p)) if len(p) > 1 else p for kind, p in out.items()}


def _start_found(expression_id: int, start: int, _end: int, _flags: int, found: list) -> None:
    found[expression_id].append(start)


def _finditer(rx: re.Pattern, text: str, starts: Starts, kind: str) -> Iterator[re.Match]:
    """``rx.finditer(text)``: from ``starts[kind]`` only, when prefiltered."""
    return rx.finditer(text) if starts is None else matches_from(rx, text, starts[kind])


def matches_from(rx: re.Pattern, text: str, starts: Iterable[int]) -> Iterator[re.Match]:
    """``rx.finditer(text)``, given (in order) every position where a match of ``rx`` can start.

    Matching at each start in turn, skipping those inside the last match, is
    what ``finditer`` does, minus the positions where nothing can start
    (``match`` at a position sees the text before it, as the search does).
    ``rx`` must not match the empty string.

    >>> [m.group() for m in matches_from(re.compile("a+"), "baa aa", [1, 2, 4])]
    ['aa', 'aa']
    """
    end = 0
    for start in starts:
        if start >= end:
            m = rx.match(text, start)
            if m:
                yield m
                end = m.end()


def _urls(text, starts=None):
    if "://" not in text:
        return
    for m in _URL.finditer(text):
        url = m.group(0).rstrip(".,;:!?")
        yield m.start(), m.start() + len(url), Identifier("url", url, url)


def canonical_path(path: str) -> str:
    """``path`` without ``/./`` and a leading ``./``.

    >>> canonical_path("./a/./b.py")
    'a/b.py'
    """
    while "/./" in path:
        path = path.replace("/./", "/")
    return path[2:] if path.startswith("./") else path


def _is_path(token: str) -> bool:
    if "/" not in token:
        ext = _EXT.search(token)
        return bool(ext) and ext.group(1).lower() in _EXTENSIONS and not token[0].isdigit()
    parts = [p for p in token.split("/") if p and p not in (".", "..", "~")]
    if not parts or all(p.isdigit() for p in parts):
        return False
    return token.startswith(("/", "./", "../", "~/")) or bool(_EXT.search(parts[-1]))


def _paths(text, starts=None):
    for m in _finditer(_PATH, text, starts, "path"):
        token = m.group(1).rstrip(".")
        if not _is_path(token):
            continue
        line = m.group(2) or m.group(3)
        end = m.end() if line else m.start(1) + len(token)
        value = canonical_path(token) + (f":{line}" if line else "")
        yield m.start(1), end, Identifier("path", value, text[m.start(1):end])


def _errors(text, starts=None):
    if starts is None and not _ERROR_HINT.search(text):
        return
    for m in _finditer(_ERROR, text, starts, "error"):
        name = m.group(1) or m.group(2)
        yield m.start(), m.end(), Identifier("error", name, m.group(0))


def _hashes(text, starts=None):
    for m in _finditer(_HASH, text, starts, "hash"):
        yield m.start(), m.end(), Identifier("hash", m.group(0), m.group(0))


def _ids(text, starts=None):
    for m in _finditer(_ID, text, starts, "id"):
        if m.group("words") and sum(map(str.isdigit, m.group("words"))) < 2:
            continue
        yield m.start(), m.end(), Identifier("id", m.group(0), m.group(0))


def _numbers(text, starts=None):
    for m in _finditer(_NUMBER, text, starts, "number"):
        dollar, whole, frac, unit = m.groups()
        if not dollar and not unit:
            continue  # a bare number is not an identifier
        number = whole.replace(",", "") + ("." + frac if frac else "")
        if "." in number:
            number = number.rstrip("0").rstrip(".")
        yield m.start(), m.end(), Identifier("number", number + ("usd" if dollar else canonical_unit(unit)),
                                             m.group(0))


_FINDERS = (("url", _urls), ("path", _paths), ("error", _errors), ("hash", _hashes), ("id", _ids),
            ("number", _numbers))  # in the order they claim text


@lru_cache(maxsize=256)
def canonical_unit(unit: str) -> str:
    """The canonical name of a unit as written, which the number pattern matched case-blind.

    Python's case-blind match also takes a long s for ``s`` and a Greek mu
    for ``µ``, which :data:`UNITS` does not list as written.

    >>> canonical_unit("MB"), canonical_unit("\u03bcs"), canonical_unit("\u017f")
    ('mb', 'us', 's')
    """
    exact = UNITS.get(unit.lower())
    if exact is not None:
        return exact
    return next(UNITS[u] for u in UNITS if re.fullmatch(re.escape(u), unit, re.IGNORECASE))


def canonical_command(line: str) -> str:
    """Whitespace collapsed, cut to :data:`MAX_COMMAND` characters.

    >>> canonical_command("  ls   -la  ")
    'ls -la'
    """
    return " ".join(line.split())[:MAX_COMMAND]


def commands(text: str) -> list[Identifier]:
    """Shell commands of ``text``: ``$ `` lines, program lines of fenced blocks, program spans in backticks.

    >>> [i.value for i in commands("```bash\\ncd /repo\\n# note\\n```\\nthen `git status` and `pip`")]
    ['cd /repo', 'git status']
    """
    # each pattern holds a literal ("$ ", a backtick): a text without it is not scanned for that pattern
    if "`" not in text and "$ " not in text:
        return []
    out = []
    for m in _PROMPT.finditer(text) if "$ " in text else ():
        out.append((m.start(1), m.group(1)))
    for m in _FENCE.finditer(text) if "```" in text else ():
        offset = m.start(1)
        for line in m.group(1).split("\n"):
            if _first_word(line) in PROGRAMS:
                out.append((offset, line))
            offset += len(line) + 1
    # an inline span starts at a backtick: matched from each (its look-behind skips every position but those)
    for m in matches_from(_INLINE, text, (b.start() for b in _BACKTICK.finditer(text))):
        words = m.group(1).split()
        if len(words) > 1 and words[0] in PROGRAMS:
            out.append((m.start(1), m.group(1)))
    if not out:
        return []
    out.sort(key=lambda p: p[0])
    return list(dict.fromkeys(Identifier("command", canonical_command(c), c.strip()) for _, c in out if c.strip()))


def _first_word(line: str) -> str:
    words = line.split()
    return words[0] if words else ""
