"""Logs for people: a quiet default, ``--log-level`` for more, sglang's CPU-only warnings filtered."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import httpx
import pytest
from tests.support.procs import READY_S, stop, wait_healthy

from sgl_speccompact.service import logs
from sgl_speccompact.errors import ConfigError
from sgl_speccompact.launch.command_line import build_parser
from sgl_speccompact.launch.plan import build_plan

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 5  # what one compaction may write to the launcher's terminal at the default level


@pytest.fixture
def package_logger():
    """The package logger's handlers, level and propagation, restored after the test."""
    logger = logging.getLogger(logs.PACKAGE_LOGGER)
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield logger
    logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]


@pytest.mark.slow
def test_a_compaction_on_launch_emulate_writes_at_most_five_lines(tmp_path):
    from sgl_speccompact.emulator import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out = tmp_path / "launch.log"
    with open(out, "w") as sink:  # every write reaches the file at once: the count is of what was written
        proc = subprocess.Popen([sys.executable, "-m", "sgl_speccompact.launch", "--emulate", "--service-port",
                                 str(port)], cwd=REPO, stdout=sink, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    try:
        wait_healthy(url, proc)
        started = out.read_text()
        messages = json.loads((REPO / "examples" / "history.json").read_text())
        res = httpx.post(f"{url}/v1/compact", json={"messages": messages, "method": "speccompact"}, timeout=READY_S)
        assert res.status_code == 200, res.text
        assert httpx.get(f"{url}/health", timeout=READY_S).status_code == 200
        written = out.read_text()[len(started):].splitlines()
    finally:
        stop(proc)
    assert 1 <= len(written) <= MAX_LINES, "\n".join(written[:20])
    assert any(line.startswith("[service] speccompact: ~") and "judged lines" in line for line in written), written
    assert "Only CUDA" not in started, started  # sglang's AWQ/GGUF notes about kernels a CPU lacks


def test_log_level_reaches_the_service_settings_from_the_flag_and_the_config(tmp_path):
    def plan(*argv):
        return build_plan(build_parser("x").parse_args(["--target-url", "http://127.0.0.1:1", "--no-drafter", *argv]))

    assert plan().service.log_level == "info"
    assert plan("--log-level", "DEBUG").service.log_level == "debug"
    conf = tmp_path / "c.toml"
    conf.write_text('[service]\nlog_level = "warning"\n')
    assert plan("--config", str(conf)).service.log_level == "warning"
    conf.write_text('[service]\nlog_level = "loud"\n')
    with pytest.raises(ConfigError, match=r"\[service\] log_level: must be one of debug, info, warning, error"):
        plan("--config", str(conf))
    with pytest.raises(SystemExit):
        build_parser("x").parse_args(["--log-level", "loud"])


def test_the_emulator_takes_the_same_flag():
    from sgl_speccompact.emulator.__main__ import parse_args

    assert parse_args([]).log_level == "info" and parse_args(["--log-level", "debug"]).log_level == "debug"


def test_access_lines_only_at_debug():
    assert logs.uvicorn_logging("info") == {"log_level": "warning", "access_log": False}
    assert logs.uvicorn_logging("debug")["access_log"] is True
    assert logs.uvicorn_logging("error") == {"log_level": "error", "access_log": False}


def test_the_package_lines_are_for_people(package_logger):
    stream = io.StringIO()
    logs.configure("info", stream)
    logs.configure("info", stream)  # a second launch in one process replaces the handler, never adds one
    logging.getLogger("sgl_speccompact.service.app").info("speccompact: done")
    logging.getLogger("sgl_speccompact.launch.run").debug("not at info")
    logging.getLogger("sgl_speccompact.service.runtime").warning("compaction failed: x")
    assert stream.getvalue() == "[service] speccompact: done\n[service] warning: compaction failed: x\n"
    logs.configure("warning", stream)
    logging.getLogger("sgl_speccompact.service.app").info("hidden")
    assert "hidden" not in stream.getvalue()


def test_quiet_sglang_ignores_exactly_the_two_cpu_only_warnings():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        logs.quiet_sglang()
        for message, module in [("Only CUDA, HIP and XPU support AWQ currently.", "sglang.srt.layers.quantization.awq.awq"),
                                ("Only CUDA, MUSA and NPU support GGUF quantization currently.",
                                 "sglang.srt.layers.quantization.gguf"),
                                ("Only CUDA, HIP and XPU support AWQ currently.", "someone.else"),
                                ("another warning", "sglang.srt.layers.quantization.gguf")]:
            warnings.warn_explicit(message, UserWarning, "f.py", 1, module=module)
    assert [(str(w.message), w.filename) for w in seen] == [("Only CUDA, HIP and XPU support AWQ currently.", "f.py"),
                                                             ("another warning", "f.py")]


def test_a_cpu_server_starts_with_the_same_two_filters():
    from sgl_speccompact.launch.cpu import server_env

    env = server_env("cpu", {"PATH": os.environ["PATH"], "PYTHONWARNINGS": "default"})
    child = ("import warnings\n"
             "for message, module in [('Only CUDA, HIP and XPU support AWQ currently.', 'sglang.srt.layers.quantization.awq.awq'),\n"
             "                        ('Only CUDA, MUSA and NPU support GGUF quantization currently.', 'sglang.srt.layers.quantization.gguf'),\n"
             "                        ('Only CUDA, HIP and XPU support AWQ currently.', 'sglang.srt.layers.quantization.awq'),\n"
             "                        ('kept', 'sglang.srt.layers.quantization.gguf')]:\n"
             "    warnings.warn_explicit(message, UserWarning, 'f.py', 1, module=module)\n")
    res = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=READY_S)
    shown = [line for line in res.stderr.splitlines() if "UserWarning" in line]
    assert res.returncode == 0 and shown == ["f.py:1: UserWarning: Only CUDA, HIP and XPU support AWQ currently.",
                                             "f.py:1: UserWarning: kept"], res.stderr
    assert env["PYTHONWARNINGS"].startswith("default,")  # the caller's own filters stay
