"""Is ``auto``'s predictor right on cells it was not fitted on?  (Figures are SIMULATED.)

Method: the committed latency reports (``bench/latency.py``, one-clock
simulator of SGLang on H200 profiles: SIMULATED end-to-end medians per cell,
a cell being model pair x speculative decoding x deployment x acceptance
rate) give each cell's fastest method.  The predictor
(:func:`sgl_speccompact.methods.auto.choose`) has two free parameters fitted
to the simulator, ``Shape.queueing`` and ``Shape.repair_batch``.  For each
split, they are refitted by grid search on the FIT cells only (most picks
within 5% of the fastest, ties broken by the mean |log(predicted /
simulated)|), then the picks are scored on the HELD-OUT cells.  A hit: the
pick's simulated median is within 5% of the fastest method's (exact: it is
the fastest).  The shipped parameters are scored on every cell as well.

Usage:
    python -m bench.auto_holdout                       # the two committed fair reports
    python -m bench.auto_holdout R1.json R2.json --out bench/results/auto-holdout.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

from sgl_speccompact.methods.auto import Deployment, Shape, choose

ROOT = Path(__file__).resolve().parents[1]

REPORTS = [ROOT / "bench/results/latency-fair-8b.json", ROOT / "bench/results/latency-fair-32b.json"]
METHODS = ("speccompact", "target_self", "hermes", "openclaw")
QUEUEING = [1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.4]  # grid of Shape.queueing
REPAIR_BATCH = [1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # grid of Shape.repair_batch
WITHIN = 1.05  # a pick within 5% of the fastest counts as a hit


def cells(paths: list[Path]) -> list[dict]:
    """One entry per cell: its conditions and each method's SIMULATED median end-to-end."""
    out = {}
    for path in paths:
        report = json.loads(path.read_text())
        cond = report["conditions"]
        for s in report["summary_by_cell"]:
            if s["label"] != s["method"] or s["method"] not in METHODS:
                continue  # auto's own rows and the Hermes-length variants are not rivals
            key = (s["model_pair"], s["speculative"], s["deployment"], s["p_accept"])
            cell = out.setdefault(key, {"pair": key[0], "speculative": key[1], "deployment": key[2], "p": key[3],
                                        "tokens": cond["synthetic_tokens"][0], "hermes_tokens": cond["hermes_tokens"][0],
                                        "drafter_speculative": cond.get("drafter_speculative"), "median_s": {}})
            cell["median_s"][s["method"]] = s["e2e_median_s"]
    return list(out.values())


def deployment(cell: dict) -> Deployment:
    """The cost-model deployment of a cell, as ``bench/latency.py``'s auto row builds it."""
    target, drafter = cell["pair"].split(":")
    named = Deployment.named(target=target, drafter=drafter, gpus=1 if cell["deployment"] == "one-gpu" else 2,
                             speculative=None if cell["speculative"] == "none" else cell["speculative"],
                             drafter_speculative=cell["drafter_speculative"],
                             equal_hardware=cell["deployment"] != "two-gpu")
    return replace(named, hermes_tokens=cell["hermes_tokens"])


def score(group: list[dict], shape: Shape) -> dict:
    """Hits and log error of the predictor with ``shape`` on ``group``."""
    hits = exact = 0
    err = []
    misses = []
    for c in group:
        sim = c["median_s"]
        got = choose(deployment(c), c["tokens"], c["p"], methods=tuple(m for m in METHODS if m in sim), shape=shape)
        best = min(sim, key=sim.get)
        exact += got.method == best
        if sim[got.method] <= WITHIN * sim[best]:
            hits += 1
        else:
            misses.append(f"{c['pair']} {c['speculative']} {c['deployment']} p={c['p']}: picked {got.method} "
                          f"({sim[got.method] / sim[best]:.3f}x the fastest, {best})")
        err += [abs(math.log(got.predicted_s[m] / sim[m])) for m in sim]
    n = len(group)
    return {"cells": n, "hits": hits, "hit_rate": round(hits / n, 3) if n else None,
            "exact_rate": round(exact / n, 3) if n else None,
            "mean_abs_log_error": round(sum(err) / len(err), 3) if err else None, "misses": misses}


def fit(group: list[dict]) -> Shape:
    """The grid point with most hits on ``group`` (then the smallest log error)."""
    best, key = None, None
    for q, rb in itertools.product(QUEUEING, REPAIR_BATCH):
        shape = replace(Shape(), queueing=q, repair_batch=rb)
        s = score(group, shape)
        k = (-s["hits"], s["mean_abs_log_error"])
        if key is None or k < key:
            best, key = shape, k
    return best


