"""bench/auto_holdout.py: the predictor refitted on some cells, scored on the others (SIMULATED)."""

from __future__ import annotations

import json

from tests.support.bench_scripts import load_bench


def report(path, cells):
    """A latency report with the fields auto_holdout reads: one summary row per (cell, method)."""
    rows = []
    for (pair, spec, dep, p), medians in cells.items():
        rows += [{"model_pair": pair, "speculative": spec, "deployment": dep, "p_accept": p, "method": m, "label": m,
                  "e2e_median_s": s} for m, s in medians.items()]
    path.write_text(json.dumps({"conditions": {"synthetic_tokens": [8000], "hermes_tokens": [1200]},
                                "summary_by_cell": rows}))
    return path


def test_hits_are_scored_against_the_simulated_fastest(tmp_path, capsys):
    bench = load_bench("auto_holdout")
    # one GPU, 8B: the predictor picks Target-self; make it the fastest in one cell and the slowest in another
    right = {"speccompact": 4.0, "target_self": 2.0, "hermes": 7.0, "openclaw": 6.0}
    wrong = {"speccompact": 1.0, "target_self": 2.0, "hermes": 7.0, "openclaw": 6.0}
    fit = report(tmp_path / "fit.json", {("qwen3-8b:qwen3-0.6b", "none", "one-gpu", 0.5): right,
                                         ("qwen3-32b:qwen3-0.6b", "none", "one-gpu", 0.5): right})
    held = report(tmp_path / "held.json", {("qwen3-8b:qwen3-0.6b", "none", "one-gpu", 0.7): wrong})
    out = tmp_path / "out.json"
    assert bench.main([str(fit), "--held-out", str(held), "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["latency_kind"] == "SIMULATED" and got["shipped"]["hit_rate"] == 1.0
    assert got["held_out"]["shipped"]["hits"] == 0 and "picked target_self" in got["held_out"]["shipped"]["misses"][0]
    assert got["splits"]["fit 8B, hold out 32B"]["out_of_sample"]["cells"] == 1
    printed = capsys.readouterr().out
    assert "SIMULATED" in printed and "held-out miss (shipped)" in printed
