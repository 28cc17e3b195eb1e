"""Import a script from ``bench/`` as a module (the folder is not a package)."""

import importlib.util
import sys

from tests.support.paths import REPO


def load_bench(name: str):
    """``bench/<name>.py`` as module ``bench_<name>``."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
