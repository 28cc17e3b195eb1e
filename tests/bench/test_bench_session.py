"""bench/session.py on the one-clock simulator: one short session, three compaction modes.

Checks structure, labelling and the accounting of every mode; how long a stall is
is a benchmark result, not a test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_scripts import load_bench

REPO = Path(__file__).resolve().parents[2]
TRAJECTORIES = REPO.parent / "shared" / "data" / "trajectories"
TOOLS = TRAJECTORIES / "All-Hands-AI__agent-sdk__tests__fixtures__llm_data__fncall-llm-message.json"


@pytest.fixture(scope="module")
def run(emulator_tokenizer_path, tmp_path_factory):
    if not TOOLS.is_file():
        pytest.skip(f"shared trajectories absent ({TOOLS})")
    bench = load_bench("session")
    out = tmp_path_factory.mktemp("bench") / "session.json"
    rc = bench.main(["--trajectories", str(TOOLS), "--model-pairs", "qwen3-8b:qwen3-0.6b", "--session-tokens",
                     "75000", "--tokenizer", emulator_tokenizer_path, "--out", str(out)])
    return rc, json.loads(out.read_text()), out


@pytest.mark.e2e  # runs the whole bench script
def test_three_modes_simulated_and_accounted(run):
    rc, report, out = run
    assert rc == 0 and report["latency_kind"] == "simulated" and "SIMULATED" in report["simulated_note"]
    rows = {r["mode"]: r for r in report["rows"]}
    assert set(rows) == {"sync", "ahead", "hermes"}
    assert len({r["requests"] for r in rows.values()}) == 1  # the same session in every mode
    for r in rows.values():
        assert r["compactions"] >= 1 and r["aborted"] == 0, r["records"]
        assert r["peak_prompt"] >= report["policy"]["trigger"]  # the session reached the trigger
        assert r["stall_max_s"] >= r["stall_median_s"] >= 0 and r["gpu_s"] > 0
        assert 0 <= r["wasted_gpu_s"] <= r["gpu_s"] and 0 <= r["carried_share"] <= 1
        for c in r["records"]:  # the plugin's request to the service is on the clock; Hermes calls the model itself
            assert (c["service_s"] > 0) is (r["mode"] != "hermes") and c["stall_s"] >= c["service_s"] + c["wait_s"]
    ahead = rows["ahead"]
    assert ahead["prepares"] >= 1 and ahead["prepares_reused"] >= 1  # a prepared prefix opened the later middle
    for c in ahead["records"]:
        if c["prepared"]:
            assert c["stall_s"] >= c["wait_s"] >= 0 and c["messages"] < rows["sync"]["records"][0]["messages"]
        if c["applied"]:  # nothing compacted at the trigger: the agent waits for the prepare and the lookup
            assert c["messages"] == 0 and c["stall_s"] == pytest.approx(c["wait_s"] + c["service_s"])
            assert c["stall_s"] > 0  # a stored prepare is not free: client cost and store lookup
    for mode in ("sync", "hermes"):
        assert rows[mode]["stall_median_s"] > 0
    assert rows["sync"]["prepares"] == rows["hermes"]["prepares"] == 0
    assert out.with_name(out.stem + "-stall.png").is_file()


@pytest.mark.e2e  # runs the whole bench script
def test_goal_rows_name_every_pair(run):
    _, report, _ = run
    goals = report["goals"]
    assert [g["model_pair"] for g in goals] == ["qwen3-8b:qwen3-0.6b"]
    assert set(goals[0]["met"]) == {"over_window", "ahead_median_stall", "wasted_share"}
    assert set(goals[0]["carried_share"]) == {"sync", "ahead"}
    for mode, share in goals[0]["carried_share"].items():
        recs = [c for r in report["rows"] if r["mode"] == mode for c in r["records"] if not c["aborted"]]
        assert share == pytest.approx(sum(c["carried_lines"] for c in recs) / sum(c["lines"] for c in recs))
    assert goals[0]["sessions_over_window"] == sum(r["over_window"] for r in report["rows"])
