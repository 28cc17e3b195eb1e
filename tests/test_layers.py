"""The package's layers: imports flow down, never up, and no module imports itself back.

The floors, bottom up (docs/concepts/layout.md):

    vocabulary (config, errors, schema, result, flags) < history < core < backends
    < programs < methods < service < launch < cli / __main__ / __init__

``emulator`` and ``train`` sit beside the product: they may import it, it
never imports them.  The one exception is ``launch --emulate`` (``launch.run``
imports the emulator lazily, only to emulate).

The lab sits above everything and outside the wheel: ``bench`` (the one-clock
simulator ``bench.sim`` and the retention evaluation ``bench.evaluation``, then
the harness ``bench.harness`` over them, then the scripts) and ``tests``.  It
may import the product; the wheel never imports the lab.

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
    "config": 0, "errors": 0, "schema": 0, "result": 0, "options": 0,
    "history": 1, "core": 2, "backends": 3, "programs": 4, "methods": 5,
    "service": 6, "launch": 7, "cli": 8, "__main__": 8, "__init__": 8,
}
BESIDE = {"emulator", "train"}  # import the product; the product never imports them
ALLOWED_UP = {("sgl_speccompact.launch.run", "emulator")}  # launch --emulate
LAB = ("bench", "tests")  # the repository's own packages, outside the wheel
# the lab's floors, bottom up: its libraries, the harness over them, then the scripts (any other bench module)
LAB_FLOORS = {"sim": 0, "evaluation": 0, "harness": 1}
SCRIPT_FLOOR = 2


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


def package_graph(root: Path = PKG) -> dict[str, set[str]]:
    """Module -> the modules of the package at ``root`` it imports (only names that are real modules)."""
    files = {module_name(p, root.parent, ""): p for p in root.rglob("*.py")}
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
                continue  # emulator/train importing the product
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
        if init.parent.name in FLOORS or init.parent.name in BESIDE:
            assert "import" in doc, f"{init.relative_to(REPO)}: say what it may and must not import"


def test_no_import_runs_up_a_layer():
    assert upward_imports(package_graph()) == []


def test_the_checker_sees_an_upward_import():
    graph = package_graph()
    graph["sgl_speccompact.core.lines"] = graph["sgl_speccompact.core.lines"] | {"sgl_speccompact.methods.pipeline"}
    graph["sgl_speccompact.history.messages"] |= {"sgl_speccompact.emulator.model"}
    bad = upward_imports(graph)
    assert any("core.lines -> sgl_speccompact.methods.pipeline" in b for b in bad)
    assert any("history.messages -> sgl_speccompact.emulator.model" in b for b in bad)


def test_no_import_cycle_in_the_package():
    assert cycles(without_package_inits(package_graph())) == []


def test_the_checker_sees_a_cycle():
    graph = without_package_inits(package_graph())
    graph["sgl_speccompact.errors"] = graph["sgl_speccompact.errors"] | {"sgl_speccompact.config"}
    assert ["sgl_speccompact.config", "sgl_speccompact.errors"] in cycles(graph)


def all_imports(root: Path) -> dict[str, set[str]]:
    """Module -> every module name it imports, for the modules under ``root``."""
    return {name: imports_of(p, name, p.name == "__init__.py")
            for name, p in ((module_name(p, root.parent, ""), p) for p in root.rglob("*.py"))}


def lab_imports(imports: dict[str, set[str]]) -> list[str]:
    """Imports of the lab (``bench``, ``tests``) by the modules in ``imports``."""
    return sorted(f"{src} -> {dst}" for src, dsts in imports.items() for dst in dsts
                  if dst.split(".")[0] in LAB)


def lab_floor(module: str) -> int:
    """The floor of a ``bench`` module: its library's, else a script's."""
    parts = module.split(".")
    return LAB_FLOORS.get(parts[1], SCRIPT_FLOOR) if len(parts) > 1 else SCRIPT_FLOOR


def lab_upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports among ``bench`` modules that run up its floors, or across between libraries of one floor."""
    bad = []
    for src, targets in graph.items():
        for dst in targets:
            src_lib, dst_lib = src.split(".")[:2], dst.split(".")[:2]
            if dst == "bench" or src_lib == dst_lib:
                continue
            if lab_floor(dst) > lab_floor(src) or (lab_floor(dst) == lab_floor(src) < SCRIPT_FLOOR):
                bad.append(f"{src} -> {dst}")
    return sorted(bad)


def test_the_wheel_never_imports_the_lab():
    assert lab_imports(all_imports(PKG)) == []


def test_the_checker_sees_the_wheel_import_the_lab():
    imports = all_imports(PKG)
    imports["sgl_speccompact.core.lines"] |= {"bench.sim.simulator"}
    imports["sgl_speccompact.emulator.server"] |= {"tests.support.tiny_qwen3"}
    assert lab_imports(imports) == ["sgl_speccompact.core.lines -> bench.sim.simulator",
                                    "sgl_speccompact.emulator.server -> tests.support.tiny_qwen3"]


def test_the_lab_imports_down_its_floors():
    assert lab_upward_imports(package_graph(BENCH)) == []


def test_the_checker_sees_the_lab_import_up():
    graph = package_graph(BENCH)
    graph["bench.sim.servers"] |= {"bench.harness.runs", "bench.evaluation.recall"}
    graph["bench.harness.runs"] |= {"bench.latency"}
    assert lab_upward_imports(graph) == ["bench.harness.runs -> bench.latency",
                                         "bench.sim.servers -> bench.evaluation.recall",
                                         "bench.sim.servers -> bench.harness.runs"]


def test_no_import_cycle_in_the_lab():
    assert cycles(without_package_inits(package_graph(BENCH))) == []
