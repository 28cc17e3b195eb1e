"""Fixtures of the simulator tests: the lines of the shared trajectories."""

from __future__ import annotations

import pytest
from bench.sim.sources import trajectory_lines
from tests.support.paths import TRAJECTORIES


@pytest.fixture(scope="module")
def lines():
    paths = sorted(p for p in TRAJECTORIES.glob("*") if p.suffix in (".json", ".traj")) if TRAJECTORIES.is_dir() else []
    got = trajectory_lines(paths)
    if len(got) < 200:
        pytest.skip(f"shared trajectories absent or too few lines ({TRAJECTORIES})")
    return got
