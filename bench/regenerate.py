#!/usr/bin/env python
"""Rerun every benchmark the current result pages quote, from today's code (SIMULATED runs).

Method: each entry of :data:`RUNS` is one committed JSON under ``bench/results``
and the exact command that writes it; this script runs them one after
another (one simulation at a time), prints each command, its conditions and
its runtime, and ends with the total.  The pages that quote them:
``docs/benchmarks/single-compaction.md``, ``docs/benchmarks/session.md`` (with the
evolving-summary race, ``session-evolving*``) and ``docs/benchmarks/auto-picker.md`` (the
fair field).
Every figure is SIMULATED (one-clock simulator, H200 cost model), never a
GPU measurement.

``--check`` reruns a few cheap cells of each run instead (its first seed;
together the cells cover every method and speculative decoding the run's rows
hold) and fails when a committed row no longer matches what the code
produces for the recorded conditions and seed (the staleness check that
``tests/bench/test_bench_regenerate.py`` runs).  Both also cover the
documentation's figures (``bench/figures.py``): a full run renders them again
from the JSONs it wrote, ``--check`` re-renders them into a temporary folder
and fails on a figure that differs from its committed PNG.

Usage::

    python -m bench.regenerate            # every quoted run (about 15-20 min on 2 busy cores)
    python -m bench.regenerate --only single-compaction
    python -m bench.regenerate --check    # a few cheap cells per run and every figure, compared with what is committed
    python -m bench.regenerate --tables   # the pages' tables, from the committed JSONs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"

# name -> (committed JSON, bench script, its arguments)
SINGLE = ["--methods", "target_self,speccompact,hermes,openclaw,auto", "--no-trajectories",
          "--synthetic-tokens", "8000", "--deployments", "two-gpu-equal,two-gpu-tp2-colocated,one-gpu",
          "--p-accept", "0.7", "--seeds", "8",
          "--speculative", "eagle3", "--hermes-tokens", "2048,2000", "--local-tokenizer", "--no-plots"]
RUNS = {
    "single-compaction-8b": ("single-compaction-8b.json", "latency.py",
                             SINGLE + ["--model-pairs", "qwen3-8b:qwen3-0.6b"]),
    "single-compaction-32b": ("single-compaction-32b.json", "latency.py",
                              SINGLE + ["--model-pairs", "qwen3-32b:qwen3-0.6b"]),
    "session": ("session.json", "session.py", [
        "--model-pairs", "qwen3-8b:qwen3-0.6b", "--deployments", "two-gpu-equal,two-gpu-tp2-colocated",
        "--speculative", "eagle3", "--session-tokens", "75000", "--seeds", "8", "--local-tokenizer", "--no-plots"]),
    "session-32b": ("session-32b.json", "session.py", [
        "--model-pairs", "qwen3-32b:qwen3-0.6b", "--deployments", "two-gpu-equal", "--speculative", "eagle3",
        "--session-tokens", "75000", "--seeds", "8", "--methods", "speccompact,target_self", "--priority", "on",
        "--local-tokenizer", "--no-plots"]),
    "session-speculative": ("session-speculative.json", "session.py", [
        "--model-pairs", "qwen3-8b:qwen3-0.6b", "--deployments", "two-gpu-equal", "--methods", "target_self",
        "--modes", "sync", "--speculative", "none,eagle3,dflash,ngram,ngram-copy", "--session-tokens", "75000",
        "--seeds", "8", "--local-tokenizer", "--no-plots"]),
}

# prepares that yield to the agent (--prepare-yield-s), ahead of time only: 0 (never waits) against bounds
YIELD = ["--speculative", "eagle3", "--session-tokens", "75000", "--seeds", "8",
         "--methods", "speccompact,target_self", "--modes", "ahead", "--priority", "on", "--local-tokenizer",
         "--no-plots"]
RUNS.update({
    "session-yield": ("session-yield.json", "session.py", [
        "--model-pairs", "qwen3-8b:qwen3-0.6b", *YIELD, "--deployments", "two-gpu-equal,two-gpu-tp2-colocated",
        "--prepare-yield-s", "0,0.5,2"]),
    "session-yield-32b": ("session-yield-32b.json", "session.py", [
        "--model-pairs", "qwen3-32b:qwen3-0.6b", *YIELD, "--deployments", "two-gpu-equal",
        "--prepare-yield-s", "0,0.5,2,5"]),
})

# the fair field (every method, three speculative decoding settings, three deployments, three
# acceptance rates) behind the auto picker's hit rates (docs/benchmarks/auto-picker.md)
FAIR = ["--no-trajectories", "--synthetic-tokens", "8000", "--deployments", "one-gpu,two-gpu,two-gpu-equal",
        "--p-accept", "0.5,0.7,0.9", "--speculative", "none,eagle3,dflash", "--hermes-tokens", "1200",
        "--seeds", "8", "--local-tokenizer", "--no-plots"]
RUNS.update({
    "fair-8b": ("latency-fair-8b.json", "latency.py", FAIR + ["--model-pairs", "qwen3-8b:qwen3-0.6b"]),
    "fair-32b": ("latency-fair-32b.json", "latency.py", FAIR + ["--model-pairs", "qwen3-32b:qwen3-0.6b"]),
})

# sessions whose summary evolves (a held share h of each summary still holds at the next compaction):
# every method, its speculative decoding and its delta (ngram-copy-h: NGRAM copying the held lines)
EVOLVE = ["--deployments", "two-gpu-equal", "--modes", "sync", "--hold", "0,0.3,0.6,0.9", "--session-tokens", "180000",
          "--hermes-tokens", "2048", "--seeds", "8", "--speculative", "eagle3", "--methods", "speccompact",
          "--local-tokenizer", "--no-plots"]
RUNS.update({
    "session-evolving": ("session-evolving.json", "session.py", ["--model-pairs", "qwen3-8b:qwen3-0.6b", *EVOLVE]),
    "session-evolving-32b": ("session-evolving-32b.json", "session.py",
                             ["--model-pairs", "qwen3-32b:qwen3-0.6b", *EVOLVE]),
})
SINGLE_DELTA = {"--speculative": "eagle3,ngram-copy-h", "--methods": "target_self,hermes,openclaw"}
# the same sessions ahead of time, the agent at the higher priority (the stall then, and the agent's slowdown):
# the delta methods and Target-self, 8B (an ahead session simulates the agent's turns around each prepare twice)
EVOLVE_AHEAD = ["--deployments", "two-gpu-equal", "--modes", "ahead", "--priority", "on", "--hold", "0,0.3,0.6,0.9",
                "--session-tokens", "180000", "--hermes-tokens", "2048", "--seeds", "8", "--speculative", "eagle3",
                "--methods", "speccompact,target_self,target_delta", "--local-tokenizer", "--no-plots"]
RUNS["session-evolving-ahead"] = ("session-evolving-ahead.json", "session.py",
                                  ["--model-pairs", "qwen3-8b:qwen3-0.6b", *EVOLVE_AHEAD])
AHEAD_SHARDS = [{"--seed": "0", "--seeds": "4"}, {"--seed": "4", "--seeds": "4"},
                {"--speculative": "ngram-copy-h", "--methods": "target_self"}]
# Target-delta copies the held lines itself and decodes only new text: EAGLE3, and plain NGRAM (nothing to copy)
TARGET_DELTA = {"--speculative": "eagle3,ngram", "--methods": "target_delta"}

# the delta race without the simulator's favours: a judge with stated error rates (false accept = false reject =
# 0, 0.05, 0.15, 0.3), held lines at drawn places in their slot and a writer that repeats a carried line it passes
# at rate 0.1 (bench/sim/mistakes.py): the judging methods on EAGLE3 per error rate, and Target-self (EAGLE3 and
# NGRAM copy), which never judges, once
JUDGE_RATES = ("0", "0.05", "0.15", "0.3")
JUDGE = ["--deployments", "two-gpu-equal", "--modes", "sync", "--hold", "0,0.3,0.6,0.9", "--session-tokens", "180000",
         "--hermes-tokens", "2048", "--seeds", "8", "--speculative", "eagle3", "--methods", "speccompact,target_delta",
         "--false-accept", ",".join(JUDGE_RATES), "--false-reject", ",".join(JUDGE_RATES), "--held-positions", "drawn",
         "--repeat", "0.1", "--local-tokenizer", "--no-plots"]
RUNS.update({
    "session-evolving-judge": ("session-evolving-judge.json", "session.py",
                               ["--model-pairs", "qwen3-8b:qwen3-0.6b", *JUDGE]),
    "session-evolving-judge-32b": ("session-evolving-judge-32b.json", "session.py",
                                   ["--model-pairs", "qwen3-32b:qwen3-0.6b", *JUDGE]),
})
# seeds in pairs, seed-major (``--shards 9`` is the whole run on seeds 0-1): per pair, Target-self once, then each
# judging method at each error rate
JUDGE_SHARDS = [shard for k in (0, 2, 4, 6) for shard in (
    [{"--seed": str(k), "--seeds": "2", "--methods": "target_self", "--speculative": "eagle3,ngram-copy-h",
      "--false-accept": "0", "--false-reject": "0"}]
    + [{"--seed": str(k), "--seeds": "2", "--methods": m, "--false-accept": e, "--false-reject": e}
       for e in JUDGE_RATES for m in ("speccompact", "target_delta")])]

# runs split into shards (of seeds, or of methods), each command under 10 minutes, merged into the one JSON
SHARDS = {"session-evolving": [{"--seed": "0", "--seeds": "4"}, {"--seed": "4", "--seeds": "4"}, SINGLE_DELTA,
                               TARGET_DELTA],
          "session-evolving-32b": [{"--seed": "0", "--seeds": "4"}, {"--seed": "4", "--seeds": "4"}, SINGLE_DELTA,
                                   TARGET_DELTA],
          "session-evolving-ahead": AHEAD_SHARDS,
          "session": [{"--seed": str(k), "--seeds": "2"} for k in (0, 2, 4, 6)],
          "session-yield": [{"--seed": str(k), "--seeds": "4"} for k in (0, 4)],
          "session-yield-32b": [{"--seed": str(k), "--seeds": "4"} for k in (0, 4)],
          "session-evolving-judge": JUDGE_SHARDS, "session-evolving-judge-32b": JUDGE_SHARDS}

# the cheap cells of --check: arguments replaced (one command per cell), and the row fields that must match the
# committed rows.  Together a run's cells cover every method and speculative decoding its rows hold.  A cell starts
# where its run (or shard) starts: the client's token-id cache is shared by the cells of one process, so the first
# cell's charge depends on what ran before it (by microseconds); the cells after it do not
CELL = {"--seeds": "1", "--deployments": "two-gpu-equal"}
# rows are matched by the trajectory's file name: its absolute path differs from one checkout to another
SESSION_KEY = (("label", "mode", "priority", "deployment", "model_pair", "speculative", "seed", "trajectory"),
               ("stalls_s", "device_s"))
# a run's Hermes rows share their method ("hermes"; @2048, @2000, @slots): its length tells them apart
SINGLE_KEY = (("method", "hermes_tokens", "deployment", "model_pair", "seed", "draw", "trajectory"),
              ("e2e_s", "decisions"))
FAIR_KEY = (("method", "hermes_tokens", "deployment", "model_pair", "speculative", "p_accept", "seed", "draw",
             "trajectory"), ("e2e_s", "decisions"))
EVOLVE_KEY = (SESSION_KEY[0] + ("hold",), SESSION_KEY[1] + ("retention", "carried_share"))
JUDGE_KEY = (EVOLVE_KEY[0] + ("false_accept", "false_reject"),
             EVOLVE_KEY[1] + ("truth_retention", "staleness"))
FAIR_CELL = {**CELL, "--deployments": "one-gpu", "--p-accept": "0.5"}  # every speculative decoding, "none" first
# an evolving run's shards: SpecCompact's first, the single-model methods under both targets, Target-delta's
# (from h = 0, where each shard starts)
EVOLVE_CELLS = [{**CELL, "--methods": "speccompact", "--hold": "0"}, {**CELL, **SINGLE_DELTA, "--hold": "0,0.6"},
                {**CELL, **TARGET_DELTA, "--hold": "0,0.6"}]
JUDGE_CELLS = [{**CELL, **JUDGE_SHARDS[i], "--seeds": "1", "--hold": "0,0.6"}
               for i in (0, 5, 6)]  # Target-self; SpecCompact and Target-delta at false accept = reject = 0.15
CHECKS = {
    "fair-8b": ([FAIR_CELL], *FAIR_KEY),
    "fair-32b": ([FAIR_CELL], *FAIR_KEY),
    "single-compaction-8b": ([{**CELL, "--hermes-tokens": "2048"}], *SINGLE_KEY),
    "single-compaction-32b": ([{**CELL, "--hermes-tokens": "2048"}], *SINGLE_KEY),
    "session": ([{**CELL, "--modes": "sync"}], *SESSION_KEY),
    "session-32b": ([{**CELL, "--modes": "sync"}], *SESSION_KEY),
    "session-speculative": ([CELL], *SESSION_KEY),
    # ahead of time, one bound: the rows are told apart by their yield bound too
    "session-yield": ([{**CELL, "--prepare-yield-s": "2"}], SESSION_KEY[0] + ("yield_s",),
                      SESSION_KEY[1] + ("agent_slowdowns",)),
    "session-yield-32b": ([{**CELL, "--prepare-yield-s": "2"}], SESSION_KEY[0] + ("yield_s",),
                          SESSION_KEY[1] + ("agent_slowdowns",)),
    "session-evolving": (EVOLVE_CELLS, *EVOLVE_KEY),
    "session-evolving-32b": (EVOLVE_CELLS, *EVOLVE_KEY),
    # h = 0.9, seed 0: a prepare evolved from the one before, beside the agent's turns
    "session-evolving-ahead": ([{**CELL, "--hold": "0.9"}, {**CELL, **AHEAD_SHARDS[2], "--hold": "0.9"}],
                               EVOLVE_KEY[0], EVOLVE_KEY[1] + ("agent_slowdowns",)),
    "session-evolving-judge": (JUDGE_CELLS, *JUDGE_KEY),
    "session-evolving-judge-32b": (JUDGE_CELLS, *JUDGE_KEY),
}


def command(name: str, out: Path, replace: dict | None = None) -> list[str]:
    """The command line of run ``name`` writing ``out`` (``replace``: arguments swapped for a cheap cell).

    >>> command("session", Path("x.json"), {"--seeds": "1"})[-6:]
    ['--seeds', '1', '--local-tokenizer', '--no-plots', '--out', 'x.json']
    """
    _, script, args = RUNS[name]
    args = list(args)
    for flag, value in (replace or {}).items():
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return [sys.executable, "-m", f"bench.{Path(script).stem}", *args, "--out", str(out)]


def run(cmd: list[str]) -> float:
    """Run one benchmark command (its output shown); its runtime in seconds."""
    print("$ " + " ".join(Path(c).name if c == sys.executable else c for c in cmd), flush=True)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH.parent), os.environ.get("PYTHONPATH")]))}
    subprocess.run(cmd, check=True, env=env, cwd=BENCH.parent)  # this checkout's package, not another install
    return time.perf_counter() - t0


def merge(parts: list[dict]) -> dict:
    """One report from shards of seeds: rows in order, the summary rebuilt, the conditions of all seeds."""
    from bench.harness.session import summarize

    rows = [r for p in parts for r in p["rows"]]
    seeds = sorted({r["seed"] for r in rows})
    cond = {**parts[0]["conditions"], "seed": seeds[0], "seeds": len(seeds)}
    for k in ("speculative", "methods", "false_accept", "false_reject", "judge_errors"):  # shards of these: all
        got = dict.fromkeys(tuple(x) if isinstance(x, list) else x for p in parts for x in p["conditions"].get(k) or [])
        if got:
            cond[k] = [list(x) if isinstance(x, tuple) else x for x in got]
    return {**parts[0], "conditions": cond, "rows": rows, "summary": summarize(rows),
            "runtime_s": round(sum(p.get("runtime_s") or 0 for p in parts), 1),
            "shards": [p["conditions"].get("seed") for p in parts]}


def regenerate(name: str, shards: int | None = None) -> float:
    """Rerun ``name`` (its first ``shards`` shards one after another, then merged); its runtime in seconds."""
    out = RESULTS / RUNS[name][0]
    if name not in SHARDS:
        return run(command(name, out))
    spent, parts = 0.0, []
    with tempfile.TemporaryDirectory() as tmp:
        for i, shard in enumerate(SHARDS[name][:shards]):
            part = Path(tmp) / f"part{i}.json"
            spent += run(command(name, part, shard))
            parts.append(json.loads(part.read_text()))
    from bench.harness.runs import write_json

    write_json(merge(parts), out)
    return spent


def stale_rows(committed: dict, fresh: dict, key: tuple, fields: tuple) -> list[str]:
    """Rows of ``fresh`` whose ``fields`` differ from the committed row with the same ``key`` (or that has none).

    >>> a = {"rows": [{"m": "x", "e": 1.0}]}
    >>> stale_rows(a, a, ("m",), ("e",)), stale_rows(a, {"rows": [{"m": "x", "e": 2.0}]}, ("m",), ("e",))
    ([], ["('x',): e 1.0 -> 2.0"])
    """
    old = {tuple(r.get(k) for k in key): r for r in committed["rows"]}
    out = []
    for r in fresh["rows"]:
        k = tuple(r.get(x) for x in key)
        if k not in old:
            out.append(f"{k}: not in the committed JSON")
            continue
        out += [f"{k}: {f} {old[k].get(f)} -> {r.get(f)}" for f in fields if old[k].get(f) != r.get(f)]
    return out


def check(name: str) -> list[str]:
    """Rerun the cheap cells of ``name``; what no longer matches its committed JSON (empty: current)."""
    cells, key, fields = CHECKS[name]
    committed = json.loads((RESULTS / RUNS[name][0]).read_text())
    out = []
    for i, replace in enumerate(cells):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "cell.json"
            run(command(name, path, replace))
            fresh = json.loads(path.read_text())
        if not fresh["rows"]:
            out.append(f"{name}: cheap cell {i} produced no rows")
        out += [f"{name} {line}" for line in stale_rows(committed, fresh, key, fields)]
    return out


NAMES = {"target_self": "Target-self", "speccompact": "SpecCompact", "openclaw": "OpenClaw-style", "auto": "auto"}


def single_table(reports: list[dict]) -> str:
    """The single-compaction page's table: per deployment and method, each target's median [min-max] (SIMULATED)."""
    pairs = [r["conditions"]["model_pairs"][0] for r in reports]
    cells = {(c["model_pair"], c["deployment"], c["label"]): c for r in reports for c in r["summary_by_cell"]}
    auto = {k: v for r in reports for k, v in r["auto"].items()}
    head = " | ".join(f"{p.split(':')[0]} e2e s, median [min-max] (TS / method; auto's prediction)" for p in pairs)
    out = [f"| deployment | method | {head} |", "|---|---|" + "---|" * len(pairs)]
    deps = list(dict.fromkeys(k[1] for k in cells))
    labels = list(dict.fromkeys(k[2] for k in cells if k[2] != "hermes@slots"))
    for dep in deps:
        for label in labels:
            row = []
            for pair in pairs:
                c, ts = cells.get((pair, dep, label)), cells.get((pair, dep, "target_self"))
                if c is None:
                    row.append("-")
                    continue
                got = next((v for k, v in auto.items() if k.startswith(f"{pair}/") and f"/{dep}/" in k), {})
                first = f"hermes@{reports[0]['conditions']['hermes_tokens'][0]}"  # auto predicts this length
                predicted = (got.get("predicted_s") or {}).get("hermes" if label == first else label)
                pick = f"; predicted {predicted:.2f}" if predicted else ""
                if label == "auto":
                    pick = f" picks {NAMES.get(got.get('pick'), got.get('pick'))}"
                ratio = ts["e2e_median_s"] / c["e2e_median_s"]
                row.append(f"{c['e2e_median_s']:.2f} [{c['e2e_min_s']:.2f}-{c['e2e_max_s']:.2f}] "
                           f"({ratio:.2f}x){pick}")
            out.append(f"| {dep} | {NAMES.get(label, label.replace('hermes@', 'Hermes-style @'))} | "
                       f"{' | '.join(row)} |")
    return "\n".join(out)


def tables() -> str:
    """Every page table from the committed JSONs (what the pages under docs/benchmarks/ show)."""
    from bench.harness.race import ahead_tables, judge_tables, race_tables
    from bench.harness.session import format_summary

    single = [json.loads((RESULTS / RUNS[n][0]).read_text()) for n in RUNS if n.startswith("single-compaction")]
    out = [f"## single compaction ({single[0]['timestamp']})\n\n{single_table(single)}"]
    for name in ("session", "session-32b", "session-speculative", "session-yield", "session-yield-32b"):
        report = json.loads((RESULTS / RUNS[name][0]).read_text())
        out.append(f"## {name} ({report['timestamp']})\n\n{format_summary(report['summary'], 'SIMULATED')}")
    for name in ("session-evolving", "session-evolving-32b"):  # the race over the held share h
        report = json.loads((RESULTS / RUNS[name][0]).read_text())
        out.append(f"## {name} ({report['timestamp']})\n\n{race_tables(report)}")
    for name in ("session-evolving-ahead",):  # ... ahead of time
        report = json.loads((RESULTS / RUNS[name][0]).read_text())
        out.append(f"## {name} ({report['timestamp']})\n\n{ahead_tables(report)}")
    for name in ("session-evolving-judge", "session-evolving-judge-32b"):  # ... with a judge that errs
        report = json.loads((RESULTS / RUNS[name][0]).read_text())
        out.append(f"## {name} ({report['timestamp']})\n\n{judge_tables(report)}")
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="+", choices=sorted(RUNS), help="these runs only")
    p.add_argument("--check", action="store_true", help="one cheap cell per run, compared with the committed JSON")
    p.add_argument("--tables", action="store_true", help="print the pages' tables from the committed JSONs")
    p.add_argument("--shards", type=int, help="of a run split into seed shards, only the first N (fewer seeds)")
    p.add_argument("--no-figures", dest="figures", action="store_false",
                   help="leave the documentation's figures (bench/figures.py) alone: not rendered, not checked")
    args = p.parse_args(argv)
    if args.tables:
        print(tables())
        return 0
    names = args.only or list(RUNS)
    print("Method: rerun each quoted benchmark from today's code, one at a time (SIMULATED: one-clock simulator, "
          "H200 cost model; not a GPU measurement)")
    print(f"Conditions: runs {', '.join(names)}; {'cheap cells of each, every method, compared' if args.check else 'full'}; "
          f"python {sys.version.split()[0]}")
    t0, failed = time.perf_counter(), []
    for name in names:
        if args.check:
            failed += check(name)
        else:
            print(f"{name}: {regenerate(name, args.shards):.0f} s", flush=True)
    if args.figures:  # the documentation's figures, from the JSONs as they are now
        from bench import figures

        if args.check:
            failed += figures.check()
        else:
            for path in figures.render_all():
                print(f"wrote {path}")
    print(f"runtime {time.perf_counter() - t0:.0f} s")
    for line in failed:
        print(f"STALE {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
