"""Fixtures of the real-model tier: SmolLM2-135M-Instruct on one real sglang CPU server.

The packaged GGUF is converted once into the user cache
(:mod:`sgl_speccompact.launch.packaged`), one server is started with the
launcher's own command, and every compaction of
:func:`bench.harness.cpu_model.tier_plan` (each method once, on one of the
trajectories) runs once per test session; the tests then read the results.  When the model or the server is unavailable
the tier fails in CI (``CI`` set) and skips elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.harness import cpu_model
from bench.harness.runs import write_json
from tests.support.procs import ChildExited, one_worker, stop, unavailable, wait_healthy
from sgl_speccompact.errors import ConfigError
from sgl_speccompact.launch.packaged import ensure_converted
from sgl_speccompact.launch.servers import server_command
from sgl_speccompact.launch.cpu import server_env
from sgl_speccompact.emulator.server import free_port

TIER = "real-model tier"
START_S = 1800.0  # the server's start-up on a loaded 2-core machine (hang guard, s)


@pytest.fixture(scope="session")
def smol_model() -> str:
    """The converted checkpoint folder (converted on first use)."""
    one_worker(TIER)
    try:
        return str(ensure_converted(cpu_model.MODEL))
    except ConfigError as exc:
        unavailable(TIER, str(exc))


@pytest.fixture(scope="session")
def smol_server(smol_model, tmp_path_factory):
    """The URL of one real sglang CPU server serving SmolLM2 (``REAL_MODEL_URL``: one started by hand)."""
    if os.environ.get("REAL_MODEL_URL"):
        yield os.environ["REAL_MODEL_URL"].rstrip("/")
        return
    spec = cpu_model.server_spec(smol_model, free_port())
    log = tmp_path_factory.mktemp("real-model") / "server.log"
    print(f"\nstarting sglang on the CPU with {cpu_model.MODEL}; log in {log}", file=sys.stderr)
    proc = subprocess.Popen(server_command(spec), env=server_env(spec.device), stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        try:
            wait_healthy(spec.url, proc, deadline_s=START_S)
        except (ChildExited, AssertionError) as exc:
            unavailable(TIER, f"the server did not start: {str(exc)[:500]}\n{log.read_text(errors='replace')[-3000:]}")
        yield spec.url
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def histories() -> dict[str, list]:
    """The tier's trajectories (their first messages), by file name."""
    folder = cpu_model.find_trajectories()
    if folder is None:
        unavailable(TIER, "the shared trajectories (shared/data/trajectories) are not beside the clone")
    return cpu_model.load_histories(folder)


@pytest.fixture(scope="session")
def runs(smol_server, histories) -> list[cpu_model.Run]:
    """Every compaction of the tier, computed once per session.

    ``REAL_MODEL_REPORT=PATH`` also writes them as ``bench/cpu_model.py``'s
    JSON report (the MEASURED (CPU) page's source) to PATH, after every run.
    """
    conds = cpu_model.conditions(smol_server)
    path = os.environ.get("REAL_MODEL_REPORT")
    return cpu_model.compact_all(
        smol_server, histories, plan=cpu_model.tier_plan(histories),
        log=lambda msg: print(f"[real-model] {msg}", file=sys.stderr, flush=True),
        after_each=lambda so_far: path and write_json(cpu_model.report(so_far, conds), path))


@pytest.fixture(scope="session")
def done(runs) -> list[cpu_model.Run]:
    """The runs that returned a result (a run that raised fails test_every_compaction_returns)."""
    return [r for r in runs if r.result is not None]
