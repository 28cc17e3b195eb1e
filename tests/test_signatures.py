"""No function of the orchestration layers takes more than eight parameters.

A long signature is an argument threaded through a layer: one request
object (:class:`~sgl_speccompact.methods.request.MethodRequest`) carries a
compaction's inputs instead; the public entry points (``run_method``,
``compact``) take the common options as keywords and the rarely used ones
on a request passed as ``messages``.  The modules checked are ``methods/``,
``programs/``, ``service/`` and the top-level modules; ``self`` and ``cls``
do not count, ``*args`` and ``**kwargs`` count as one each.  No exemptions.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "sgl_speccompact"
CHECKED = [*PKG.glob("*.py"), *(PKG / "methods").rglob("*.py"), *(PKG / "programs").rglob("*.py"),
           *(PKG / "service").rglob("*.py")]
MAX_PARAMETERS = 8


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
                if parameters(node) > MAX_PARAMETERS:
                    out.append(f"{where} ({parameters(node)})")
    return out


def test_no_function_takes_more_than_eight_parameters():
    assert long_signatures() == []


def test_the_checker_counts_keywords_and_varargs():
    fn = ast.parse("def f(self, a, /, b, *args, c, d=1, **kw): pass").body[0]
    assert parameters(fn) == 6
