"""The evidence check in the simulated judge (bench/sim/mistakes.py) and the race's tables with and without it.

The stage refuses invented judged lines (wrong drafts and candidates, never
true) at the stated catch rate before the judge's false-accept draw; stale
lines (true once) and lines that hold pass it.  Without it, or with a judge
that never errs, every verdict is what it was.  The race's tables keep the
runs with and without the check apart.  Nothing here is timed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.bench_scripts import load_bench

from bench.sim.mistakes import EVIDENCE_CATCH, Mistakes, caught, flips
from bench.sim.workload import SummaryWorkload, draw_hold
from sgl_speccompact.schema import OPENCLAW_SLOTS

SLOTS = tuple(s.name for s in OPENCLAW_SLOTS)
RESULTS = Path(__file__).resolve().parents[3] / "bench" / "results"


def chain(lines, mistakes: Mistakes, seed: int = 3, k: int = 3) -> list[SummaryWorkload]:
    out = [SummaryWorkload(lines, SLOTS, seed=seed * 1000, mistakes=mistakes)]
    for i in range(1, k):
        out.append(SummaryWorkload(lines, SLOTS, seed=seed * 1000 + i, previous=out[-1],
                                   hold=draw_hold(0.6, seed, i), mistakes=mistakes))
    return out


def test_the_check_refuses_invented_lines_at_its_rate_before_the_judges_draw():
    lines = [[f"- line {i}"] for i in range(4000)]
    both = Mistakes(false_accept=0.5, evidence_catch=0.3)
    accepted = sum(flips(both, 7, x, bad=True, invented=True) for x in lines) / len(lines)
    assert accepted == pytest.approx(0.5 * (1 - 0.3), abs=0.03)  # only what the check lets through is drawn
    refused = sum(caught(both, 7, x) for x in lines) / len(lines)
    assert refused == pytest.approx(0.3, abs=0.03)
    # a stale line, or one that holds, is not touched: the judge's draws alone, as before
    assert [flips(both, 7, x, bad=True) for x in lines] == [flips(Mistakes(false_accept=0.5), 7, x, bad=True)
                                                            for x in lines]
    assert not any(flips(Mistakes(evidence_catch=1.0), 7, x, bad=False, invented=True) for x in lines)
    with pytest.raises(ValueError):
        Mistakes(evidence_catch=1.5)


def test_in_a_session_the_check_catches_wrong_drafts_never_stale_lines(lines):
    """A judge that accepts every wrong line, and a check that catches every invented one."""
    wl = chain(lines, Mistakes(false_accept=1.0, evidence_catch=1.0))[-1]
    drafts = [ln for v in wl.drafted.values() for ln in v if ln in wl.wrong]
    stale = sorted(wl.stale)
    assert drafts and stale  # the session has both
    assert not any(wl.holds([ln]) for ln in drafts)  # invented: refused before the judge
    assert all(wl.holds([ln]) for ln in stale)  # true once: the check cannot tell, the judge accepts
    held = [ln for v in wl.true.values() for ln in v if ln.startswith("- ")]
    assert all(wl.holds([ln]) for ln in held)


def test_without_the_check_the_verdicts_are_the_judges_alone(lines):
    judge = Mistakes(false_accept=0.3, false_reject=0.1)
    wl = chain(lines, judge)[-1]
    judged = [ln for v in wl.drafted.values() for ln in v] + sorted(wl.earlier)[:300]
    alone = [(ln in wl.wrong) if flips(judge, wl.seed, [ln], ln in wl.wrong) else (ln not in wl.wrong) for ln in judged]
    assert [wl.holds([ln]) for ln in judged] == alone  # the judge's draw alone, as before the stage existed
    assert any(a and ln in wl.wrong for a, ln in zip(alone, judged))  # and it did accept some wrong lines
    perfect = chain(lines, Mistakes(evidence_catch=EVIDENCE_CATCH))[-1]  # a judge that never errs: nothing moves
    judged = [ln for v in perfect.drafted.values() for ln in v] + sorted(perfect.earlier)[:300]
    assert all(perfect.holds([ln]) is (ln not in perfect.wrong) for ln in judged)


def test_the_default_catch_rate_is_the_judge_sets_measured_share():
    report = json.loads((RESULTS / "evidence-judge-set-smollm2.json").read_text())
    check = report["check_alone"]
    assert EVIDENCE_CATCH == pytest.approx(check["caught"] / check["contradicted"])


def test_the_session_flag_defaults_to_the_packages_default():
    from sgl_speccompact.config import CompactConfig

    session = load_bench("session")
    args = session.build_parser().parse_args([])
    assert (args.evidence_check == "on") is CompactConfig().evidence_check
    args.evidence_catch = 0.25
    assert session.evidence_rates(args) == [0.25]
    args.evidence_check = "both"
    assert session.evidence_rates(args) == [0.0, 0.25]
    args.evidence_catch = 2.0
    with pytest.raises(ValueError):
        session.evidence_rates(args)


# ---------------------------------------------------------------- the race's tables


def _report() -> dict:
    """Two judging methods at one error pair, without and with the check, and Target-self once; h = 0.6."""
    rows, summary = [], []

    def add(label, fa, ev, dev, kept):
        rows.append({"label": label, "speculative": "eagle3", "hold": 0.6, "seed": 0, "mode": "sync",
                     "false_accept": fa, "false_reject": fa, "evidence_catch": ev, "compactions": 2,
                     "device_s": 2 * dev, "records": [{"device_s": dev, "observed_held": None,
                                                       "prompt_tokens": 60_000}] * 2})
        summary.append({"label": label, "speculative": "eagle3", "hold": 0.6, "false_accept": fa,
                        "false_reject": fa, "evidence_catch": ev, "device_s_per_compaction_median": dev,
                        "device_s_per_compaction_min": dev, "device_s_per_compaction_max": dev,
                        "truth_retention": kept, "truth_retention_min": kept, "truth_retention_max": kept,
                        "staleness": round(1 - kept, 3)})

    for ev, kept in ((0.0, 0.81), (EVIDENCE_CATCH, 0.87)):
        add("speccompact", 0.15, ev, 2.5, kept)
        add("target_delta", 0.15, ev, 1.5, 0.9)
    add("target_self", 0.0, 0.0, 2.0, 0.99)
    return {"conditions": {"model_pairs": ["qwen3-8b:qwen3-0.6b"], "p_accept": 0.7, "hermes_tokens": [2048],
                           "held_positions": "drawn", "repeat": 0.1},
            "policy": {"tail_tokens": 10_880}, "rows": rows, "summary": summary}


def test_the_judge_tables_show_each_error_pair_with_and_without_the_check():
    from bench.harness.race import errors_of, judge_tables

    report = _report()
    assert errors_of(report) == [(0.15, 0.15, 0.0), (0.15, 0.15, EVIDENCE_CATCH), (0.0, 0.0, 0.0)]
    text = judge_tables(report)
    spec = [ln for ln in text.split("\n") if ln.startswith("| SpecCompact")]
    with_check = f"0.15, 0.15 + evidence check {EVIDENCE_CATCH:.2f}"
    assert "| 0.15, 0.15 | " in spec[2] and "0.81 [0.81-0.81] / 0.190" in spec[2]  # the retention table
    assert f"| {with_check} | " in spec[3] and "0.87 [0.87-0.87] / 0.130" in spec[3]
    crossover = text.split("by judge errors")[-1].split("\n")  # the crossover table: one row per setting
    assert [ln.split(" | ")[0] for ln in crossover if ln.startswith("| 0")] == \
        ["| 0.15, 0.15", f"| {with_check}", "| 0, 0"]


def test_a_report_from_before_the_check_reads_as_without_it():
    from bench.harness.race import cells, errors_of

    report = _report()
    for x in report["rows"] + report["summary"]:
        if not x["evidence_catch"]:
            del x["evidence_catch"]
    assert (0.15, 0.15, 0.0) in errors_of(report)
    assert cells(report, (0.15, 0.15, 0.0))[("speccompact", "eagle3", 0.6)]["truth_retention"] == 0.81
