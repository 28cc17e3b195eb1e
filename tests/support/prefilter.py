"""Both paths of the prefilter in one process, and the texts that tell them apart.

``plain()`` runs the code as it runs where hyperscan is not installed (every
pattern on every text); outside it, the prefilter decides what runs.
``texts()`` generates texts from the pieces the patterns look for, so the
two paths meet the places where a superset expression could fall short:
secrets cut and joined across pieces, overlapping formats, case folding,
non-ASCII word and space characters, Python's extra whitespace.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from hypothesis import strategies as st

from sgl_speccompact.history import prefilter
from sgl_speccompact.history.redaction_cache import REDACTION_CACHE
from tests.history.test_redaction import UNITS
from tests.support.secret_cases import SECRET_CASES

HAS_HYPERSCAN = prefilter.available()  # the test extra installs it; without it only the plain path runs

# what identifiers look like, and the characters their patterns treat specially
IDENTIFIER_PIECES = (
    "/", ".", "./", "../", "~/", "a", "Z", "_", "-", "@", "+", "~", "<", ":", ",", " ", "\n", "\t", '"', "'",
    "`", "```", "```bash\n", "$", "$ ", "#", "&", "%", "0", "1", "12", "2024-05-15", "abcdef0", "9fceb02",
    "deadbeef12", "py", ".py", ".json", ".jsonlx", "line ", '", line 3', ":12:3", ":12/x.py", "Error", "ValueError",
    "mod.KeyError", "Exception", "Warning", "SystemExit", "Interrupt", "ENOENT", "EPIPE", "HAT136", "ZFA04Y",
    "ab_12", "mia_li_3668", "x-1-2", "a-b_", "x-abcdefab-abcd-abcd-abcd-abcdefabcdef", "MB", "ms", " s", "µs",
    "μs", "5 ", "3.50", "1,200", "$1,200.50", "80%", "10 lines", "\u017f", "\u212a", "\u0131", "\u0130", "é",
    "→", "١", "٢٣", "\xa0", "\u2009", "\x1c", "\x80", "\x81", "sec", "lines", "http://", "https://x.org/a.",
    "12345678-1234-1234-1234-123456789abc", "#١", "python ", "git status", "pytest -x tests/", "src/app/main.py",
    "/etc/hosts", "07/17/2024", "1s/a/b/",
)
SECRET_PIECES = tuple(text for _, text, _ in SECRET_CASES) + tuple(
    s for _, _, secrets in SECRET_CASES for s in secrets) + UNITS + (
    "password", "PASSWORD", "Pa", "ss", "word", "=", ":", "=>", ":=", "\u017fecret", "to\u212aen", "pa\u017f\u017f",
    "-----BEGIN ", "PRIVATE KEY", "-----END RSA PRIVATE KEY-----", "AKIA", "sk-", "ghp_", "xoxb-", "eyJ",
    "Bearer ", "Authorization: ", "machine ", "login ", "://", "@", "é", "→", "\x1c", "\xa0")


def texts(pieces: tuple[str, ...], max_pieces: int = 30) -> st.SearchStrategy[str]:
    """Texts joined from ``pieces``, their cuts (a secret split where a piece ends) and a little random text."""
    cut = st.sampled_from(pieces).flatmap(lambda p: st.integers(0, len(p)).map(lambda i: p[:i] if i % 2 else p[i:]))
    part = st.one_of(st.sampled_from(pieces), st.sampled_from(pieces), cut, st.text(max_size=4),
                     st.text(alphabet="aA0_-./:=\"' \n", min_size=1, max_size=48))
    return st.lists(part, max_size=max_pieces).map("".join)


@contextmanager
def plain() -> Iterator[None]:
    """The code as it runs without hyperscan: every pattern scans every text."""
    saved = prefilter.hyperscan
    prefilter.hyperscan = None
    try:
        yield
    finally:
        prefilter.hyperscan = saved


def uncached(redact_fn):
    """``redact_fn`` that redacts every time: what a timing of the scan must call (a repeat would be a hit)."""
    def run(text):
        REDACTION_CACHE.clear()
        return redact_fn(text)
    run.__name__ = redact_fn.__name__
    return run
