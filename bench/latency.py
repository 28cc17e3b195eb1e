"""Latency benchmark: end-to-end compaction latency per method, speedup over Hermes-style and Target-self.

Default: the one-clock simulator (``sgl_speccompact/testing/simulator.py``).
The project's real programs run unchanged on sglang's interpreter; their
transport is answered by simulated target and drafter servers that share one
virtual clock (H200 cost model, sglang's scheduler rules, tokenizer cost).
Every latency is then SIMULATED, never a GPU measurement, and the tables say
so.  Sweeps: ``--deployments`` (two-gpu, one-gpu), ``--model-pairs``
(8B and 32B targets with the 0.6B drafter), ``--p-accept`` (0.5, 0.7, 0.9),
over the representative trajectories plus a synthetic 16k-token history.
The workload (``sgl_speccompact/testing/workload.py``) draws lopsided slot
lengths, real trajectory lines and per-line acceptance from ``--seed``.

Per row: end-to-end, the critical slot's breakdown (before-fork, drafting,
verifying, repairing, generating, waiting, after-join; they add up to the
end-to-end), requests and tokens per server, busy time per server (the
simulator checks busy <= end-to-end on every run), and speedups.

``--layouts classic,agent`` runs the slot methods on both target prefix
layouts, ``--hermes-tokens 1200,2000`` Hermes-style at each length, and
``--scenario agent-session`` replays the agent's session on the simulated
target before each compaction (not counted in its end-to-end); see
``latency_cases.py``.  A goal table compares SpecCompact on the agent layout
with each reference.

Against real SGLang servers (``--target-url``/``--drafter-url``) it measures
wall-clock per compaction (median of ``--repeats``) and writes the same JSON
row shape (``e2e_s``; ``latency_kind`` "measured"; no breakdown).

Usage:
    python bench/latency.py                                  # full simulated sweep + plots
    python bench/latency.py --deployments one-gpu --model-pairs qwen3-32b:qwen3-0.6b --p-accept 0.7
    python bench/latency.py --scenario agent-session --layouts classic,agent --hermes-tokens 1200,2000
    python bench/latency.py --target-url http://gpu:30000 --drafter-url http://gpu:30001 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import latency_cases as lc  # methods x layouts x Hermes lengths; the agent-session scenario
import radix_cache as rc  # shared helpers: trajectories, methods, JSON

REPO = rc.REPO
DEFAULT_TRAJECTORIES = (
    ("blakeelias__tau2-bench__data__simulations__2025-10-13T13:51:25.241970_airline_llm_agent_grok-4_"
     "user_simulator_grok-4_task_32.json"),
    "All-Hands-AI__agent-sdk__tests__fixtures__llm_data__fncall-llm-message.json",
    ("princeton-nlp__SWE-agent__trajectories__demonstrations__replay__marshmallow-code__marshmallow-1867__"
     "function_calling_replace__install-1__marshmallow-code__marshmallow-1867.traj"),
)
PARTS = ("before_fork", "drafting", "verifying", "repairing", "generating", "waiting", "after_join")
SIMULATED_NOTE = ("SIMULATED: one-clock discrete-event simulation (sgl_speccompact/testing/simulator.py), H200 "
                  "cost model (sgl_speccompact/testing/cost.py); not a GPU measurement")


def log(msg: str) -> None:
    print(f"[latency] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ labels and the critical slot


def labeler():
    """``(server, path, body) -> (lane, role)`` for the event log: the slot and what the request is for."""
    from sgl_speccompact.core.prompts import DRAFTER_SLOT_REQUEST, TARGET_SLOT_REQUEST

    def pattern(template):
        head, _, tail = template.partition("{slot}")
        return re.escape(head) + r"([a-z][a-z0-9_]*)" + re.escape(tail[:8])

    slot_re = re.compile(f"{pattern(TARGET_SLOT_REQUEST)}|{pattern(DRAFTER_SLOT_REQUEST)}")

    def label(server: str, path: str, body: dict):
        if path != "/generate":
            return None, "tokenize"
        texts = body.get("text")
        text = texts[0] if isinstance(texts, list) and texts else (texts or "")
        found = slot_re.findall(text) if isinstance(text, str) else []
        lane = next((g for g in found[-1] if g), None) if found else None
        sp = body.get("sampling_params") or {}
        sp = sp[0] if isinstance(sp, list) and sp else sp
        stop = sp.get("stop") or []
        if "token_ids_logprob" in body:
            role = "judge"
        elif sp.get("max_new_tokens") == 0:
            role = "prefill"
        elif server == "drafter":
            role = "draft"
        elif "\n" in (stop if isinstance(stop, list) else [stop]):
            role = "repair"
        else:
            role = "generate"
        return lane, role

    return label


SERVICE_PART = {"draft": "drafting", "judge": "verifying", "repair": "repairing", "generate": "generating"}


WAIT_PARTS = ("to_scheduler", "queued", "other_requests")  # what "waiting" is made of


def _wait(r, whole: bool) -> dict:
    """Waiting of one critical-path request: o_req + tokenizer, scheduler queue, or (``whole``) all of it."""
    if whole:  # a request the slot waits on (token counting, a prefill): its whole latency
        return {"to_scheduler": 0.0, "queued": 0.0, "other_requests": r.latency}
    to_sched = (r.arrived - r.issued) if r.arrived is not None else 0.0
    return {"to_scheduler": to_sched, "queued": r.latency - r.service_s - to_sched, "other_requests": 0.0}


def breakdown(report: dict) -> dict:
    """The critical path's time split into PARTS (they sum to the end-to-end), and its slot.

    ``waiting_split`` divides ``waiting`` into WAIT_PARTS: ``to_scheduler``
    (o_req, the tokenizer's queue and its encoding, until the request joins
    the scheduler), ``queued`` (in the scheduler, beyond the request's own
    forward passes) and ``other_requests`` (requests the slot waits on
    whole: token counts, prefills).
    """
    from sgl_speccompact.testing.sim.timeline import critical_path

    end = report["e2e_s"]
    chain = critical_path(report["requests"], end)
    parts = dict.fromkeys(PARTS, 0.0)
    split = dict.fromkeys(WAIT_PARTS, 0.0)

    def wait(r, whole):
        for k, v in _wait(r, whole).items():
            split[k] += v
        parts["waiting"] += r.latency if whole else r.latency - r.service_s

    slotted = [i for i, r in enumerate(chain) if r.lane and r.role != "prefill"]
    if not slotted:  # a monolithic method: one request after the set-up
        for r in chain:
            part = SERVICE_PART.get(r.role)
            if part:
                parts[part] += r.service_s
            wait(r, not part)
        return {"critical_slot": None, "parts": parts, "waiting_split": split, "chain": [r.seq for r in chain]}
    first, last = slotted[0], slotted[-1]
    parts["before_fork"] = chain[first].issued
    for r in chain[first:last + 1]:
        part = SERVICE_PART.get(r.role)
        if part:
            parts[part] += r.service_s
        wait(r, not part)
    parts["after_join"] = end - chain[last].finished
    return {"critical_slot": chain[last].lane, "parts": parts, "waiting_split": split,
            "chain": [r.seq for r in chain]}


def server_numbers(report: dict, server: str) -> dict:
    reqs = [r for r in report["requests"] if r.server == server and r.path == "/generate"]
    return {"requests": len(reqs), "prompt_tokens": sum(r.prompt_tokens for r in reqs),
            "cached_tokens": sum(r.cached_tokens for r in reqs),
            "computed_tokens": sum(r.prompt_tokens - r.cached_tokens for r in reqs),
            "completion_tokens": sum(r.completion_tokens for r in reqs),
            "tokenize_requests": sum(r.server == server and r.path == "/tokenize" for r in report["requests"]),
            "tokenized_tokens": sum(r.tokenized for r in report["requests"] if r.server == server),
            "busy_s": report["busy_s"][server]}


# ------------------------------------------------------------------ simulated runs


def workload_lines():
    from sgl_speccompact.testing.sim.workload import trajectory_lines

    return trajectory_lines(sorted(p for p in rc.TRAJECTORY_DIR.iterdir() if p.suffix in (".json", ".traj")))


def workload_section_sizes():
    """Progress sub-section sizes of the shared trajectories (the workload draws one per seed)."""
    from sgl_speccompact.testing.sim.workload import trajectory_section_sizes

    return trajectory_section_sizes(sorted(p for p in rc.TRAJECTORY_DIR.iterdir() if p.suffix in (".json", ".traj")))


def histories(args, lines, count) -> list:
    from sgl_speccompact.testing.sim.workload import synthetic_history

    trajs, skipped = [], []
    if not args.no_trajectories:
        paths = args.trajectories or ([] if args.all else
                                      [str(rc.TRAJECTORY_DIR / n) for n in DEFAULT_TRAJECTORIES
                                       if (rc.TRAJECTORY_DIR / n).is_file()])
        trajs, skipped = rc.load_trajectories(paths or None, 0, None)
    for n in args.synthetic_tokens:
        for k in range(args.synthetic_count):  # history k is drawn with seed + k
            tag = f"#{k}" if k else ""
            trajs.append(rc.Trajectory(f"synthetic:{n}{tag}", f"synthetic {n // 1000}k{tag}", 0,
                                       synthetic_history(lines, n, count, seed=args.seed + k)))
    return trajs, skipped


def simulate(args, methods, runner) -> tuple[list[dict], dict]:
    from sgl_speccompact.config import make_config
    from sgl_speccompact.schema import OPENCLAW_SLOTS
    from sgl_speccompact.testing import CostModel
    from sgl_speccompact.testing.emulator.cost import DEPLOYMENTS, Scheduling
    from sgl_speccompact.testing.sim.simulator import build_simulation
    from sgl_speccompact.testing.sim.workload import SummaryWorkload

    tok, tok_kind = args.tokenizer, "given"
    if not tok:
        from sgl_speccompact.testing.emulator.qwen3 import default_tokenizer

        tok, tok_kind = default_tokenizer()
    sched = Scheduling(schedule_policy=args.schedule_policy, chunked_prefill_size=args.chunked_prefill_size or None,
                       **({"tokenizer_tokens_per_s": args.tokenizer_rate} if args.tokenizer_rate is not None else {}))
    lines, section_sizes = workload_lines(), workload_section_sizes()
    config = {"agent_context_tokens": args.agent_context_tokens, **(json.loads(args.config) if args.config else {})}
    slots = tuple(s.name for s in OPENCLAW_SLOTS)
    rows, info = [], {"tokenizer": tok_kind, "scheduling": vars(sched) if hasattr(sched, "__dict__") else None}
    from dataclasses import asdict

    info["scheduling"] = asdict(sched)
    count = None
    reuse: dict = {}  # rows of cases that sent no drafter request: they do not depend on the acceptance rate
    session = args.scenario == "agent-session"
    info["scenario"] = {"name": args.scenario, "note": lc.SESSION_NOTE if session else
                        "every compaction on empty caches"}
    for pair in args.model_pairs:
        names = pair.split(":")
        costs = {"target": CostModel.for_model(names[0]), "drafter": CostModel.for_model(names[1])}
        for dep in args.deployments:
            for p in args.p_accept:
                wl = SummaryWorkload(lines, slots, p_accept=p, clustered=args.clustered, seed=args.seed,
                                     hermes_tokens=args.hermes_tokens[0], section_sizes=section_sizes)
                sim = build_simulation(tok, {"target": wl, "drafter": wl}, costs, DEPLOYMENTS[dep], sched)
                sim.labeler = labeler()
                model = sim.servers["target"].model
                wl.bind(model)
                if count is None:
                    count = lambda text, m=model: len(m.encode(text))  # noqa: E731
                    trajs, skipped = histories(args, lines, count)
                    info["skipped"] = [{"path": a, "reason": b} for a, b in skipped]
                target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
                for traj in trajs:
                    for case in lc.cases(methods, args.layouts, args.hermes_tokens):
                        method, key = case["method"], (pair, dep, traj.path, case["label"])
                        cached = reuse.get(key)
                        if cached is not None:
                            rows.append({**cached, "p_accept": p, "realized_acceptance": round(wl.acceptance, 4),
                                         "reused_from_p": cached["p_accept"]})
                            continue
                        log(f"{pair} {dep} p={p} {traj.name} {case['label']}")
                        row = {"method": method, "label": case["label"], "layout": case["layout"],
                               "hermes_tokens": case["hermes_tokens"], "scenario": args.scenario,
                               "trajectory": traj.name, "path": traj.path,
                               "messages": len(traj.messages), "deployment": dep, "model_pair": pair,
                               "p_accept": p, "acceptance": "clustered" if args.clustered else "independent",
                               "realized_acceptance": round(wl.acceptance, 4)}
                        if case["hermes_tokens"]:
                            wl.hermes_tokens = case["hermes_tokens"]  # between runs: no request in flight
                        kw = lc.runner_kwargs(case, tok)
                        try:
                            t0 = time.perf_counter()
                            if session:
                                row["session"] = lc.run_session(sim, traj.messages)
                            result, report = sim.run(lambda m=method, t=traj, kw=kw: runner(
                                m, t.messages, target=target, drafter=drafter, config=config,
                                source_judge=args.source_judge, **kw), keep_cache=session)
                        except Exception as exc:  # noqa: BLE001 - one failed row does not end the sweep
                            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
                            log(f"    ERROR {row['error']}")
                            rows.append(row)
                            continue
                        row.update(e2e_s=report["e2e_s"], real_s=time.perf_counter() - t0,
                                   summary_tokens=result.summary_tokens,
                                   judged_acceptance=result.stats.acceptance_rate,
                                   busy_ok=all(b <= report["e2e_s"] + 1e-9 for b in report["busy_s"].values()),
                                   gpu_busy_s=report["gpu_busy_s"][0] if dep == "one-gpu" else None,
                                   first_target=lc.first_target(report),
                                   agent_tokens=result.stats.agent_tokens,
                                   agent_cached_tokens=result.stats.agent_cached_tokens,
                                   **breakdown(report),
                                   **{s: server_numbers(report, s) for s in ("target", "drafter")})
                        rows.append(row)
                        if row["drafter"]["requests"] == 0:
                            reuse[key] = row
    make_config(config)  # validated above by the runs; raises ConfigError on a bad --config
    return rows, info


# ------------------------------------------------------------------ real servers


def measure(args, methods, runner) -> tuple[list[dict], dict]:
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    eps = {"target": SpecCompactEndpoint(args.target_url, api_key=args.api_key, timeout_s=args.timeout),
           "drafter": SpecCompactEndpoint(args.drafter_url, api_key=args.api_key, timeout_s=args.timeout,
                                          lora_path=args.drafter_lora_name)}
    servers = {r: rc.Server(r, u, args.api_key, args.timeout)
               for r, u in (("target", args.target_url), ("drafter", args.drafter_url))}
    trajs, skipped = rc.load_trajectories(args.trajectories, 0, None) if (args.trajectories or args.all) else \
        rc.load_trajectories([str(rc.TRAJECTORY_DIR / n) for n in DEFAULT_TRAJECTORIES], 0, None)
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
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {exc}"[:500]
                rows.append(row)
                continue
            row.update(e2e_s=statistics.median(walls), e2e_min_s=min(walls), e2e_max_s=max(walls),
                       summary_tokens=result.summary_tokens, critical_slot=None, parts=None)
            for role in ("target", "drafter"):
                n = rc.server_numbers(result.stats, role)
                row[role] = {k: n[k] for k in ("requests", "prompt_tokens", "cached_tokens", "completion_tokens")}
            rows.append(row)
    return rows, {"servers": {r: s.describe() for r, s in servers.items()},
                  "skipped": [{"path": a, "reason": b} for a, b in skipped]}


# ------------------------------------------------------------------ speedups and tables


def add_speedups(rows: list[dict]) -> None:
    """Speedups = reference e2e / row e2e in the same (pair, deployment, p, history).

    ``speedups`` maps each reference to it: ``hermes@N`` for every Hermes-style
    length that ran (``hermes`` when only one did), and ``target_self``: the
    Target-self row on the row's own layout (its first layout for rows without
    one).  ``speedup_vs_hermes`` is against the first ``--hermes-tokens`` value,
    ``speedup_vs_target_self`` the Target-self one.
    """
    key = lambda r: (r["model_pair"], r["deployment"], r["p_accept"], r["path"])  # noqa: E731
    ok = [r for r in rows if r.get("e2e_s")]
    hermes = {}  # key -> {label: e2e}, in run order
    selfs = {}  # key -> {layout: e2e}, in run order
    for r in ok:
        if r["method"] == "hermes":
            hermes.setdefault(key(r), {})[r.get("label", "hermes")] = r["e2e_s"]
        elif r["method"] == "target_self":
            selfs.setdefault(key(r), {})[r.get("layout", "classic")] = r["e2e_s"]
    for r in rows:
        v, refs = r.get("e2e_s"), {}
        for label, b in hermes.get(key(r), {}).items():
            refs[label] = b / v if v else None
        own = selfs.get(key(r), {})
        b = own.get(r.get("layout")) or next(iter(own.values()), None)
        if own:
            refs["target_self"] = b / v if b and v else None
        r["speedups"] = refs
        r["speedup_vs_hermes"] = next((x for k, x in refs.items() if k.startswith("hermes")), None)
        r["speedup_vs_target_self"] = refs.get("target_self")


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def summarize(rows: list[dict]) -> list[dict]:
    """Per (pair, deployment, p, case label): geometric means over histories, mean breakdown and cache numbers."""
    out, groups = [], {}
    for r in rows:
        if "e2e_s" in r:
            groups.setdefault((r["model_pair"], r["deployment"], r["p_accept"], r.get("label", r["method"])),
                              []).append(r)
    for (pair, dep, p, label), rs in groups.items():
        parts = {k: statistics.fmean(r["parts"][k] for r in rs) for k in PARTS} if rs[0].get("parts") else None
        split = ({k: statistics.fmean(r["waiting_split"][k] for r in rs) for k in WAIT_PARTS}
                 if rs[0].get("waiting_split") else None)
        refs = list(dict.fromkeys(k for r in rs for k in r.get("speedups", {})))
        first = [r["first_target"] for r in rs if r.get("first_target")]
        out.append({"model_pair": pair, "deployment": dep, "p_accept": p, "method": rs[0]["method"], "label": label,
                    "layout": rs[0].get("layout"), "hermes_tokens": rs[0].get("hermes_tokens"),
                    "histories": len(rs),
                    "geomean_e2e_s": geomean(r["e2e_s"] for r in rs),
                    "geomean_speedup_vs_hermes": geomean(r.get("speedup_vs_hermes") for r in rs),
                    "geomean_speedup_vs_target_self": geomean(r.get("speedup_vs_target_self") for r in rs),
                    "geomean_speedups": {k: geomean(r["speedups"].get(k) for r in rs) for k in refs},
                    "mean_parts_s": parts, "mean_waiting_split_s": split,
                    "mean_requests": {s: statistics.fmean(r[s]["requests"] for r in rs) for s in ("target", "drafter")},
                    "mean_tokens": {s: statistics.fmean(r[s]["prompt_tokens"] + r[s]["completion_tokens"]
                                                        for r in rs) for s in ("target", "drafter")},
                    "mean_target_tokens": {k: statistics.fmean(r["target"][k] for r in rs)
                                           for k in ("prompt_tokens", "cached_tokens")},
                    "mean_first_target": {k: _mean(f[k] for f in first) for k in ("prompt_tokens", "cached_tokens")}
                    if first else None,
                    "mean_session_s": _mean((r.get("session") or {}).get("session_s") for r in rs)})
    return out


def _pair_title(pair: str) -> str:
    t, d = pair.split(":")
    return f"{t.replace('qwen3', 'Qwen3').upper().replace('QWEN3', 'Qwen3')} target + {d.replace('qwen3', 'Qwen3').upper().replace('QWEN3', 'Qwen3')} drafter"


def _speedup_cell(s: dict, refs: list[str]) -> str:
    if s is None or s["geomean_e2e_s"] is None:
        return "-"
    sp = [(s.get("geomean_speedups") or {}).get(k) for k in refs]
    return f"{s['geomean_e2e_s']:.2f} (" + " / ".join("-" if x is None else f"{x:.2f}x" for x in sp) + ")"


def format_tables(summary: list[dict], rows: list[dict], kind: str) -> str:
    """One speedup table per (model pair, deployment), one breakdown table per (pair, deployment, p)."""
    label = "SIMULATED" if kind == "simulated" else "MEASURED"
    out = []
    for pair in dict.fromkeys(s["model_pair"] for s in summary):
        for dep in dict.fromkeys(s["deployment"] for s in summary):
            cell = [s for s in summary if s["model_pair"] == pair and s["deployment"] == dep]
            if not cell:
                continue
            ps = sorted({s["p_accept"] for s in cell}, key=lambda x: (x is None, x))
            n = max(s["histories"] for s in cell)
            refs = list(dict.fromkeys(k for s in cell for k in s.get("geomean_speedups") or {}))
            names = " / ".join("Target-self (same layout)" if k == "target_self" else
                               k.replace("hermes", "Hermes-style") for k in refs)
            out.append(f"\n{label} end-to-end latency, deployment {dep}, {_pair_title(pair)} "
                       f"(geometric mean over {n} histories; s, speedup vs {names})")
            out.append("| method | " + " | ".join(f"p={p}" for p in ps) + " |")
            out.append("|---" * (len(ps) + 1) + "|")
            for name in dict.fromkeys(s.get("label", s["method"]) for s in cell):
                cells = [_speedup_cell(next((x for x in cell if x.get("label", x["method"]) == name
                                             and x["p_accept"] == p), None), refs) for p in ps]
                out.append(f"| {name} | " + " | ".join(cells) + " |")
            for p in ps:
                sub = [s for s in cell if s["p_accept"] == p and s["mean_parts_s"]]
                if not sub:
                    continue
                out.append(f"\n{label} critical slot, deployment {dep}, {_pair_title(pair)}, p={p} "
                           "(mean over histories, s; requests and tokens per compaction)")
                out.append("| method | e2e | " + " | ".join(PARTS) + " | wait: " + " | wait: ".join(WAIT_PARTS)
                           + " | T reqs | T tokens | D reqs | D tokens |")
                out.append("|---" * (len(PARTS) + len(WAIT_PARTS) + 6) + "|")
                for s in sub:
                    split = s.get("mean_waiting_split_s") or dict.fromkeys(WAIT_PARTS)
                    parts = " | ".join([f"{s['mean_parts_s'][k]:.2f}" for k in PARTS]
                                       + ["-" if split[k] is None else f"{split[k]:.2f}" for k in WAIT_PARTS])
                    out.append(f"| {s.get('label', s['method'])} | {s['geomean_e2e_s']:.2f} | {parts} | "
                               f"{s['mean_requests']['target']:.0f} | {s['mean_tokens']['target']:.0f} | "
                               f"{s['mean_requests']['drafter']:.0f} | {s['mean_tokens']['drafter']:.0f} |")
    errors = [r for r in rows if "error" in r]
    if errors:
        out.append(f"\n{len(errors)} row(s) failed: " + "; ".join(f"{r.get('label', r['method'])}/{r['trajectory']}: "
                                                             f"{r['error'][:80]}" for r in errors[:5]))
    return "\n".join(out)


# ------------------------------------------------------------------ main


def run(args) -> dict:
    from sglang.version import __version__ as sglang_version

    available, runner, runner_src = rc.resolve_methods()
    methods = [m.strip() for m in args.methods.split(",")] if args.methods else list(available)
    missing = [m for m in methods if m not in available]
    if missing:
        raise SystemExit(f"method(s) {missing} not available; available: {list(available)}")
    for ref in ("target_self", "hermes"):
        if ref not in methods and ref in available:
            methods.insert(0, ref)
    measured = bool(args.target_url or args.drafter_url)
    if measured and not (args.target_url and args.drafter_url):
        raise SystemExit("pass both --target-url and --drafter-url (or neither, for the simulator)")
    now = datetime.now(UTC)
    kind = "measured" if measured else "simulated"
    print(f"Method: end-to-end latency of {', '.join(methods)} via {runner_src}; speedups = reference e2e / "
          "method e2e on the same history, deployment, model pair and acceptance rate")
    if not measured:
        print(f"Latency: {SIMULATED_NOTE}.")
        print(f"Conditions: scenario {args.scenario}"
              + (f" ({lc.SESSION_NOTE})" if args.scenario == "agent-session" else " (empty caches)")
              + f"; slot-method layouts {','.join(args.layouts)}; Hermes-style writes "
              f"{' and '.join(map(str, args.hermes_tokens))} tokens on its own fresh prompt (classic); "
              f"deployments {','.join(args.deployments)}; model pairs {','.join(args.model_pairs)}; "
              f"acceptance {','.join(map(str, args.p_accept))} ({'clustered' if args.clustered else 'independent'}); "
              f"seed {args.seed}")
    sys.stdout.flush()
    rows, info = measure(args, methods, runner) if measured else simulate(args, methods, runner)
    add_speedups(rows)
    summary = summarize(rows)
    conditions = {k: v for k, v in vars(args).items() if k not in ("api_key",)}
    pairs = sorted({r["model_pair"] for r in rows})
    servers = info.pop("servers", None) or ({"target": {"model_path": _model_path(pairs[0].split(":")[0])}}
                                            if len(pairs) == 1 else {})
    report = {"benchmark": "latency", "latency_kind": kind, "headline_field": "e2e_s",
              "latency_label": "measured wall-clock" if measured else SIMULATED_NOTE,
              "simulated_note": None if measured else SIMULATED_NOTE, "methods": methods, "runner": runner_src,
              "timestamp": now.isoformat(timespec="seconds"), "sglang_version": sglang_version,
              "conditions": conditions, "servers": servers, **info, "rows": rows,
              "summary": {}, "summary_by_cell": summary}
    goals = lc.goal_rows(summary)
    report["goals"] = goals
    print(format_tables(summary, rows, kind))
    if args.scenario == "agent-session" or len(args.layouts) > 1:
        print(lc.format_cache_table(summary))
    print(lc.format_goals(goals))
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    path = rc.write_json(report, args.out or str(rc.RESULTS_DIR / f"latency-{stamp}.json"))
    print(f"wrote {path}")
    if args.plots and not measured:
        import latency_plots

        for png in latency_plots.plot(report, Path(path).with_suffix("")):
            print(f"wrote {png}")
    return report


def _model_path(preset: str) -> str:
    from sgl_speccompact.testing.emulator.cost import PRESETS

    return PRESETS[preset].name if preset in PRESETS else preset


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def _layouts(text: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in out if x not in lc.LAYOUTS]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"layouts are {', '.join(lc.LAYOUTS)}; got {text!r}")
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
    sim.add_argument("--deployments", type=lambda s: s.split(","), default=["two-gpu", "one-gpu"])
    sim.add_argument("--model-pairs", type=lambda s: s.split(","),
                     default=["qwen3-8b:qwen3-0.6b", "qwen3-32b:qwen3-0.6b"])
    sim.add_argument("--p-accept", type=_floats, default=[0.5, 0.7, 0.9], help="acceptance rates (default 0.5,0.7,0.9)")
    sim.add_argument("--clustered", action="store_true", help="clustered rejections instead of independent ones")
    sim.add_argument("--hermes-tokens", type=lambda t: [int(x) for x in t.split(",")], default=[2000],
                     help="Hermes-style summary tokens, a list (default 2000, its prompt's length target for a "
                     "32,768-token window; 1200 is the conservative low end), e.g. 1200,2000")
    sim.add_argument("--agent-context-tokens", type=int, default=32768,
                     help="the agent's context window (Hermes's prompt asks for max(2000, min(20%% of the turns, "
                     "5%% of it, 10000)) tokens); default 32768, Qwen3-8B/32B's native window")
    sim.add_argument("--layouts", type=_layouts, default=["classic"],
                     help="target prefix layouts of the slot methods, a list of classic,agent (default classic); "
                     "Hermes-style and OpenClaw-style always send their own fresh prompt")
    sim.add_argument("--scenario", choices=("cold", "agent-session"), default="cold",
                     help="cold: every compaction on empty caches; agent-session: the agent's session (every "
                     "assistant turn as a chat completion) runs on the simulated target first, not counted in e2e")
    sim.add_argument("--synthetic-tokens", type=lambda s: [int(x) for x in s.split(",") if x], default=[16000],
                     help="synthetic history sizes in tokens (default 16000; '' for none)")
    sim.add_argument("--synthetic-count", type=int, default=1,
                     help="synthetic histories per size, drawn with seeds seed, seed+1, ... (default 1)")
    sim.add_argument("--schedule-policy", default="fcfs", choices=["fcfs", "lpm"])
    sim.add_argument("--chunked-prefill-size", type=int, default=8192, help="0: off (default 8192, sglang on H200)")
    sim.add_argument("--tokenizer-rate", type=float, help="tokenizer tokens/s (default: cost.py's measured rate)")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--tokenizer", help="tokenizer directory (default: the emulator's default)")
    sim.add_argument("--no-plots", dest="plots", action="store_false", help="skip the PNG plots")
    real = p.add_argument_group("real SGLang servers (measured wall-clock)")
    real.add_argument("--target-url")
    real.add_argument("--drafter-url")
    real.add_argument("--drafter-lora-name")
    real.add_argument("--repeats", type=int, default=3)
    real.add_argument("--api-key")
    real.add_argument("--timeout", type=float, default=300.0)
    return p


def main(argv: list[str] | None = None) -> int:
    report = run(build_parser().parse_args(argv))
    return 1 if any("error" in r for r in report["rows"]) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
