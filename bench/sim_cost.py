#!/usr/bin/env python
"""The simulator's CPU cost per row, this checkout against another revision, on the same cells (MEASURED (CPU)).

Method: the other revision (``--base``, default ``main``) is checked out into a
temporary ``git worktree``; for each revision, one child process imports that
tree's package and benchmarks (``PYTHONPATH``: the tree and its Hermes
plugin), loads sglang's request classes and the tokenizer, then runs each
cell, a cheap cell of ``bench/regenerate.py``'s staleness check (its
``bench/session.py`` arguments), and measures the process's CPU time
(``time.process_time``: every thread of the process) around each row's
session replay (``Replay.run``: the simulated compactions of one session).
The revisions run one after another on the same machine; the ratio is old
CPU over new CPU per row, summed over the cells' rows.  Imports and the
tokenizer load are measured apart (per process, not per row).  The rows of
both revisions are compared field by field (wall-clock fields aside): the
ratio is reported only for cells whose outcomes are identical.

CPU time, not wall time: it does not depend on what else runs on the
machine (the load is printed), though a busy machine can still move it a
little (caches, frequency).  Nothing here is a GPU figure.

Usage::

    python -m bench.sim_cost                        # main vs this checkout, the default cell
    python -m bench.sim_cost --cells session-evolving:0 session-evolving-judge:1 --repeats 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
DEFAULT_CELLS = ("session-evolving:0",)  # SpecCompact, h = 0, seed 0: one 180K-token session, sync
WALL_FIELDS = ("real_s", "runtime_s", "wall_s")  # fields that hold wall-clock time: never compared


def cell_args(cell: str) -> tuple[str, list[str]]:
    """``(script, arguments)`` of check cell ``run:index`` of ``bench/regenerate.py``.

    >>> script, args = cell_args("session-evolving:0"); script, "--seeds" in args
    ('session', True)
    """
    from bench import regenerate
    from bench.harness.runs import TRAJECTORY_DIR
    from bench.session import DEFAULT_TRAJECTORIES

    name, _, index = cell.partition(":")
    cells = regenerate.CHECKS[name][0]
    cmd = regenerate.command(name, Path("cell.json"), cells[int(index or 0)])
    script, args = cmd[2].removeprefix("bench."), cmd[3:-2]  # without "python -m" and "--out cell.json"
    if script == "session":  # the trajectory named, so a tree checked out elsewhere reads the same file
        args += ["--trajectories", *(str(TRAJECTORY_DIR / t) for t in DEFAULT_TRAJECTORIES)]
    return script, args


def child(script: str, args: list[str], out: str) -> None:
    """Run one cell in this process (imported from ``PYTHONPATH``'s tree); write its CPU and rows to ``out``.

    A session cell's rows are timed one by one (each row's ``Replay.run``);
    a latency cell's rows are computed inside one call, so its CPU per row
    is that call's CPU over the rows it computed (rows it reused cost none).
    """
    t0 = time.process_time()
    import sgl_speccompact
    from sgl_speccompact.emulator import frontend
    from sgl_speccompact.emulator.qwen3 import default_tokenizer
    from sgl_speccompact.emulator.server import load_tokenizer

    import bench.latency as latency
    import bench.session as session
    from bench.sim import session_replay

    frontend.preload()
    imports = time.process_time() - t0
    t1 = time.process_time()
    load_tokenizer(default_tokenizer()[0])
    tokenizer = time.process_time() - t1
    rows: list[float] = []
    replay = session_replay.Replay.run

    def timed(self, *a, **kw):
        start = time.process_time()
        try:
            return replay(self, *a, **kw)
        finally:
            rows.append(time.process_time() - start)

    session_replay.Replay.run = timed
    t2 = time.process_time()
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # the bench's own tables
        if script == "session":
            report = session.run(session.build_parser().parse_args(args))
        else:
            report = latency.run(latency.parse([*args, "--out", str(Path(out).with_suffix(".report.json"))]))
    total = time.process_time() - t2
    if script != "session":
        computed = sum(1 for r in report["rows"] if not r.get("reused_from")) or 1
        rows = [total / computed] * computed
    Path(out).write_text(json.dumps({
        "package": sgl_speccompact.__file__, "imports_cpu_s": imports, "tokenizer_cpu_s": tokenizer,
        "run_cpu_s": total, "row_cpu_s": rows,
        "rows": [{k: v for k, v in r.items() if k not in WALL_FIELDS} for r in report["rows"]]}))


def measure(tree: Path, script: str, args: list[str]) -> dict:
    """One child process on ``tree``'s code; its report."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "integrations" / "hermes")])}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cost.json"
        argv = [str(HERE), "--child", script, out.as_posix(), "--", *args]
        # this file run by path from the tree's root: sys.path[0] is the tree, so ``bench`` is the tree's
        code = f"import runpy, sys; sys.argv = {argv!r}; runpy.run_path({str(HERE)!r}, run_name='__main__')"
        subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tree, stdout=subprocess.DEVNULL)
        got = json.loads(out.read_text())
    if not Path(got["package"]).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the child imported {got['package']}, not {tree}'s package")
    return got


