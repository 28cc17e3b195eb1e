"""Latency benchmark: end-to-end compaction latency per method, on the fair field (SIMULATED by default).

Default: the one-clock simulator (``bench/sim/simulator.py``).
The project's real programs run unchanged on sglang's interpreter; their
transport is answered by simulated target and drafter servers that share one
virtual clock (H200 cost model ``sgl_speccompact/core/costmodel.py``, sglang's
scheduler rules, tokenizer and client-side cost, speculative decoding
``sgl_speccompact/core/specdecode.py``).  Every latency is then SIMULATED, never a
GPU measurement, and the tables say so.  The runs and their statistics live in
``bench/harness/latency.py``, ``latency_cases.py`` and ``latency_tables.py``.

Sweeps: ``--model-pairs`` (8B and 32B targets with the 0.6B drafter),
``--speculative none,eagle3,dflash,standalone,ngram`` (sglang's speculative
decoding on every server that supports it), ``--deployments`` (one-gpu,
two-gpu; ``--equal-hardware`` adds two-gpu-equal: single-model methods run
the target with TP=2 on both GPUs), ``--p-accept`` (0.5, 0.7, 0.9) and
``--seeds`` workload draws (default 8; median, min and max per cell).  The
methods include ``auto`` (``sgl_speccompact/methods/auto.py``), whose row names its
pick, and Hermes-style at the slot methods' own output length
(``hermes@slots``) beside its ``--hermes-tokens`` lengths.

Per row: end-to-end, the critical path's breakdown (before-fork, drafting,
verifying, repairing, generating, waiting, after-join, host CPU; they add up
to the end-to-end), requests and tokens per server, busy time per server,
speedups against Target-self and Hermes-style on the same draw.

Host CPU (``--host-cpu``): the end-to-end ``e2e_s`` of a simulated row is
``e2e_device_s`` (the simulator's clock) plus ``host_cpu_s``, the compacting
process's CPU for the method and the history's tokens from a
``bench/host.py`` run (MEASURED (CPU) on this project's machine,
:mod:`bench.sim.host_cpu`); default the newest committed
``bench/results/host-*.json``, ``none`` leaves it out.  The JSON records the
file (``host_cpu``).

Against real SGLang servers (``--target-url``/``--drafter-url``) it measures
wall-clock per compaction (median of ``--repeats``) and writes the same row
shape (``latency_kind`` "measured"; no breakdown).

Usage:
    python -m bench.latency                                  # 8 seeds, both pairs, one-gpu and two-gpu
    python -m bench.latency --speculative none,eagle3,dflash --equal-hardware --hermes-tokens 1200
    python -m bench.latency --repick bench/results/latency-fair-8b.json   # auto re-picked, same runs
    python -m bench.latency --target-url http://gpu:30000 --drafter-url http://gpu:30001 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.harness import latency_cases as lc  # the cases and the agent-session scenario
from bench.harness import runs  # shared helpers: trajectories, methods, JSON
from bench.sim import host_cpu  # the host's CPU per compaction (MEASURED (CPU)), added to e2e_s

from bench.harness.latency_cases import LAYOUTS, PARTS, WAIT_PARTS, labeler  # noqa: F401 - re-exported
from bench.harness.latency_tables import (
    add_speedups,
    auto_check,
    format_cache_table,
    format_checks,
    format_tables,
    goal_rows,
    summarize,
)

DEFAULT_TRAJECTORIES = (
    ("blakeelias__tau2-bench__data__simulations__2025-10-13T13:51:25.241970_airline_llm_agent_grok-4_"
     "user_simulator_grok-4_task_32.json"),
    "All-Hands-AI__agent-sdk__tests__fixtures__llm_data__fncall-llm-message.json",
    ("princeton-nlp__SWE-agent__trajectories__demonstrations__replay__marshmallow-code__marshmallow-1867__"
     "function_calling_replace__install-1__marshmallow-code__marshmallow-1867.traj"),
)
SIMULATED_NOTE = ("SIMULATED: one-clock discrete-event simulation (bench/sim/simulator.py), H200 "
                  "cost model (sgl_speccompact/core/costmodel.py, sgl_speccompact/core/specdecode.py); not a GPU measurement")
SPECULATIVE = ("none", "eagle3", "dflash", "standalone", "ngram")


def log(msg: str) -> None:
    print(f"[latency] {msg}", file=sys.stderr, flush=True)


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def workload_lines():
    from bench.sim.sources import trajectory_lines

    return trajectory_lines(sorted(p for p in runs.TRAJECTORY_DIR.iterdir() if p.suffix in (".json", ".traj")))


def workload_section_sizes():
    """Progress sub-section sizes of the shared trajectories (the workload draws one per seed)."""
    from bench.sim.sources import trajectory_section_sizes

    return trajectory_section_sizes(sorted(p for p in runs.TRAJECTORY_DIR.iterdir() if p.suffix in (".json", ".traj")))


def simulate(args, methods, runner) -> tuple[list[dict], dict]:
    """Every simulated cell's rows (``bench.harness.latency.simulate``) and run info."""
    from dataclasses import asdict

    from sgl_speccompact.config import make_config
    from sgl_speccompact.emulator.cost import Scheduling
    from bench.harness.latency import simulate as run_cells

    tok, tok_kind = args.tokenizer, "given"
    if not tok:
        from sgl_speccompact.emulator.qwen3 import default_tokenizer

        tok, tok_kind = default_tokenizer()
    args.config_dict = json.loads(args.config) if args.config else {}
    trajs, skipped = [], []
    if not args.no_trajectories:
        paths = args.trajectories or ([] if args.all else
                                      [str(runs.TRAJECTORY_DIR / n) for n in DEFAULT_TRAJECTORIES
                                       if (runs.TRAJECTORY_DIR / n).is_file()])
        trajs, skipped = runs.load_trajectories(paths or None, 0, None)
    args.section_sizes = workload_section_sizes()
    args.host_cpu_model = host_cpu.resolve(args.host_cpu)  # before any run: a bad file fails at once
    rows, info = run_cells(args, methods, runner, trajs, tok, workload_lines(), log=log)
    info["host_cpu"] = host_cpu.recorded(args.host_cpu_model)
    make_config({"agent_context_tokens": args.agent_context_tokens, **args.config_dict})  # ConfigError if bad
    info.update(tokenizer=tok_kind, skipped=[{"path": a, "reason": b} for a, b in skipped],
                scheduling=asdict(Scheduling(schedule_policy=args.schedule_policy)),
                scenario={"name": args.scenario, "note": lc.SESSION_NOTE if args.scenario == "agent-session"
                          else "every compaction on empty caches"})
    return rows, info


