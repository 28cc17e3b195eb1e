"""The package's layers: imports flow down, never up, and no module imports itself back.

The floors, bottom up (docs/concepts/layout.md):

    vocabulary (config, errors, schema, result, flags) < history < core < backends
    < programs < methods < service < launch < cli / __main__ / __init__

``testing``, ``evaluation`` and ``train`` sit beside the product: they may
import it, it never imports them.  ``bench`` (the scripts and
``bench/harness``, outside the wheel) sits above everything: it may import
the product, the product never imports it.  The one exception is ``launch --emulate``
(``launch.run`` imports the emulator lazily, only to emulate).

Every import counts, including the ones inside functions: a lazy import
running up is still an upward dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "sgl_speccompact"
BENCH = REPO / "bench"

FLOORS = {
    "config": 0, "errors": 0, "schema": 0, "result": 0, "flags": 0,
    "history": 1, "core": 2, "backends": 3, "programs": 4, "methods": 5,
    "service": 6, "launch": 7, "cli": 8, "__main__": 8, "__init__": 8,
}
BESIDE = {"testing", "evaluation", "train"}  # import the product; the product never imports them
ALLOWED_UP = {("sgl_speccompact.launch.run", "testing")}  # launch --emulate


def module_name(path: Path, root: Path, prefix: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([prefix, *parts]) if prefix else ".".join(parts)


def imports_of(path: Path, name: str, is_pkg: bool) -> set[str]:
    """Absolute module names imported anywhere in ``path`` (``from x import y`` gives x.y when y is a module)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
    return found


def package_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (only names that are real modules)."""
    files = {module_name(p, PKG.parent, ""): p for p in PKG.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        found = imports_of(path, name, path.name == "__init__.py")
        graph[name] = {m for m in found if m in files and m != name}
    return graph


def floor(module: str) -> tuple[str, int | None]:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return top, FLOORS.get(top)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for src, targets in graph.items():
        src_top, src_floor = floor(src)
        for dst in targets:
            dst_top, dst_floor = floor(dst)
            if src_top == dst_top:
                continue
            if dst_top in BESIDE:
                if src_top not in BESIDE and (src, dst_top) not in ALLOWED_UP:
                    bad.append(f"{src} -> {dst} (the product imports {dst_top})")
                continue
            if src_floor is None or dst_floor is None:
                continue  # testing/evaluation/train importing the product
            if dst_floor > src_floor:
                bad.append(f"{src} -> {dst} ({src_top} is below {dst_top})")
    return sorted(bad)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def without_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Drop edges into a package's own ``__init__`` from inside it: re-exports are not a cycle."""
    return {src: {d for d in dsts if not (src.startswith(d + ".") and d != "sgl_speccompact")}
            for src, dsts in graph.items()}


def test_the_top_level_holds_at_most_eight_modules():
    modules = sorted(p.name for p in PKG.glob("*.py"))
    assert len(modules) <= 8, modules


def test_every_subpackage_states_its_layer():
    for init in PKG.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.splitlines()) >= 3, f"{init.relative_to(REPO)} has no layer docstring"
        if init.parent.name in FLOORS or init.parent.parent.name == "testing":
            assert "import" in doc, f"{init.relative_to(REPO)}: say what it may and must not import"


def test_no_import_runs_up_a_layer():
    assert upward_imports(package_graph()) == []


def test_the_checker_sees_an_upward_import():
    graph = package_graph()
    graph["sgl_speccompact.core.lines"] = graph["sgl_speccompact.core.lines"] | {"sgl_speccompact.methods.pipeline"}
    graph["sgl_speccompact.history.messages"] |= {"sgl_speccompact.testing.emulator.model"}
    bad = upward_imports(graph)
    assert any("core.lines -> sgl_speccompact.methods.pipeline" in b for b in bad)
    assert any("history.messages -> sgl_speccompact.testing.emulator.model" in b for b in bad)


def test_no_import_cycle_in_the_package():
    assert cycles(without_package_inits(package_graph())) == []


def test_the_checker_sees_a_cycle():
    graph = without_package_inits(package_graph())
    graph["sgl_speccompact.errors"] = graph["sgl_speccompact.errors"] | {"sgl_speccompact.config"}
    assert ["sgl_speccompact.config", "sgl_speccompact.errors"] in cycles(graph)


def test_the_product_never_imports_bench():
    bad = [f"{src} -> {dst}" for src, path in ((module_name(p, PKG.parent, ""), p) for p in PKG.rglob("*.py"))
           for dst in imports_of(path, src, path.name == "__init__.py") if dst == "bench" or dst.startswith("bench.")]
    assert bad == []


def test_the_bench_harness_imports_no_bench_script():
    scripts = {p.stem for p in BENCH.glob("*.py")} - {"__init__"}
    for path in (BENCH / "harness").glob("*.py"):
        name = module_name(path, REPO, "")
        tops = {m.split(".")[0] for m in imports_of(path, name, path.name == "__init__.py")}
        assert not tops & scripts, f"{path.relative_to(REPO)} imports a bench script: {tops & scripts}"


def test_no_import_cycle_among_the_bench_scripts():
    scripts = {p.stem: p for p in BENCH.glob("*.py")}
    graph = {name: {m.split(".")[0] for m in imports_of(p, name, False)} & (set(scripts) - {name})
             for name, p in scripts.items()}
    assert cycles(graph) == []
