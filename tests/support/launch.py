"""Running the launcher as a child process and reading its dry-run plan."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from tests.support.paths import REPO
from tests.support.procs import READY_S
from sgl_speccompact.launch.command_line import build_parser
from sgl_speccompact.launch.plan import build_plan




def launch(*args: str, env: dict | None = None, timeout: float = READY_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sgl_speccompact.launch", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def parse_dry_run(stdout: str) -> tuple[dict[str, list[str]], dict]:
    """Server role -> argv, and the service config."""
    lines = stdout.splitlines()
    cmds, role = {}, None
    for i, line in enumerate(lines):
        if line.startswith("# service config"):
            return cmds, json.loads("\n".join(lines[i + 1:]))
        if line.startswith("# "):
            role = line.split()[1]
        elif line.strip():
            cmds[role] = shlex.split(line)
    raise AssertionError("no service config in dry-run output")


def plan_for(*argv: str):
    return build_plan(build_parser().parse_args(list(argv)))
