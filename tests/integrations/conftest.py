"""Fixtures of the integration tests: a hermes-agent virtual environment with the plugin installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
import pytest

from tests.support.hermes import PLUGIN
HERMES_PIN = "hermes-agent==0.19.0"


INDEX_DOWN = ("No matching distribution", "Could not find a version", "Failed to establish a new connection",
              "Temporary failure in name resolution", "Network is unreachable", "ProxyError")


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="session")
def hermes_env(tmp_path_factory):
    """``(python, plugin_site)``: a venv with hermes-agent, and a folder holding the installed plugin."""
    ready = os.environ.get("SPECCOMPACT_HERMES_VENV")
    root = tmp_path_factory.mktemp("hermes-env")
    if ready:
        python = Path(ready) / "bin" / "python"
    else:
        venv = root / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        python = venv / "bin" / "python"
        res = _pip(python, HERMES_PIN)
        if res.returncode != 0:
            text = res.stdout + res.stderr
            if any(marker in text for marker in INDEX_DOWN):
                pytest.skip(f"the package index cannot be reached to install {HERMES_PIN}: {text.strip()[-300:]}")
            raise RuntimeError(f"installing {HERMES_PIN} failed:\n{text[-3000:]}")
    site = root / "plugin-site"  # the plugin, installed with its entry point, outside the venv
    res = _pip(python, "--no-deps", "--target", str(site), str(PLUGIN))
    assert res.returncode == 0, res.stdout + res.stderr
    return python, site
