"""Which method is fastest where: a markdown table from latency reports (their figures are SIMULATED).

Reads one or more ``bench/latency.py`` JSON reports and prints, per target,
deployment and speculative decoding, the fastest method's median end-to-end
at each acceptance rate, SpecCompact's and Target-self's medians, and what
``auto`` picked; then the goal rows and auto's within-5% check.

Usage:
    python -m bench.fastest_where bench/results/latency-fair-8b.json bench/results/latency-fair-32b.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NAMES = {"speccompact": "SpecCompact", "target_self": "Target-self", "hermes": "Hermes-style",
         "openclaw": "OpenClaw-style", "auto": "auto"}


def load(paths: list[str]) -> tuple[list[dict], list[dict], list[dict], dict]:
    summary, goals, checks, cond = [], [], [], {}
    for p in paths:
        r = json.loads(Path(p).read_text())
        summary += r["summary_by_cell"]
        goals += r.get("goals", [])
        checks += r.get("auto_check", [])
        cond = r["conditions"]
    return summary, goals, checks, cond


def table(summary: list[dict]) -> str:
    """One row per (target, deployment, speculative); a cell per acceptance rate."""
    rates = sorted({s["p_accept"] for s in summary})
    out = ["| target | deployment | speculative | " + " | ".join(f"p={p}" for p in rates) + " |",
           "|---|---|---|" + "---|" * len(rates)]
    keys = sorted({(s["model_pair"], s["deployment"], s["speculative"]) for s in summary},
                  key=lambda k: ("32b" in k[0], ["one-gpu", "two-gpu", "two-gpu-equal"].index(k[1]), k[2] != "none", k[2]))
    for pair, dep, spec in keys:
        cells = []
        for p in rates:
            sub = {s["label"]: s for s in summary if (s["model_pair"], s["deployment"], s["speculative"], s["p_accept"])
                   == (pair, dep, spec, p)}
            rivals = [s for lab, s in sub.items() if lab not in ("auto", "hermes@slots")]
            if not rivals:
                cells.append("-")
                continue
            best = min(rivals, key=lambda s: s["e2e_median_s"])
            sc, ts, auto = sub.get("speccompact"), sub.get("target_self"), sub.get("auto")
            text = f"**{NAMES[best['method']]}** {best['e2e_median_s']:.2f} s"
            if sc and ts:
                text += f"; SC/TS {ts['e2e_median_s'] / sc['e2e_median_s']:.2f}x"
            if auto:
                text += f"; auto: {NAMES.get(auto.get('pick'), auto.get('pick'))}"
            cells.append(text)
        out.append(f"| {pair.split(':')[0]} | {dep} | {spec} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("reports", nargs="+")
    args = p.parse_args(argv)
    summary, goals, checks, cond = load(args.reports)
    print(f"SIMULATED (one-clock simulator, H200 cost model; not a GPU measurement): median end-to-end over "
          f"{cond.get('seeds')} seeds, synthetic {cond.get('synthetic_tokens')}-token histories, Hermes-style "
          f"{cond.get('hermes_tokens')} tokens. SC/TS: Target-self median / SpecCompact median (> 1: SpecCompact "
          "faster).")
    print(table(summary))
    print("\n| target | speculative | deployment | p | method | reference | median speedup | goal | met |")
    print("|---|---|---|---|---|---|---|---|---|")
    for g in goals:
        met = "-" if g["met"] is None else ("yes" if g["met"] else "no")
        sp = "-" if g["speedup"] is None else f"{g['speedup']:.2f}x"
        print(f"| {g['model_pair'].split(':')[0]} | {g['speculative']} | {g['deployment']} | {g['p_accept']} | "
              f"{g['method']} | {g['reference']} | {sp} | >= {g['goal']:g}x | {met} |")
    bad = [c for c in checks if not c["within_5pct"]]
    print(f"\nauto within 5% of the fastest median in {len(checks) - len(bad)} of {len(checks)} cells"
          + ("" if not bad else ": misses " + "; ".join(f"{c['model_pair']} {c['deployment']} {c['speculative']} "
                                                        f"p={c['p_accept']} ({c['ratio']:.3f})" for c in bad)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
