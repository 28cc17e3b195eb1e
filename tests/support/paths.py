"""Where the tests find the repository and the shared agent trajectories."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the repository root
# ../shared beside the repository; a worktree one level deeper finds it one level up
TRAJECTORIES = next((p for p in (REPO.parent / "shared" / "data" / "trajectories",
                                 REPO.parents[1] / "shared" / "data" / "trajectories") if p.is_dir()),
                    REPO.parent / "shared" / "data" / "trajectories")
