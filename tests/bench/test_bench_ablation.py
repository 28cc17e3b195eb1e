"""bench/ablation.py: none, each optimization alone, all but one, all (SIMULATED); every row comparable."""

from __future__ import annotations

import json

import pytest
from tests.support.bench_scripts import load_bench

from sgl_speccompact.config import OPTIMIZATIONS, CompactConfig


@pytest.fixture(scope="module")
def bench():
    return load_bench("ablation")


def test_variants_cover_every_registered_switch(bench):
    got = dict(bench.variants())
    on = [n for n in OPTIMIZATIONS if CompactConfig.model_fields[n].default]
    off = [n for n in OPTIMIZATIONS if n not in on]
    assert off and on  # both kinds exist (source_judge_on_prefix is off by default)
    none = dict.fromkeys(on, False)
    assert got["none"] == none and got[bench.ALL] == {}
    for n in on:
        assert got[f"only {n}"] == {**none, n: True}
        assert got[f"all but {n}"] == {n: False}
    for n in off:
        assert got[f"all + {n}"] == {n: True}
    assert len(got) == 2 + 2 * len(on) + len(off)


def test_a_switch_that_cannot_act_reuses_the_run_it_equals(bench):
    args = bench.build_parser().parse_args([])
    assert not args.source_judge
    plan = {e["variant"]: e for e in bench.plan(args)}
    if "source_judge_on_prefix" in OPTIMIZATIONS:  # an alternative now: off by default (the faithful SJC form)
        assert plan["all + source_judge_on_prefix"]["same_as"] == bench.ALL
        sjc = {e["variant"]: e for e in bench.plan(bench.build_parser().parse_args(["--source-judge"]))}
        assert sjc["all + source_judge_on_prefix"]["same_as"] is None  # with SJC and the prefix it acts
        assert sjc["all + source_judge_on_prefix"]["changes"] == ["source_judge_on_prefix"]
    assert plan["none"]["same_as"] is None and plan[bench.ALL]["same_as"] is None
    # the same-decisions rule of the switch tests: prompt-changing flips are declared, not checked
    assert plan["none"]["changes"] == ["evidence_check", "short_judge_suffix"] and plan[bench.ALL]["changes"] == []
    assert plan["all but line_aware_stopping"]["changes"] == []
    assert plan["none"]["layouts"] == ["agent", "classic"] and plan["only line_aware_stopping"]["layouts"] == ["agent"]


@pytest.fixture(scope="module")
def tiny(bench, emulator_tokenizer_path, tmp_path_factory):
    if not bench.runs.TRAJECTORY_DIR.is_dir():
        pytest.skip(f"shared trajectories absent ({bench.runs.TRAJECTORY_DIR}): the workload draws its lines there")
    out = tmp_path_factory.mktemp("ablation") / "ablation.json"
    code = bench.main(["--tokenizer", emulator_tokenizer_path, "--synthetic-tokens", "700", "--histories", "1",
                       "--model-pairs", "qwen3-8b:qwen3-0.6b", "--deployments", "two-gpu", "--hermes-tokens", "300",
                       "--host-cpu", "none", "--out", str(out)])
    return code, json.loads(out.read_text())


@pytest.mark.e2e  # runs the whole bench script
def test_tiny_ablation_runs_end_to_end_and_every_row_is_comparable(bench, tiny):
    code, report = tiny
    assert code == 0 and not [r for r in report["rows"] if "error" in r]
    assert report["latency_kind"] == "simulated" and "SIMULATED" in report["simulated_note"]
    # every SpecCompact run on the history made the same decisions, whatever its switches and layout, but those
    # that flip a decision-changing switch (the evidence check changes which lines are judged, by design)
    apart = bench.deciding(report["variants"])
    assert apart and all(v.startswith(("none", "only", "all but evidence_check")) for v in apart)
    compared = sum(len(d) for k, d in report["decisions"].items() if k.split("/", 1)[1] not in apart)
    assert report["comparable"] and all(c["same"] and c["runs"] == compared >= 8
                                        for c in report["comparable"].values())
    agent = {s["variant"]: s for s in report["summary"] if s["layout"] == "agent"}
    classic = {s["variant"]: s for s in report["summary"] if s["layout"] == "classic"}
    assert list(agent) == [label for label, _ in bench.variants()]
    assert set(classic) == {"none", bench.ALL}
    for s in [*agent.values(), *classic.values()]:
        # checked only where every flipped switch changes requests alone (tests/test_switches.py's rule)
        assert s["same_decisions"] is (None if s["changes"] else True) and s["histories"] == 1
        assert s["geomean_e2e_s"] > 0 and s["speedup_vs_hermes"]["300"] > 0 and s["speedup_vs_target_self"] > 0
    assert agent[bench.ALL]["ratio_to_all"] == pytest.approx(1.0)
    # the switches change requests, not decisions
    assert agent["none"]["mean_target_requests"] > agent[bench.ALL]["mean_target_requests"]
    refs = {(r["method"], r.get("layout"), r.get("hermes_tokens")) for r in report["rows"] if r["variant"] == "reference"}
    assert refs == {("hermes", "classic", 300), ("target_self", "agent", None), ("target_self", "classic", None)}


@pytest.mark.e2e  # runs the whole bench script
def test_tables_say_simulated_and_name_the_conditions(bench, tiny):
    _, report = tiny
    text = bench.format_tables(report["summary"], report["variants"])
    titles = [line for line in text.splitlines() if line.startswith("SIMULATED")]
    assert len(titles) == 2 and all("two-gpu" in t and "layout" in t for t in titles)
    assert "vs Hermes@300" in text and "same decisions" in text
    assert "| n/a |" in text and "| yes |" in text
