"""The prefilter flags every text its Python patterns match, on the bytes hyperscan scans.

What the superset rewriting must get right is Python's own reading of a
pattern: Unicode classes, case folding onto ASCII letters, the whitespace
``\\s`` adds (``\\x1c``-``\\x1f``), look-behinds.  Each property compares a
Python ``search`` with what the prefilter says, on texts built from the
pieces those patterns look for.
"""

from __future__ import annotations

import functools
import json
import re
import string
import subprocess
import sys
import threading
import types

import pytest
from hypothesis import HealthCheck, example, given, settings

from sgl_speccompact.history import identifiers, prefilter
from sgl_speccompact.history.prefilter import FOLDED_LETTERS, OTHER, WORD, Prefilter, Untranslatable, view
from sgl_speccompact.history.redaction import detectors
from tests.support.paths import REPO
from tests.support.prefilter import HAS_HYPERSCAN, IDENTIFIER_PIECES, SECRET_PIECES, plain, texts

needs_hyperscan = pytest.mark.skipif(not HAS_HYPERSCAN, reason="hyperscan is not installed (the fast extra)")
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# constructs whose Python meaning a naive translation gets wrong, one pattern each
TRICKY = tuple(re.compile(p) for p in (
    r"(?i)key", r"(?i)\bSECRET\b", r"a\sb", r"a[^\s]b", r"a\Sb", r"(?<=pass)word=", r"(?<![a-z])tok",
    r"x++y", r"(?>ab|a)c", r"(a)\1", r"\d{2}-\d", r"[\w.]+@", r"(?a)\w+!", r"(?i)[a-k]{3}z", r"µs", r"(?i)µ",
    r"é", r"→", r"[^a-z]{2}q", r"\Aab", r"ab\Z", r"(?m)^\$ ", r"(?s)a.b", r"a.b", r"(?x) a  b # comment",
    r"(?i:Token)=", r"(?:(?<=a)|(?<=b))c", r"\u017f",
))


def test_the_view_is_one_byte_per_character():
    text = "a\u00e9\u2192\x80\x81_\u0661\xa0\ud800 z\u212a"
    got = view(text)
    assert len(got) == len(text)
    for ch, b in zip(text, got):
        assert b == (ord(ch) if ch.isascii() else WORD if re.fullmatch(r"\w", ch) else OTHER), repr(ch)


def test_folded_letters_are_the_ascii_letters_some_non_ascii_character_matches_case_blind():
    letter, folded = re.compile("(?i)[a-z]"), set()
    for cp in range(0x80, 0x110000):
        if letter.fullmatch(chr(cp)):
            folded |= {a for a in string.ascii_letters if re.fullmatch("(?i)" + a, chr(cp))}
    assert folded == set(FOLDED_LETTERS)


def test_a_construct_without_a_superset_runs_on_every_text():
    conditional = re.compile(r"(a)?(?(1)b|c)")
    with pytest.raises(Untranslatable):
        prefilter.superset_expression(conditional)
    pf = Prefilter([re.compile("zzz"), conditional, None])
    assert pf.always == [1, 2]
    assert pf.hits("nothing here") >= {1, 2}


def test_a_parse_this_module_does_not_read_runs_its_pattern_on_every_text(monkeypatch):
    """re's parser is internal: a Python whose parser answers otherwise costs speed, never a secret."""
    def other_parser(pattern, flags):
        raise AttributeError("no such field in this Python")

    monkeypatch.setattr(prefilter, "_parser", types.SimpleNamespace(parse=other_parser))  # this module's only
    assert Prefilter([re.compile("sk-[a-z]+")]).always == [0]


def _flags_every_match(patterns: tuple, text: str) -> None:
    hits = _prefilter(patterns).hits(text)
    missed = [rx.pattern for i, rx in enumerate(patterns) if i not in hits and rx.search(text)]
    assert not missed, f"{text!r}: {missed}"


@functools.lru_cache(maxsize=None)
def _prefilter(patterns: tuple) -> Prefilter:
    return Prefilter(list(patterns))  # compiled once per pattern set, on its first scan


