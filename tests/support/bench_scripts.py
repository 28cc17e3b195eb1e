"""Import a script of ``bench/`` (a package of the repository) as the module it runs as."""

import importlib


def load_bench(name: str):
    """``bench/<name>.py`` as module ``bench.<name>`` (``python -m bench.<name>`` runs the same module)."""
    return importlib.import_module(f"bench.{name}")
