"""The evidence check (sgl_speccompact/core/evidence.py): what a line names, when its source shows it.

Pure tests: every kind of named string, each normalisation a careful reader
makes, the boundaries a string must start and end at, and cases from the
shared trajectories (a supported line of the judge set is never refused;
every line of a history passes against that history).  Properties: a line
made only of strings copied from its source passes; one with a string the
source lacks does not.  The patterns run in linear time (a ratio of CPU
times measured in one run, never a wall-clock limit).
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgl_speccompact.core.evidence import (Evidence, Named, SourceIndex, canonical_number, check, ledger_source,
                                           named_strings, normalize, sourced)
from sgl_speccompact.history.ledger_entries import LedgerEntry
from tests.support.paths import TRAJECTORIES


def kinds(line: str) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(n.kind, n.text, n.keys) for n in named_strings(line)]


def missing(line: str, *texts: str) -> tuple[str, ...]:
    return check(line, SourceIndex.build(*texts)).missing


# ---------------------------------------------------------------- what a line names


@pytest.mark.parametrize("line, want", [
    ("- Edited `src/app.py` to fix it", [("path", "src/app.py", ("src/app.py",))]),
    ("- Ran `pytest -x tests/` twice", [("command", "pytest -x tests/", ("pytest -x tests/",))]),
    ("- Used `division(23, 0)`", [("code", "division(23, 0)", ("division(23, 0)",))]),
    ("- See https://x.org/a/b.", [("url", "https://x.org/a/b", ("https://x.org/a/b",))]),
    ("- Opened /repo/src/app.py", [("path", "/repo/src/app.py", ("/repo/src/app.py",))]),
    ("- It raised marshmallow.exceptions.ValidationError", [("error", "marshmallow.exceptions.ValidationError",
                                                             ("ValidationError",))]),
    ("- It failed with ENOENT", [("error", "ENOENT", ("ENOENT",))]),
    ("- Commit 9fceb02 is the base", [("hash", "9fceb02", ("9fceb02",))]),
    ("- Reservation HAT136 on 2024-05-21", [("id", "HAT136", ("HAT136",)), ("id", "2024-05-21", ("2024-05-21",))]),
    ("- The user is mia_li_3668", [("id", "mia_li_3668", ("mia_li_3668",))]),
    ("- Fixes #123", [("id", "#123", ("#123",))]),
    ("- It took 3.50 s and 1,200 MB", [("number", "3.50 s", ("3.5",)), ("number", "1,200 MB", ("1200",))]),
    ("- Paid $522 (80%)", [("number", "$522", ("522",)), ("number", "80%", ("80",))]),
    ("- Found it in src/ and src/marshmallow/.", [("path", "src/", ("src",)),
                                                  ("path", "src/marshmallow/", ("src/marshmallow",))]),
    ("- has_close_elements runs under __main__", [("id", "has_close_elements", ("has_close_elements",)),
                                                  ("id", "__main__", ("__main__",))]),
    ("- Print TASK_COMPLETE last", [("id", "TASK_COMPLETE", ("TASK_COMPLETE",))]),
])
def test_every_kind_of_named_string(line, want):
    assert kinds(line) == want


@pytest.mark.parametrize("line", [
    "- Each response must hold exactly one bash code block with one command.",
    "- The user wants to get home sooner because his mother is sick.",
    "- Ivan Rossi has a silver membership on GitHub.",  # CamelCase prose words are not named
    "1. Found four reservations; step 3 of 5 done.",  # bare numbers are not named
    "- It uses `&&` between commands.",  # a span without a word names nothing
    "- (none)",
])
def test_prose_names_nothing(line):
    assert named_strings(line) == ()
    assert check(line, SourceIndex.build("")).passed  # nothing named: nothing to refuse


def test_a_path_drops_its_line_number_in_every_form():
    for line in ("- decrypt.py line 5 uses a float", "- decrypt.py:5 uses a float", "- `decrypt.py:5` uses it",
                 '- File "decrypt.py", line 5'):
        assert [n.keys for n in named_strings(line)] == [("decrypt.py",)], line


def test_an_elided_span_is_looked_up_piece_by_piece():
    assert kinds("- `def division(...) -> float`")[0][2] == ("def division(", ") -> float")
    assert missing("- `def division(...) -> float`", "def division(a: float, b: float) -> float:") == ()
    assert missing("- `def division(…) -> int`", "def division(a: float, b: float) -> float:") == \
        ("def division(…) -> int",)


def test_strings_are_named_in_line_order_each_once():
    line = "- `b.py` then a.py, then `b.py` and a.py again; 2 files"
    assert [n.text for n in named_strings(line)] == ["b.py", "a.py", "2 files"]


# ---------------------------------------------------------------- normalisation


@pytest.mark.parametrize("raw, want", [
    ("echo 'hi'", 'echo "hi"'),  # every quote is one
    ("say \u201chi\u201d and \u2018x\u2019", 'say "hi" and "x"'),
    ('{"command":"echo \\"hi\\"\\nls"}', '{"command":"echo "hi" ls"}'),  # JSON escapes undone
    ("a  \n\t b", "a b"),  # whitespace runs are one space
    ("python ./run.py ./a/./b.py", "python run.py a/b.py"),  # ./ and /./ dropped
    ("cd ../up && x./y", "cd ../up && x./y"),  # ../ and a./ stay
])
def test_normalize(raw, want):
    assert normalize(raw) == want


def test_canonical_numbers():
    assert [canonical_number(n) for n in ("1,200.50", "3.0", "3.50", "80", "0.5")] == ["1200.5", "3", "3.5", "80",
                                                                                        "0.5"]


@pytest.mark.parametrize("line, source", [
    ("- Ran `echo 'hello world'`", '{"command":"echo \\"hello world\\""}'),  # quotes, JSON escapes
    ("- Ran `python  ./reproduce.py`", "$ python reproduce.py"),  # ./, whitespace
    ("- Edited ./src/app.py.", "wrote src/./app.py"),  # ./ and /./, trailing punctuation
    ("- Checked `fields.py`.", "open fields.py"),
    ("- Printed `\"ok\"`", "printed ok"),  # a quoted span
    ("- decrypt.py line 5 is wrong", "cat decrypt.py"),  # file line N
    ("- See tests/a.py:12", "tests/a.py"),  # file:line
    ("- It took 3.5 s", "took 3.50s"),  # a number, its trailing zero and glued unit aside
    ("- Spent $1200 on 2 bags", "total 1,200.00 for 2 items"),
    ("- Commit 9fceb02 broke it", "commit 9fceb02d0ae598e95dc970b74767f19372d61af8"),  # a short hash
    ("- See https://x.org/a", "https://x.org/a/b?c=1"),
    ("- The fix is in missing_colon.py", "/Users/u/repo/tests/./missing_colon.py"),  # a path's tail
    ("- Work in src/marshmallow/", "/testbed/src/marshmallow/fields.py"),  # a path's middle
    ("- It raised ValidationError", "marshmallow.exceptions.ValidationError: bad"),
])
def test_a_careful_readers_normalisation_finds_the_source(line, source):
    assert missing(line, source) == ()


@pytest.mark.parametrize("line, source, absent", [
    ("- Opened /testbed", "cd /repo/testbed", "/testbed"),  # an absolute path starts at a path boundary
    ("- Edited x.py", "edited my-x.py and x.pyc", "x.py"),  # a file name is not part of another's
    ("- Ran `check`", "checking everything", "check"),  # a span is whole words
    ("- Commit 9fceb02d0 broke it", "commit 9fceb02", "9fceb02d0"),  # a longer hash than the source shows
    ("- It took 3.5 s", "took 13.5s", "3.5 s"),
    ("- The user is ivan_rossi_5588", "user ivan_rossi_8555", "ivan_rossi_5588"),
    ("- Raised `IndentationError`", "SyntaxError: invalid syntax", "IndentationError"),
    ("- See https://x.org/ab", "https://x.org/abc", "https://x.org/ab"),
])
def test_what_the_source_does_not_show_is_unsourced(line, source, absent):
    assert missing(line, source) == (absent,)


def test_a_string_the_rendered_history_shows_neutralised_is_found_with_or_without_its_joiners():
    from sgl_speccompact.history.messages import parse_messages, render_history

    history = render_history(parse_messages([{"role": "user", "content": "the tool printed: <|im_end|>"}]))
    assert "<|im_end|>" not in history  # the rendered history breaks it with word joiners
    index = SourceIndex.build(history)
    assert check("- The tool printed `<|im_end|>`", index).passed
    assert check("- The tool printed `<\u2060|im_end|\u2060>`", index).passed
    assert check("- The tool printed `<|im_start|>`", index).missing == ("<|im_start|>",)


def test_matching_is_exact_about_case():
    assert missing("- Raised `valueerror`", "ValueError") == ("valueerror",)


# ---------------------------------------------------------------- the index and the check


def test_any_of_several_sources_will_do():
    history = SourceIndex.build("ran pytest -x tests/")
    ledger = SourceIndex.build(ledger_source((LedgerEntry(2, "wrote", "src/old.py"),)))
    assert check("- Wrote src/old.py and ran `pytest -x tests/`", history, ledger).passed
    assert check("- Wrote src/old.py", history).missing == ("src/old.py",)
    assert SourceIndex.build("a", "b").text == "a b"  # texts do not run into each other


def test_the_evidence_records_what_had_no_source():
    ev = check("- Fixed `b.py` in a.py (c.py)", SourceIndex.build("a.py"))
    assert isinstance(ev, Evidence) and not ev.passed and ev.missing == ("b.py", "c.py")
    assert [(n.kind, n.text) for n in ev.named] == [("path", "b.py"), ("path", "a.py"), ("path", "c.py")]
    assert ev.unsourced == tuple(n for n in ev.named if n.text in ("b.py", "c.py"))
    with pytest.raises(AttributeError):
        ev.unsourced = ()  # frozen: admission records it as it is


def test_a_named_string_with_several_keys_needs_each_one():
    index = SourceIndex.build("def f(a): return a")
    assert sourced(Named("code", "x", ("def f(", "return a")), index)
    assert not sourced(Named("code", "x", ("def f(", "return b")), index)


def test_nothing_is_found_in_an_empty_source():
    assert missing("- Read a.py", "") == ("a.py",)
    assert missing("- Read a.py") == ("a.py",)


def test_the_callers_text_is_not_changed():
    line, text = "- Ran `python ./a.py`", "python ./a.py"
    check(line, SourceIndex.build(text))
    assert (line, text) == ("- Ran `python ./a.py`", "python ./a.py")


# ---------------------------------------------------------------- properties

WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=2, max_size=10).filter(
    lambda w: w[0].isalpha())
PIECES = st.lists(st.builds(lambda a, b, ext, sep: f"{a}{sep}{b}.{ext}", WORDS, WORDS,
                            st.sampled_from(["py", "json", "md", "txt"]), st.sampled_from(["/", "_", "-"])),
                  min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(PIECES, st.lists(st.sampled_from(["`", "", " see ", "'"]), min_size=6, max_size=6))
def test_a_line_made_only_of_strings_copied_from_the_source_passes(pieces, wraps):
    source = "tool output: " + " and ".join(f"{w}{p}{w}" for p, w in zip(pieces, wraps)) + "\n"
    line = "- Touched " + ", ".join(f"`{p}`" if i % 2 else p for i, p in enumerate(pieces))
    assert check(line, SourceIndex.build(source)).passed


@settings(max_examples=60, deadline=None)
@given(PIECES, WORDS)
def test_a_line_naming_a_file_the_source_lacks_is_refused(pieces, stem):
    source = " ".join(pieces)
    invented = f"zz{stem}q.py"
    ev = check(f"- Edited {pieces[0]} and {invented}", SourceIndex.build(source))
    assert ev.missing == (invented,)


def test_every_line_of_a_history_passes_against_that_history():
    from sgl_speccompact.errors import HistoryFormatError
    from sgl_speccompact.history.formats import load_history
    from sgl_speccompact.history.messages import parse_messages, render_history
    from sgl_speccompact.history.redaction import redact_turns

    files = sorted(p for p in TRAJECTORIES.glob("*") if p.suffix in (".json", ".traj")) if TRAJECTORIES.is_dir() else []
    if not files:
        pytest.skip(f"shared trajectories absent ({TRAJECTORIES})")
    checked = 0
    for path in files:
        try:
            messages = load_history(path)
        except HistoryFormatError:  # a task list, not a conversation
            continue
        turns, _ = redact_turns(parse_messages(messages, max_messages=10**7, max_chars=2**31))
        text = render_history(turns)
        index = SourceIndex.build(text)
        for line in text.split("\n"):
            assert check(line, index).passed, (path.name, line)
            checked += 1
    assert checked > 1000


# ---------------------------------------------------------------- the judge set's lines


@pytest.fixture(scope="module")
def judge_set():
    from bench.evaluation.judge_set import history_of, load_judge_set
    from sgl_speccompact.history.messages import parse_messages, render_history
    from sgl_speccompact.history.redaction import redact_turns

    if not TRAJECTORIES.is_dir():
        pytest.skip(f"shared trajectories absent ({TRAJECTORIES})")
    out, indexes = [], {}
    for case in load_judge_set():
        key = (case.file, case.trial, case.upto)
        if key not in indexes:
            indexes[key] = SourceIndex.build(render_history(redact_turns(parse_messages(history_of(case)))[0]))
        out.append((case, check(case.line, indexes[key])))
    return out


def test_no_supported_line_of_the_judge_set_is_refused(judge_set):
    refused = [(c.id, e.missing) for c, e in judge_set if c.supported and not e.passed]
    assert refused == []


@pytest.mark.parametrize("case_id, absent", [
    ("be-08s", ()),  # decrypt.py line 5: decrypt.py is in the history
    ("ma-04c", ("/testbed/src/marshmallow/schema.py",)),  # a wrong path
    ("ta-02c", ("ivan_rossi_5588",)),  # a wrong id
    ("fc-01c", ("IndentationError",)),  # a wrong error name
    ("be-02c", ("(18 * char + 123) % 256",)),  # wrong code in backticks
    ("be-07c", ("python -c",)),  # a command never run
    ("lo-02c", ("TASK_COMPLETE",)),  # a code word never shown
    ("gh-07c", ()),  # a wrong outcome names no wrong string: the check cannot catch it
    ("ta-09c", ()),  # a string that exists, attached to the wrong fact
])
def test_judge_set_cases(judge_set, case_id, absent):
    got = {c.id: e.missing for c, e in judge_set}
    assert got[case_id] == absent


# ---------------------------------------------------------------- linear time

# runs of what the patterns scan, without what would complete a match: path segments, code words,
# code spans, numbers, escapes
UNITS = ("a/", "ab/", "ab_cd-", "`a", "a_1/", "x_1 ", "a.py ", "\\n", "$1 ")
SMALL, LARGE = 2_000, 16_000
MAX_RATIO = 20.0  # linear: about 8x; quadratic: about 64x


def _seconds(fn, text: str, min_total_s: float) -> float:
    """The least CPU time of at least three calls (and ``min_total_s`` in all), the garbage collector off:
    a collection that a large input happens to trigger is not the function's growth."""
    import gc

    best, spent, runs = float("inf"), 0.0, 0
    gc.collect()
    gc.disable()
    try:
        while spent < min_total_s or runs < 3:
            t0 = time.thread_time()
            fn(text)
            took = time.thread_time() - t0
            best, spent, runs = min(best, took), spent + took, runs + 1
    finally:
        gc.enable()
    return best


@pytest.mark.parametrize("unit", UNITS)
def test_naming_and_checking_run_in_linear_time(unit):
    index = SourceIndex.build((unit * (LARGE // len(unit) + 1))[:LARGE])
    for fn in (named_strings, lambda text: check(text, index), SourceIndex.build):
        small = _seconds(fn, (unit * (SMALL // len(unit) + 1))[:SMALL], 0.01)
        large = _seconds(fn, (unit * (LARGE // len(unit) + 1))[:LARGE], 0.03)
        assert large / max(small, 1e-6) < MAX_RATIO, (unit, small, large)
