"""What the repository's texts name, and whether it exists: paths, modules and names in them.

Markdown pages name things in backticks; Python files name them in docstrings (backticks and
Sphinx roles such as ``:func:`~.judge.verdict```), comments and string constants; result JSONs
carry them in their notes.  :func:`python_references` and :func:`json_references` gather what a
``.py`` or a result file names, :func:`stale` keeps what does not exist.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "sgl_speccompact"
SUBPACKAGES = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
TOP_MODULES = {p.stem for p in PKG.glob("*.py")} - {"__init__", "__main__"}
PATH_RE = re.compile(r"^[\w.~-]*(?:/[\w.*-]+)+/?(?:::[\w\[\]-]+)?$|^[\w.-]+\.(?:py|md|toml|json|yaml|yml|ts|mjs|png)(?:::\w+)?$")
DOTTED_RE = re.compile(r"^(?:sgl_speccompact(?:\.\w+)*|[a-z_]+(?:\.\w+)+)$")


def spans(text: str) -> list[str]:
    """Backticked spans outside fenced code blocks.

    >>> spans("see `a/b.py` and\\n```\\n`not/this`\\n```\\n`c.md`")
    ['a/b.py', 'c.md']
    """
    out, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            out += re.findall(r"`([^`\n]+)`", line)
    return out


TOP = {p.name for p in ROOT.iterdir()} - {".git"}


def repo_paths(text: str) -> list[str]:
    """The spans that read as a path inside this repository.

    A path with a slash counts when its first folder is one of the repository's or the
    package's (``bench/latency.py``, ``core/judge.py``): hub ids (``Qwen/Qwen3-8B``), SGLang's own
    sources and output folders are not ours.  A bare file name counts when it is a ``.py``
    file.  Placeholders (``<time>``, ``...``), home and absolute paths are skipped.

    >>> repo_paths("`bench/x.py` `Qwen/Qwen3-8B` `config.json` `radix_cache.py` `bench/results/a-<t>.json`")
    ['bench/x.py', 'radix_cache.py']
    """
    out = []
    for s in spans(text):
        if not PATH_RE.match(s) or re.search(r"[<>{}$]|\.\.\.|^~|^/|^\w+://", s):
            continue
        first = s.split("/")[0]
        if ("/" in s and first in TOP | SUBPACKAGES) or ("/" not in s and s.split("::")[0].endswith(".py")):
            out.append(s)
    return out


def path_exists(span: str) -> bool:
    path, _, test = span.partition("::")
    if "/" not in path:  # a bare module file name: any file of that name in the repository
        return any(p for p in ROOT.rglob(path) if ".git" not in p.parts)
    for base in (ROOT, PKG, ROOT / "integrations"):
        hits = sorted(base.glob(path)) if "*" in path else [base / path] if (base / path).exists() else []
        if hits:
            return not test or any(re.search(rf"^(?:async )?def {re.escape(test.split('[')[0])}\b",
                                             h.read_text(), re.M) for h in hits if h.is_file())
    return False


def module_name_exists(dotted: str) -> bool | None:
    """True or False for a dotted name inside the package; None when it is not one."""
    parts = dotted.split(".")
    if parts[0] == "sgl_speccompact":
        parts = parts[1:]
    elif parts[0] not in SUBPACKAGES | TOP_MODULES:
        return None
    base = PKG
    for i, part in enumerate(parts):
        if (base / part).is_dir():
            base = base / part
            continue
        if (base / f"{part}.py").is_file():
            src, rest = (base / f"{part}.py").read_text(), parts[i + 1:]
        else:
            src, rest = ((base / "__init__.py").read_text() if (base / "__init__.py").is_file() else ""), parts[i:]
        return not rest or re.search(rf"\b{re.escape(rest[0])}\b", src) is not None
    return True


# ---------------------------------------------------------------- Python files and result JSONs

SCANNED = ("sgl_speccompact", "bench", "integrations/hermes", "tests", "docs/hooks", "examples")
# an unquoted path into the package or the benchmarks, in a comment, a string or a result JSON
BARE_PATH_RE = re.compile(r"(?<![\w./-])((?:sgl_speccompact|bench)/[\w./-]*\w\.(?:py|md|json|toml))(?![\w/])")
ROLE_RE = re.compile(r":(?:mod|func|class|meth|data|attr|obj|exc):`~?([\w.]+)`")
# a path into the design folder beside the repository: the repository speaks only of itself
OUTSIDE_RE = re.compile(r"(?<![\w/.-])reference/(?:cost_model|design_study|fair_race|hermes_context_engine)\.md")
FILE_SUFFIXES = ("json", "jsonl", "toml", "md", "py", "yaml", "yml", "txt", "ts", "png")


def without_examples(doc: str) -> str:
    """A docstring without its doctest examples (``>>>`` lines and their output).

    >>> without_examples("Text.\\n\\n>>> f('a/b.py')\\n'a/b.py'\\n\\nMore.")
    'Text.\\n\\nMore.'
    """
    out, example = [], False
    for line in doc.split("\n"):
        stripped = line.strip()
        example = stripped.startswith((">>>", "...")) or (example and stripped != "")
        if not example:
            out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out))


def _module_of(path: Path) -> str | None:
    """``sgl_speccompact.core.judge`` for a file of the package (its package for ``__init__.py``)."""
    rel = path.resolve().relative_to(ROOT)
    if rel.parts[0] != "sgl_speccompact":
        return None
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def texts(source: str) -> list[tuple[int, str, str]]:
    """``(line, kind, text)`` for every docstring, other string constant and comment of a source.

    >>> [(k, t) for _, k, t in texts("'Doc `a/b.py`.'\\nX = 'c/d.py'  # see e/f.py\\n")]
    [('docstring', 'Doc `a/b.py`.'), ('string', 'c/d.py'), ('comment', '# see e/f.py')]
    """
    tree = ast.parse(source)
    docs = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docs[id(first.value)] = first.value
    out = [(n.lineno, "docstring", n.value) for n in docs.values()]
    out += [(n.lineno, "string", n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]
    out += [(tok.start[0], "comment", tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT]
    return sorted(out, key=lambda t: t[0])


def python_references(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """``(line, reference)`` for what a ``.py`` file names (``source``: its text, if not the file's).

    Docstrings: backticked repository paths and dotted names (a leading dot is relative to the
    module's package, then each package above it).  Comments and string constants of the
    package and the benchmarks: unquoted ``sgl_speccompact/...`` and ``bench/...`` paths (tests
    carry such paths as data).  Everywhere: a path into the design folder beside the repository.
    """
    module = _module_of(path)
    is_test = path.resolve().relative_to(ROOT).parts[0] == "tests"
    out = []
    for line, kind, text in texts(path.read_text() if source is None else source):
        if kind != "docstring":
            if not is_test:  # tests carry paths as data
                out += [(line, p) for p in BARE_PATH_RE.findall(text)]
                out += [(line, m.group()) for m in OUTSIDE_RE.finditer(text)]
            continue
        out += [(line, m.group()) for m in OUTSIDE_RE.finditer(text)]
        text = without_examples(text).replace("``", "`")  # reST literals read as Markdown code spans
        out += [(line, p) for p in repo_paths(text) + BARE_PATH_RE.findall(text) if "/" in p and "*" not in p]
        names = [s.lstrip("~") for s in spans(text) if not PATH_RE.match(s)]
        names += [m.group(1) for m in ROLE_RE.finditer(text)]
        package = module if path.name == "__init__.py" else (module or "").rpartition(".")[0]
        for name in names:
            if name.rpartition(".")[2] in FILE_SUFFIXES:  # a file name or an extension, not a module
                continue
            if re.fullmatch(r"\.{1,2}\w+(?:\.\w+)*", name) and module is not None:
                out.append((line, f"{package}:{name}"))  # relative: resolved by exists()
            elif DOTTED_RE.match(name) and module_name_exists(name) is not None:
                out.append((line, name))
    return sorted(set(out))


def json_leaves(value):
    """Every scalar inside a parsed JSON value, depth first."""
    if isinstance(value, dict):
        for x in value.values():
            yield from json_leaves(x)
    elif isinstance(value, list):
        for x in value:
            yield from json_leaves(x)
    else:
        yield value


def json_references(path: Path) -> list[str]:
    """The repository paths written in a result JSON's strings (notes, conditions)."""
    found = [p for v in json_leaves(json.loads(path.read_text())) if isinstance(v, str)
             for p in BARE_PATH_RE.findall(v) + OUTSIDE_RE.findall(v)]
    return sorted(set(found))


def _defines(module_file: Path, name: str) -> bool:
    """Whether a module defines ``name`` (a package's ``__init__`` may also import it)."""
    tree = ast.parse(module_file.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if module_file.name == "__init__.py" and isinstance(node, ast.ImportFrom):
            if any((a.asname or a.name) == name for a in node.names):
                return True
    # a name a module serves lazily through its __getattr__
    return bool(re.search(rf"^def __getattr__\b[\s\S]*[\"']{re.escape(name)}[\"']", module_file.read_text(), re.M))


def dotted_exists(dotted: str) -> bool:
    """A module of the package, then a name it defines (attributes after a class are not checked)."""
    parts = dotted.split(".")
    if len(parts) == 1:
        return parts[0] == "sgl_speccompact"
    if parts[0] != "sgl_speccompact":
        return module_name_exists(dotted) is not False
    base, i = PKG, 1
    while i < len(parts) and (base / parts[i]).is_dir():
        base, i = base / parts[i], i + 1
    if i < len(parts) and (base / f"{parts[i]}.py").is_file():
        return i + 1 == len(parts) or _defines(base / f"{parts[i]}.py", parts[i + 1])
    if i == len(parts):
        return True
    return (base / "__init__.py").is_file() and _defines(base / "__init__.py", parts[i])


def relative_exists(package: str, name: str) -> bool:
    """A relative name (``.judge.verdict``, ``..core.judge``) from ``package``: its dots go up
    that many packages less one, then the name is tried there and in each package above.

    >>> relative_exists("sgl_speccompact.methods", ".request.MethodRequest")
    True
    >>> relative_exists("sgl_speccompact.methods", ".costmodel")  # it is core's
    False
    """
    level = len(name) - len(name.lstrip("."))
    parts = package.split(".")[:len(package.split(".")) - (level - 1)]
    while parts:
        if dotted_exists(".".join(parts) + "." + name.lstrip(".")):
            return True
        parts = parts[:-1]
    return False


def exists(reference: str) -> bool:
    """Whether a reference of :func:`python_references` or :func:`json_references` resolves."""
    if OUTSIDE_RE.fullmatch(reference):
        return False
    if ":" in reference:
        return relative_exists(*reference.split(":", 1))
    if "/" in reference or reference.endswith((".py", ".md", ".json")):
        return path_exists(reference)
    return dotted_exists(reference)


def stale(path: Path, source: str | None = None) -> list[str]:
    """``line: reference`` for each reference of a ``.py`` file that does not resolve."""
    return [f"{line}: {ref}" for line, ref in python_references(path, source) if not exists(ref)]


def python_files() -> list[Path]:
    """The repository's Python files (sources, benchmarks, the Hermes plugin, tests, hooks, examples)."""
    files = []
    for folder in SCANNED:
        files += [p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(files)
