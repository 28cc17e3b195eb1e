"""The Hermes plugin's copy of the tool-group cutter agrees with the package's.

The plugin runs in Hermes's own Python with the standard library only and
cannot import ``sgl_speccompact``, so it keeps its own copy of
:func:`~sgl_speccompact.history.tool_groups.group_start` and
:func:`~sgl_speccompact.history.tool_groups.past_tool_results`; here both
move every cut index of every shared trajectory to the same place.
"""

from pathlib import Path

import pytest


from speccompact_hermes import messages as plugin

from sgl_speccompact.history.formats import load_history
from sgl_speccompact.history.tool_groups import group_start, past_tool_results

TRAJ = Path(__file__).resolve().parents[3] / "shared" / "data" / "trajectories"
FILES = sorted(p for p in TRAJ.glob("*") if p.suffix in (".json", ".traj")) if TRAJ.is_dir() else []


@pytest.mark.skipif(not FILES, reason=f"shared trajectories not found at {TRAJ}")
def test_the_plugin_cuts_tool_groups_where_the_package_does():
    checked = 0
    for path in FILES:
        try:
            messages = load_history(path)
        except Exception:  # noqa: BLE001 - a file with no single conversation (a task list): nothing to cut
            continue
        for i in range(len(messages) + 1):
            assert plugin._tool_group_start(messages, i) == group_start(messages, i), (path.name, i)
            assert plugin._past_tool_results(messages, i) == past_tool_results(messages, i), (path.name, i)
        checked += any(m.get("tool_calls") for m in messages)
    assert checked >= 3  # several trajectories with tool calls were compared
