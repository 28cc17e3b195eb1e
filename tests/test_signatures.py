"""No function of the orchestration layers takes more than eight parameters.

A long signature is an argument threaded through a layer: one request
object (:class:`~sgl_speccompact.methods.request.MethodRequest`) carries a
compaction's inputs instead.  The modules checked are ``methods/``,
``programs/``, ``service/`` and the top-level modules; ``self`` and ``cls``
do not count, ``*args`` and ``**kwargs`` count as one each.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "sgl_speccompact"
CHECKED = [*PKG.glob("*.py"), *(PKG / "methods").rglob("*.py"), *(PKG / "programs").rglob("*.py"),
           *(PKG / "service").rglob("*.py")]
MAX_PARAMETERS = 8
# the public keyword entry points: every option a named keyword, so a caller's typo is a TypeError
# and help() lists them; below them the options travel as one MethodRequest
EXEMPT = {"methods/registry.py:run_method", "methods/speccompact.py:compact"}


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return len([n for n in names if n not in ("self", "cls")]) + bool(a.vararg) + bool(a.kwarg)


def long_signatures() -> list[str]:
    out = []
    for path in sorted(CHECKED):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                where = f"{path.relative_to(PKG).as_posix()}:{node.name}"
                if where not in EXEMPT and parameters(node) > MAX_PARAMETERS:
                    out.append(f"{where} ({parameters(node)})")
    return out


def test_no_function_takes_more_than_eight_parameters():
    assert long_signatures() == []


def test_the_exemptions_are_still_there():
    found = {f"{p.relative_to(PKG).as_posix()}:{n.name}" for p in CHECKED
             for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.FunctionDef)}
    assert EXEMPT <= found
