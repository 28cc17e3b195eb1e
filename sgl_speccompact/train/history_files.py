"""History files in, validated conversations out, for SFT data generation.

Files are read with :func:`sgl_speccompact.history.formats.load_history` (every
supported agent format, several trials per tau2 file); without that module a
plain JSON list of OpenAI messages, or ``{"messages": [...]}``, still works.

A trajectory's id is the file stem plus a hash of the file's bytes (and the
trial index for multi-trial files), so the same file read from two places is
one trajectory, and ids do not depend on the directory layout.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..errors import ConfigError, HistoryFormatError, InvalidHistoryError
from ..history import parse_messages

HISTORY_SUFFIXES = (".json", ".traj")  # files picked up when a directory is given


@dataclass(frozen=True)
class Trajectory:
    """One conversation to summarize."""

    id: str  # stable id: file stem + content hash (+ trial index)
    messages: list[dict]  # OpenAI chat messages
    group: str = ""  # split unit: conversations of one file share it ("" = own id)
    source: str = ""  # where it was read from (for the manifest)

    @property
    def split_key(self) -> str:
        return self.group or self.id


def history_files(paths: Iterable[str | Path]) -> list[tuple[Path, bool]]:
    """Expand files and directories into ``(file, named_explicitly)`` pairs.

    Directories are searched recursively for ``*.json`` and ``*.traj`` files,
    in sorted order so runs are reproducible.
    """
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += [(f, False) for f in sorted(p.rglob("*")) if f.is_file() and f.suffix in HISTORY_SUFFIXES]
        elif p.is_file():
            out.append((p, True))
        else:
            raise ConfigError(f"history path does not exist: {p}")
    return out


def _plain_messages(path: Path) -> list[list[dict]]:
    """Fallback reader: a JSON list of OpenAI messages, or ``{"messages": [...]}``."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HistoryFormatError(f"cannot read JSON: {exc}", field=str(path)) from exc
    if isinstance(obj, dict) and isinstance(obj.get("messages"), list):
        obj = obj["messages"]
    if not isinstance(obj, list):
        raise HistoryFormatError("expected a list of OpenAI chat messages", field=str(path))
    return [obj]


def _conversations(path: Path) -> list[list[dict]]:
    """Every conversation a history file holds (several for tau2 result files)."""
    try:  # the multi-format reader is optional: plain OpenAI JSON works without it
        from ..history import formats
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__.rsplit('.', 1)[0]}.formats":
            raise
        return _plain_messages(path)
    return [formats.load_history(path, trial=t.index) for t in formats.list_trials(path)]


def _file_id(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:8]
    return f"{path.stem.removesuffix('.traj')}-{digest}"


def load_trajectories(paths: Iterable[str | Path]) -> tuple[list[Trajectory], list[str]]:
    """Read histories from files and directories.

    Parameters
    ----------
    paths : iterable of str or Path
        History files, or directories searched for ``*.json`` / ``*.traj``.

    Returns
    -------
    trajectories : list of Trajectory
        Validated conversations, duplicates (same file content) dropped.
    skipped : list of str
        Files found in directories that are not histories, with the reason.
        A file named explicitly that is not a history raises instead.
    """
    trajectories, skipped, seen = [], [], set()
    for path, explicit in history_files(paths):
        try:
            convs = _conversations(path)
            for conv in convs:
                parse_messages(conv)
        except InvalidHistoryError as exc:
            if explicit:
                raise
            skipped.append(f"{path}: {exc}")
            continue
        group = _file_id(path)
        if group in seen:
            continue
        seen.add(group)
        for i, conv in enumerate(convs):
            tid = f"{group}-t{i}" if len(convs) > 1 else group
            trajectories.append(Trajectory(tid, conv, group, str(path)))
    return trajectories, skipped
