"""Reading a summary made on the real servers: lines, provenance, label words.

Every assertion of the tier goes through here, so each one reads the summary
text itself, not only counts.
"""

from __future__ import annotations

import copy
from pathlib import Path

from tests.real_sglang import scripts
from tests.real_sglang.real_servers import unavailable
from sgl_speccompact.core.ledger import strip_ledger
from sgl_speccompact.config import CompactConfig
from sgl_speccompact.history.formats import load_history

TRAJ = Path(__file__).resolve().parents[3] / "shared" / "data" / "trajectories"
OPENAI = "All-Hands-AI__agent-sdk__tests__fixtures__llm_data__fncall-llm-message.json"
LABEL_WORDS = {w.lower() for w in scripts.LABELS}


def history(name: str = OPENAI) -> list[dict]:
    """A real trajectory that holds none of the scripts' marker words."""
    path = TRAJ / name
    if not path.exists():
        unavailable(f"shared trajectories not found at {TRAJ}")
    messages = load_history(path)
    text = str(messages)
    for word in (*scripts.MARKERS.values(), scripts.REJECT, scripts.NO_SOURCE):
        assert word.strip() not in text, f"the trajectory mentions the marker {word!r}"
    return messages


def body_lines(summary: str) -> list[str]:
    """The summary's content lines: no headings, no blank lines, no empty-slot markers.

    A line is written into one slot only (a copy in a later slot is removed at
    assembly), so a slot whose scripted lines an earlier slot holds reads ``(none)``.
    """
    markers = set(CompactConfig().empty_markers)
    summary = strip_ledger(summary)  # the exact ledger copies the history: no model wrote it
    return [ln for ln in summary.splitlines() if ln.strip() and not ln.startswith("#") and ln.strip() not in markers]


def assert_no_label_lines(summary: str) -> None:
    """No line of ``summary`` is a bare judge label, in any case or spacing."""
    bare = [ln for ln in summary.splitlines() if ln.strip().strip(".").lower() in LABEL_WORDS]
    assert not bare, f"bare label lines in the summary: {bare}"


def assert_scripted(summary: str, allowed: set[str] | None = None) -> list[str]:
    """Every content line was written by a scripted model; returns the lines."""
    allowed = scripts.written() if allowed is None else allowed
    lines = body_lines(summary)
    assert lines, "the summary has no content lines"
    stray = [ln for ln in lines if ln not in allowed]
    assert not stray, f"lines no scripted model writes: {stray}"
    assert_no_label_lines(summary)
    return lines


class Unchanged:
    """``with Unchanged(messages):`` fails when the block mutated the caller's history."""

    def __init__(self, messages):
        self.messages, self.before = messages, copy.deepcopy(messages)

    def __enter__(self):
        return self.messages

    def __exit__(self, *exc):
        if exc[0] is None:
            assert self.messages == self.before, "the caller's history was mutated"
