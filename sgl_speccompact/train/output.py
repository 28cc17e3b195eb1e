"""Drafter SFT records and the files they go to (the data generator's output edge).

``train.jsonl`` and ``validation.jsonl`` hold one JSON record per line;
:func:`write_dataset` streams :class:`Example` s into them and counts what
it wrote.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

SPLITS = ("train", "validation")


@dataclass(frozen=True)
class Example:
    """One generated record and the split it belongs to."""

    split: str  # "train" | "validation"
    record: dict  # trajectory_id, slot, incremental, prompt, completion
    truncated: bool = False  # the target hit max_tokens; the cut last line was dropped


@dataclass
class DataSummary:
    """Counts reported after a run (also written to ``manifest.json``)."""

    histories: int = 0  # trajectories used
    examples: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SPLITS, 0))  # records per split
    trajectories: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SPLITS, 0))  # per split
    incremental: int = 0  # examples with a previous summary
    truncated: int = 0  # completions that hit max_tokens
    empty: int = 0  # completions with no text
    completion_chars: int = 0  # total characters of supervision
    skipped: list[str] = field(default_factory=list)  # directory files that are not histories
    seconds: float = 0.0  # wall time of generation


def write_dataset(examples: Iterable[Example], out_dir: str | Path) -> DataSummary:
    """Stream examples into ``out_dir/train.jsonl`` and ``out_dir/validation.jsonl``.

    Returns the counts; the caller writes the manifest.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary, seen = DataSummary(), {s: set() for s in SPLITS}
    files = {s: (out / f"{s}.jsonl").open("w", encoding="utf-8") for s in SPLITS}
    try:
        for ex in examples:
            files[ex.split].write(json.dumps(ex.record, ensure_ascii=False) + "\n")
            text = ex.record["completion"][0]["content"]
            summary.examples[ex.split] += 1
            summary.incremental += bool(ex.record.get("incremental"))
            seen[ex.split].add(ex.record["trajectory_id"])
            summary.truncated += ex.truncated
            summary.empty += not text
            summary.completion_chars += len(text)
    finally:
        for f in files.values():
            f.close()
    summary.trajectories = {s: len(ids) for s, ids in seen.items()}
    summary.histories = sum(summary.trajectories.values())
    return summary


