"""bench/latency.py on the one-clock simulator: a small --all-style run over both deployments.

Checks structure, labelling and the simulator's invariants on every row; which method is
faster is a benchmark result, not a test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_scripts import load_bench

REPO = Path(__file__).resolve().parents[2]
TRAJECTORIES = REPO.parent / "shared" / "data" / "trajectories"
SMALL = TRAJECTORIES / "SWE-agent__mini-swe-agent__tests__test_data__local.traj.json"


@pytest.fixture(scope="module")
def bench():
    return load_bench("latency")


@pytest.fixture(scope="module")
def run(bench, emulator_tokenizer_path, tmp_path_factory):
    if not SMALL.is_file():
        pytest.skip(f"shared trajectories absent ({SMALL})")
    out = tmp_path_factory.mktemp("bench") / "latency.json"
    rc = bench.main(["--trajectories", str(SMALL), "--synthetic-tokens", "2500", "--model-pairs",
                     "qwen3-8b:qwen3-0.6b", "--p-accept", "0.5,0.9", "--tokenizer", emulator_tokenizer_path,
                     "--out", str(out)])
    return rc, json.loads(out.read_text()), out


@pytest.mark.slow
def test_every_row_is_simulated_and_keeps_the_busy_time_invariant(bench, run):
    rc, report, _ = run
    assert rc == 0
    assert report["latency_kind"] == "simulated" and "SIMULATED" in report["simulated_note"]
    methods, _, _ = bench.rc.resolve_methods()
    rows = report["rows"]
    assert {r["deployment"] for r in rows} == {"two-gpu", "one-gpu"}
    assert len(rows) == len(methods) * 2 * 2 * 2  # methods x deployments x rates x histories
    for row in rows:
        assert "error" not in row, row
        for server in ("target", "drafter"):
            assert row[server]["busy_s"] <= row["e2e_s"] + 1e-9, (row["method"], row["deployment"], server)
        if row["deployment"] == "one-gpu":
            assert row["gpu_busy_s"] <= row["e2e_s"] + 1e-9
        assert row["busy_ok"] is True
        assert sum(row["parts"].values()) == pytest.approx(row["e2e_s"], abs=1e-9)
        assert row["target"]["requests"] >= 1


@pytest.mark.slow
def test_speedups_tables_and_plots(run):
    _, report, out = run
    for row in report["rows"]:
        ref = {"hermes": "speedup_vs_hermes", "target_self": "speedup_vs_target_self"}.get(row["method"])
        if ref:
            assert row[ref] == 1.0
    spec = [r for r in report["rows"] if r["method"] == "speccompact"]
    assert all(r["drafter"]["requests"] > 0 and r["critical_slot"] for r in spec)
    low = {(r["deployment"], r["path"]): r for r in spec if r["p_accept"] == 0.5}
    high = {(r["deployment"], r["path"]): r for r in spec if r["p_accept"] == 0.9}
    for key, r in low.items():  # fewer accepted drafts: more repairs
        assert r["target"]["completion_tokens"] >= high[key]["target"]["completion_tokens"]
    for name in ("speedup", "critical"):
        assert Path(f"{out.with_suffix('')}-{name}.png").stat().st_size > 1000


def test_tables_name_the_deployment(bench):
    summary = [{"model_pair": "qwen3-8b:qwen3-0.6b", "deployment": dep, "p_accept": 0.7, "method": m,
                "histories": 1, "geomean_e2e_s": 2.0, "geomean_speedup_vs_hermes": 1.0,
                "geomean_speedup_vs_target_self": 1.0, "mean_parts_s": dict.fromkeys(bench.PARTS, 0.1),
                "mean_requests": {"target": 1, "drafter": 0}, "mean_tokens": {"target": 10, "drafter": 0}}
               for dep in ("two-gpu", "one-gpu") for m in ("hermes", "speccompact")]
    text = bench.format_tables(summary, [], "simulated")
    titles = [line for line in text.splitlines() if "latency" in line or "critical" in line]
    assert titles and all("SIMULATED" in t and ("two-gpu" in t or "one-gpu" in t) for t in titles)


def test_layouts_and_hermes_lengths_make_one_case_each(bench):
    args = bench.build_parser().parse_args(["--layouts", "classic,agent", "--hermes-tokens", "1200,2000",
                                            "--scenario", "agent-session"])
    assert args.layouts == ["classic", "agent"] and args.hermes_tokens == [1200, 2000]
    got = bench.lc.cases(["hermes", "speccompact", "openclaw", "target_self"], args.layouts, args.hermes_tokens)
    assert [(c["label"], c["layout"]) for c in got] == [
        ("hermes@1200", "classic"), ("hermes@2000", "classic"), ("speccompact/classic", "classic"),
        ("speccompact/agent", "agent"), ("openclaw", "classic"), ("target_self/classic", "classic"),
        ("target_self/agent", "agent")]
    assert bench.lc.runner_kwargs(got[3], "/tok") == {"layout": "agent", "chat_template": "/tok"}
    assert bench.lc.runner_kwargs(got[0], "/tok") == {}  # Hermes-style: its own fresh prompt
    with pytest.raises(SystemExit):
        bench.build_parser().parse_args(["--layouts", "classic,agentic"])


def test_speedups_use_target_self_on_the_same_layout(bench):
    def row(label, method, layout, e2e, tokens=None):
        return {"model_pair": "p", "deployment": "two-gpu", "p_accept": 0.7, "path": "h", "label": label,
                "method": method, "layout": layout, "hermes_tokens": tokens, "e2e_s": e2e}

    rows = [row("hermes@1200", "hermes", "classic", 12.0, 1200), row("hermes@2000", "hermes", "classic", 20.0, 2000),
            row("target_self/classic", "target_self", "classic", 4.0),
            row("target_self/agent", "target_self", "agent", 3.0),
            row("speccompact/classic", "speccompact", "classic", 2.0),
            row("speccompact/agent", "speccompact", "agent", 1.5)]
    bench.add_speedups(rows)
    spec = rows[-1]
    assert spec["speedups"] == {"hermes@1200": 8.0, "hermes@2000": 20.0 / 1.5, "target_self": 2.0}
    assert spec["speedup_vs_hermes"] == 8.0 and rows[-2]["speedup_vs_target_self"] == 2.0


@pytest.mark.slow
def test_agent_session_scenario_rows(bench, emulator_tokenizer_path, tmp_path, capsys):
    if not SMALL.is_file():
        pytest.skip(f"shared trajectories absent ({SMALL})")
    out = tmp_path / "session.json"
    rc = bench.main(["--trajectories", str(SMALL), "--synthetic-tokens", "", "--model-pairs", "qwen3-8b:qwen3-0.6b",
                     "--deployments", "two-gpu", "--p-accept", "0.7", "--methods", "target_self",
                     "--hermes-tokens", "40,60", "--layouts", "classic,agent", "--scenario", "agent-session",
                     "--tokenizer", emulator_tokenizer_path, "--no-plots", "--out", str(out)])
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert rc == 0 and "NOT part of its end-to-end" in text and "SIMULATED agent session then compaction" in text
    rows = {r["label"]: r for r in report["rows"]}
    assert set(rows) == {"hermes@40", "hermes@60", "target_self/classic", "target_self/agent"}
    for r in rows.values():
        assert r["session"]["turns"] >= 1 and r["session"]["session_s"] > 0
        assert sum(r["parts"].values()) == pytest.approx(r["e2e_s"], abs=1e-9)
        assert sum(r["waiting_split"].values()) == pytest.approx(r["parts"]["waiting"], abs=1e-9)
        assert min(r["waiting_split"].values()) >= -1e-9
    agent, classic = rows["target_self/agent"], rows["target_self/classic"]
    assert agent["first_target"]["cached_tokens"] == agent["agent_cached_tokens"] > 0
    assert classic["first_target"]["cached_tokens"] < agent["first_target"]["cached_tokens"]
    assert set(agent["speedups"]) == {"hermes@40", "hermes@60", "target_self"} and agent["speedup_vs_target_self"] == 1


def test_goal_rows_compare_speccompact_on_the_agent_layout(bench):
    def cell(pair, dep, method, layout, speedups):
        return {"model_pair": pair, "deployment": dep, "p_accept": 0.7, "method": method, "layout": layout,
                "geomean_speedups": speedups}

    summary = [cell("qwen3-32b:qwen3-0.6b", "two-gpu", "speccompact", "agent",
                    {"hermes@1200": 9.0, "hermes@2000": 12.0, "target_self": 1.6}),
               cell("qwen3-32b:qwen3-0.6b", "two-gpu", "speccompact", "classic", {"hermes@1200": 20.0}),
               cell("qwen3-8b:qwen3-0.6b", "one-gpu", "speccompact", "agent", {"hermes@1200": 9.0})]
    got = {(g["deployment"], g["reference"]): (g["goal"], g["met"]) for g in bench.lc.goal_rows(summary)}
    assert got == {("two-gpu", "hermes@1200"): (10.0, False), ("two-gpu", "hermes@2000"): (10.0, True),
                   ("two-gpu", "target_self"): (1.5, True), ("one-gpu", "hermes@1200"): (None, None)}
    assert "| NO |" in bench.lc.format_goals(bench.lc.goal_rows(summary))
