"""Ablation benchmark (paper Table 4 style): SpecCompact's latency with each optimization switched off.

The optimizations are ``sgl_speccompact.config.OPTIMIZATIONS`` (CompactConfig
bool field -> description); every switch registered there is swept.  Rows:
all on (the defaults), each switch flipped from its default alone ("no X",
or "with X" for a switch that is off by default), all off.  Each row runs
SpecCompact on the one-clock simulator (bench/latency.py's ``simulate``:
same workload, deployments and cost model), so every latency is SIMULATED,
never a GPU measurement.  Reported per row: geometric-mean end-to-end over
the histories, its ratio to all-on (> 1: switching it off costs time), and
target/drafter requests per compaction.

Usage:
    python bench/ablation.py                      # 8B + 0.6B, both deployments, p=0.7
    python bench/ablation.py --deployments one-gpu --model-pairs qwen3-32b:qwen3-0.6b --p-accept 0.5
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import latency  # noqa: E402
import radix_cache as rc  # noqa: E402


def variants() -> list[tuple[str, dict]]:
    """``(label, CompactConfig overrides)``: the defaults, each switch flipped alone, all off."""
    from sgl_speccompact.config import OPTIMIZATIONS

    from sgl_speccompact.config import CompactConfig

    names = list(OPTIMIZATIONS)
    default = {n: CompactConfig.model_fields[n].default for n in names}  # the recommended setting
    return ([("all on", {})] + [(f"no {n}" if default[n] else f"with {n}", {n: not default[n]}) for n in names]
            + ([("all off", dict.fromkeys(names, False))] if len(names) > 1 else []))


def run(args) -> dict:
    from sgl_speccompact.config import OPTIMIZATIONS

    _, runner, runner_src = rc.resolve_methods()
    print("Method: SpecCompact end-to-end latency with each optimization of sgl_speccompact.config.OPTIMIZATIONS "
          "switched off alone, all on and all off; ratio = variant e2e / all-on e2e")
    print(f"Latency: {latency.SIMULATED_NOTE}.")
    rows = []
    for label, overrides in variants():
        sub = argparse.Namespace(**{**vars(args), "config": json.dumps(overrides) if overrides else None})
        got, info = latency.simulate(sub, ["speccompact"], runner)
        for r in got:
            r["variant"], r["overrides"] = label, overrides
        rows += got
    summary = []
    cells = dict.fromkeys((r["model_pair"], r["deployment"], r["p_accept"]) for r in rows)
    for cell in cells:
        inside = [r for r in rows if (r["model_pair"], r["deployment"], r["p_accept"]) == cell and "e2e_s" in r]
        base = latency.geomean(r["e2e_s"] for r in inside if r["variant"] == "all on")
        for label, overrides in variants():
            rs = [r for r in inside if r["variant"] == label]
            e2e = latency.geomean(r["e2e_s"] for r in rs)
            summary.append({"model_pair": cell[0], "deployment": cell[1], "p_accept": cell[2], "variant": label,
                            "overrides": overrides, "histories": len(rs), "geomean_e2e_s": e2e,
                            "ratio_to_all_on": e2e / base if e2e and base else None,
                            "mean_target_requests": sum(r["target"]["requests"] for r in rs) / max(len(rs), 1),
                            "mean_drafter_requests": sum(r["drafter"]["requests"] for r in rs) / max(len(rs), 1)})
    print(format_table(summary))
    now = datetime.now(UTC)
    report = {"benchmark": "ablation", "latency_kind": "simulated", "simulated_note": latency.SIMULATED_NOTE,
              "optimizations": dict(OPTIMIZATIONS), "runner": runner_src,
              "timestamp": now.isoformat(timespec="seconds"), "conditions": vars(args), **info,
              "rows": rows, "summary": summary}
    path = rc.write_json(report, args.out or str(rc.RESULTS_DIR / f"ablation-{now.strftime('%Y%m%dT%H%M%SZ')}.json"))
    print(f"wrote {path}")
    return report


def format_table(summary: list[dict]) -> str:
    out = []
    for cell in dict.fromkeys((s["model_pair"], s["deployment"], s["p_accept"]) for s in summary):
        rows = [s for s in summary if (s["model_pair"], s["deployment"], s["p_accept"]) == cell]
        out.append(f"\nSIMULATED ablation, deployment {cell[1]}, {cell[0]}, p={cell[2]} "
                   f"(SpecCompact, geometric mean over {rows[0]['histories']} histories)")
        out.append("| configuration | e2e s | vs all on | T reqs | D reqs |")
        out.append("|---|---|---|---|---|")
        for s in rows:
            e2e = "-" if s["geomean_e2e_s"] is None else f"{s['geomean_e2e_s']:.2f}"
            ratio = "-" if s["ratio_to_all_on"] is None else f"{s['ratio_to_all_on']:.2f}x"
            out.append(f"| {s['variant']} | {e2e} | {ratio} | {s['mean_target_requests']:.0f} | "
                       f"{s['mean_drafter_requests']:.0f} |")
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    p = latency.build_parser()
    p.description = "SIMULATED ablation of SpecCompact's optimizations (paper Table 4 style)."
    p.set_defaults(model_pairs=["qwen3-8b:qwen3-0.6b"], p_accept=[0.7], plots=False)
    return p


def main(argv: list[str] | None = None) -> int:
    report = run(build_parser().parse_args(argv))
    return 1 if any("error" in r for r in report["rows"]) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(rc.REPO))
    raise SystemExit(main())
