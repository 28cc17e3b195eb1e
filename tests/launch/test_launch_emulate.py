"""``launch --emulate`` end to end: every method's summary, read line by line."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from tests.support.procs import READY_S
from tests.support.summary_checks import assert_summary_clean

TRAJ = Path(__file__).resolve().parents[3] / "shared" / "data" / "trajectories"
SMALL = TRAJ / "SWE-agent__mini-swe-agent__tests__test_data__github_issue.traj.json"


@pytest.mark.slow
@pytest.mark.skipif(not SMALL.is_file(), reason=f"shared trajectories absent ({SMALL})")
@pytest.mark.parametrize("method,source_judge", [("speccompact", False), ("speccompact", True), ("target_self", False),
                                                 ("hermes", False), ("openclaw", False), ("auto", False)])
def test_every_method_on_launch_emulate_writes_clean_summaries(emulated_service, method, source_judge):
    from sgl_speccompact.history.formats import load_history

    body = {"messages": load_history(SMALL), "method": method, "source_judge": source_judge}
    res = httpx.post(f"{emulated_service}/v1/compact", json=body, timeout=READY_S)
    assert res.status_code == 200, res.text[:2000]
    out = res.json()
    lines = assert_summary_clean(out)
    if method in ("speccompact", "target_self"):
        assert out["slots"] and any(ln.startswith("- ") for ln in lines)
    if method == "speccompact":  # the emulated judges rejected some drafts: their repairs are lines too
        assert out["stats"]["proposed_lines"] > 0
