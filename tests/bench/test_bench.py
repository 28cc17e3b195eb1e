"""bench/radix_cache.py end to end on the SGLang-API emulator (one small real trajectory)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.bench_scripts import load_bench

REPO = Path(__file__).resolve().parents[2]
TRAJECTORIES = REPO.parent / "shared" / "data" / "trajectories"
SMALL = TRAJECTORIES / "SWE-agent__mini-swe-agent__tests__test_data__local.traj.json"
FIELDS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens")

pytestmark = pytest.mark.skipif(not SMALL.is_file(), reason=f"shared trajectories absent ({SMALL})")


@pytest.fixture(scope="module")
def bench():
    return load_bench("radix_cache")


@pytest.fixture(scope="module")
def run(bench, emulator_tokenizer_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "radix_cache.json"
    rc = bench.main(["--trajectories", str(SMALL), "--tokenizer", emulator_tokenizer_path, "--out", str(out)])
    return rc, json.loads(out.read_text())


def test_report_has_conditions_and_one_row_per_method(bench, run):
    rc, report = run
    assert rc == 0
    methods, _, _ = bench.resolve_methods()
    assert report["benchmark"] == "radix_cache"
    assert report["emulator"] is True and report["conditions"]["backend"] == "emulator"
    assert report["conditions"]["p_accept"] == 0.7 and report["conditions"]["flush_before_each_row"] is True
    assert report["sglang_version"] and report["timestamp"] and report["method"]
    assert report["methods"] == list(methods)
    assert [r["method"] for r in report["rows"]] == list(methods)
    for row in report["rows"]:
        assert "error" not in row, row
        # every summary's lines were read: no bare label word, no rejected draft in it
        assert row["summary_defects"] == [], (row["method"], row["summary_defects"])
        assert row["trajectory"] == "local.traj.json" and row["messages"] == 6
        for server in ("target", "drafter"):
            n = row[server]
            for key in (*FIELDS, "computed_tokens", "cache_hit_ratio", "requests_by_kind"):
                assert key in n, (row["method"], server, key)
            assert n["computed_tokens"] == n["prompt_tokens"] - n["cached_tokens"]
            if n["prompt_tokens"]:
                assert n["cache_hit_ratio"] == pytest.approx(n["cached_tokens"] / n["prompt_tokens"])
            for f in FIELDS:
                assert n[f] == sum(k[f] for k in n["requests_by_kind"].values())


def test_speccompact_reuses_the_shared_prefix(run):
    _, report = run
    row = next(r for r in report["rows"] if r["method"] == "speccompact")
    target, drafter = row["target"], row["drafter"]
    assert target["cache_hit_ratio"] > 0.5
    assert target["requests_by_kind"]["prefill"]["requests"] == 1
    assert target["requests_by_kind"]["verify"]["requests"] > 0
    assert drafter["requests_by_kind"]["draft"]["requests"] > 0
    assert drafter["cache_hit_ratio"] > 0.5
    assert 0.0 < row["acceptance_rate"] <= 1.0


def test_client_stats_match_emulator_server_stats(run):
    _, report = run
    assert report["crosscheck_ok"] is True
    for row in report["rows"]:
        for server in ("target", "drafter"):
            check = row[server]["crosscheck"]
            assert check["ok"] and check["client"] == check["server"]
            assert check["client"] == {f: row[server][f] for f in FIELDS}


def test_table_printed_with_every_row(bench, run):
    _, report = run
    table = bench.format_table(report["rows"], simulated=False)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["method", "trajectory", "msgs"]
    assert len(lines) == 2 + len(report["rows"])
    assert all(" ok" in line for line in lines[2:])


def test_simulated_latency_is_labelled(bench, emulator_tokenizer_path, tmp_path, capsys):
    out = tmp_path / "sim.json"
    rc = bench.main(["--trajectories", str(SMALL), "--tokenizer", emulator_tokenizer_path, "--methods",
                     "speccompact", "--max-messages", "4", "--simulate-latency", "qwen3-8b:qwen3-0.6b",
                     "--sim-time-scale", "0", "--out", str(out)])
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert rc == 0 and report["rows"][0]["messages"] == 4
    assert "SIMULATED" in printed and "SIMULATED" in report["simulated_note"]
    sim = report["rows"][0]["target"]["simulated"]
    assert sim["busy_s"] > 0 and "SIMULATED" in sim["note"]
    assert report["servers"]["target"]["model_path"] == "Qwen/Qwen3-8B"


def test_unknown_method_is_refused(bench, emulator_tokenizer_path):
    with pytest.raises(SystemExit, match="not available"):
        bench.main(["--trajectories", str(SMALL), "--tokenizer", emulator_tokenizer_path,
                    "--methods", "nope", "--out", "/dev/null"])


FUNCTION_CALLING = TRAJECTORIES / "princeton-nlp__SWE-agent__trajectories__demonstrations__function_calling_simple.traj"


@pytest.mark.slow
def test_agent_session_scenario_compares_the_layouts(bench, emulator_tokenizer_path, tmp_path):
    out = tmp_path / "agent.json"
    rc = bench.main(["--scenario", "agent-session", "--methods", "target_self", "--trajectories",
                     str(FUNCTION_CALLING), "--tokenizer", emulator_tokenizer_path, "--out", str(out)])
    report = json.loads(out.read_text())
    assert rc == 0 and report["conditions"]["scenario"] == "agent-session"
    classic, agent = report["rows"]
    assert (classic["layout"], agent["layout"]) == ("classic", "agent")
    assert classic["agent_turns"] == agent["agent_turns"] == 5
    assert classic["agent_cached_tokens"] is None and classic["prefill_cached_tokens"] < 10
    # the agent layout's prefix prefill reuses the whole replayed session: every prompt the agent sent
    assert agent["agent_cached_tokens"] == agent["prefill_cached_tokens"] > 0.8 * agent["agent_tokens"]
    assert "Agent session, then compaction" in bench.format_agent_table(report["rows"])
