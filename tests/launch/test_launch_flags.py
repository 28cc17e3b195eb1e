"""``serve``/``launch`` flags and config-file service sections: each bad value is one line and a
non-zero exit before anything starts, never a traceback or a silent start.
"""

from __future__ import annotations

import pytest

from sgl_speccompact.launch import command_line as launch
from tests.support.cli import one_clear_line


def _serve(argv: list[str], capsys) -> tuple[int, str]:
    try:
        rc = launch.main(["--target-url", "http://t:1", "--drafter-url", "http://d:2", *argv, "--dry-run"],
                  serve_only=True)
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("flags,word", [  # before: accepted (dry run 0) or a traceback at start
    (["--request-timeout", "0"], "--request-timeout"), (["--request-timeout", "-1"], "--request-timeout"),
    (["--request-timeout", "nan"], "--request-timeout"), (["--request-timeout", "inf"], "--request-timeout"),
    (["--compaction-timeout", "-5"], "--compaction-timeout"), (["--compaction-timeout", "nan"], "--compaction-timeout"),
    (["--compaction-timeout", "inf"], "--compaction-timeout"), (["--compaction-timeout", "0"], "--compaction-timeout"),
    (["--max-workers", "0"], "--max-workers"), (["--max-workers", "-3"], "--max-workers"),
    (["--max-body-mb", "nan"], "--max-body-mb"), (["--max-body-mb", "inf"], "--max-body-mb"),
    (["--max-body-mb", "-1"], "--max-body-mb"), (["--max-body-mb", "0"], "--max-body-mb"),
    (["--health-wait", "nan"], "--health-wait"), (["--service-port", "70000"], "--service-port"),
    (["--max-workers", "many"], "--max-workers"),
    (["--session-store-mb", "nan"], "--session-store-mb"), (["--session-store-mb", "inf"], "--session-store-mb"),
    (["--session-store-mb", "-1"], "--session-store-mb"), (["--session-store-mb", "0"], "--session-store-mb"),
    (["--session-ttl", "nan"], "--session-ttl"), (["--session-ttl", "-5"], "--session-ttl"),
    (["--session-ttl", "0"], "--session-ttl"), (["--session-ttl", "inf"], "--session-ttl"),
    (["--gpu", "NOPE"], "--gpu"), (["--gpu", " "], "--gpu"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_serve_flags_one_line_nonzero(capsys, flags, word):
    rc, err = _serve(flags, capsys)
    assert rc not in (0, None)
    one_clear_line(err, word)


@pytest.mark.parametrize("line,word", [  # before: accepted
    ("max_workers = 0", "max_workers"), ("compaction_timeout_s = -5.0", "compaction_timeout_s"),
    ("max_body_mb = nan", "max_body_mb"), ("request_timeout_s = inf", "request_timeout_s"),
    ("session_store_mb = nan", "session_store_mb"), ("session_ttl_s = -5.0", "session_ttl_s"),
    ('gpu = "NOPE"', "gpu"), ("gpu = 3", "gpu"),
])
def test_service_section_of_a_config_file(tmp_path, capsys, line, word):
    path = tmp_path / "c.toml"
    path.write_text(f"[service]\n{line}\n")
    rc, err = _serve(["--config", str(path)], capsys)
    assert rc not in (0, None)
    one_clear_line(err, word)


@pytest.mark.parametrize("flags,word", [  # before: the emulators started first, the error after their banners
    (["--max-workers", "0"], "--max-workers"),
    (["--emulate-speed", "0"], "--emulate-speed"), (["--emulate-speed", "nan"], "--emulate-speed"),
    (["--emulate-speed", "-2"], "--emulate-speed"), (["--emulate-gpu", "NOPE"], "--emulate-gpu"),
])
def test_emulate_flags_are_checked_before_anything_starts(monkeypatch, capsys, flags, word):
    monkeypatch.setattr(launch, "run_emulated", lambda args: pytest.fail("started with a bad flag"))
    assert launch.main(["--emulate", *flags]) == 2
    one_clear_line(capsys.readouterr().err, word)


def test_good_values_still_start(monkeypatch, capsys):
    rc, err = _serve(["--session-store-mb", "0.5", "--session-ttl", "60", "--gpu", "NVIDIA H100 80GB HBM3"], capsys)
    assert rc == 0, err
    rc, err = _serve(["--gpu", "Tesla T4", "--calibrate"], capsys)  # an unlisted GPU is fitted, not refused
    assert rc == 0, err
    started = []
    monkeypatch.setattr(launch, "run_emulated", lambda args: started.append(args) or 0)
    assert launch.main(["--emulate", "--emulate-speed", "0.5", "--emulate-gpu", "A100"]) == 0 and started


def test_no_gpu_message_names_emulate(monkeypatch, capsys):
    monkeypatch.setattr(launch, "cuda_available", lambda: False)
    assert launch.main([]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "--emulate" in err


def test_prepare_yield_flag_reaches_the_service_limits_and_zero_keeps_the_old_behaviour(monkeypatch):
    from sgl_speccompact.errors import ConfigError
    from sgl_speccompact.launch.command_line import build_parser
    from sgl_speccompact.launch.plan import build_plan

    def plan(*argv):
        return build_plan(build_parser("x").parse_args(["--target-url", "http://127.0.0.1:1", "--no-drafter", *argv]))

    assert plan().service.prepare_yield_s == 2.0  # default: the bound the session benchmark measured
    assert plan("--prepare-yield-s", "0").service.prepare_yield_s == 0.0
    with pytest.raises(ConfigError, match="--prepare-yield-s: must be a finite number >= 0"):
        plan("--prepare-yield-s", "-1")
