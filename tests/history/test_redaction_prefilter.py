"""Redaction through the prefilter finds the spans every pattern finds, and the cache redacts each text once.

The plain path (every detector on every text, ``plain()``) is the earlier
redaction; the prefiltered one must return the same spans for any text:
the shared trajectories, the listed secret formats, and texts generated
from secrets, their cuts and the pieces the patterns look for.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, example, given, settings

from bench.harness import runs
from sgl_speccompact.history import redaction
from sgl_speccompact.history.messages import parse_messages, render_history
from sgl_speccompact.history.redaction import find_secrets, redact, redact_arguments, redact_turns
from sgl_speccompact.history.redaction_cache import ENTRY_CHARS, REDACTION_CACHE, RedactionCache
from tests.support.methods import baseline_target
from tests.support.paths import TRAJECTORIES
from tests.support.prefilter import HAS_HYPERSCAN, SECRET_PIECES, plain, texts
from tests.support.secret_cases import SECRET_CASES

needs_hyperscan = pytest.mark.skipif(not HAS_HYPERSCAN, reason="hyperscan is not installed (the fast extra)")


def assert_as_every_pattern(text: str) -> None:
    with plain():
        every = find_secrets(text)
    assert find_secrets(text) == every, text


@needs_hyperscan
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts(SECRET_PIECES))
@example("".join(text for _, text, _ in SECRET_CASES))  # every format, overlapping where they touch
@example("api_\u212aey = 'abcdefgh' \u017fecret=abcd1234 PA\u017f\u017fWORD: hunter22")  # case folding
@example("password\x1c=\x1chunter22 machine\x1ca\x1clogin\x1cb\x1cpassword\x1cc")  # Python's extra whitespace
def test_generated_texts(text):
    assert_as_every_pattern(text)


@needs_hyperscan
@pytest.mark.parametrize("name,text,secrets", SECRET_CASES, ids=[c[0] for c in SECRET_CASES])
def test_listed_formats(name, text, secrets):
    assert_as_every_pattern(text)
    assert find_secrets(text), name


@needs_hyperscan
@pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason=f"shared trajectories not found at {TRAJECTORIES}")
def test_every_text_of_the_shared_trajectories():
    trajectories, _ = runs.load_trajectories(None, 0, None, default_dir=TRAJECTORIES)
    checked = 0
    for traj in trajectories:
        turns = parse_messages(traj.messages, max_messages=10**6, max_chars=2**31)
        for text in [render_history(turns), *(t.content for t in turns),
                     *(x for t in turns for c in t.tool_calls for x in (c.id, c.name, c.arguments))]:
            assert_as_every_pattern(text)
            checked += 1
    assert checked > 100


# ---------------------------------------------------------------- the cache


@pytest.fixture
def scans(monkeypatch):
    """Every text redaction scans (a cache miss), in order; the cache starts empty."""
    seen: list[str] = []
    for name in ("_redact", "_redact_arguments"):
        scan = getattr(redaction, name)
        monkeypatch.setattr(redaction, name, lambda text, scan=scan: (seen.append(text), scan(text))[1])
    REDACTION_CACHE.clear()
    yield seen
    REDACTION_CACHE.clear()


def _history(n: int) -> list[dict]:
    """A user request with a secret, then ``n`` shell calls and their outputs, each text its own."""
    out = [{"role": "user", "content": "deploy with GITHUB_TOKEN=ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"}]
    for i in range(n):
        out += [{"role": "assistant", "content": f"Step {i}: listing part {i}.", "tool_calls": [
                    {"id": f"call_{i}", "type": "function",
                     "function": {"name": "bash", "arguments": f'{{"command": "ls /srv/part{i}"}}'}}]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": f"file_{i}_a.txt\nfile_{i}_b.txt"}]
    return out


def _texts(messages: list[dict]) -> set[str]:
    return {t for m in messages for t in (m.get("content"), *(c["function"]["arguments"] for c in m.get(
        "tool_calls", ())))}


def test_a_second_compaction_of_a_grown_history_redacts_only_the_new_messages(scans):
    from tests.support.methods import baseline

    first, grown = _history(6), _history(9)
    old, new = _texts(first), _texts(grown) - _texts(first)
    baseline("hermes", first, target=baseline_target())
    assert old <= set(scans)  # the first compaction redacted every text
    scans.clear()
    result = baseline("hermes", grown, target=baseline_target())
    assert new <= set(scans)
    assert not old & set(scans), "a message the first compaction redacted was scanned again"
    assert result.redactions.get("github_token") == 1  # counted from the cache all the same


def test_a_cached_redaction_is_the_redaction(scans):
    text = "export OPENAI_API_KEY=sk-proj-Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6 and run"
    first = redact(text)
    counts = first[1]
    counts["openai_key"] = 99  # a caller changing its counts changes nothing cached
    again = redact(text)
    assert scans == [text] and again == ("export OPENAI_API_KEY=[REDACTED:openai_key] and run", {"openai_key": 1})
    clean = "nothing secret " * 20
    assert redact(clean)[0] is clean and redact(clean)[0] is clean and scans.count(clean) == 1
    args = '{"command": "export SECRET_KEY=\\"r8(v+3w!=y^t[q)k@e\\""}'
    assert redact_arguments(args) == redact_arguments(args) and scans.count(args) == 1


def test_the_cache_holds_no_secret(scans):
    for _, text, _ in SECRET_CASES:
        redact(text)
        redact_arguments(text)
    held = [entry for entry, _ in REDACTION_CACHE._entries.values()]
    assert len(held) == 2 * len(SECRET_CASES)
    assert all(len(key) == 16 for key in REDACTION_CACHE._entries)
    for _, _, secrets in SECRET_CASES:
        for secret in secrets:
            assert not any(secret in (shown or "") for shown, _ in held), secret


def test_the_cache_is_bounded_and_drops_the_least_recently_used():
    cache = RedactionCache(max_chars=3 * ENTRY_CHARS + 30)
    for k in range(3):
        cache.put(bytes([k]) * 16, (None, {}))
    assert cache.get(bytes([0]) * 16) == (None, {})  # 0 is now the most recently used
    cache.put(bytes([3]) * 16, ("x" * 30, {"k": 1}))
    assert len(cache) == 3 and cache.chars <= cache.max_chars
    assert cache.get(bytes([1]) * 16) is None and cache.get(bytes([0]) * 16) is not None
    cache.put(bytes([4]) * 16, ("y" * (4 * ENTRY_CHARS), {}))  # alone over the bound: everything else goes
    assert cache.chars <= cache.max_chars or len(cache) == 1


def test_compactions_in_threads_share_the_cache(scans):
    corpus = [text for _, text, _ in SECRET_CASES] + [f"plain text number {i} " * 5 for i in range(40)]
    expected = {t: redact(t) for t in corpus}
    REDACTION_CACHE.clear()
    scans.clear()
    got: list[dict] = [{} for _ in range(4)]

    def run(k):
        for t in corpus[k::2] + corpus:
            got[k][t] = redact(t)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(g == expected for g in got)
    assert len(REDACTION_CACHE) == len(corpus)
    assert REDACTION_CACHE.chars == sum(c for _, c in REDACTION_CACHE._entries.values())


def test_turns_without_a_secret_are_returned_as_they_are():
    turns = parse_messages(_history(2))
    out, counts = redact_turns(turns)
    assert counts == {"github_token": 1}
    assert out[0] != turns[0] and all(a is b for a, b in zip(out[1:], turns[1:]))