SPLITS = {  # name -> (fit cells, held-out cells)
    "fit 8B, hold out 32B": (lambda c: "8b" in c["pair"].split(":")[0], lambda c: "32b" in c["pair"].split(":")[0]),
    "fit 32B, hold out 8B": (lambda c: "32b" in c["pair"].split(":")[0], lambda c: "8b" in c["pair"].split(":")[0]),
    "fit p=0.5,0.9, hold out p=0.7": (lambda c: c["p"] != 0.7, lambda c: c["p"] == 0.7),
    "fit no/eagle3, hold out dflash": (lambda c: c["speculative"] != "dflash", lambda c: c["speculative"] == "dflash"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="*", type=Path, default=REPORTS, help="bench/latency.py JSON reports")
    ap.add_argument("--held-out", nargs="*", type=Path, default=[],
                    help="reports whose cells no fit sees (other sizes or rates): scored with the shipped "
                         "parameters and with those refitted on every cell of REPORTS")
    ap.add_argument("--out", type=Path, help="write the JSON report here too")
    args = ap.parse_args(argv)
    all_cells = cells(args.reports)
    shipped = Shape()
    report = {"benchmark": "auto_holdout", "latency_kind": "SIMULATED",
              "method": "grid-refit of Shape.queueing and Shape.repair_batch on the fit cells; picks scored on "
                        f"held-out cells; hit = pick within {round((WITHIN - 1) * 100)}% of the fastest",
              "conditions": {"reports": [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
                                         for p in args.reports],
                             "cells": len(all_cells), "grid": {"queueing": QUEUEING, "repair_batch": REPAIR_BATCH}},
              "shipped": {"queueing": shipped.queueing, "repair_batch": shipped.repair_batch,
                          **score(all_cells, shipped)}, "splits": {}}
    print(f"auto predictor on held-out cells (SIMULATED medians, {len(all_cells)} cells from "
          f"{', '.join(report['conditions']['reports'])})")
    print(f"shipped Shape(queueing={shipped.queueing}, repair_batch={shipped.repair_batch}), all cells: "
          f"hit {report['shipped']['hit_rate']}, exact {report['shipped']['exact_rate']}")
    print("| split | fitted (queueing, repair_batch) | in-sample hit (exact) | out-of-sample hit (exact) |")
    print("|---|---|---|---|")
    for name, (is_fit, is_held) in SPLITS.items():
        fit_cells = [c for c in all_cells if is_fit(c)]
        held = [c for c in all_cells if is_held(c)]
        shape = fit(fit_cells)
        ins, out = score(fit_cells, shape), score(held, shape)
        report["splits"][name] = {"fitted": {"queueing": shape.queueing, "repair_batch": shape.repair_batch},
                                  "in_sample": ins, "out_of_sample": out}
        print(f"| {name} | ({shape.queueing}, {shape.repair_batch}) | {ins['hits']}/{ins['cells']} = "
              f"{ins['hit_rate']} ({ins['exact_rate']}) | {out['hits']}/{out['cells']} = {out['hit_rate']} "
              f"({out['exact_rate']}) |")
        for miss in out["misses"]:
            print(f"    held-out miss: {miss}")
    if args.held_out:
        unseen = cells(args.held_out)
        shape = fit(all_cells)
        report["held_out"] = {"reports": [str(p) for p in args.held_out],
                              "refit_on_all": {"fitted": {"queueing": shape.queueing, "repair_batch": shape.repair_batch},
                                               "in_sample": score(all_cells, shape), "out_of_sample": score(unseen, shape)},
                              "shipped": score(unseen, shipped)}
        h = report["held_out"]
        print(f"held-out reports {', '.join(map(str, args.held_out))}: {len(unseen)} cells "
              f"({', '.join(sorted({str(c['tokens']) + ' tokens' for c in unseen}))}, "
              f"p {sorted({c['p'] for c in unseen})})")
        print(f"| refit on all {len(all_cells)} cells ({shape.queueing}, {shape.repair_batch}) | "
              f"{h['refit_on_all']['in_sample']['hit_rate']} ({h['refit_on_all']['in_sample']['exact_rate']}) | "
              f"{h['refit_on_all']['out_of_sample']['hits']}/{len(unseen)} = "
              f"{h['refit_on_all']['out_of_sample']['hit_rate']} ({h['refit_on_all']['out_of_sample']['exact_rate']}) |")
        print(f"| shipped ({shipped.queueing}, {shipped.repair_batch}) | {report['shipped']['hit_rate']} "
              f"({report['shipped']['exact_rate']}) | {h['shipped']['hits']}/{len(unseen)} = {h['shipped']['hit_rate']} "
              f"({h['shipped']['exact_rate']}) |")
        for miss in h["shipped"]["misses"]:
            print(f"    held-out miss (shipped): {miss}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
