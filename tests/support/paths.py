"""Where the tests find the repository and the shared agent trajectories."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the repository root
# ../shared beside the repository; a worktree one level deeper finds it one level up
TRAJECTORIES = next((p for p in (REPO.parent / "shared" / "data" / "trajectories",
                                 REPO.parents[1] / "shared" / "data" / "trajectories") if p.is_dir()),
                    REPO.parent / "shared" / "data" / "trajectories")


def trajectory_files() -> list[Path]:
    """The shared folder's agent trajectories: its files the history loader reads (``SOURCES.md`` and
    tau2-bench's task list are not trajectories); none when the folder is absent."""
    from sgl_speccompact.errors import HistoryFormatError
    from sgl_speccompact.history.formats import load_history

    found = []
    for path in sorted(TRAJECTORIES.glob("*")) if TRAJECTORIES.is_dir() else []:
        try:
            load_history(path)
        except HistoryFormatError:
            continue
        found.append(path)
    return found
