"""The evolving-session race without the simulator's favours (bench/session.py, bench/harness/race.py).

* With a judge that never errs (and the other new knobs neutral) the race's
  committed rows come out again, to the bit;
* NGRAM copy is priced at plain speed where there is nothing to copy (a
  session's first compaction) and at the harmonic mix after it;
* ``auto`` is raced on the share it observes, never the true one;
* the tables count the seeds that ran, and ``--check`` covers every method
  and speculative decoding of every run.

Timings are SIMULATED; none is asserted except against the committed JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.bench_scripts import load_bench

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
SWE = REPO.parent / "shared" / "data" / "trajectories" / (
    "princeton-nlp__SWE-agent__trajectories__demonstrations__replay__marshmallow-code__marshmallow-1867__"
    "function_calling_replace__install-1__marshmallow-code__marshmallow-1867.traj")


@pytest.fixture(scope="module")
def lines():
    if not SWE.is_file():
        pytest.skip(f"shared trajectories absent ({SWE})")
    return load_bench("latency").workload_lines()  # what the session benchmark draws its workloads from


@pytest.mark.slow
@pytest.mark.parametrize("method", ["target_delta", "speccompact"])
def test_a_judge_error_rate_of_0_reproduces_the_committed_race_rows(method, tmp_path):
    """The first cells of the race's shard of ``method`` (EAGLE3, seed 0, h = 0 then 0.6), the new knobs given
    at their neutral values, against ``session-evolving.json``: every compared field equal."""
    if not SWE.is_file():
        pytest.skip(f"shared trajectories absent ({SWE})")
    regen = load_bench("regenerate")
    out = tmp_path / "cell.json"
    cmd = regen.command("session-evolving", out, {"--methods": method, "--seeds": "1", "--hold": "0,0.6",
                                                  "--false-accept": "0", "--false-reject": "0",
                                                  "--held-positions": "first", "--repeat": "0",
                                                  "--host-cpu": regen.recorded_host(json.loads(
                                                      (RESULTS / "session-evolving.json").read_text()))})
    assert load_bench("session").main(cmd[3:]) == 0
    fresh = json.loads(out.read_text())
    committed = json.loads((RESULTS / "session-evolving.json").read_text())
    _, key, fields = regen.CHECKS["session-evolving"]
    assert len(fresh["rows"]) == 2 and {r["hold"] for r in fresh["rows"]} == {0.0, 0.6}
    assert regen.stale_rows(committed, fresh, key, fields) == []
    old = {tuple(r[k] for k in key): r for r in committed["rows"]}
    for r in fresh["rows"]:  # and each compaction's lines, carried lines and held facts
        before = old[tuple(r[k] for k in key)]["records"]
        assert [(c["lines"], c["carried_lines"], c["retained_facts"]) for c in r["records"]] == \
            [(c["lines"], c["carried_lines"], c["retained_facts"]) for c in before]


class FakeSim:
    """What ``Servers.draw`` retunes: the target's cost model and its scheduler's speculative decoding."""

    def __init__(self, cost):
        from types import SimpleNamespace as N

        model = N(policy=None, encode=lambda text: text.split())
        self.servers = {"target": N(cost=cost, sched=N(spec=cost.spec), model=model),
                        "drafter": N(cost=None, sched=N(spec=None), model=model)}


@pytest.mark.parametrize("spec", ["ngram-copy-h", "ngram-copy"])
def test_compaction_0_is_priced_at_ngrams_plain_rate_and_later_ones_at_what_they_copy(lines, spec):
    """The session's first compaction has no previous summary: nothing to copy."""
    from types import SimpleNamespace as N

    from sgl_speccompact.core.specdecode import DEFAULTS, NGRAM_COPY_TAU, copy_tau
    from sgl_speccompact.emulator import CostModel
    from bench.harness.session import target_spec

    session = load_bench("session")
    servers = session.Servers.__new__(session.Servers)
    servers.args, servers.lines = N(p_accept=0.7), lines
    sim = FakeSim(CostModel.for_model("qwen3-8b", spec=target_spec(spec, "qwen3-8b", 0.9)))
    new_draw = servers.draw(sim, 0, 2048, hold=0.9 if spec == "ngram-copy-h" else None, spec=spec)
    taus = []
    for k in range(3):
        wl = new_draw(k)
        taus.append((sim.servers["target"].cost.spec.tau, sim.servers["target"].sched.spec.tau, wl))
    assert taus[0][:2] == (DEFAULTS["NGRAM"]["tau"],) * 2  # compaction 0: plain NGRAM
    for tau, sched, wl in taus[1:]:
        want = NGRAM_COPY_TAU if spec == "ngram-copy" else copy_tau(wl.copied_share())
        assert tau == sched == pytest.approx(want)
    if spec == "ngram-copy-h":
        assert 0.7 < taus[1][2].copied_share() < 1.0  # what the previous summary holds, by tokens