# ------------------------------------------------------------------ real servers


def measure(args, methods, runner) -> tuple[list[dict], dict]:
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    eps = {"target": SpecCompactEndpoint(args.target_url, api_key=args.api_key, timeout_s=args.timeout),
           "drafter": SpecCompactEndpoint(args.drafter_url, api_key=args.api_key, timeout_s=args.timeout,
                                          lora_path=args.drafter_lora_name)}
    servers = {r: runs.Server(r, u, args.api_key, args.timeout)
               for r, u in (("target", args.target_url), ("drafter", args.drafter_url))}
    trajs, skipped = runs.load_trajectories(args.trajectories, 0, None) if (args.trajectories or args.all) else \
        runs.load_trajectories([str(runs.TRAJECTORY_DIR / n) for n in DEFAULT_TRAJECTORIES], 0, None)
    pair = ":".join(str(s.info.get("model_path")) for s in servers.values())
    rows = []
    for traj in trajs:
        for method in methods:
            row = {"method": method, "trajectory": traj.name, "path": traj.path, "messages": len(traj.messages),
                   "deployment": "measured", "model_pair": pair, "p_accept": None}
            walls, result = [], None
            try:
                for _ in range(args.repeats):
                    for s in servers.values():
                        s.flush()
                    t0 = time.perf_counter()
                    result = runner(method, traj.messages, target=eps["target"], drafter=eps["drafter"],
                                    config=json.loads(args.config) if args.config else None,
                                    source_judge=args.source_judge)
                    walls.append(time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001 - one failed row does not end the benchmark; the row records it
                row["error"] = f"{type(exc).__name__}: {exc}"[:500]
                rows.append(row)
                continue
            row.update(e2e_s=statistics.median(walls), e2e_min_s=min(walls), e2e_max_s=max(walls),
                       summary_tokens=result.summary_tokens, critical_slot=None, parts=None)
            for role in ("target", "drafter"):
                n = runs.server_numbers(result.stats, role)
                row[role] = {k: n[k] for k in ("requests", "prompt_tokens", "cached_tokens", "completion_tokens")}
            rows.append(row)
    return rows, {"servers": {r: s.describe() for r, s in servers.items()},
                  "skipped": [{"path": a, "reason": b} for a, b in skipped]}


# ------------------------------------------------------------------ main


def run(args) -> dict:
    from sglang.version import __version__ as sglang_version

    old = None
    if args.repick:
        old = json.loads(Path(args.repick).read_text())
        args = argparse.Namespace(**{**old["conditions"], "repick": args.repick, "out": args.out or args.repick,
                                     "plots": args.plots, "config_dict": None})
    available, runner, runner_src = runs.resolve_methods()
    names = [m.strip() for m in args.methods.split(",")] if args.methods else [*available, "auto"]
    missing = [m for m in names if m not in available and m != "auto"]
    if missing:
        raise SystemExit(f"method(s) {missing} not available; available: {list(available)} and auto")
    for ref in ("target_self", "hermes"):
        if ref not in names and ref in available:
            names.insert(0, ref)
    measured = bool(args.target_url or args.drafter_url)
    if measured and not (args.target_url and args.drafter_url):
        raise SystemExit("pass both --target-url and --drafter-url (or neither, for the simulator)")
    if measured:
        names = [m for m in names if m != "auto"]
    now = datetime.now(UTC)
    kind = "measured" if measured else "simulated"
    print(f"Method: end-to-end latency of {', '.join(names)} via {runner_src}; speedups = reference e2e / "
          "method e2e on the same draw, history, deployment, model pair, speculative decoding and acceptance rate")
    if not measured:
        print(f"Latency: {SIMULATED_NOTE}.")
        print(f"Conditions: scenario {args.scenario}; layouts {','.join(args.layouts)}; Hermes-style writes "
              f"{' and '.join(map(str, args.hermes_tokens))} tokens and as many as Target-self (hermes@slots); "
              f"deployments {','.join(args.deployments)}; speculative {','.join(args.speculative)} (drafter: "
              f"{args.drafter_speculative or 'same where supported'}); model pairs {','.join(args.model_pairs)}; "
              f"acceptance {','.join(map(str, args.p_accept))} ({'clustered' if args.clustered else 'independent'}, "
              f"falling {args.acceptance_fall:g} per doubling past {args.drafter_train_tokens} history tokens); "
              f"{args.seeds} seeds from {args.seed} (draw j of history k: seed + j + 1000k); histories: "
              f"{'none' if args.no_trajectories else 'trajectories'} + synthetic {args.synthetic_tokens} tokens")
    sys.stdout.flush()
    if old is not None:  # the same runs, auto's picks redone with the current predictor
        from bench.harness.latency import repick

        rows, picks = repick(old["rows"], old["conditions"])
        info = {k: old[k] for k in ("spec_notes", "tokenizer", "skipped", "scheduling", "scenario") if k in old}
        info.update(auto=picks, repicked_from={"path": args.repick, "timestamp": old["timestamp"]})
    else:
        rows, info = measure(args, names, runner) if measured else simulate(args, names, runner)
    add_speedups(rows)
    summary = summarize(rows)
    if not measured and old is None:
        print(f"Host CPU: {info['host_cpu']['label'] if info.get('host_cpu') else 'none (device time only)'}")
    conditions = {k: v for k, v in vars(args).items() if k not in ("api_key", "config_dict", "host_cpu_model")}
    pairs = sorted({r["model_pair"] for r in rows})
    servers = info.pop("servers", None) or ({"target": {"model_path": _model_path(pairs[0].split(":")[0])}}
                                            if len(pairs) == 1 else {})
    goals, checks = goal_rows(summary), auto_check(summary)
    report = {"benchmark": "latency", "latency_kind": kind, "headline_field": "e2e_median_s",
              "latency_label": "measured wall-clock" if measured else SIMULATED_NOTE,
              "simulated_note": None if measured else SIMULATED_NOTE, "methods": names, "runner": runner_src,
              "timestamp": now.isoformat(timespec="seconds"), "sglang_version": sglang_version,
              "conditions": conditions, "servers": servers, **info, "rows": rows,
              "summary_by_cell": summary, "goals": goals, "auto_check": checks}
    print(format_tables(summary, kind))
    if args.scenario == "agent-session" or len(args.layouts) > 1:
        print(format_cache_table(summary))
    print(format_checks(goals, checks))
    errors = [r for r in rows if "error" in r]
    if errors:
        print(f"\n{len(errors)} row(s) failed: " + "; ".join(f"{r.get('label', r['method'])}/{r['trajectory']}: "
                                                            f"{r['error'][:80]}" for r in errors[:5]))
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    path = runs.write_json(report, args.out or str(runs.RESULTS_DIR / f"latency-{stamp}.json"))
    print(f"wrote {path}")
    if args.plots and not measured:
        from bench import latency_plots

        for png in latency_plots.plot(report, Path(path).with_suffix("")):
            print(f"wrote {png}")
    return report


def _model_path(preset: str) -> str:
    from sgl_speccompact.emulator.cost import PRESETS

    return PRESETS[preset].name if preset in PRESETS else preset


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def _speculative(text: str) -> list[str]:
    out = [x.strip().lower() for x in text.split(",") if x.strip()]
    if not out or any(x not in SPECULATIVE for x in out):
        raise argparse.ArgumentTypeError(f"speculative algorithms are {', '.join(SPECULATIVE)}; got {text!r}")
    return out


def _layouts(text: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in out if x not in LAYOUTS]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"layouts are {', '.join(LAYOUTS)}; got {text!r}")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="End-to-end latency of the compaction methods (SIMULATED on the "
                                "one-clock simulator by default; measured with --target-url/--drafter-url).")
    p.add_argument("--methods", help="comma-separated methods (default: every available one; hermes and "
                   "target_self are always added as the speedup references)")
    p.add_argument("--trajectories", nargs="+", metavar="PATH", help="trajectory files (default: 3 representative)")
    p.add_argument("--all", action="store_true", help="every trajectory in the shared folder")
    p.add_argument("--no-trajectories", action="store_true", help="synthetic histories only")
    p.add_argument("--source-judge", action="store_true", help="add SJC to every method")
    p.add_argument("--config", help='CompactConfig overrides as JSON, e.g. \'{"eta": 0.8}\'')
    p.add_argument("--out", help="JSON path (default bench/results/latency-<timestamp>.json)")
    sim = p.add_argument_group("simulator (default; SIMULATED latencies)")
    sim.add_argument("--deployments", type=lambda s: s.split(","), default=["two-gpu", "one-gpu"], help="one-gpu, "
                     "two-gpu (the paper's), two-gpu-equal (or --equal-hardware), two-gpu-tp2-colocated")
    sim.add_argument("--model-pairs", type=lambda s: s.split(","),
                     default=["qwen3-8b:qwen3-0.6b", "qwen3-32b:qwen3-0.6b"])
    sim.add_argument("--p-accept", type=_floats, default=[0.5, 0.7, 0.9], help="acceptance rates (default 0.5,0.7,0.9)")
    sim.add_argument("--clustered", action="store_true", help="clustered rejections instead of independent ones")
    sim.add_argument("--hermes-tokens", type=lambda t: [int(x) for x in t.split(",")], default=[2000],
                     help="Hermes-style summary tokens, a list (default 2000, its prompt's length target for a "
                     "32,768-token window; 1200 is the conservative low end), e.g. 1200,2000")
    sim.add_argument("--agent-context-tokens", type=int, default=32768, help="the agent's context window (Hermes "
                     "asks for max(2000, min(20%% of the turns, 5%% of it, 10000)) tokens); default 32768")
    sim.add_argument("--layouts", type=_layouts, default=["classic"], help="target prefix layouts of the slot "
                     "methods: classic,agent (default classic); Hermes- and OpenClaw-style send their own prompt")
    sim.add_argument("--local-tokenizer", action="store_true", help="the client tokenizes (no /tokenize; charged)")
    sim.add_argument("--drafter-lora-merged", action="store_true", help="the drafter's adapter merged: no LoRA cost")
    sim.add_argument("--scenario", choices=("cold", "agent-session"), default="cold",
                     help="cold: every compaction on empty caches; agent-session: the agent's session (every "
                     "assistant turn as a chat completion) runs on the simulated target first, not counted in e2e")
    sim.add_argument("--synthetic-tokens", type=lambda s: [int(x) for x in s.split(",") if x], default=[16000],
                     help="synthetic history sizes in tokens (default 16000; '' for none)")
    sim.add_argument("--schedule-policy", default="fcfs", choices=["fcfs", "lpm"])
    sim.add_argument("--chunked-prefill-size", type=int, default=8192, help="0: off (default 8192, sglang on H200)")
    sim.add_argument("--tokenizer-rate", type=float, help="tokenizer tokens/s (default: cost.py's measured rate)")
    sim.add_argument("--seed", type=int, default=0, help="base seed: draw j of history k uses seed + j + 1000k")
    sim.add_argument("--seeds", type=int, default=8, help="workload draws per cell (default 8; median, min, max)")
    sim.add_argument("--speculative", type=_speculative, default=["none"],
                     help="sglang speculative decoding per cell, a list of none,eagle3,dflash,standalone,ngram, "
                     "on every server that supports it (default none)")
    sim.add_argument("--equal-hardware", action="store_true",
                     help="add the two-gpu-equal deployment: single-model methods run the target with TP=2")
    sim.add_argument("--drafter-speculative", choices=SPECULATIVE,
                     help="the drafter server's own algorithm (a SpecCompact lever; default: the cell's, where "
                     "supported)")
    sim.add_argument("--drafter-lora-rank", type=int, default=16, help="drafter adapter rank charged per pass "
                     "(default 16, sgl_speccompact/train/hparams.py; 0: free)")
    sim.add_argument("--drafter-lora-modules", type=lambda s: s.split(","),
                     default=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    sim.add_argument("--drafter-train-tokens", type=int, default=16384, help="the drafter's training length (16384)")
    sim.add_argument("--acceptance-fall", type=float, default=0.1, help="fraction of the acceptance lost per "
                     "doubling of the history past the training length (default 0.1, an estimate: unmeasured)")
    sim.add_argument("--repick", metavar="JSON", help="rebuild the auto rows of a report with the current "
                     "predictor from its own runs (no new simulation); writes --out or the same file")
    sim.add_argument("--no-hermes-slots", dest="hermes_slots", action="store_false",
                     help="skip Hermes-style at the slot methods' own output length")
    sim.add_argument("--tokenizer", help="tokenizer directory (default: the emulator's default)")
    sim.add_argument("--no-plots", dest="plots", action="store_false", help="skip the PNG plots")
    sim.add_argument("--host-cpu", default=host_cpu.COMMITTED, metavar="PATH|none|committed",
                     help="add the compacting process's CPU (a bench/host.py JSON's fit, MEASURED (CPU)) to each "
                     "e2e_s (default: the newest committed bench/results/host-*.json; none: device time only)")
    real = p.add_argument_group("real SGLang servers (measured wall-clock)")
    real.add_argument("--target-url")
    real.add_argument("--drafter-url")
    real.add_argument("--drafter-lora-name")
    real.add_argument("--repeats", type=int, default=3)
    real.add_argument("--api-key")
    real.add_argument("--timeout", type=float, default=300.0)
    p.set_defaults(config_dict=None)
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.equal_hardware and "two-gpu-equal" not in args.deployments:
        args.deployments = [*args.deployments, "two-gpu-equal"]
    return args


def main(argv: list[str] | None = None) -> int:
    report = run(parse(argv))
    return 1 if any("error" in r for r in report["rows"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
