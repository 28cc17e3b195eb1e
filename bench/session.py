#!/usr/bin/env python
"""Agent sessions with compaction, replayed on the simulator's clock (SIMULATED).

Method: each shared trajectory plays as an agent session (its turns played
again and again until ``--session-tokens``: the trajectories are far shorter
than Hermes's smallest trigger, 64K) under Hermes's trigger policy at
``--window`` (``sgl_speccompact/testing/session_policy.py``).  The session's
compactions run three ways (``sgl_speccompact/testing/session_replay.py``):
``sync`` (SpecCompact when the trigger is reached), ``ahead`` (SpecCompact
ahead of time: prepared at ``--prepare-ratio`` of the trigger, concurrently
with the agent's next turns on the same simulated servers; at the trigger
the prepared summary replaces its prefix and the later turns stay verbatim
when that brings the prompt under the prepare threshold, else the rest is
compacted incrementally) and ``hermes``
(Hermes-style, synchronous: the reference).  Per session and mode it reports
the peak prompt against the window, compactions (aborted, ineffective), the
agent-perceived stall per compaction (median, max; the plugin's request to
the service and, ahead of time, the service's lookup of the stored prepare
included), GPU seconds of compaction with wasted prepares counted, and the
share of summary lines carried from the previous summary (accepted carried
proposals of incremental compactions).  Every request is charged the
client cost measured with ``bench/client_cost.py``.

Usage::

    python bench/session.py                       # 8B and 32B, two-gpu, p=0.7
    python bench/session.py --trajectories A B --model-pairs qwen3-8b:qwen3-0.6b
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import radix_cache as rc  # noqa: E402 - shared helpers: trajectories, methods, JSON

SIMULATED_NOTE = ("SIMULATED: one-clock discrete-event simulation (sgl_speccompact/testing/simulator.py), H200 "
                  "cost model (sgl_speccompact/testing/cost.py); not a GPU measurement")
GOALS = {"over_window": 0, "ahead_median_stall_s": 0.3, "wasted_share": 0.20}  # the goals (SIMULATED)
DEFAULT_TRAJECTORIES = (  # tool-using agent sessions from the shared folder
    "All-Hands-AI__agent-sdk__tests__fixtures__llm_data__fncall-llm-message.json",
    ("princeton-nlp__SWE-agent__trajectories__demonstrations__replay__marshmallow-code__marshmallow-1867__"
     "function_calling_replace__install-1__marshmallow-code__marshmallow-1867.traj"),
)


def log(msg: str) -> None:
    print(f"[session] {msg}", file=sys.stderr, flush=True)


def simulation(pair: str, deployment: str, p_accept: float, hermes_tokens: int, seed: int, tokenizer: str | None):
    """``(sim, target, drafter, count)`` for one model pair."""
    from latency import workload_lines

    from sgl_speccompact.schema import OPENCLAW_SLOTS
    from sgl_speccompact.testing import CostModel
    from sgl_speccompact.testing.emulator.cost import (CLIENT_S_PER_REQUEST, CLIENT_S_PER_TOKEN, DEPLOYMENTS,
                                                       Scheduling)
    from sgl_speccompact.testing.sim.simulator import build_simulation
    from sgl_speccompact.testing.sim.workload import SummaryWorkload

    if not tokenizer:
        from sgl_speccompact.testing.emulator.qwen3 import default_tokenizer

        tokenizer, _ = default_tokenizer()
    names = pair.split(":")
    client = {"client_s_per_request": CLIENT_S_PER_REQUEST, "client_s_per_token": CLIENT_S_PER_TOKEN}
    costs = {"target": CostModel.for_model(names[0], **client), "drafter": CostModel.for_model(names[1], **client)}
    wl = SummaryWorkload(workload_lines(), tuple(s.name for s in OPENCLAW_SLOTS), p_accept=p_accept, seed=seed,
                         hermes_tokens=hermes_tokens)
    sim = build_simulation(tokenizer, {"target": wl, "drafter": wl}, costs, DEPLOYMENTS[deployment], Scheduling())
    model = sim.servers["target"].model
    wl.bind(model)
    return sim, sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter"), \
        (lambda text: len(model.encode(text)))


def run(args) -> dict:
    from sgl_speccompact.testing.sim import session_policy as sp
    from sgl_speccompact.testing.sim.session_replay import MODES, Replay

    _, runner, runner_src = rc.resolve_methods()
    paths = args.trajectories or [str(rc.TRAJECTORY_DIR / n) for n in DEFAULT_TRAJECTORIES
                                  if (rc.TRAJECTORY_DIR / n).is_file()]
    trajs, skipped = rc.load_trajectories(paths, 0, None)
    policy = sp.Policy(window=args.window, prepare_ratio=args.prepare_ratio)
    print(f"Method: agent sessions replayed under Hermes's trigger policy (window {args.window}, trigger "
          f"{policy.trigger}, tail {policy.tail_tokens}, prepare at {args.prepare_ratio:g} of the trigger); "
          f"compaction modes {', '.join(MODES)} via {runner_src}")
    print(f"Latency: {SIMULATED_NOTE}.")
    print(f"Conditions: deployment {args.deployment}; model pairs {','.join(args.model_pairs)}; acceptance "
          f"{args.p_accept}; Hermes-style writes {args.hermes_tokens} tokens; sessions of {args.session_tokens} "
          f"tokens from {len(trajs)} trajectories; seed {args.seed}")
    rows = []
    config = {"agent_context_tokens": args.window}
    for pair in args.model_pairs:
        sim, target, drafter, count = simulation(pair, args.deployment, args.p_accept, args.hermes_tokens,
                                                 args.seed, args.tokenizer)
        tokens = sp.message_tokens(count)

        def compact(method, messages, previous, target=target, drafter=drafter):
            return runner(method, messages, target=target, drafter=drafter, config=config, previous_summary=previous)

        replay = Replay(sim, target, compact, tokens)
        for traj in trajs:
            session = sp.looped_session(traj.messages, args.session_tokens, tokens)
            for mode in MODES:
                log(f"{pair} {traj.name} {mode}")
                t0 = time.perf_counter()
                result = replay.run(session, policy, mode).summary()
                rows.append({"model_pair": pair, "deployment": args.deployment, "trajectory": traj.name,
                             "path": traj.path, "session_messages": len(session), **result,
                             "real_s": round(time.perf_counter() - t0, 1)})
    return {"benchmark": "session", "latency_kind": "simulated", "simulated_note": SIMULATED_NOTE,
            "runner": runner_src, "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
            "conditions": {k: v for k, v in vars(args).items()}, "policy": {**vars(policy), "trigger": policy.trigger,
                                                                          "tail_tokens": policy.tail_tokens,
                                                                          "soft": policy.soft},
            "skipped": [{"path": a, "reason": b} for a, b in skipped], "rows": rows,
            "goals": goal_check(rows)}


def goal_check(rows: list[dict]) -> list[dict]:
    """The issue's goals per model pair (SIMULATED): sessions over the window, median stall, wasted share."""
    out = []
    for pair in dict.fromkeys(r["model_pair"] for r in rows):
        mine = [r for r in rows if r["model_pair"] == pair]
        ahead = [s for r in mine if r["mode"] == "ahead" for s in r["stalls_s"]]
        hermes = [s for r in mine if r["mode"] == "hermes" for s in r["stalls_s"]]
        gpu = sum(r["gpu_s"] for r in mine if r["mode"] == "ahead")
        wasted = sum(r["wasted_gpu_s"] for r in mine if r["mode"] == "ahead")
        med = statistics.median(ahead) if ahead else None
        lines = {m: [(c["carried_lines"], c["lines"]) for r in mine if r["mode"] == m for c in r["records"]
                     if not c["aborted"]] for m in ("sync", "ahead")}
        service = [c["service_s"] for r in mine if r["mode"] == "ahead" for c in r["records"] if c["prepared"]]
        out.append({"model_pair": pair, "sessions_over_window": sum(r["over_window"] for r in mine),
                    "ahead_median_stall_s": med, "hermes_median_stall_s": statistics.median(hermes) if hermes else None,
                    "ahead_wasted_share": wasted / gpu if gpu else 0.0,
                    "carried_share": {m: (sum(a for a, _ in v) / sum(b for _, b in v) if sum(b for _, b in v) else 0.0)
                                      for m, v in lines.items()},
                    "ahead_prepared_service_median_s": statistics.median(service) if service else None,
                    "met": {"over_window": sum(r["over_window"] for r in mine) == GOALS["over_window"],
                            "ahead_median_stall": med is not None and med <= GOALS["ahead_median_stall_s"],
                            "wasted_share": (wasted / gpu if gpu else 0.0) <= GOALS["wasted_share"]}})
    return out