def test_eagle3_is_never_retuned(lines):
    from types import SimpleNamespace as N

    from sgl_speccompact.emulator import CostModel
    from bench.harness.session import target_spec

    session = load_bench("session")
    servers = session.Servers.__new__(session.Servers)
    servers.args, servers.lines = N(p_accept=0.7), lines
    cost = CostModel.for_model("qwen3-8b", spec=target_spec("eagle3", "qwen3-8b"))
    sim = FakeSim(cost)
    new_draw = servers.draw(sim, 0, 2048, hold=0.9, spec="eagle3")
    new_draw(0), new_draw(1)
    assert sim.servers["target"].cost is cost


def _record(device_s: float, observed: float | None, prompt: int = 60_000) -> dict:
    return {"device_s": device_s, "observed_held": observed, "prompt_tokens": prompt}


def _race(observed: list, held_realized: float) -> dict:
    """A two-method race report: Target-delta costs 1 per compaction, Target-self 2; the held share that
    the sessions' compactions observe is ``observed`` (one per compaction), the true one ``held_realized``."""
    rows = []
    for label, dev in (("target_self", 2.0), ("target_delta", 1.0)):
        rows.append({"label": label, "speculative": "eagle3", "hold": 0.9, "seed": 0, "mode": "sync",
                     "compactions": len(observed), "device_s": dev * len(observed),
                     "records": [_record(dev, o) for o in observed]})
    cell = lambda lab, d: {"label": lab, "speculative": "eagle3", "hold": 0.9, "held_realized": held_realized,
                           "device_s_per_compaction_median": d}
    return {"conditions": {"model_pairs": ["qwen3-8b:qwen3-0.6b"], "p_accept": 0.7, "hermes_tokens": [2048]},
            "policy": {"tail_tokens": 10_880}, "rows": rows,
            "summary": [cell("target_self", 2.0), cell("target_delta", 1.0)]}


def test_auto_is_raced_on_the_share_observed_at_the_previous_compaction_not_the_true_one():
    from bench.harness.race import auto_race

    # compaction 0 has no previous summary and compaction 1 a previous compaction that had none: nothing
    # observed, auto predicts a fresh summary (Target-self); from compaction 2 on it is told 0.9 and picks
    # Target-delta, although the true held share was 0.9 from compaction 1 on
    got = auto_race(_race([None, 0.9, 0.9, 0.9], held_realized=0.9))[(0.9, "eagle3")]
    assert got["picks"] == {"target_self": 2, "target_delta": 2}
    assert got["per_compaction"] == [pytest.approx((2 + 2 + 1 + 1) / 4)]
    # what it observed says little holds: it stays with Target-self, whatever the truth
    assert auto_race(_race([None, 0.0, 0.0, 0.0], held_realized=0.9))[(0.9, "eagle3")]["picks"] == \
        {"target_self": 4}


def test_the_race_tables_count_the_seeds_that_ran():
    from bench.harness.race import race_tables

    report = _race([None, 0.9], held_realized=0.9)
    for c in report["summary"]:
        c.update({"device_s_per_compaction_min": 1.0, "device_s_per_compaction_max": 2.0, "stall_p50_s": 0.5,
                  "seed_median_min_s": 0.5, "seed_median_max_s": 0.5, "carried_share_later": 0.0, "retention": None})
    text = race_tables(report)
    assert "median of the 1 seed (0) session means" in text and "8 seeds" not in text


def test_the_ahead_tables_show_the_judging_methods_at_the_runs_own_judge_setting():
    """The ahead-of-time run prices the evidence check (its cells' judge setting is not the no-error one):
    its tables still show SpecCompact and Target-delta, as the session page does."""
    from bench.harness.race import ahead_tables, errors_of

    report = json.loads((RESULTS / "session-evolving-ahead.json").read_text())
    assert errors_of(report) != [(0.0, 0.0, 0.0)]
    text = ahead_tables(report)
    assert "| SpecCompact" in text and "| Target-delta" in text
    assert text in (REPO / "docs" / "benchmarks" / "session.md").read_text()


def test_the_staleness_check_covers_every_method_and_target_of_every_run():
    regen = load_bench("regenerate")
    for name, (file, _, _) in regen.RUNS.items():
        cells, key, _ = regen.CHECKS[name]
        committed = json.loads((RESULTS / file).read_text())
        kind = "method" if "label" not in key else "label"
        rows = {(r[kind], r.get("speculative")) for r in committed["rows"]}
        covered = set()
        for cell in cells:
            args = regen.command(name, Path("x.json"), cell)
            methods = args[args.index("--methods") + 1].split(",") if "--methods" in args else None
            specs = args[args.index("--speculative") + 1].split(",") if "--speculative" in args else [None]
            covered |= {(m, s) for m, s in rows if (methods is None or m.split("@")[0] in methods)
                        and (s in specs or specs == [None])}
        assert covered == rows, (name, rows - covered)
