"""bench/latency.py end to end on the SGLang-API emulator (one small real trajectory, tiny time_scale).

Checks structure and labelling only; which method is faster is a measurement, not a test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_scripts import load_bench

REPO = Path(__file__).resolve().parents[1]
TRAJECTORIES = REPO.parent / "shared" / "data" / "trajectories"
SMALL = TRAJECTORIES / "SWE-agent__mini-swe-agent__tests__test_data__local.traj.json"
MONOLITHIC_TOKENS = 300


@pytest.fixture(scope="module")
def bench():
    return load_bench("latency")


@pytest.fixture(scope="module")
def run(bench, emulator_tokenizer_path, tmp_path_factory):
    if not SMALL.is_file():
        pytest.skip(f"shared trajectories absent ({SMALL})")
    out = tmp_path_factory.mktemp("bench") / "latency.json"
    rc = bench.main(["--trajectories", str(SMALL), "--tokenizer", emulator_tokenizer_path, "--time-scale", "0.01",
                     "--monolithic-tokens", str(MONOLITHIC_TOKENS), "--out", str(out)])
    return rc, json.loads(out.read_text())


def test_one_simulated_row_per_method(bench, run):
    rc, report = run
    assert rc == 0
    methods, _, _ = bench.rc.resolve_methods()
    assert report["benchmark"] == "latency" and report["emulator"] is True
    assert report["latency_kind"] == "simulated"
    assert "SIMULATED" in report["latency_label"] and "not a GPU measurement" in report["simulated_note"]
    assert report["simulated_method"] and report["headline_field"] == "simulated_e2e_s"
    assert report["speedup_field"] == "speedup_vs_hermes_simulated"
    cond = report["conditions"]
    assert cond["backend"] == "emulator" and cond["model_pair"] == "qwen3-8b:qwen3-0.6b"
    assert cond["p_accept"] == 0.7 and cond["time_scale"] == 0.01
    assert cond["monolithic_tokens"] == MONOLITHIC_TOKENS and cond["flush_before_each_compaction"] is True
    assert {s["simulated_cost_model"]["model"] for s in report["servers"].values()} == {"Qwen/Qwen3-8B",
                                                                                        "Qwen/Qwen3-0.6B"}
    assert sorted(r["method"] for r in report["rows"]) == sorted(methods)
    for row in report["rows"]:
        assert "error" not in row, row
        assert row["trajectory"] == "local.traj.json" and row["messages"] == 6
        assert row["simulated_e2e_s"] > 0 and row["speedup_vs_hermes_simulated"] > 0
        assert "measured_e2e_s" not in row  # nothing on the emulator is a measurement
        assert row["trace_complete"] is True
        rep = row["repeats"][0]
        assert rep["simulated_e2e_s"] == row["simulated_e2e_s"]
        assert set(rep["simulated_busy_s"]) == {"target", "drafter"} and rep["simulated_busy_s"]["target"] > 0
        for key in ("simulated_pre_fork_s", "simulated_slot_chain_s", "simulated_post_join_s",
                    "wall_over_time_scale_s"):
            assert key in rep, key
        for server in ("target", "drafter"):
            assert {"requests", "prompt_tokens", "cached_tokens", "completion_tokens"} <= set(row[server])
    assert set(report["summary"]) == set(methods)


def test_hermes_is_the_reference(run):
    _, report = run
    hermes = next(r for r in report["rows"] if r["method"] == "hermes")
    assert hermes["speedup_vs_hermes_simulated"] == 1.0
    assert report["summary"]["hermes"]["geomean_speedup_vs_hermes_simulated"] == 1.0
    for row in report["rows"]:
        assert row["speedup_vs_hermes_simulated"] == pytest.approx(hermes["simulated_e2e_s"] / row["simulated_e2e_s"])


def test_monolithic_generation_length_is_the_knob(run):
    _, report = run
    for method in ("hermes", "openclaw"):
        row = next(r for r in report["rows"] if r["method"] == method)
        assert abs(row["target"]["completion_tokens"] - MONOLITHIC_TOKENS) <= 5, row["target"]


def test_slot_parallel_methods_have_slot_chains(run):
    _, report = run
    for method in ("speccompact", "target_self"):
        rep = next(r for r in report["rows"] if r["method"] == method)["repeats"][0]
        assert len(rep["simulated_slot_chain_s"]) == 6
        assert rep["critical_slot"] in rep["simulated_slot_chain_s"]


def _req(slot, t0, t1, lat):
    return {"slot": slot, "t0": t0, "t1": t1, "simulated_latency_s": lat}


def test_critical_path_composition(bench):
    trace = [
        _req(None, 0.0, 1.0, 0.5), _req(None, 0.1, 0.9, 0.3),  # concurrent prefills: max
        _req("a", 1.0, 1.1, 0.2), _req("b", 1.0, 1.2, 0.4), _req("a", 1.2, 1.3, 0.3),  # slots: max of sums
        _req(None, 2.0, 2.1, 0.1), _req(None, 2.2, 2.3, 0.05),  # sequential after the join: sum
    ]
    cp = bench.critical_path(trace)
    assert cp["simulated_pre_fork_s"] == pytest.approx(0.5)
    assert cp["simulated_slot_chain_s"] == pytest.approx({"a": 0.5, "b": 0.4})
    assert cp["critical_slot"] == "a"
    assert cp["simulated_post_join_s"] == pytest.approx(0.15)
    assert cp["simulated_e2e_s"] == pytest.approx(1.15)
    assert bench.critical_path([_req(None, 0.0, 1.0, None)]) is None
    assert bench.critical_path([]) is None


def test_slot_regex_reads_target_and_drafter_prompts(bench):
    from sgl_speccompact.prompts import drafter_slot_request, target_slot_request
    from sgl_speccompact.schema import OPENCLAW_SLOTS

    regex = bench.slot_regex()
    for slot in OPENCLAW_SLOTS:
        for text in (target_slot_request(slot), drafter_slot_request(slot)):
            found = regex.findall("history ...\n" + text + "\n- a line")
            assert [g for g in found[-1] if g] == [slot.name]
