"""A small ``bench/host.py``-shaped JSON for tests (its numbers are made up, not a measurement)."""

from __future__ import annotations

import json
from pathlib import Path

FIT = {"speccompact": {"fixed_s": 0.25, "per_100k_s": 0.5}, "target_self": {"fixed_s": 0.05, "per_100k_s": 0.3},
       "hermes": {"fixed_s": 0.04, "per_100k_s": 0.2}, "openclaw": {"fixed_s": 0.04, "per_100k_s": 0.2}}
CONDITIONS = {"label": "MEASURED (CPU)", "cpu_count": 2, "load_average_start": [3.0, 3.0, 3.0]}


def write_host_json(path: Path, fit: dict | None = None, conditions: dict | None = None) -> Path:
    """``path`` holding a host report with ``fit`` (default :data:`FIT`) as its ``host_cpu_fit``."""
    path.write_text(json.dumps({"benchmark": "host", "label": "MEASURED (CPU)",
                                "conditions": CONDITIONS if conditions is None else conditions,
                                "host_cpu_fit": FIT if fit is None else fit}))
    return path
