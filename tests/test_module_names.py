"""Every module of the package has a basename of its own.

Two ``router.py`` or two ``cli.py`` make a traceback, an import line or a
doc reference ambiguous until the folder is read too.  ``__init__.py`` and
``__main__.py`` are a package's own names and exempt.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "sgl_speccompact"
EXEMPT = {"__init__.py", "__main__.py"}  # every package has them


def shared_basenames(root: Path) -> dict[str, list[str]]:
    """``basename -> paths`` for every basename two or more modules under ``root`` share."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if path.name not in EXEMPT:
            where[path.name].append(path.relative_to(root).as_posix())
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_no_two_package_modules_share_a_basename():
    assert shared_basenames(PKG) == {}


def test_the_check_finds_a_shared_basename_and_exempts_init(tmp_path):
    for rel in ("a/router.py", "b/router.py", "a/__init__.py", "b/__init__.py", "a/plan.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert shared_basenames(tmp_path) == {"router.py": ["a/router.py", "b/router.py"]}
