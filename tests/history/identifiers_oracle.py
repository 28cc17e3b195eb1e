"""The identifier extractor as it was before its prefilter: every pattern scans the whole text.

The oracle of ``tests/history/test_identifiers_prefilter.py``: the package's
:func:`~sgl_speccompact.history.identifiers.extract` must return what this
returns, on real trajectories and generated text, with hyperscan and
without.  It is the earlier module unchanged but for one fix, marked below:
a unit Python's case-blind match took for one it lists (``3 μs`` with a
Greek mu, a long s) raised KeyError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sgl_speccompact.history.identifiers import canonical_unit

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
# every match starts with a digit or "$": that cheap test comes first, the look-behind after it
_NUMBER = re.compile(r"(?=[\d$])(?<![\w.$:,])(\$)?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?:\s?(" + _UNIT_ALT
                     + r"))?(?![\w%/])", re.IGNORECASE)
_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_PROMPT = re.compile(r"^[^\S\n]*\$ (.+)$", re.MULTILINE)


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
    taken = [False] * len(text)
    found: list[tuple[int, Identifier]] = []
    for finder in (_urls, _paths, _errors, _hashes, _ids, _numbers):
        for start, end, ident in finder(text):
            if ident is not None and not any(taken[start:end]):
                found.append((start, ident))
                taken[start:end] = [True] * (end - start)
    found.sort(key=lambda p: p[0])
    out = [i for _, i in found] + commands(text)
    return list(dict.fromkeys(out))


def _urls(text):
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
        return bool(ext) and ext.group(1).lower() in EXTENSIONS and not token[0].isdigit()
    parts = [p for p in token.split("/") if p and p not in (".", "..", "~")]
    if not parts or all(p.isdigit() for p in parts):
        return False
    return token.startswith(("/", "./", "../", "~/")) or bool(_EXT.search(parts[-1]))


def _paths(text):
    for m in _PATH.finditer(text):
        token = m.group(1).rstrip(".")
        if not _is_path(token):
            continue
        line = m.group(2) or m.group(3)
        end = m.end() if line else m.start(1) + len(token)
        value = canonical_path(token) + (f":{line}" if line else "")
        yield m.start(1), end, Identifier("path", value, text[m.start(1):end])


def _errors(text):
    if not _ERROR_HINT.search(text):
        return
    for m in _ERROR.finditer(text):
        name = m.group(1) or m.group(2)
        yield m.start(), m.end(), Identifier("error", name, m.group(0))


def _hashes(text):
    for m in _HASH.finditer(text):
        yield m.start(), m.end(), Identifier("hash", m.group(0), m.group(0))


def _ids(text):
    for m in _ID.finditer(text):
        if m.group("words") and sum(c.isdigit() for c in m.group("words")) < 2:
            continue
        yield m.start(), m.end(), Identifier("id", m.group(0), m.group(0))


def _numbers(text):
    for m in _NUMBER.finditer(text):
        dollar, whole, frac, unit = m.groups()
        if not dollar and not unit:
            continue  # a bare number is not an identifier
        number = whole.replace(",", "") + ("." + frac if frac else "")
        if "." in number:
            number = number.rstrip("0").rstrip(".")
        # the one change: the unit's canonical name as the package finds it (was UNITS[unit.lower()])
        yield m.start(), m.end(), Identifier("number", number + ("usd" if dollar else canonical_unit(unit)),
                                             m.group(0))


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
    out = []
    for m in _PROMPT.finditer(text):
        out.append((m.start(1), m.group(1)))
    for m in _FENCE.finditer(text):
        offset = m.start(1)
        for line in m.group(1).split("\n"):
            if _first_word(line) in PROGRAMS:
                out.append((offset, line))
            offset += len(line) + 1
    for m in _INLINE.finditer(text):
        words = m.group(1).split()
        if len(words) > 1 and words[0] in PROGRAMS:
            out.append((m.start(1), m.group(1)))
    out.sort(key=lambda p: p[0])
    return list(dict.fromkeys(Identifier("command", canonical_command(c), c.strip()) for _, c in out if c.strip()))


def _first_word(line: str) -> str:
    words = line.split()
    return words[0] if words else ""