TRIGGERS = tuple(d.trigger for d in detectors())


# texts a generator may take long to find: case folding onto k and s, Python's extra whitespace
FOLDS = ("\u212aey", "api_\u212aey = 'abcdefgh'", "\u017fecret=abcdefgh", "PA\u017f\u017fWORD: hunter22",
         "a\x1cb", "a\x1fb", "SE\u212aRET", "\u0131d_token=abcd1234", "\u03bcs", "to\u212aen: abcdefgh")


@needs_hyperscan
@PROPERTY
@given(texts(SECRET_PIECES + IDENTIFIER_PIECES))
@example("")
def test_every_text_a_pattern_matches_is_flagged(text):
    for fold in FOLDS:
        _flags_every_match(TRICKY, fold)
        _flags_every_match(TRIGGERS, fold)
    _flags_every_match(TRICKY, text)
    _flags_every_match(TRIGGERS, text)


@needs_hyperscan
@PROPERTY
@given(texts(IDENTIFIER_PIECES, 40))
def test_every_position_an_identifier_can_start_at_is_a_start(text):
    starts = identifiers._starts(text)
    patterns = {"path": identifiers._PATH, "error": identifiers._ERROR, "hash": identifiers._HASH,
                "id": identifiers._ID, "number": identifiers._NUMBER}
    for kind, rx in patterns.items():
        for p in range(len(text)):
            m = rx.match(text, p)
            if not m or (kind == "number" and not (m.group(1) or m.group(4))):
                continue  # a bare number needs no start: nothing can start inside one
            assert p in starts[kind], f"{kind} at {p} of {text!r}: {m.group(0)!r}"


@needs_hyperscan
def test_a_database_is_scanned_from_many_threads_at_once():
    pf = Prefilter(list(TRIGGERS))
    corpus = [piece * 3 for piece in SECRET_PIECES]
    expected = [pf.hits(t) for t in corpus]
    got: dict[int, list] = {}

    def scan(k):
        got[k] = [pf.hits(t) for t in corpus for _ in range(3)][::3]

    threads = [threading.Thread(target=scan, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(got[k] == expected for k in range(4))


@needs_hyperscan
def test_the_prefilters_compile_and_flag_nothing_in_plain_prose():
    """Redaction's and the extractor's databases compile (else every pattern would run, silently slower)."""
    from sgl_speccompact.history.redaction import prefilter as redaction_prefilter

    prose = "We looked at the results and wrote a short note about them."
    assert redaction_prefilter().hits(prose) == set(redaction_prefilter().always) == set()
    assert identifiers._starts(prose) == {kind: [] for kind in ("path", "error", "hash", "id", "number")}


@needs_hyperscan
def test_a_database_hyperscan_cannot_compile_leaves_every_pattern_running():
    db = prefilter.Database([("a{0,2000000}b", 0)])
    with pytest.warns(RuntimeWarning, match="could not compile"):
        assert db.scan(b"ab", lambda *a: None, None) is False


def test_without_hyperscan_every_pattern_runs():
    with plain():
        assert not prefilter.available()
        assert Prefilter([re.compile("zzz"), re.compile("yyy")]).hits("abc") == {0, 1}
        assert identifiers._starts("src/a.py") is None


PROBE = "token=ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 in /src/app.py after 3.5 s: KeyError (HAT136)"


def test_the_package_imports_and_answers_the_same_where_hyperscan_does_not_import():
    """hyperscan blocked from importing, in a fresh interpreter: redaction and extraction as here."""
    code = ("import sys, json; sys.modules['hyperscan'] = None\n"
            "from sgl_speccompact.history import identifiers, prefilter, redaction\n"
            f"text = {PROBE!r}\n"
            "print(json.dumps([prefilter.available(), redaction.redact(text),"
            " [[i.kind, i.value, i.text] for i in identifiers.extract(text)]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    from sgl_speccompact.history.redaction import redact
    here = [redact(PROBE), [[i.kind, i.value, i.text] for i in identifiers.extract(PROBE)]]
    assert json.loads(out.stdout) == [False, *json.loads(json.dumps(here))]