@contextlib.contextmanager
def worktree(rev: str):
    """``rev`` checked out (detached) in a temporary git worktree, removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="sim-cost-"))
    path = tmp / "tree"
    shared = REPO.parent / "shared"
    if shared.is_dir():  # the trees read ../shared (trajectories, the workload's lines)
        (tmp / "shared").symlink_to(shared)
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(path), rev], check=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=False)
        with contextlib.suppress(OSError):
            (tmp / "shared").unlink(missing_ok=True)
            tmp.rmdir()


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], argv[4:], argv[2])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", default="main", help="the revision to compare with (default main)")
    p.add_argument("--cells", nargs="+", default=list(DEFAULT_CELLS),
                   help="check cells of bench/regenerate.py as run:index (bench/session.py runs)")
    p.add_argument("--repeats", type=int, default=1, help="runs of each revision per cell (the least CPU counts)")
    p.add_argument("--out", help="JSON path for the measurements")
    args = p.parse_args(argv)
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.base], check=True,
                         capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    print("Method: the simulator's CPU time per row (time.process_time of the whole process around each "
          "session replay, Replay.run), the base revision in a temporary git worktree and this checkout, "
          "one child process per revision and cell, one after another; imports and tokenizer apart; "
          "MEASURED (CPU), not a GPU figure")
    print(f"Conditions: base {args.base} ({rev}) vs this checkout (HEAD {head}, with its uncommitted changes); cells "
          f"{', '.join(args.cells)}; repeats {args.repeats} (least CPU kept); {os.cpu_count()} CPUs; load average "
          f"{load()} at start; python {sys.version.split()[0]}")
    results, old_sum, new_sum = [], 0.0, 0.0
    with worktree(args.base) as base:
        for cell in args.cells:
            script, cargs = cell_args(cell)
            runs = {"old": [measure(base, script, cargs) for _ in range(args.repeats)],
                    "new": [measure(REPO, script, cargs) for _ in range(args.repeats)]}
            best = {k: min(v, key=lambda r: sum(r["row_cpu_s"])) for k, v in runs.items()}
            same = best["old"]["rows"] == best["new"]["rows"]
            old, new = sum(best["old"]["row_cpu_s"]), sum(best["new"]["row_cpu_s"])
            rows = len(best["new"]["row_cpu_s"])
            print(f"| {cell} | rows {rows} | old {old / rows:.2f} CPU-s/row | new {new / rows:.2f} CPU-s/row | "
                  f"ratio {old / new:.2f}x | outcomes {'identical' if same else 'DIFFER'} | imports old "
                  f"{best['old']['imports_cpu_s']:.1f} s new {best['new']['imports_cpu_s']:.1f} s | tokenizer "
                  f"{best['new']['tokenizer_cpu_s']:.1f} s |", flush=True)
            results.append({"cell": cell, "script": script, "args": cargs, "rows": rows, "identical": same,
                            **{f"{k}_{f}": best[k][f] for k in best for f in
                               ("row_cpu_s", "run_cpu_s", "imports_cpu_s", "tokenizer_cpu_s")}})
            if same:
                old_sum, new_sum = old_sum + old, new_sum + new
    ratio = old_sum / new_sum if new_sum else None
    print("ratio (old / new CPU per row, cells with identical outcomes): "
          + (f"{ratio:.2f}x" if ratio else "-") + f"; load average {load()} at the end")
    if args.out:
        Path(args.out).write_text(json.dumps({"benchmark": "sim_cost", "kind": "MEASURED (CPU)", "base": rev,
                                              "head": head, "load_start_end": load(), "cells": results,
                                              "ratio": ratio}, indent=2) + "\n")
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
