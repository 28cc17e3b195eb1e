"""bench/latency.py on the one-clock simulator: a small run over the fair field.

Checks structure, labelling, seeding and the simulator's invariants on every row, and that auto's
median is within 5% of the fastest method's in every cell of the small run; which method is faster
is a benchmark result, not a test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.bench_scripts import load_bench
from tests.support.host_cpu import write_host_json

REPO = Path(__file__).resolve().parents[2]
TRAJECTORIES = REPO.parent / "shared" / "data" / "trajectories"
SMALL = TRAJECTORIES / "SWE-agent__mini-swe-agent__tests__test_data__local.traj.json"
REQUIRED = ("method", "deployment", "model_pair", "speculative", "p_accept", "seeds", "e2e_median_s", "e2e_min_s",
            "e2e_max_s")


@pytest.fixture(scope="module")
def bench():
    return load_bench("latency")


@pytest.fixture(scope="module")
def run(bench, emulator_tokenizer_path, tmp_path_factory):
    if not SMALL.is_file():
        pytest.skip(f"shared trajectories absent ({SMALL})")
    out = tmp_path_factory.mktemp("bench") / "latency.json"
    host = write_host_json(out.with_name("host-fixture.json"))  # made-up host CPU line per method
    rc = bench.main(["--host-cpu", str(host), "--trajectories", str(SMALL), "--synthetic-tokens", "", "--model-pairs",
                     "qwen3-8b:qwen3-0.6b", "--p-accept", "0.5,0.9", "--deployments", "one-gpu",
                     "--equal-hardware", "--speculative", "none,eagle3", "--seeds", "2", "--hermes-tokens", "300",
                     "--tokenizer", emulator_tokenizer_path, "--out", str(out)])
    return rc, json.loads(out.read_text()), out


@pytest.mark.e2e  # runs the whole bench script
def test_every_row_is_simulated_and_keeps_the_busy_time_invariant(bench, run):
    from bench.sim import host_cpu

    rc, report, _ = run
    assert rc == 0
    assert report["latency_kind"] == "simulated" and "SIMULATED" in report["simulated_note"]
    host = host_cpu.load(report["host_cpu"]["path"])
    rows = report["rows"]
    assert {r["deployment"] for r in rows} == {"one-gpu", "two-gpu-equal"}
    assert {r["speculative"] for r in rows} == {"none", "eagle3"}
    # methods + hermes@slots + auto, x deployments x speculative x rates x seeds (one history)
    methods, _, _ = bench.runs.resolve_methods()
    assert len(rows) == (len(methods) + 2) * 2 * 2 * 2 * 2
    assert len({r["seed"] for r in rows}) == 2  # the draws differ
    for row in rows:
        assert "error" not in row, row
        for server in ("target", "drafter"):
            assert row[server]["busy_s"] <= row["e2e_s"] + 1e-9, (row["method"], row["deployment"], server)
        assert row["busy_ok"] is True
        assert sum(row["parts"].values()) == pytest.approx(row["e2e_s"], abs=1e-9)
        # the host's CPU for the method and the history's tokens, on top of the device's time
        assert row["host_cpu_s"] == pytest.approx(host.seconds(row.get("pick") or row["method"], row["history_tokens"]))
        assert row["host_cpu_s"] > 0 and row["e2e_s"] == pytest.approx(row["e2e_device_s"] + row["host_cpu_s"])
    tp2 = [r for r in rows if r["deployment"] == "two-gpu-equal" and r["method"] in ("hermes", "target_self")]
    assert tp2 and all(r["target_tp"] == 2 for r in tp2)
    spec = [r for r in rows if r["speculative"] == "eagle3"]
    assert all(r["target_speculative"] == "EAGLE3" and r["drafter_speculative"].startswith("no EAGLE3")
               for r in spec)


@pytest.mark.e2e  # runs the whole bench script
def test_summary_rows_carry_the_required_fields_and_auto_names_its_pick(run):
    _, report, out = run
    for s in report["summary_by_cell"]:
        assert all(k in s for k in REQUIRED), s.keys()
        assert s["e2e_min_s"] <= s["e2e_median_s"] <= s["e2e_max_s"] and s["seeds"] == 2
    autos = [s for s in report["summary_by_cell"] if s["method"] == "auto"]
    assert len(autos) == 8 and all(s["pick"] in ("speccompact", "target_self", "hermes", "openclaw") for s in autos)
    # auto's closed form against the simulator: at least half the picks within 5% of the fastest (the miss rate on
    # held-out cells is published by bench/auto_holdout.py, not asserted here)
    checks = report["auto_check"]
    assert checks and sum(c["within_5pct"] for c in checks) >= 0.5 * len(checks), checks
    slots = [r for r in report["rows"] if r["label"] == "hermes@slots"]
    ts = {(r["speculative"], r["deployment"], r["seed"]): r["summary_tokens"] for r in report["rows"]
          if r["method"] == "target_self"}
    assert slots and all(r["hermes_tokens"] == ts[(r["speculative"], r["deployment"], r["seed"])] for r in slots)
    for name in ("speedup", "critical"):
        assert Path(f"{out.with_suffix('')}-{name}.png").stat().st_size > 1000


def test_the_seeding_rule_is_shared_with_the_ablation_bench():
    from bench.harness.latency import draw_seed

    ablation = load_bench("ablation")
    args = ablation.build_parser().parse_args(["--histories", "1"])
    seen = {}

    def fake(sub, methods, runner):
        seen["seeds"], seen["seed"] = sub.seeds, sub.seed
        return [], {}

    real = ablation.latency.simulate
    ablation.latency.simulate = fake
    try:
        ablation.run_cell_set(args, 3, ["hermes"], None, ["agent"], None)
    finally:
        ablation.latency.simulate = real
    assert seen == {"seeds": 1, "seed": 3} and draw_seed(3, 0, 0) == 3  # ablation history seed s = draw 0 of s


def test_parser_options(bench):
    args = bench.parse(["--speculative", "none,eagle3,dflash", "--equal-hardware"])
    assert args.speculative == ["none", "eagle3", "dflash"] and args.seeds == 8
    assert args.deployments == ["two-gpu", "one-gpu", "two-gpu-equal"]
    with pytest.raises(SystemExit):
        bench.parse(["--speculative", "medusa"])


def test_cases_and_layouts(bench):
    args = bench.build_parser().parse_args(["--layouts", "classic,agent", "--hermes-tokens", "1200,2000"])
    got = bench.lc.cases(["hermes", "speccompact", "openclaw", "target_self"], args.layouts, args.hermes_tokens)
    assert [(c["label"], c["layout"]) for c in got] == [
        ("hermes@1200", "classic"), ("hermes@2000", "classic"), ("speccompact/classic", "classic"),
        ("speccompact/agent", "agent"), ("openclaw", "classic"), ("target_self/classic", "classic"),
        ("target_self/agent", "agent"), ("hermes@slots", "classic")]
    assert bench.lc.runner_kwargs(got[3], "/tok") == {"layout": "agent", "chat_template": "/tok"}
    assert bench.lc.runner_kwargs(got[0], "/tok") == {}  # Hermes-style: its own fresh prompt
    with pytest.raises(SystemExit):
        bench.build_parser().parse_args(["--layouts", "classic,agentic"])


def test_speedups_compare_runs_of_the_same_draw(bench):
    def row(label, method, layout, e2e, draw):
        return {"model_pair": "p", "speculative": "none", "deployment": "two-gpu", "p_accept": 0.7, "path": "h",
                "draw": draw, "label": label, "method": method, "layout": layout, "hermes_tokens": None,
                "e2e_s": e2e}

    rows = [row("hermes", "hermes", "classic", 12.0, 0), row("target_self", "target_self", "classic", 4.0, 0),
            row("speccompact", "speccompact", "classic", 2.0, 0), row("hermes", "hermes", "classic", 30.0, 1),
            row("target_self", "target_self", "classic", 3.0, 1), row("speccompact", "speccompact", "classic", 6.0, 1)]
    bench.add_speedups(rows)
    assert rows[2]["speedups"] == {"hermes": 6.0, "target_self": 2.0}
    assert rows[5]["speedups"] == {"hermes": 5.0, "target_self": 0.5}
    summary = bench.summarize([{**r, "parts": None, "target": {"requests": 1, "prompt_tokens": 1,
                                                                   "completion_tokens": 1, "cached_tokens": 0},
                                "drafter": {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}}
                               for r in rows])
    spec = next(s for s in summary if s["method"] == "speccompact")
    assert (spec["e2e_median_s"], spec["e2e_min_s"], spec["e2e_max_s"], spec["seeds"]) == (4.0, 2.0, 6.0, 2)
    assert spec["median_speedups"]["target_self"] == pytest.approx(1.25)


def test_goal_rows_use_equal_gpu_cells_with_speculative_decoding(bench):
    def cell(pair, spec, dep, method, speedups, p=0.7, label=None, tokens=None):
        return {"model_pair": pair, "speculative": spec, "deployment": dep, "p_accept": p, "method": method,
                "label": label or method, "hermes_tokens": tokens, "median_speedups": speedups}

    summary = [cell("qwen3-32b:qwen3-0.6b", "eagle3", "two-gpu-equal", "speccompact", {"target_self": 1.6}),
               cell("qwen3-32b:qwen3-0.6b", "eagle3", "two-gpu-equal", "hermes", {}, tokens=1200),
               cell("qwen3-32b:qwen3-0.6b", "eagle3", "two-gpu-equal", "auto", {"hermes": 9.0}),
               cell("qwen3-32b:qwen3-0.6b", "none", "two-gpu-equal", "speccompact", {"target_self": 3.0}),
               cell("qwen3-32b:qwen3-0.6b", "eagle3", "two-gpu", "speccompact", {"target_self": 3.0}),
               cell("qwen3-8b:qwen3-0.6b", "dflash", "one-gpu", "auto", {"hermes": 5.5})]
    got = {(g["model_pair"][:9], g["method"]): (g["speedup"], g["met"]) for g in bench.goal_rows(summary)}
    assert got == {("qwen3-32b", "speccompact"): (1.6, True), ("qwen3-32b", "auto"): (9.0, False),
                   ("qwen3-8b:", "auto"): (None, None)}  # 8B: no Hermes row at 1,200 tokens in that cell
