#!/usr/bin/env python
"""Rerun every benchmark the current result pages quote, from today's code (SIMULATED runs).

Method: each entry of :data:`RUNS` is one committed JSON under ``bench/results``
and the exact command that writes it (split into the parts of
:data:`SHARDS` where one is long).  The commands run in ``--workers`` worker
processes that import sglang, torch and the tokenizer once each
(:mod:`bench.harness.jobs`), heaviest first; every finished part prints a
progress line (its wall and CPU time, what is left), and the end prints the
total CPU and wall time.  The pages that quote the runs:
``docs/benchmarks/single-compaction.md``, ``docs/benchmarks/session.md`` (with
the evolving-summary race, ``session-evolving*``) and
``docs/benchmarks/auto-picker.md`` (the fair field).  Every figure is
SIMULATED (one-clock simulator, H200 cost model), never a GPU measurement.

Resumable: a part is written to ``bench/results/<run>.parts.tmp/`` (not
committed) with a stamp of its command and a digest of the code; an
interrupted regeneration run again keeps every part made by the same
command from the same code (``--fresh`` makes them all again), and a run's
JSON is written once all its parts are there.

``--check`` reruns a few cheap cells of each run instead (its first seed;
together the cells cover every method and speculative decoding the run's rows
hold) and fails when a committed row no longer matches what the code
produces for the recorded conditions and seed (the staleness check that
``tests/bench/test_bench_regenerate.py`` and CI run).  It also prints an
estimate of a full regeneration's CPU and wall time from the cells.  Both
cover the documentation's figures (``bench/figures.py``): a full run renders
them again from the JSONs it wrote, ``--check`` re-renders them into a
temporary folder and fails on a figure that differs from its committed PNG.

Usage::

    python -m bench.regenerate            # every quoted run, resumable
    python -m bench.regenerate --only single-compaction-8b session
    python -m bench.regenerate --check    # cheap cells of every run and every figure, with the estimate
    python -m bench.regenerate --tables   # the pages' tables, from the committed JSONs
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
WORKERS = 2  # worker processes: this machine's cores
WARM_S = 15.0  # CPU seconds a worker spends on its imports and the tokenizer before its first job

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
         "--repeat", "0.1", "--evidence-check", "both", "--local-tokenizer", "--no-plots"]
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
JUDGE_KEY = (EVOLVE_KEY[0] + ("false_accept", "false_reject", "evidence_catch"),
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


# ------------------------------------------------------------------ what runs, and where its parts are kept


def parts_of(name: str, shards: int | None = None) -> list[dict | None]:
    """The argument swaps of each command of run ``name`` (``[None]``: one command, the whole run)."""
    return list(SHARDS[name][:shards]) if name in SHARDS else [None]


def workdir(name: str) -> Path:
    """Where run ``name``'s finished parts wait for the others (``bench/results/<run>.parts.tmp``, not committed)."""
    return RESULTS / (Path(RUNS[name][0]).stem + ".parts.tmp")


