"""The launcher's newer flags are checked like the others: one clear line and a non-zero exit, no traceback.

Before: ``--session-store-mb nan|inf`` crashed with a traceback, ``--session-store-mb -1|0``,
``--session-ttl nan|-5|0``, ``--emulate-speed 0|nan`` and ``--gpu NOPE`` started silently.
"""

from __future__ import annotations

import pytest

from sgl_speccompact.launch import cli as launch


def _one_clear_line(err: str, word: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and word in lines[0] and "Traceback" not in err, err


def _serve(argv: list[str], capsys) -> tuple[int, str]:
    try:
        rc = launch.main(["--target-url", "http://t:1", "--drafter-url", "http://d:2", *argv, "--dry-run"],
                         serve_only=True)
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("flags,word", [
    (["--session-store-mb", "nan"], "--session-store-mb"), (["--session-store-mb", "inf"], "--session-store-mb"),
    (["--session-store-mb", "-1"], "--session-store-mb"), (["--session-store-mb", "0"], "--session-store-mb"),
    (["--session-ttl", "nan"], "--session-ttl"), (["--session-ttl", "-5"], "--session-ttl"),
    (["--session-ttl", "0"], "--session-ttl"), (["--session-ttl", "inf"], "--session-ttl"),
    (["--gpu", "NOPE"], "--gpu"), (["--gpu", " "], "--gpu"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_probe_serve_flags_one_line_nonzero(capsys, flags, word):
    rc, err = _serve(flags, capsys)
    assert rc not in (0, None)
    _one_clear_line(err, word)


@pytest.mark.parametrize("line,word", [
    ("session_store_mb = nan", "session_store_mb"), ("session_ttl_s = -5.0", "session_ttl_s"),
    ('gpu = "NOPE"', "gpu"), ("gpu = 3", "gpu"),
])
def test_probe_service_section_of_a_config_file(tmp_path, capsys, line, word):
    path = tmp_path / "c.toml"
    path.write_text(f"[service]\n{line}\n")
    rc, err = _serve(["--config", str(path)], capsys)
    assert rc not in (0, None)
    _one_clear_line(err, word)


@pytest.mark.parametrize("flags,word", [
    (["--emulate-speed", "0"], "--emulate-speed"), (["--emulate-speed", "nan"], "--emulate-speed"),
    (["--emulate-speed", "-2"], "--emulate-speed"), (["--emulate-gpu", "NOPE"], "--emulate-gpu"),
])
def test_probe_emulate_flags_are_checked_before_anything_starts(monkeypatch, capsys, flags, word):
    monkeypatch.setattr(launch, "run_emulated", lambda args: pytest.fail("started with a bad flag"))
    assert launch.main(["--emulate", *flags]) == 2
    _one_clear_line(capsys.readouterr().err, word)


def test_good_values_still_start(monkeypatch, capsys):
    rc, err = _serve(["--session-store-mb", "0.5", "--session-ttl", "60", "--gpu", "NVIDIA H100 80GB HBM3"], capsys)
    assert rc == 0, err
    rc, err = _serve(["--gpu", "Tesla T4", "--calibrate"], capsys)  # an unlisted GPU is fitted, not refused
    assert rc == 0, err
    started = []
    monkeypatch.setattr(launch, "run_emulated", lambda args: started.append(args) or 0)
    assert launch.main(["--emulate", "--emulate-speed", "0.5", "--emulate-gpu", "A100"]) == 0 and started
