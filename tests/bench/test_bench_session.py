"""bench/session.py on the one-clock simulator: one short session, two methods, both modes, one seed.

Checks structure, labelling and the accounting of every mode (device-seconds,
agent slowdown, a new workload per compaction); how long a stall is is a
benchmark result, not a test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.bench_scripts import load_bench
from tests.support.host_cpu import write_host_json

REPO = Path(__file__).resolve().parents[2]
TRAJECTORIES = REPO.parent / "shared" / "data" / "trajectories"
SWE = TRAJECTORIES / ("princeton-nlp__SWE-agent__trajectories__demonstrations__replay__marshmallow-code__"
                      "marshmallow-1867__function_calling_replace__install-1__marshmallow-code__marshmallow-1867.traj")


@pytest.fixture(scope="module")
def run(emulator_tokenizer_path, tmp_path_factory):
    if not SWE.is_file():
        pytest.skip(f"shared trajectories absent ({SWE})")
    bench = load_bench("session")
    out = tmp_path_factory.mktemp("bench") / "session.json"
    host = write_host_json(out.with_name("host-fixture.json"))  # made-up host CPU line per method
    rc = bench.main(["--trajectories", str(SWE), "--model-pairs", "qwen3-8b:qwen3-0.6b", "--session-tokens",
                     "75000", "--tokenizer", emulator_tokenizer_path, "--out", str(out), "--seeds", "1",
                     "--host-cpu", str(host),
                     "--methods", "speccompact,hermes", "--deployments", "two-gpu-tp2-colocated",
                     "--speculative", "none", "--priority", "both"])
    return rc, json.loads(out.read_text()), out


@pytest.mark.e2e  # runs the whole bench script
def test_every_method_both_modes_simulated_and_accounted(run):
    rc, report, out = run
    assert rc == 0 and report["latency_kind"] == "simulated" and "SIMULATED" in report["simulated_note"]
    rows = {(r["label"], r["mode"], r["priority"]): r for r in report["rows"]}
    assert len(rows) == len(report["rows"])
    assert set(rows) == {(lab, m, p) for lab in ("speccompact", "hermes@2048", "hermes@3200")
                         for m, p in (("sync", False), ("ahead", False), ("ahead", True))}
    assert len({r["requests"] for r in rows.values()}) == 1  # the same session in every mode
    assert report["tool_times_s"] and all(t > 0 for t in report["tool_times_s"])  # from the trajectory
    for (label, mode, _), r in rows.items():
        assert r["compactions"] >= 1 and r["aborted"] == 0, r["records"]
        assert r["peak_prompt"] >= report["policy"]["trigger"]
        assert r["stall_max_s"] >= r["stall_median_s"] >= 0 and r["gpu_s"] > 0
        # colocated: SpecCompact's passes hold the TP=2 pair, drafter's too; single-model methods run at TP=2
        assert r["device_s"] == pytest.approx(2 * r["gpu_s"]), (label, mode)
        for c in r["records"]:  # the plugin's request to the service is on the clock for every method
            assert c["service_s"] > 0 and c["stall_s"] >= c["service_s"] + c["wait_s"]
            # the host's CPU of a compaction at the trigger is part of its stall (none when a prepare applied)
            assert (c["host_cpu_s"] == 0) is c["applied"]
            assert c["stall_s"] >= c["service_s"] + c["wait_s"] + c["host_cpu_s"] - 1e-9
        assert (mode == "ahead") is (r["prepares"] >= 1)
        if mode == "ahead":  # the agent ran its turns next to the prepare and was slowed, never sped up
            assert r["agent_slowdowns"] and all(s >= 1 - 1e-9 for s in r["agent_slowdowns"])
        else:
            assert r["agent_slowdowns"] == []
    assert rows[("speccompact", "ahead", False)]["prepares_reused"] >= 1
    assert report["host_cpu"]["path"].endswith("host-fixture.json") and "MEASURED (CPU)" in report["host_cpu"]["label"]
    assert out.with_name(out.stem + "-stall.png").is_file()


@pytest.mark.e2e  # runs the whole bench script
def test_summary_cells_match_their_rows(run):
    _, report, _ = run
    cells = {(c["label"], c["mode"], c["priority"]): c for c in report["summary"]}
    assert set(cells) == {(r["label"], r["mode"], r["priority"]) for r in report["rows"]}
    for key, c in cells.items():
        mine = [r for r in report["rows"] if (r["label"], r["mode"], r["priority"]) == key]
        stalls = sorted(s for r in mine for s in r["stalls_s"])
        assert c["stall_p50_s"] in stalls and c["stall_p95_s"] == stalls[-1]  # nearest rank; few compactions
        assert c["device_s_median"] == pytest.approx(mine[0]["device_s"]) and c["sessions"] == 1
    hermes = [c for c in report["summary"] if c["label"].startswith("hermes@")]
    assert {c["label"] for c in hermes} == {"hermes@2048", "hermes@3200"}  # the paper's budget and Hermes's own


@pytest.fixture(scope="module")
def evolving(emulator_tokenizer_path, tmp_path_factory):
    if not SWE.is_file():
        pytest.skip(f"shared trajectories absent ({SWE})")
    bench = load_bench("session")
    out = tmp_path_factory.mktemp("bench") / "session-evolving.json"
    # a small window: its trigger (17,000 tokens) comes often, so a short session compacts four times and more
    rc = bench.main(["--trajectories", str(SWE), "--model-pairs", "qwen3-8b:qwen3-0.6b", "--window", "20000",
                     "--session-tokens", "75000", "--tokenizer", emulator_tokenizer_path, "--out", str(out),
                     "--seeds", "1", "--methods", "speccompact,target_self,target_delta", "--deployments",
                     "two-gpu-equal", "--speculative", "none", "--modes", "sync", "--hold", "0,0.9", "--no-plots",
                     "--host-cpu", "none"])
    return rc, json.loads(out.read_text())


@pytest.mark.e2e  # runs the whole bench script
def test_an_evolving_session_carries_what_still_holds(evolving):
    rc, report = evolving
    assert rc == 0 and report["conditions"]["hold"] == [0.0, 0.9]
    cells = {(c["label"], c["hold"]): c for c in report["summary"]}
    assert set(cells) == {(m, h) for m in ("speccompact", "target_self", "target_delta") for h in (0.0, 0.9)}
    assert all(c["compactions_min"] >= 4 for c in cells.values())
    for delta in ("speccompact", "target_delta"):  # the methods that carry lines
        assert cells[(delta, 0.0)]["carried_share_later"] == 0.0  # nothing holds: nothing carried
        # most holds, and is carried: carried lines against the lines that held (the content-line share's
        # denominator also holds the exact ledger's lines, copied from the history and never carried)
        later = [c for r in report["rows"] if r["method"] == delta and r["hold"] == 0.9
                 for c in r["records"][1:] if not c["aborted"]]
        assert later and sum(c["carried_lines"] for c in later) > 0.6 * sum(c["held_facts"] for c in later)
    assert cells[("target_self", 0.9)]["carried_share_later"] == 0.0  # it writes every line again
    # what held is mostly kept (a slot's token budget may still cut long lines); at h = 0 nothing held
    assert all(cells[(m, 0.9)]["retention"] > 0.8 for m in ("speccompact", "target_self", "target_delta"))
    assert cells[("speccompact", 0.0)]["retention"] is None
    for c in cells.values():  # device-seconds per compaction: the session's device-seconds over its compactions
        row = next(r for r in report["rows"] if (r["label"], r["hold"]) == (c["label"], c["hold"]))
        assert c["device_s_per_compaction_median"] == pytest.approx(row["device_s"] / row["compactions"])


def test_the_race_names_each_delta_methods_crossover_and_where_auto_is_measured():
    from bench.harness.race import RACE_ROWS, race_tables

    def cell(label, spec, hold, dev):
        return {"label": label, "speculative": spec, "hold": hold, "device_s_per_compaction_median": dev,
                "device_s_per_compaction_min": dev, "device_s_per_compaction_max": dev, "stall_p50_s": dev / 2,
                "seed_median_min_s": dev / 2, "seed_median_max_s": dev / 2, "held_realized": hold or None,
                "carried_share_later": 0.0, "retention": None}

    def row(label, spec, hold, dev):  # one seed's session: three compactions, auto sees the true share after one
        seen = [None, hold or None, hold or None]
        return {"label": label, "speculative": spec, "hold": hold, "seed": 0, "mode": "sync", "compactions": 3,
                "device_s": 3 * dev, "records": [{"device_s": dev, "observed_held": o, "prompt_tokens": 60_000}
                                                 for o in seen]}

    dev = {  # device-seconds per compaction: Target-delta has the fewest from h = 0.6 on
        ("speccompact", "eagle3"): (3.0, 2.0), ("target_self", "eagle3"): (1.5, 1.5),
        ("target_self", "ngram-copy-h"): (1.8, 1.2), ("target_delta", "eagle3"): (1.7, 1.0),
        ("target_delta", "ngram"): (1.9, 1.1)}
    report = {"conditions": {"model_pairs": ["qwen3-8b:qwen3-0.6b"], "p_accept": 0.7},
              "policy": {"tail_tokens": 10_880},
              "rows": [row(lab, sp, h, v[i]) for (lab, sp), v in dev.items() for i, h in enumerate((0.0, 0.9))],
              "summary": [cell(lab, sp, h, v[i]) for (lab, sp), v in dev.items() for i, h in enumerate((0.0, 0.9))]}
    text = race_tables(report)
    assert sum(1 for lab, sp, _ in RACE_ROWS if (lab, sp) in dev) == 5
    for name in ("Target-delta: carried lines judged", "Target-delta, NGRAM"):
        assert sum(1 for line in text.splitlines() if line.startswith(f"| {name}")) == 3  # one row per table
    assert "(the h from which Target-delta has the fewest device-seconds per compaction): h = 0.9" in text
    assert "(the h from which SpecCompact has the fewest device-seconds per compaction): none in 0-0.9" in text
    line = next(x for x in text.splitlines() if x.startswith("- h = 0.9:"))
    assert "fewest device-seconds target_delta (eagle3) 1.00" in line
    # auto picks Target-self twice (nothing observed yet), then Target-delta; on the NGRAM target a Target-delta
    # pick is priced from its NGRAM row (no copy), not the EAGLE3 one
    assert "on the eagle3 target 1.33 [1.33-1.33] = 1.33x (target_delta x1, target_self x2)" in line
    assert "on the ngram-copy-h target 1.17 [1.17-1.17] = 1.17x (target_delta x1, target_self x2)" in line