def _s(x) -> str:
    """Seconds for a table: milliseconds stay visible under 1 s.

    >>> _s(None), _s(0.00353), _s(12.4798)
    ('-', '0.004', '12.48')
    """
    if x is None:
        return "-"
    return f"{x:.3f}" if abs(x) < 1 else f"{x:.2f}"


def format_tables(report: dict) -> str:
    out = [f"\nSIMULATED agent sessions, deployment {report['conditions']['deployment']}, window "
           f"{report['policy']['window']} (trigger {report['policy']['trigger']}); {report['simulated_note']}",
           "| model pair | trajectory | mode | peak prompt | over window | compactions | aborted | ineffective | "
           "prune-only | stall median s | stall max s | GPU s | wasted GPU s | prepares applied/reused/run | "
           "carried share |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        out.append(f"| {r['model_pair']} | {r['trajectory'][:32]} | {r['mode']} | {r['peak_prompt']} | "
                   f"{'YES' if r['over_window'] else 'no'} | {r['compactions']} | {r['aborted']} | "
                   f"{r['ineffective']} | "
                   f"{r['prune_only']} | {_s(r['stall_median_s'])} | {_s(r['stall_max_s'])} | {r['gpu_s']:.2f} | "
                   f"{r['wasted_gpu_s']:.2f} | {r['prepares_applied']}/{r['prepares_reused']}/{r['prepares']} | "
                   f"{r['carried_share']:.2f} |")
    out += ["\nSIMULATED goal check (0 sessions over the window; ahead-of-time median stall <= 0.3 s; wasted "
            "prepare work <= 20% of compaction GPU time)",
            "| model pair | sessions over window | ahead median stall s | hermes median stall s | wasted share | "
            "carried share sync / ahead | met |",
            "|---|---|---|---|---|---|---|"]
    for g in report["goals"]:
        met = ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in g["met"].items())
        out.append(f"| {g['model_pair']} | {g['sessions_over_window']} | {_s(g['ahead_median_stall_s'])} | "
                   f"{_s(g['hermes_median_stall_s'])} | {g['ahead_wasted_share']:.1%} | "
                   f"{g['carried_share']['sync']:.2f} / {g['carried_share']['ahead']:.2f} | {met} |")
    out.append("carried share: summary lines accepted from the previous summary's carried proposals / all lines")
    return "\n".join(out)


