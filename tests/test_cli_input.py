"""The ``compact`` command line on hostile input: binary or invalid UTF-8 files, FIFOs, bad
``--set`` items and numeric flags each end in one clear line and a non-zero exit.
"""

from __future__ import annotations

import json
import threading

import pytest
from tests.support.cli import one_clear_line

# ------------------------------------------------------------------ 8. CLI


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    """Run the CLI in a thread so a hang fails the test instead of blocking it."""
    from tests.support.cli import URLS, Recorder, fake_connect

    from sgl_speccompact import cli

    out: list = []
    t = threading.Thread(target=lambda: out.append(cli.main([*argv, *URLS], connect=fake_connect,
                                                            runner=Recorder())), daemon=True)
    t.start()
    t.join(timeout=60)
    assert out, "the CLI hung"
    return out[0], capsys.readouterr().err


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\x00\x00\x00", b'[{"role": "user", "content": "caf\xe9"}]'])
def test_cli_binary_or_invalid_utf8_history(tmp_path, capsys, content):
    f = tmp_path / "h.json"
    f.write_bytes(content)
    rc, err = _cli([str(f)], capsys)
    assert rc == 1
    one_clear_line(err, "UTF-8", str(f))


def test_cli_binary_previous_summary(tmp_path, capsys):
    f, prev = tmp_path / "h.json", tmp_path / "prev.txt"
    f.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    prev.write_bytes(b"\xff\xfe\x00summary")
    rc, err = _cli([str(f), "--previous-summary", str(prev)], capsys)
    assert rc == 1
    one_clear_line(err, "--previous-summary", "UTF-8")


@pytest.mark.parametrize("which", ["history", "previous"])
def test_cli_fifo_does_not_hang(tmp_path, capsys, which):
    import os

    f, fifo = tmp_path / "h.json", tmp_path / "pipe"
    f.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    os.mkfifo(fifo)  # nobody ever writes to it
    argv = [str(fifo)] if which == "history" else [str(f), "--previous-summary", str(fifo)]
    rc, err = _cli(argv, capsys)
    assert rc == 1
    one_clear_line(err, "not a regular file")


@pytest.mark.parametrize("item,words", [
    ("eta=2", ["--set eta", "less than or equal to 1"]),
    ('eta="0.8x"', ["--set eta"]),
    ("nope=1", ["--set nope", "unknown field; valid: eta"]),
    ("max_new_tokens=-5", ["--set max_new_tokens"]),
    ("positive_label=negative", ["--set", "must differ"]),
])
def test_cli_set_errors_are_one_line(tmp_path, capsys, item, words):
    f = tmp_path / "h.json"
    f.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    rc, err = _cli([str(f), "--set", item], capsys)
    assert rc == 1
    one_clear_line(err, *words)


# ------------------------------------------------------------------ flags: one line, non-zero exit


@pytest.mark.parametrize("flags,words", [  # before: 0/-1/nan/inf ran (nan/-1: a traceback on the first request)
    (["--timeout", "0"], ["--timeout"]), (["--timeout", "-1"], ["--timeout"]),
    (["--timeout", "nan"], ["--timeout"]), (["--timeout", "inf"], ["--timeout"]),
    (["--trial", "-1"], ["--trial"]),
])
def test_cli_numeric_flags(tmp_path, capsys, flags, words):
    f = tmp_path / "h.json"
    f.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    rc, err = _cli([str(f), *flags], capsys)
    assert rc != 0
    one_clear_line(err, *words)


def test_cli_huge_integer_in_a_history_file(tmp_path, capsys):
    # before: ValueError traceback (Python's integer-string conversion limit)
    f = tmp_path / "h.json"
    f.write_text('[{"role": "user", "content": "hi", "n": ' + "9" * 5000 + "}]")
    rc, err = _cli([str(f)], capsys)
    assert rc == 1
    one_clear_line(err, str(f))


@pytest.mark.parametrize("item", [  # before: "0.8" became 0.8; 5000 digits was a traceback
    'eta="0.8"', "eta=true", 'max_new_tokens="32"', "max_new_tokens=" + "9" * 5000, "draft_temperature=1e999",
    "eta=NaN", "eta=Infinity",  # refused before too (by eta's bounds), kept as guards of the new parsing
])
def test_cli_set_is_typed_like_the_http_body(tmp_path, capsys, item):
    f = tmp_path / "h.json"
    f.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    rc, err = _cli([str(f), "--set", item], capsys)
    assert rc == 1
    one_clear_line(err, "--set")


def test_cli_set_bare_words_are_still_strings():  # passed before too: what must keep working
    from sgl_speccompact.cli import parse_overrides

    assert parse_overrides(["positive_label=yes", "eta=0.8", "empty_markers=[\"-\"]"]) == {
        "positive_label": "yes", "eta": 0.8, "empty_markers": ["-"]}


@pytest.mark.parametrize("argv, status", [
    (["--no-such-flag"], 2),  # a usage error: argparse's status
    (["--timeout", "many"], 2),
    (["--timeout", "0"], 1),  # a value the parser accepts and the checks refuse
    (["--set", "eta=high"], 1),
])
def test_a_usage_error_exits_2_and_any_other_failure_1(tmp_path, capsys, argv, status):
    f = tmp_path / "h.json"
    f.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    from sgl_speccompact import cli
    from tests.support.cli import URLS, Recorder, fake_connect

    try:
        rc = cli.main([str(f), *argv, *URLS], connect=fake_connect, runner=Recorder())
    except SystemExit as exc:  # argparse exits from inside main
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == status, err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1 and "Traceback" not in err, err
