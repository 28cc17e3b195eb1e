"""Prompts as token ids: what the servers' tokenizers encode per compaction, and the latency effect.

Every request of a compaction carries the whole history.  Sent as text
(``send_token_ids`` off), each server's tokenizer process encodes every
prompt in full.  Sent as ``input_ids`` (on, the default), the endpoint cuts
each prompt where tokenization restarts and asks ``/tokenize`` only for
segments it has not seen in this compaction
(``sgl_speccompact/backends/token_ids.py``); sglang's ``TokenizerManager`` skips
prompts given as ids.

Method: each history is compacted with SpecCompact on the one-clock
simulator (``bench/sim/simulator.py``: same workload, cost
model and tokenizer rate as ``bench/latency.py``), once with the switch on
and once off.  Per compaction and server it reports the tokens that
server's tokenizer encoded (``/generate`` prompts given as text plus
``/tokenize`` prompts, from the simulator's event log: a deterministic
count) and the simulated end-to-end latency.  Each run starts with cold
radix trees and cold token-id caches.  Every latency is SIMULATED, never a
GPU measurement.

Usage:
    python -m bench.token_ids
    python -m bench.token_ids --model-pairs qwen3-32b:qwen3-0.6b --deployments one-gpu --tokenizer-rate 58000
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from bench import latency
from bench.harness import runs


def histories(args, lines, count) -> tuple[list, list]:
    """The shared trajectories (unless --no-trajectories) and the synthetic histories, seeded as the latency bench."""
    from bench.harness.latency import draw_seed
    from bench.sim.sources import synthetic_history

    trajs, skipped = [], []
    if not args.no_trajectories:
        paths = args.trajectories or ([] if args.all else [str(runs.TRAJECTORY_DIR / n) for n in latency.DEFAULT_TRAJECTORIES
                                                         if (runs.TRAJECTORY_DIR / n).is_file()])
        trajs, skipped = runs.load_trajectories(paths or None, 0, None)
    for n in args.synthetic_tokens:
        for k in range(args.synthetic_count):
            tag = f"#{k}" if k else ""
            trajs.append(runs.Trajectory(f"synthetic:{n}{tag}", f"synthetic {n // 1000}k{tag}", 0,
                                       synthetic_history(lines, n, count, seed=draw_seed(args.seed, 0, k))))
    return trajs, skipped


def tokenizer_numbers(report: dict, server: str, rate: float) -> dict:
    """Tokens the server's tokenizer encoded, split by route, and its busy time (SIMULATED)."""
    reqs = [r for r in report["requests"] if r.server == server]
    gen = sum(r.tokenized for r in reqs if r.path == "/generate")
    tok = sum(r.tokenized for r in reqs if r.path == "/tokenize")
    return {"generate_text_tokens": gen, "tokenize_tokens": tok, "tokenized": gen + tok,
            "tokenize_requests": sum(r.path == "/tokenize" for r in reqs),
            "prompt_tokens": sum(r.prompt_tokens for r in reqs if r.path == "/generate"),
            "tokenizer_busy_s": (gen + tok) / rate if rate > 0 else 0.0}


def run(args) -> dict:
    from sgl_speccompact.emulator import CostModel
    from sgl_speccompact.emulator.cost import DEPLOYMENTS, Scheduling
    from bench.sim.simulator import build_simulation
    from bench.sim.workload import SummaryWorkload
    from bench.harness.latency_cases import labeler

    _, runner, _ = runs.resolve_methods()
    tok, tok_kind = args.tokenizer, "given"
    if not tok:
        from sgl_speccompact.emulator.qwen3 import default_tokenizer

        tok, tok_kind = default_tokenizer()
    sched = Scheduling(**({"tokenizer_tokens_per_s": args.tokenizer_rate} if args.tokenizer_rate else {}))
    print(__doc__.split("Usage:")[0].strip())
    print(f"\nConditions: tokenizer {tok_kind}, tokenizer rate {sched.tokenizer_tokens_per_s:,.0f} tokens/s, "
          f"p_accept {args.p_accept}, seed {args.seed}, {latency.SIMULATED_NOTE}.")
    lines = latency.workload_lines()
    slots = tuple(s.name for s in __import__("sgl_speccompact.schema", fromlist=["x"]).OPENCLAW_SLOTS)
    rows, trajs = [], None
    for pair in args.model_pairs:
        names = pair.split(":")
        costs = {"target": CostModel.for_model(names[0]), "drafter": CostModel.for_model(names[1])}
        for dep in args.deployments:
            wl = SummaryWorkload(lines, slots, p_accept=args.p_accept, seed=args.seed)
            sim = build_simulation(tok, {"target": wl, "drafter": wl}, costs, DEPLOYMENTS[dep], sched)
            sim.labeler = labeler()
            model = sim.servers["target"].model
            wl.bind(model)
            if trajs is None:
                trajs, _ = histories(args, lines, lambda text, m=model: len(m.encode(text)))
            target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
            for traj in trajs:
                for on in (False, True):
                    latency.log(f"{pair} {dep} {traj.name} send_token_ids={on}")
                    result, report = sim.run(lambda t=traj, o=on, target=target, drafter=drafter: runner(
                        "speccompact", t.messages, target=target, drafter=drafter,
                        config={"send_token_ids": o}))
                    rows.append({"model_pair": pair, "deployment": dep, "trajectory": traj.name,
                                 "send_token_ids": on, "e2e_s": report["e2e_s"], "summary": result.summary,
                                 **{s: tokenizer_numbers(report, s, sched.tokenizer_tokens_per_s)
                                    for s in ("target", "drafter")}})
    pairs = paired(rows)
    print(format_table(pairs))
    now = datetime.now(UTC)
    report = {"benchmark": "token_ids", "latency_kind": "simulated", "simulated_note": latency.SIMULATED_NOTE,
              "timestamp": now.isoformat(timespec="seconds"), "tokenizer": tok_kind,
              "tokenizer_tokens_per_s": sched.tokenizer_tokens_per_s,
              "conditions": {k: v for k, v in vars(args).items()}, "rows": rows, "pairs": pairs}
    path = runs.write_json(report, args.out or str(runs.RESULTS_DIR / f"token-ids-{now.strftime('%Y%m%dT%H%M%SZ')}.json"))
    print(f"wrote {path}")
    return report