def plot(report: dict, stem: Path) -> list[Path]:
    """Stall per compaction, per model pair and mode (SIMULATED)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = list(dict.fromkeys(r["model_pair"] for r in report["rows"]))
    fig, axes = plt.subplots(1, len(pairs), figsize=(6 * len(pairs), 4), squeeze=False)
    for ax, pair in zip(axes[0], pairs):
        for mode, marker in (("hermes", "s"), ("sync", "o"), ("ahead", "^")):
            stalls = [s for r in report["rows"] if r["model_pair"] == pair and r["mode"] == mode for s in r["stalls_s"]]
            ax.plot(range(1, len(stalls) + 1), stalls, marker=marker, linestyle="", label=mode)
        ax.set_yscale("symlog", linthresh=0.1)
        ax.set_xlabel("compaction (sessions in order)")
        ax.set_ylabel("agent-perceived stall, s (SIMULATED)")
        ax.set_title(f"{pair}, {report['conditions']['deployment']} (SIMULATED)")
        ax.axhline(GOALS["ahead_median_stall_s"], color="grey", linewidth=0.8)
        ax.legend()
    fig.tight_layout()
    path = stem.with_name(stem.name + "-stall.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trajectories", nargs="+", metavar="PATH", help="trajectory files (default: 2 tool-using ones)")
    p.add_argument("--model-pairs", type=lambda s: s.split(","),
                   default=["qwen3-8b:qwen3-0.6b", "qwen3-32b:qwen3-0.6b"])
    p.add_argument("--deployment", default="two-gpu", choices=["two-gpu", "one-gpu"])
    p.add_argument("--p-accept", type=float, default=0.7)
    p.add_argument("--hermes-tokens", type=int, default=2000, help="tokens the Hermes-style summary writes")
    p.add_argument("--window", type=int, default=64_000, help="the agent's context window (Hermes's minimum: 64000)")
    p.add_argument("--session-tokens", type=int, default=180_000, help="tokens one session adds in all")
    p.add_argument("--prepare-ratio", type=float, default=0.8, help="prepare at this share of the trigger")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokenizer", help="tokenizer directory (default: the emulator's default)")
    p.add_argument("--out", help="JSON path (default bench/results/session-<timestamp>.json)")
    p.add_argument("--no-plots", dest="plots", action="store_false")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report = run(args)
    print(format_tables(report))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = rc.write_json(report, args.out or str(rc.RESULTS_DIR / f"session-{stamp}.json"))
    print(f"wrote {path}")
    if args.plots:
        for png in plot(report, Path(path).with_suffix("")):
            print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