def source_digest() -> str:
    """A digest of the code a run depends on: a part made by other code is never reused."""
    h = hashlib.sha256()
    roots = [BENCH.parent / "sgl_speccompact", BENCH, BENCH.parent / "integrations" / "hermes"]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "results" in path.relative_to(root).parts[:1]:
                continue
            h.update(str(path.relative_to(BENCH.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def kept(part: Path, args: list[str], digest: str) -> bool:
    """Whether ``part`` was made by exactly this command from this code (and so is not made again)."""
    stamp = part.with_suffix(".stamp")
    if not (part.is_file() and stamp.is_file()):
        return False
    try:
        return json.loads(stamp.read_text()) == {"args": args, "source": digest}
    except ValueError:
        return False


def weight(name: str, parts: int) -> float:
    """A part's expected cost, from its committed run's runtime (heavier parts start first)."""
    try:
        report = json.loads((RESULTS / RUNS[name][0]).read_text())
    except (OSError, ValueError):
        return 1.0
    runtime = report.get("runtime_s") or sum(r.get("real_s") or 0 for r in report.get("rows", [])) or 1.0
    return runtime / parts


def full_jobs(names: list[str], shards: int | None, digest: str, fresh: bool) -> tuple[list, list[Path]]:
    """``(jobs still to run, parts kept from an earlier, interrupted regeneration)``."""
    from bench.harness.jobs import Job

    todo, reused = [], []
    for name in names:
        swaps = parts_of(name, shards)
        folder = workdir(name)
        folder.mkdir(parents=True, exist_ok=True)
        for i, swap in enumerate(swaps):
            part = folder / f"part{i}.json"
            args = command(name, part, swap)[3:]
            if not fresh and kept(part, args, digest):
                reused.append(part)
                continue
            part.with_suffix(".stamp").unlink(missing_ok=True)
            todo.append(Job(f"{name} part {i + 1}/{len(swaps)}", Path(RUNS[name][1]).stem, tuple(args),
                            weight(name, len(swaps)), log=str(part.with_suffix(".log"))))
    return todo, reused


def finish(name: str, shards: int | None) -> Path | None:
    """Run ``name``'s final JSON from its parts, once every part is there; its folder is removed."""
    from bench.harness.runs import write_json

    folder, n = workdir(name), len(parts_of(name, shards))
    parts = [folder / f"part{i}.json" for i in range(n)]
    if not all(p.with_suffix(".stamp").is_file() for p in parts):
        return None
    out = RESULTS / RUNS[name][0]
    if name in SHARDS:
        write_json(merge([json.loads(p.read_text()) for p in parts]), out)
    else:
        os.replace(parts[0], out)
    shutil.rmtree(folder, ignore_errors=True)
    return out


# ------------------------------------------------------------------ the staleness check


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


def recorded_host(committed: dict) -> str:
    """The ``--host-cpu`` a committed run was made with: the host file it records, or ``none`` (device time only).

    >>> recorded_host({"host_cpu": {"path": "bench/results/host-1.json"}}), recorded_host({"host_cpu": None})
    ('bench/results/host-1.json', 'none')
    """
    host = committed.get("host_cpu")
    return str(host["path"]) if host else "none"


def check_jobs(names: list[str], folder: Path) -> list:
    """One job per cheap cell of each run, writing into ``folder``; each with the host file its run used."""
    from bench.harness.jobs import Job

    jobs = []
    for name in names:
        cells = CHECKS[name][0]
        host = recorded_host(json.loads((RESULTS / RUNS[name][0]).read_text()))
        for i, replace in enumerate(cells):
            out = folder / f"{name}-cell{i}.json"
            jobs.append(Job(f"{name} cell {i + 1}/{len(cells)}", Path(RUNS[name][1]).stem,
                            tuple(command(name, out, {**replace, "--host-cpu": host})[3:]), weight(name, 1) / 100,
                            log=str(out.with_suffix(".log"))))
    return jobs


def cell_verdict(job, folder: Path) -> list[str]:
    """What a finished check cell found stale (empty: current)."""
    name, i = job.name.split(" cell ")[0], int(job.name.split(" cell ")[1].split("/")[0]) - 1
    _, key, fields = CHECKS[name]
    fresh = json.loads((folder / f"{name}-cell{i}.json").read_text())
    committed = json.loads((RESULTS / RUNS[name][0]).read_text())
    out = [] if fresh["rows"] else [f"{name}: cheap cell {i} produced no rows"]
    return out + [f"{name} {line}" for line in stale_rows(committed, fresh, key, fields)]


def check(name: str, workers: int = 2) -> list[str]:
    """Rerun the cheap cells of ``name``; what no longer matches its committed JSON (empty: current)."""
    from bench.harness.jobs import execute

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        done = execute(check_jobs([name], folder), workers, lambda d: None)
        out = [f"{d.job.name}: failed: {d.error.strip().splitlines()[-1]}" for d in done if d.error]
        for d in sorted((d for d in done if not d.error), key=lambda d: d.job.name):
            out += cell_verdict(d.job, folder)
    return out


# ------------------------------------------------------------------ twins: runs that differ in hardware only

# a run at 32B and its run at 8B: the same commands but the model pair.  Their check cells are compared for what the
# engine decided (the timing apart): where every row matches, only the hardware moved the numbers
TWINS = {"single-compaction-32b": "single-compaction-8b", "fair-32b": "fair-8b", "session-32b": "session",
         "session-yield-32b": "session-yield", "session-evolving-32b": "session-evolving",
         "session-evolving-judge-32b": "session-evolving-judge"}
# per compaction, what the engine decided (not when): lines, carried lines, facts kept, truth kept, untrue lines
DECIDED = ("lines", "carried_lines", "content_lines", "retained_facts", "held_facts", "true_kept", "untrue_lines",
           "aborted", "prepared", "applied")


def decided(row: dict) -> tuple:
    """What the engine decided in one row, whatever the hardware (a latency row: its decisions digest).

    >>> decided({"decisions": "ab12", "method": "speccompact", "e2e_s": 1.0})
    ('ab12',)
    """
    if "records" in row:
        return (row["compactions"], *(tuple(c.get(f) for f in DECIDED) for c in row["records"]))
    return (row.get("decisions"),)


def twin_rows(a: dict, b: dict, key: tuple) -> tuple[int, int, list[str]]:
    """``(rows of b with a twin in a, of which the engine decided alike, the keys of the others)``.

    Rows pair on ``key`` without the model pair; ``auto`` rows are left out (its pick is made from the
    hardware's cost model).
    """
    key = tuple(k for k in key if k != "model_pair")
    first = {tuple(r.get(k) for k in key): r for r in a["rows"] if r.get("method") != "auto"}
    pairs = [(first[k], r) for r in b["rows"] if r.get("method") != "auto"
             and (k := tuple(r.get(x) for x in key)) in first]
    differ = [str(tuple(r.get(x) for x in key)) for old, r in pairs if decided(old) != decided(r)]
    return len(pairs), len(pairs) - len(differ), differ


def twins(folder: Path, names: list[str]) -> list[str]:
    """What the engine decided in each 32B run's cells against its 8B run's cells (lines to print)."""
    out = []
    for big, small in TWINS.items():
        if big not in names or small not in names:
            continue
        key = CHECKS[big][1]
        paired = same = 0
        differ: list[str] = []
        for i in range(min(len(CHECKS[big][0]), len(CHECKS[small][0]))):
            a, b = (folder / f"{n}-cell{i}.json" for n in (small, big))
            if a.is_file() and b.is_file():
                n, k, d = twin_rows(json.loads(a.read_text()), json.loads(b.read_text()), key)
                paired, same, differ = paired + n, same + k, differ + d
        verdict = "only the hardware differs" if paired and same == paired else "the engine decided otherwise"
        out.append(f"twins {big} / {small}: {same} of {paired} cell rows decided alike ({verdict})"
                   + (f"; first: {differ[0]}" if differ else ""))
    return out


# ------------------------------------------------------------------ the estimate of a full regeneration


def real_rows(report: dict) -> int:
    """Rows a run computed (a row reused from another cell costs nothing)."""
    return sum(1 for r in report["rows"] if not r.get("reused_from"))


def estimate(cells: dict[str, list[tuple[float, int]]], workers: int, warm_s: float) -> tuple[float, float]:
    """``(CPU s, wall s)`` of a full regeneration of the runs in ``cells``, from their check cells.

    ``cells``: per run, each cell's ``(CPU s, computed rows)``.  A run's CPU
    is its cells' CPU per computed row times its committed JSON's computed
    rows; the wall time is that CPU over ``workers`` (each part on one
    core), or the largest part when that is longer, plus each worker's
    start ``warm_s``.  An estimate: rows of one run differ in cost.
    """
    total, largest = 0.0, 0.0
    for name, got in cells.items():
        cpu, rows = sum(c for c, _ in got), sum(n for _, n in got)
        if not rows:
            continue
        report = json.loads((RESULTS / RUNS[name][0]).read_text())
        run_cpu = cpu / rows * real_rows(report)
        total += run_cpu
        largest = max(largest, run_cpu / len(parts_of(name)))
    return total, max(total / workers, largest) + warm_s


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


def minutes(seconds: float) -> str:
    """``12 min 5 s`` style.

    >>> minutes(725.4), minutes(42)
    ('12 min 5 s', '42 s')
    """
    m, sec = divmod(round(seconds), 60)
    return f"{m} min {sec} s" if m else f"{sec} s"


class Progress:
    """One line per finished job: what, its cost, and how far the whole is."""

    def __init__(self, jobs: list, t0: float):
        self.total, self.left, self.t0, self.n = sum(j.weight for j in jobs) or 1.0, len(jobs), t0, 0
        self.spent = 0.0  # weight of the finished jobs

    def __call__(self, done) -> None:
        self.n += 1
        self.spent += done.job.weight
        elapsed = time.perf_counter() - self.t0
        ahead = elapsed * (self.total - self.spent) / self.spent if self.spent else 0.0
        status = "FAILED" if done.error else "done"
        print(f"[{self.n}/{self.left}] {done.job.name}: {status} in {minutes(done.wall_s)} ({done.cpu_s:.0f} CPU-s); "
              f"{minutes(elapsed)} elapsed, about {minutes(ahead)} left", flush=True)


def run_check(names: list[str], workers: int, figures: bool) -> tuple[list[str], dict]:
    """The cheap cells of ``names`` (and the figures); ``(stale lines, per run [(cell CPU s, rows)])``."""
    from bench.harness.jobs import Job, execute

    failed, cells = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        jobs = check_jobs(names, folder) + ([Job("figures", "figures", (), 0.0, call="check")] if figures else [])
        progress = Progress(jobs, time.perf_counter())

        def seen(done) -> None:
            progress(done)
            if done.error:
                failed.append(f"{done.job.name}: failed: {done.error.strip().splitlines()[-1]}")
            elif done.job.call == "check":
                failed.extend(done.result)
            else:
                failed.extend(cell_verdict(done.job, folder))
                name = done.job.name.split(" cell ")[0]
                fresh = json.loads(Path(done.job.args[done.job.args.index("--out") + 1]).read_text())
                cells.setdefault(name, []).append((done.cpu_s, real_rows(fresh)))

        execute(jobs, workers, seen)
        for line in twins(folder, names):
            print(line)
    return failed, cells


def run_full(names: list[str], shards: int | None, workers: int, fresh: bool) -> list[str]:
    """Every part of ``names`` not kept from an interrupted regeneration, then each run's JSON; what failed."""
    from bench.harness.jobs import execute

    digest = source_digest()
    jobs, reused = full_jobs(names, shards, digest, fresh)
    for part in reused:
        print(f"kept {part.relative_to(BENCH.parent)} (made by this code with this command)")
    failed, progress = [], Progress(jobs, time.perf_counter())

    def seen(done) -> None:
        progress(done)
        if done.error:
            failed.append(f"{done.job.name}: failed (log: {done.job.log})")
            return
        part = Path(done.job.args[done.job.args.index("--out") + 1])
        part.with_suffix(".stamp").write_text(json.dumps({"args": list(done.job.args), "source": digest}))
        out = finish(done.job.name.split(" part ")[0], shards)
        if out is not None:
            print(f"wrote {out.relative_to(BENCH.parent)}", flush=True)

    execute(jobs, workers, seen)
    for name in names:  # runs whose every part was kept
        out = finish(name, shards)
        if out is not None:
            print(f"wrote {out.relative_to(BENCH.parent)}")
    return failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="+", choices=sorted(RUNS), help="these runs only")
    p.add_argument("--check", action="store_true", help="cheap cells of each run, compared with the committed JSON")
    p.add_argument("--tables", action="store_true", help="print the pages' tables from the committed JSONs")
    p.add_argument("--shards", type=int, help="of a run split into seed shards, only the first N (fewer seeds)")
    p.add_argument("--workers", type=int, default=WORKERS, help=f"worker processes (default {WORKERS})")
    p.add_argument("--fresh", action="store_true",
                   help="make every part again, even one an interrupted regeneration finished with this code")
    p.add_argument("--no-figures", dest="figures", action="store_false",
                   help="leave the documentation's figures (bench/figures.py) alone: not rendered, not checked")
    args = p.parse_args(argv)
    if args.tables:
        print(tables())
        return 0
    from bench.harness.jobs import children_cpu_s, own_cpu_s

    names = args.only or list(RUNS)
    print("Method: rerun each quoted benchmark from today's code in worker processes that import the stack once "
          "(SIMULATED: one-clock simulator, H200 cost model; not a GPU measurement)")
    print(f"Conditions: runs {', '.join(names)}; "
          f"{'cheap cells of each, every method, compared' if args.check else 'full'}; {args.workers} workers on "
          f"{os.cpu_count()} CPUs; load average {load()}; python {sys.version.split()[0]}", flush=True)
    t0 = time.perf_counter()
    if args.check:
        failed, cells = run_check(names, args.workers, args.figures)
    else:
        failed, cells = run_full(names, args.shards, args.workers, args.fresh), {}
        if args.figures and not failed:  # the documentation's figures, from the JSONs as they are now
            from bench import figures

            for path in figures.render_all():
                print(f"wrote {path}")
    wall, cpu = time.perf_counter() - t0, own_cpu_s() + children_cpu_s()
    print(f"total: {cpu:.0f} CPU-s ({cpu / 60:.1f} CPU-min), wall {minutes(wall)} on {args.workers} workers; "
          f"load average {load()} at the end")
    if cells:
        est_cpu, est_wall = estimate(cells, args.workers, WARM_S)
        print(f"estimated full regeneration of these runs (this machine, nothing else running): {est_cpu / 60:.0f} "
              f"CPU-min, about {est_wall / 60:.0f} min of wall time on {args.workers} workers (each run's check "
              f"cells' CPU per computed row times its computed rows, plus {WARM_S:.0f} s per worker to start)")
    for line in failed:
        print(f"STALE {line}")
    return 1 if failed else 0


def load() -> str:
    """The machine's load average (1, 5, 15 min), or ``unknown``."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
