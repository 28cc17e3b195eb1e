"""The README's at-a-glance block, run as written: start, wait, compact, and the Hermes lines.

The block is read from README.md, so the test fails when the README drifts
from what works.  Two things stand in for the outside world: ``pip`` is a
shell function that reuses the environment the tests run in (CI installed
it already), and the network is a private one (a new network namespace,
when the machine allows one) so that the block's fixed port 8000 is free
and no other service answers on it.  The Hermes lines run twice: with no
``hermes`` on PATH (a clear message, not a shell error) and with a stand-in
``hermes`` whose interpreter records what it is asked.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.procs import EXIT_S, READY_S

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.e2e
# the install line reuses this environment: CI installed it already
PRELUDE = 'pip() { echo "pip $* (the tests reuse the environment CI installed)"; }\n'


def glance_block() -> str:
    """The bash block that follows "At a glance" in README.md."""
    text = (REPO / "README.md").read_text()
    return re.search(r"At a glance.*?```bash\n(.*?)```", text, re.S).group(1)


def expected_output() -> list[str]:
    """The README's "What it prints" lines, each up to its ``…`` (the part it shortens)."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"What it prints.*?```text\n(.*?)```", text, re.S).group(1)
    return [line.split("…")[0] for line in block.splitlines() if line.strip()]


def hermes_lines(block: str) -> str:
    """The block's Hermes part: from ``if command -v hermes`` to its ``fi``."""
    return block[block.index("if command -v hermes"):block.rindex("fi") + 2] + "\n"


def private_network() -> list[str] | None:
    """A command prefix that runs in a new network namespace with loopback up, or None where none is allowed."""
    if not (shutil.which("unshare") and shutil.which("ip")):
        return None
    probe = subprocess.run(["unshare", "-rn", "sh", "-c", "ip link set lo up"], capture_output=True, timeout=60)
    return ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$@"'] if probe.returncode == 0 else None


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def shell_env(bin_dirs: list[Path]) -> dict[str, str]:
    """This test's Python first on PATH, then the given folders and the system's; no hermes unless given."""
    path = [str(d) for d in bin_dirs] + [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    return {**os.environ, "PATH": os.pathsep.join(path), "PYTHONUNBUFFERED": "1"}


def test_the_at_a_glance_block_runs_as_written(tmp_path):
    if not shutil.which("curl"):
        pytest.fail("curl is needed: the README's block calls it")
    prefix = private_network()
    if prefix is None and not port_free(8000):
        pytest.skip("port 8000 is taken and this machine allows no private network namespace")
    script = tmp_path / "glance.sh"
    script.write_text(PRELUDE + glance_block())
    out = tmp_path / "out.txt"
    with open(out, "w") as sink:
        proc = subprocess.Popen([*(prefix or []), "bash", str(script)], cwd=REPO, stdout=sink,
                                stderr=subprocess.STDOUT, env=shell_env([]), start_new_session=True)
        try:
            rc = proc.wait(timeout=READY_S)  # a hang guard: the block ends once the compaction answered
        finally:
            with_group_stopped(proc)  # the launcher the block left running in the background
    shown = out.read_text()
    assert rc == 0, shown[-3000:]
    for line in expected_output():
        assert any(got.startswith(line) for got in shown.splitlines()), f"missing {line!r} in:\n{shown[-3000:]}"
    assert "head: cannot open" not in shown and "command not found" not in shown


def with_group_stopped(proc: subprocess.Popen) -> None:
    """SIGTERM the block's process group (the launcher it left running), then SIGKILL what is left."""
    pgid = proc.pid  # the session's leader: the block's shell, which left the launcher in its group
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + EXIT_S  # a hang guard for the launcher's shutdown
        while time.monotonic() < end:
            proc.poll()
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def test_the_hermes_lines_install_into_the_interpreter_hermes_runs_on(tmp_path):
    """A stand-in ``hermes`` whose first line names a recording interpreter, as pip writes a script."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    python = bin_dir / "hermes-python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    hermes = bin_dir / "hermes"
    hermes.write_text(f"#!{python}\n")
    for f in (python, hermes):
        f.chmod(0o755)
    res = subprocess.run(["bash", "-c", hermes_lines(glance_block())], cwd=REPO, capture_output=True, text=True,
                         env=shell_env([bin_dir]), timeout=READY_S)
    assert res.returncode == 0, res.stderr
    assert calls.read_text().splitlines() == ["-m pip install ./integrations/hermes",
                                              f"{hermes} plugins enable speccompact",
                                              f"{hermes} config set context.engine speccompact"]


def test_without_hermes_the_lines_say_so_and_where_to_get_it(tmp_path):
    res = subprocess.run(["bash", "-c", hermes_lines(glance_block())], cwd=REPO, capture_output=True, text=True,
                         env=shell_env([]), timeout=READY_S)
    assert res.returncode == 0 and res.stderr == ""
    assert res.stdout.startswith("Hermes Agent is not installed") and "docs/guides/hermes.md" in res.stdout
    assert (REPO / "docs/guides/hermes.md").read_text().count("hermes-agent==") >= 1  # the page says how to get it
