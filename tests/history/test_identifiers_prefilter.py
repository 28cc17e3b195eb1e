"""The identifier extractor finds what it found before its prefilter, with hyperscan and without.

The oracle is the earlier extractor (``identifiers_oracle.py``: every
pattern over the whole text).  Compared on every text the exact ledger reads
in the shared trajectories, on their whole rendered histories, and on texts
generated from the pieces identifiers are made of.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings

from bench.harness import runs
from sgl_speccompact.history import identifiers, ledger_entries as ledger
from sgl_speccompact.history.messages import parse_messages, render_history
from tests.history import identifiers_oracle as oracle
from tests.support.paths import TRAJECTORIES
from tests.support.prefilter import HAS_HYPERSCAN, IDENTIFIER_PIECES, plain, texts


def found(extract, text: str) -> list[tuple[str, str, str]]:
    return [(i.kind, i.value, i.text) for i in extract(text)]


def assert_as_before(text: str) -> None:
    before = found(oracle.extract, text)
    assert found(identifiers.extract, text) == before, text
    with plain():
        assert found(identifiers.extract, text) == before, text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts(IDENTIFIER_PIECES, 40))
@example("ab_12 x")  # a joined word at the very start of the text
@example("x-abcdefab-abcd-abcd-abcd-abcdefabcdef_")  # a UUID inside a word that is no id
@example("foo.xyz:12/abc.py")  # a rejected path whose line number hides the next one
@example("took 3 \u03bcs, 5 \u017f, 2 \u212ab, 1 m\u0131n")  # units Python matches case-blind
def test_generated_texts(text):
    assert_as_before(text)


def _ledger_texts(turns) -> list[str]:
    """Every text the ledger hands the extractor for ``turns`` (they are redacted in a compaction; the
    shared trajectories hold no secret)."""
    seen: list[str] = []

    def extract(text):
        seen.append(text)
        return identifiers.extract(text)

    def commands(text):
        seen.append(text)
        return identifiers.commands(text)

    saved = ledger.extract, ledger.commands
    ledger.extract, ledger.commands = extract, commands
    try:
        ledger.ledger_entries(turns)
    finally:
        ledger.extract, ledger.commands = saved
    return seen


@pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason=f"shared trajectories not found at {TRAJECTORIES}")
def test_every_text_of_the_shared_trajectories():
    trajectories, _ = runs.load_trajectories(None, 0, None, default_dir=TRAJECTORIES)
    checked = 0
    for traj in trajectories:
        turns = parse_messages(traj.messages, max_messages=10**6, max_chars=2**31)
        for text in [*_ledger_texts(turns), render_history(turns)]:
            assert_as_before(text)
            checked += 1
    assert checked > 100


@pytest.mark.skipif(not HAS_HYPERSCAN, reason="hyperscan is not installed (the fast extra)")
def test_the_prefilter_runs_where_hyperscan_is():
    """The comparisons above meet the prefiltered path: the starts come from hyperscan, not a full scan."""
    starts = identifiers._starts("see /src/app.py, KeyError and mia_li_3668 after 3 ms")
    assert starts is not None and starts["path"] == [4] and starts["error"] and starts["number"]


def test_a_unit_python_matches_case_blind_is_read_not_raised():
    """``3 μs`` (a Greek mu) and ``5 ſ`` (a long s) raised KeyError before."""
    assert found(identifiers.extract, "took 3 \u03bcs and 5 \u017f") == [
        ("number", "3us", "3 \u03bcs"), ("number", "5s", "5 \u017f")]
