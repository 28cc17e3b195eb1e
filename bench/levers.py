"""SpecCompact's levers against a baseline run: a markdown table from latency reports (SIMULATED figures).

Each report is a ``bench/latency.py`` run of the same cells and seeds with
one lever switched on (``--config``, or ``--drafter-speculative``).  Per target, deployment and method the
table gives the baseline's median end-to-end and the lever's, each with its
spread over the draws (min-max), their ratio (above 1: the lever is faster),
and whether every draw kept the same decisions (the rows' ``decisions``
digests).

Usage:
    python -m bench.levers bench/results/latency-lever-baseline.json \\
        bench/results/latency-lever-split-slots.json bench/results/latency-lever-drafter-ngram.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

NAMES = {"speccompact": "SpecCompact", "target_self": "Target-self", "hermes": "Hermes-style"}


def medians(report: dict) -> dict[tuple, tuple[float, float, float]]:
    """``(target, deployment, method) -> (median, min, max)`` of e2e_s over the report's draws."""
    runs: dict[tuple, list[float]] = {}
    for r in report["rows"]:
        if r.get("e2e_s") is not None and r["method"] in NAMES:
            runs.setdefault((r["model_pair"].split(":")[0], r["deployment"], r["method"]), []).append(r["e2e_s"])
    return {k: (statistics.median(v), min(v), max(v)) for k, v in runs.items()}


def spread(m: tuple[float, float, float]) -> str:
    """``median (min-max)``.

    >>> spread((2.0, 1.0, 9.0))
    '2.00 (1.00-9.00)'
    """
    return f"{m[0]:.2f} ({m[1]:.2f}-{m[2]:.2f})"


def same_decisions(base: dict, lever: dict) -> dict[tuple, bool]:
    """``(target, deployment, method) -> True`` when every draw's decisions digest matches the baseline's."""
    def digests(report):
        return {(r["model_pair"].split(":")[0], r["deployment"], r["method"], r["draw"]): r.get("decisions")
                for r in report["rows"] if r["method"] in NAMES}
    a, b = digests(base), digests(lever)
    out: dict[tuple, bool] = {}
    for k, v in b.items():
        out[k[:3]] = out.get(k[:3], True) and v is not None and a.get(k) == v
    return out


def table(base: dict, name: str, lever: dict) -> list[str]:
    """Markdown rows of one lever against the baseline."""
    m0, m1, same = medians(base), medians(lever), same_decisions(base, lever)
    out = []
    for key in sorted(m1, key=lambda k: ("32b" in k[0], k[1] != "two-gpu-equal", k[2])):
        if key[2] == "hermes" or key not in m0:
            continue
        out.append(f"| {name} | {key[0]} | {key[1]} | {NAMES[key[2]]} | {spread(m0[key])} | {spread(m1[key])} | "
                   f"{m0[key][0] / m1[key][0]:.2f}x | {'yes' if same.get(key) else 'no'} |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("baseline", help="latency report with every lever at its default")
    p.add_argument("levers", nargs="+", help="latency reports of the same cells, one lever on in each")
    args = p.parse_args(argv)
    base = json.loads(Path(args.baseline).read_text())
    print("SIMULATED (one-clock simulator, H200 cost model); not a GPU measurement. Medians over "
          f"{base['conditions']['seeds']} seeds; speculative {','.join(base['conditions']['speculative'])}, "
          f"p={','.join(map(str, base['conditions']['p_accept']))}.\n")
    print("| lever | target | deployment | method | baseline e2e (s), median (min-max) | lever e2e (s) | speedup "
          "(medians) | same decisions |")
    print("|---|---|---|---|---|---|---|---|")
    for path in args.levers:
        lever = json.loads(Path(path).read_text())
        cond = lever["conditions"]
        name = f"`{cond.get('config') or 'drafter_speculative=' + str(cond.get('drafter_speculative'))}`"
        print("\n".join(table(base, name, lever)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
