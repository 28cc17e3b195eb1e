"""The README and the docs site name only what exists, and every benchmark figure has a run behind it.

Paths: every backticked repository path in ``README.md``, ``bench/README.md`` and ``docs/**.md``
exists (tried from the repository root, then from ``sgl_speccompact/``); ``file.py::test_name``
names a test in that file; a glob (``latency-lever-*.json``) matches a file; a dotted name
``sgl_speccompact.core.judge`` or ``core.judge.judge_next_token`` is a module of the package and, after
it, a name that module's source defines or imports.

Figures, the rule of docs/benchmarks/index.md: a current benchmark page (``docs/benchmarks/*.md``
but the index; ``archive/`` pages are dated copies and exempt) names its runs as backticked
``bench/results/*.json`` paths, each one committed, and every number in its tables is a number
of those JSON files at the printed precision (or that number x 100 printed with ``%``).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from functools import lru_cache

import pytest

from tests.support.references import (DOTTED_RE, json_leaves, PATH_RE, ROOT, module_name_exists, path_exists, repo_paths,
                                     spans)

PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").rglob("*.md")])
NUMBER_RE = re.compile(r"(?<![\w./-])-?\d[\d,]*(?:\.\d+)?(?=[x%]?(?!\w))")


# Pages written alongside this site's first version; DOCS_SKIP_MISSING=1 (as for mkdocs, see
# docs/hooks/nav_check.py) tolerates exactly these being absent, to check a branch without them.
PENDING = {f"docs/{p}.md" for p in (
    "guides/real-sglang", "guides/security", "guides/sessions-and-prepare", "guides/shared-store",
    "guides/hermes", "guides/openclaw", "guides/emulator", "concepts/incremental-compaction",
    "benchmarks/single-compaction", "benchmarks/session", "benchmarks/auto-picker")}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_backticked_path_and_module_exists(page):
    text = page.read_text()
    pending_ok = PENDING if os.environ.get("DOCS_SKIP_MISSING") == "1" else set()
    missing = [s for s in repo_paths(text) if not path_exists(s) and s not in pending_ok]
    missing += [s for s in spans(text) if DOTTED_RE.match(s) and not PATH_RE.match(s) and module_name_exists(s) is False]
    assert not missing, f"{page.relative_to(ROOT)} names what does not exist: {missing}"


# ---------------------------------------------------------------- benchmark figures

BENCH_PAGES = sorted(p for p in (ROOT / "docs" / "benchmarks").glob("*.md") if p.name != "index.md")


def table_numbers(text: str) -> list[str]:
    """Numbers printed in the body rows of the page's Markdown tables.

    Left out: the header row, the first cell of each row (the row's label) and tables whose
    first header cell is ``flag`` or ``option`` (they list defaults, not results).

    >>> table_numbers("| run | b |\\n|---|---|\\n| p=0.7 | 1.52 s, 40% |\\n\\n| flag | d |\\n|--|--|\\n| x | 42 |")
    ['1.52', '40%']
    """
    out, lines = [], text.splitlines()
    skip = False
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            skip = False
            continue
        if i + 1 < len(lines) and RULE_RE.match(lines[i + 1]):  # a header row
            skip = line.strip("| ").lower().startswith(("flag", "option"))
            continue
        if skip or RULE_RE.match(line):
            continue
        body = line.split("|", 2)[2] if line.count("|") > 2 else ""
        for m in NUMBER_RE.finditer(body):
            out.append(m.group() + ("%" if body[m.end():m.end() + 1] == "%" else ""))
    return out


RULE_RE = re.compile(r"^\|[\s:|-]+\|$")


@lru_cache(maxsize=None)
def json_numbers(path: str) -> frozenset[float]:
    """Every number in a JSON file, also rounded to 0-4 decimals and as a percentage."""
    numbers = [v for v in json_leaves(json.loads((ROOT / path).read_text()))
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return frozenset(round(k * v, d) for v in numbers for k in (1, 100) for d in range(5))


def committed(path: str) -> bool:
    res = subprocess.run(["git", "ls-files", "--error-unmatch", path], cwd=ROOT, capture_output=True)
    return res.returncode == 0


@pytest.mark.parametrize("page", BENCH_PAGES, ids=lambda p: p.name)
def test_every_benchmark_figure_is_in_a_committed_run(page):
    text = page.read_text()
    runs = sorted({s for s in spans(text) if re.fullmatch(r"bench/results/[\w.-]+\.json", s)})
    assert runs, f"{page.name} names no run (a backticked bench/results/*.json path)"
    assert all(committed(r) for r in runs), [r for r in runs if not committed(r)]
    numbers = set().union(*(json_numbers(r) for r in runs))
    untraced = []
    for printed in table_numbers(text):
        value = float(printed.rstrip("%").replace(",", ""))
        if value not in numbers:
            untraced.append(printed)
    assert not untraced, f"{page.name}: table figures in none of {runs}: {untraced[:20]}"