def paired(rows: list[dict]) -> list[dict]:
    """One entry per (pair, deployment, history): text vs ids."""
    out = []
    for off in (r for r in rows if not r["send_token_ids"]):
        on = next(r for r in rows if r["send_token_ids"] and all(
            r[k] == off[k] for k in ("model_pair", "deployment", "trajectory")))
        out.append({k: off[k] for k in ("model_pair", "deployment", "trajectory")} | {
            "same_summary": on["summary"] == off["summary"],
            "tokenized_text": off["target"]["tokenized"] + off["drafter"]["tokenized"],
            "tokenized_ids": on["target"]["tokenized"] + on["drafter"]["tokenized"],
            "tokenize_requests_ids": on["target"]["tokenize_requests"] + on["drafter"]["tokenize_requests"],
            "e2e_text_s": off["e2e_s"], "e2e_ids_s": on["e2e_s"], "saved_s": off["e2e_s"] - on["e2e_s"]})
    return out


def format_table(pairs: list[dict]) -> str:
    out = ["\nTokens encoded by the servers' tokenizers per SpecCompact compaction (target + drafter; "
           "deterministic counts) and SIMULATED end-to-end latency",
           "| targets | deployment | history | tokenized, text | tokenized, ids | ratio | /tokenize reqs | "
           "e2e text s | e2e ids s | saved s | same summary |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for p in pairs:
        out.append(f"| {p['model_pair']} | {p['deployment']} | {p['trajectory']} | {p['tokenized_text']:,} | "
                   f"{p['tokenized_ids']:,} | {p['tokenized_text'] / max(p['tokenized_ids'], 1):.1f}x | "
                   f"{p['tokenize_requests_ids']} | {p['e2e_text_s']:.3f} | {p['e2e_ids_s']:.3f} | "
                   f"{p['saved_s']:.3f} | {p['same_summary']} |")
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Tokens the servers tokenize per compaction, text vs token ids "
                                            "(SIMULATED latency)")
    p.add_argument("--model-pairs", nargs="+", default=["qwen3-8b:qwen3-0.6b", "qwen3-32b:qwen3-0.6b"])
    p.add_argument("--deployments", nargs="+", default=["two-gpu"], choices=["two-gpu", "one-gpu"])
    p.add_argument("--p-accept", type=float, default=0.7, help="workload acceptance probability")
    p.add_argument("--seed", type=int, default=0, help="workload seed")
    p.add_argument("--tokenizer", default=None, help="tokenizer directory (default: Qwen3's)")
    p.add_argument("--tokenizer-rate", type=float, default=None, help="tokenizer tokens/s (default: cost.py's)")
    p.add_argument("--trajectories", nargs="*", default=None, help="history files (default: latency.py's three)")
    p.add_argument("--all", action="store_true", help="every shared trajectory")
    p.add_argument("--no-trajectories", action="store_true", help="synthetic histories only")
    p.add_argument("--synthetic-tokens", type=int, nargs="*", default=[16000], help="synthetic history sizes")
    p.add_argument("--synthetic-count", type=int, default=1, help="synthetic histories per size (seed + k)")
    p.add_argument("--out", default=None, help="JSON output path")
    return p


def main(argv: list[str] | None = None) -> int:
    run(build_parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
