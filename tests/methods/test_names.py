"""The built-in methods' names are written once (``methods/names.py``); every other list is read from it."""

from __future__ import annotations

import ast
from pathlib import Path

from sgl_speccompact.methods import names

PKG = Path(__file__).resolve().parents[2] / "sgl_speccompact"
SIMULATOR = PKG / "testing"  # the simulator keeps its own workload list, outside the product


def method_lists(root: Path) -> list[str]:
    """Every tuple or list literal in the product naming all the built-in methods."""
    found = []
    for path in root.rglob("*.py"):
        if SIMULATOR in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Tuple, ast.List)):
                words = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if set(names.METHODS) <= words:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_the_method_list_is_written_once():
    assert method_lists(PKG) == ["sgl_speccompact/methods/names.py:13"]


def test_the_checker_sees_a_second_list(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "copy.py").write_text(f"M = {tuple(reversed(names.METHODS)) + ('x',)!r}\n")
    assert method_lists(tmp_path / "pkg") == ["pkg/copy.py:1"]


def test_every_consumer_reads_the_one_list():
    from sgl_speccompact.methods import auto, registry
    from sgl_speccompact.methods.pipeline import REGISTRY
    from sgl_speccompact.service.app import create_app
    from tests.support.service import Backend, FakeRunner

    assert registry.METHODS is auto.METHODS is names.METHODS
    assert set(names.METHODS) <= set(REGISTRY)  # each one registered
    app = create_app(Backend("t"), Backend("d"), runner=FakeRunner())
    assert app.state.service.method_names == names.METHODS  # the service's default list
    assert tuple(auto.choose(auto.Deployment.named(gpus=2), 8000).predicted_s) == names.METHODS  # predicted in its order
