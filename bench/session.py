#!/usr/bin/env python
"""Agent sessions with compaction, every method, replayed on the simulator's clock (SIMULATED).

Method: each shared trajectory plays as an agent session (its turns played
again and again until ``--session-tokens``: the trajectories are far shorter
than Hermes's smallest trigger, 64K) under Hermes's trigger policy at
``--window`` (``bench/sim/session_policy.py``: the Hermes
plugin's own trigger and pruning, ``integrations/hermes`` installed).  Every
method (SpecCompact, Target-self, Hermes-style at the paper's 2,048-token
budget and at Hermes's own, OpenClaw-style) compacts the session two ways
(``bench/sim/session_replay.py``): ``sync`` (at the
trigger; the agent waits) and ``ahead`` (prepared at ``--prepare-ratio`` of
the trigger while the agent's next turns and tool calls run on the same
simulated servers).  Layouts per deployment, speculative decoding on the
target, tool time and device-seconds: ``bench/harness/
session.py``.  Each compaction draws a new workload (seed ``seed * 1000 +
k``), so the summary changes between compactions; with ``--hold`` the
summary evolves instead: compaction k keeps each line of compaction k-1's
true summary with a held share drawn per compaction around the swept ``h``
(``draw_hold`` in ``bench/sim/workload.py``), the rest
stale and replaced by new facts, and every cell is run per ``h``.  Per cell it reports the
agent-perceived stall (p50, p95 over every compaction of every seed, and
the spread of the per-seed medians), device-seconds per session, the share
of summary lines carried from the previous summary, and the agent's decode
slowdown while a prepare runs, and with ``--hold`` the retention of the
facts that still held (their share in the method's summary).  Every request is charged the client cost
measured with ``bench/client_cost.py``.  Ahead of time runs twice: in
sglang's default first-come-first-served order, and with the agent's
requests at a higher priority than the prepare's (``--priority``, sglang's
``--enable-priority-scheduling``: prefill admission only, no preemption).
With ``--prepare-yield-s`` ahead of time also runs with the prepare yielding
to the agent between requests (the service's ``--prepare-yield-s``: each
target request of the prepare waits while an agent request runs, at most
that long; ``0`` is the run without).

The judge and the writers are perfect unless told otherwise
(``bench/sim/mistakes.py``): ``--false-accept`` and ``--false-reject``
(comma lists, paired in order, each pair a cell) give the judge stated error
rates per judged line, ``--held-positions drawn`` puts the lines that still
hold at drawn places in their slot, and ``--repeat`` makes a writer that
passes a carried line on its way through the slot (one that sits among the
new lines) write it again at that rate; the extra decoding is charged as it
happens.  ``--evidence-check`` (``on``, the package's default; ``off``;
``both``, each judge error pair run with and without) puts the evidence
check before the judge: an invented line (a wrong draft, never true) is
refused at ``--evidence-catch``, by default the share of the judge set's
contradicted lines the check refuses, before the judge's false-accept
draw.  Only SpecCompact and
Target-delta judge: the other methods run once per cell and their rows are
reused for every judge error pair (``reused_from``).  Beside the stall and
device-seconds every row reports what of the true summary each compaction
keeps (retention) and the lines it keeps that do not hold (staleness).
NGRAM copy (``ngram-copy``, ``ngram-copy-h``) follows what is copyable: the
session's first compaction has no previous summary and decodes at NGRAM's
plain acceptance; later ones at ``ngram-copy``'s estimate, or for
``ngram-copy-h`` at the harmonic mix by the share of the true summary's
tokens that the previous summary holds (``copy_speed`` in
``bench/harness/session.py``).

Usage::

    python -m bench.session                       # 8B, two-gpu-equal + colocated, none/eagle3/ngram-copy
    python -m bench.session --seeds 2 --methods speccompact,target_self --speculative none
    python -m bench.session --hold 0,0.3,0.6,0.9 --session-tokens 200000 --speculative eagle3,ngram-copy-h
    python -m bench.session --hold 0.6 --methods target_delta --false-accept 0,0.15 --false-reject 0,0.15 \
        --held-positions drawn --repeat 0.1 --modes sync
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.harness import runs  # shared helpers: trajectories, methods, JSON
from bench.sim import host_cpu  # the host's CPU per compaction (MEASURED (CPU)), added to each compaction

SIMULATED_NOTE = ("SIMULATED: one-clock discrete-event simulation (bench/sim/simulator.py), H200 "
                  "cost model (sgl_speccompact/emulator/cost.py); not a GPU measurement")
PRIORITY = {"off": [False], "on": [True], "both": [False, True]}  # --priority: the agent's over the compaction's
JUDGING = ("speccompact", "target_delta")  # the methods that judge lines: the only ones judge errors move
DEFAULT_TRAJECTORIES = (  # a tool-using agent session with recorded tool times, from the shared folder
    ("princeton-nlp__SWE-agent__trajectories__demonstrations__replay__marshmallow-code__marshmallow-1867__"
     "function_calling_replace__install-1__marshmallow-code__marshmallow-1867.traj"),
)


def log(msg: str) -> None:
    print(f"[session] {msg}", file=sys.stderr, flush=True)


class Servers:
    """One simulation per (pair, layout), reconfigured per cell; the workload redrawn per compaction."""

    def __init__(self, args, tokenizer: str):
        from bench.latency import workload_lines

        self.args, self.tokenizer, self.lines = args, tokenizer, workload_lines()
        self.loaded = runs.loaded_tokenizer(tokenizer)
        self.sims: dict = {}

    def get(self, pair: str, deployment: str, method: str, spec: str, hold: float | None = None):
        """``(sim, target, drafter, held)`` for one method's session in one cell."""
        from dataclasses import replace

        from sgl_speccompact.emulator import CostModel
        from sgl_speccompact.emulator.cost import CLIENT_S_PER_REQUEST, CLIENT_S_PER_TOKEN, DEPLOYMENTS
        from sgl_speccompact.emulator.cost import Scheduling
        from bench.harness import session as hs
        from bench.harness.latency import configure
        from bench.sim.simulator import build_simulation

        t_name, d_name = pair.split(":")
        where, tp = hs.layout(deployment, method)
        client = {"client_s_per_request": CLIENT_S_PER_REQUEST, "client_s_per_token": CLIENT_S_PER_TOKEN}
        costs = {"target": replace(CostModel.for_model(t_name, spec=hs.target_spec(spec, t_name, hold), **client),
                                   tp=tp),
                 "drafter": CostModel.for_model(d_name, lora=self.lora(), **client)}
        key = (pair, where, tp)
        if key not in self.sims:
            sim = build_simulation(self.tokenizer, {"target": None, "drafter": None}, costs, DEPLOYMENTS[where],
                                   Scheduling(), tokenizer=self.loaded)
            self.sims[key] = (sim, sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter"))
            if self.args.local_tokenizer:  # the client tokenizes: no /tokenize on the clock
                for ep in self.sims[key][1:]:
                    ep.use_local_tokenizer()
        sim, target, drafter = self.sims[key]
        return configure(sim, costs), target, drafter, hs.held(where, tp)

    def lora(self):
        from sgl_speccompact.core.costmodel import LoraCost

        return LoraCost(merged=self.args.merged_lora)

    def draw(self, sim, seed: int, hermes_tokens: int, hold: float | None = None, spec: str = "none",
             mistakes=None):
        """``new_draw(k)``: compaction k of this session gets workload seed ``seed * 1000 + k``; with
        ``hold``, evolved from compaction k-1's with the held share ``draw_hold(hold, seed, k)``; the
        judge and writers get wrong what ``mistakes`` states.  A copying target (``spec`` ngram-copy,
        ngram-copy-h) is set to what compaction k can copy (:func:`~bench.harness.session.copy_speed`)."""
        from sgl_speccompact.schema import OPENCLAW_SLOTS
        from bench.harness.session import copy_speed, retune
        from bench.sim.mistakes import Mistakes
        from bench.sim.workload import SummaryWorkload, draw_hold

        last: list = []

        def new_draw(k: int):
            before = last[-1] if k and last and hold is not None else None
            wl = SummaryWorkload(self.lines, tuple(x.name for x in OPENCLAW_SLOTS), p_accept=self.args.p_accept,
                                 seed=seed * 1000 + k, hermes_tokens=hermes_tokens, previous=before,
                                 hold=draw_hold(hold, seed, k) if before is not None else 0.0,
                                 mistakes=mistakes or Mistakes())
            last[:] = [wl]
            for srv in sim.servers.values():
                srv.model.policy = wl
            wl.bind(sim.servers["target"].model)
            tau = copy_speed(spec, wl, first=k == 0)
            if tau is not None:
                retune(sim, tau)
            return wl

        return new_draw


def judge_errors(args) -> list[tuple[float, float]]:
    """``(false accept, false reject)`` pairs of a run: the two lists zipped, a single value paired with each.

    >>> from types import SimpleNamespace as N
    >>> judge_errors(N(false_accept=[0.0, 0.05], false_reject=[0.0])), judge_errors(N(false_accept=[0.1], false_reject=[0.2]))
    ([(0.0, 0.0), (0.05, 0.0)], [(0.1, 0.2)])
    """
    fa, fr = args.false_accept, args.false_reject
    n = max(len(fa), len(fr))
    if len(fa) not in (1, n) or len(fr) not in (1, n):
        raise ValueError(f"--false-accept and --false-reject need as many rates, or one: {fa} and {fr}")
    return [(fa[i if len(fa) > 1 else 0], fr[i if len(fr) > 1 else 0]) for i in range(n)]


EVIDENCE = {"on": [True], "off": [False], "both": [False, True]}  # --evidence-check: runs without / with it


def evidence_rates(args) -> list[float]:
    """The evidence check's catch rate per run of each judge error pair: 0 without the check.

    >>> from types import SimpleNamespace as N
    >>> evidence_rates(N(evidence_check="both", evidence_catch=0.3)), evidence_rates(N(evidence_check="on", evidence_catch=0.3))
    ([0.0, 0.3], [0.3])
    """
    if not 0.0 <= args.evidence_catch <= 1.0:
        raise ValueError(f"--evidence-catch must be in [0, 1], not {args.evidence_catch}")
    return [args.evidence_catch if on else 0.0 for on in EVIDENCE[args.evidence_check]]


def labels(args) -> list[tuple[str, str, int]]:
    """``(label, method, hermes tokens)`` of every method row."""
    from bench.harness.session import hermes_own_tokens

    out = []
    budgets = args.hermes_tokens or (2048, hermes_own_tokens(args.window))
    for m in args.methods:
        if m == "hermes":
            out += [(f"hermes@{n}", "hermes", n) for n in dict.fromkeys(budgets)]
        else:
            out.append((m, m, 2048))
    return out


def run(args) -> dict:
    from sgl_speccompact.emulator.qwen3 import default_tokenizer
    from bench.harness import session as hs
    from bench.sim import session_policy as sp
    from bench.sim.mistakes import EVIDENCE_CATCH, Mistakes
    from bench.sim.session_replay import Replay, ReplayHooks

    t_start = time.perf_counter()
    if args.evidence_catch is None:  # the judge set's measured share
        args.evidence_catch = EVIDENCE_CATCH
    _, runner, runner_src = runs.resolve_methods()
    paths = args.trajectories or [str(runs.TRAJECTORY_DIR / n) for n in DEFAULT_TRAJECTORIES
                                  if (runs.TRAJECTORY_DIR / n).is_file()]
    trajs, skipped = runs.load_trajectories(paths, 0, None)
    times = hs.tool_times(paths) or hs.tool_times([str(p) for p in runs.TRAJECTORY_DIR.glob("*.traj")])
    policy = sp.Policy(window=args.window, prepare_ratio=args.prepare_ratio)
    tokenizer = args.tokenizer or default_tokenizer()[0]
    holds = args.hold or [None]
    errors = [(fa, fr, ev) for fa, fr in judge_errors(args) for ev in evidence_rates(args)]
    print(f"Method: agent sessions replayed under Hermes's trigger policy (window {args.window}, trigger "
          f"{policy.trigger}, tail {policy.tail_tokens}, prepare at {args.prepare_ratio:g} of the trigger); every "
          f"method sync and ahead of time via {runner_src}; "
          + (f"the summary evolves, held share h in {args.hold} (Beta around h per compaction)" if args.hold
             else "a new workload draw per compaction"))
    host = host_cpu.resolve(args.host_cpu)  # before any run: a bad file fails at once
    print(f"Latency: {SIMULATED_NOTE}.")
    print(f"Host CPU: {host.label if host is not None else 'none (device time only)'}")
    print(f"Conditions: deployments {','.join(args.deployments)}; model pairs {','.join(args.model_pairs)}; target "
          f"speculative decoding {','.join(args.speculative)}; acceptance {args.p_accept}; sessions of "
          f"{args.session_tokens} tokens from {len(trajs)} trajectories; seeds {args.seed}.."
          f"{args.seed + args.seeds - 1}; tool time from {len(times)} recorded SWE-agent steps; drafter LoRA "
          f"{'merged' if args.merged_lora else 'served (per fused layer)'}; judge errors (false accept, false "
          f"reject) {', '.join(f'({a:g}, {r:g})' for a, r in dict.fromkeys(e[:2] for e in errors))}, the evidence "
          f"check {args.evidence_check} (an invented line refused at {args.evidence_catch:.4g} before the judge), "
          f"held lines {args.held_positions} in their "
          f"slot, a writer repeats a carried line it passes at rate {args.repeat:g}; NGRAM copy at plain speed where "
          "there is no previous summary")
    servers, rows, alone, done, sessions, counters = Servers(args, tokenizer), [], {}, {}, {}, {}
    # the workload draws its true lines from every shared trajectory, not from the history it compacts, so the
    # engine's evidence check would refuse true lines for naming strings of other trajectories; the check is priced
    # by the mistakes model instead (--evidence-check, --evidence-catch: an invented line caught at the judge set's rate)
    config = {"agent_context_tokens": args.window, "evidence_check": False}
    for pair in args.model_pairs:
        for dep in args.deployments:
            for spec, label, method, hermes_n, hold, (fa, fr, ev) in [
                    (s, *m, h, e) for s in args.speculative for m in labels(args) for h in holds for e in errors]:
                mistakes = Mistakes(fa, fr, args.held_positions, args.repeat, evidence_catch=ev)
                sim, target, drafter, gpus = servers.get(pair, dep, method, spec, hold)
                model = sim.servers["target"].model
                if model.tokenizer not in counters:  # one count per text and tokenizer, for every cell
                    counters[model.tokenizer] = sp.message_tokens(lambda text, m=model: len(m.encode(text)))
                tokens = counters[model.tokenizer]

                def compact(meth, messages, previous, target=target, drafter=drafter, yield_s=None):
                    view = target.yielding(yield_s) if yield_s else target  # a prepare yielding to the agent
                    return runner(meth, messages, target=view, drafter=drafter, config=config,
                                  previous_summary=previous)

                for seed, traj, mode, prio, ys in [
                        (a, t, m, p, y) for a in range(args.seed, args.seed + args.seeds) for t in trajs
                        for m in args.modes for p in (PRIORITY[args.priority] if m == "ahead" else [False])
                        for y in (args.prepare_yield_s if m == "ahead" else [0.0])]:
                    hooks = ReplayHooks(tool_s=(lambda i: times[i % len(times)]) if times else None,
                                        new_draw=servers.draw(sim, seed, hermes_n, hold, spec, mistakes), held=gpus,
                                        alone=alone.setdefault(seed, {}), priority=prio, yield_s=ys or None,
                                        host=host)
                    replay = Replay(sim, target, compact, tokens, hooks)
                    if (id(model), traj.path) not in sessions:
                        sessions[(id(model), traj.path)] = sp.looped_session(traj.messages, args.session_tokens,
                                                                             tokens)
                    session = sessions[(id(model), traj.path)]
                    judged = (fa, fr, ev) if method in JUDGING else None  # a method that never judges: one run for all
                    key = (pair, hs.layout(dep, method), spec, label, seed, traj.path, mode, prio, ys, hold, judged)
                    if key in done:  # the same servers ran this session already (single-model; never judging)
                        old = done[key]
                        rows.append({**old, "deployment": dep, "false_accept": fa, "false_reject": fr,
                                     "evidence_catch": ev,
                                     "reused_from": f"{old['deployment']} judge errors "
                                                    f"({old['false_accept']:g}, {old['false_reject']:g}), evidence "
                                                    f"check {old['evidence_catch']:.4g}"})
                        continue
                    log(f"{pair} {dep} {spec} {label} seed {seed} {traj.name} {mode} priority {prio}"
                        + (f" yield {ys:g} s" if ys else "") + (f" h {hold:g}" if hold is not None else "")
                        + (f" judge errors ({fa:g}, {fr:g})" if (fa, fr) != (0.0, 0.0) else "")
                        + (f" evidence check {ev:.4g}" if ev and method in JUDGING else ""))
                    t0 = time.perf_counter()
                    result = replay.run(session, policy, mode, method).summary()
                    done[key] = {"model_pair": pair, "deployment": dep, "speculative": spec,
                                 "label": label, "hermes_tokens": hermes_n, "seed": seed,
                                 "trajectory": traj.name, "path": traj.path,
                                 "session_messages": len(session), **result,
                                 **({"hold": hold} if hold is not None else {}),
                                 "false_accept": fa, "false_reject": fr, "evidence_catch": ev,
                                 "real_s": round(time.perf_counter() - t0, 1)}
                    rows.append(done[key])
    return {"benchmark": "session", "latency_kind": "simulated", "simulated_note": SIMULATED_NOTE,
            "host_cpu": host_cpu.recorded(host),
            "runner": runner_src, "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
            "conditions": {**{k: v for k, v in vars(args).items() if k not in ("out", "plots")},
                           "judge_errors": [list(e) for e in dict.fromkeys(e[:2] for e in errors)],
                           "evidence_rates": evidence_rates(args)},
            "policy": {**vars(policy), "trigger": policy.trigger, "tail_tokens": policy.tail_tokens,
                       "soft": policy.soft},
            "tool_times_s": times, "skipped": [{"path": a, "reason": b} for a, b in skipped], "rows": rows,
            "summary": hs.summarize(rows), "runtime_s": round(time.perf_counter() - t_start, 1)}


def _s(x) -> str:
    """Seconds for a table: milliseconds stay visible under 1 s.

    >>> _s(None), _s(0.00353), _s(12.4798)
    ('-', '0.004', '12.48')
    """
    if x is None:
        return "-"
    return f"{x:.3f}" if abs(x) < 1 else f"{x:.2f}"


def format_tables(report: dict) -> str:
    from bench.harness.session import format_summary

    return "\n" + format_summary(report["summary"], report["simulated_note"])


def plot(report: dict, stem: Path) -> list[Path]:
    """Stall p50 and p95 per method and mode, one panel per (pair, deployment, spec) (SIMULATED)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = report["summary"]
    panels = list(dict.fromkeys((c["model_pair"], c["deployment"], c["speculative"]) for c in summary))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        cells = [c for c in summary if (c["model_pair"], c["deployment"], c["speculative"]) == panel]
        names = [f"{c['label']}\n{c['mode']}" for c in cells]
        ax.bar(names, [c["stall_p95_s"] or 0 for c in cells], color="lightgrey", label="p95")
        ax.bar(names, [c["stall_p50_s"] or 0 for c in cells], label="p50")
        ax.set_yscale("symlog", linthresh=0.1)
        ax.set_ylabel("agent-perceived stall, s (SIMULATED)")
        ax.set_title(f"{panel[0].split(':')[0]} {panel[1]} {panel[2]} (SIMULATED)", fontsize=9)
        ax.tick_params(axis="x", labelsize=6, rotation=90)
        ax.legend()
    fig.tight_layout()
    path = stem.with_name(stem.name + "-stall.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def build_parser() -> argparse.ArgumentParser:
    split = lambda s: s.split(",")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trajectories", nargs="+", metavar="PATH", help="trajectory files (default: one SWE-agent one)")
    p.add_argument("--model-pairs", type=split, default=["qwen3-8b:qwen3-0.6b"])
    p.add_argument("--deployments", type=split, default=["two-gpu-equal", "two-gpu-tp2-colocated"],
                   help="one-gpu, two-gpu, two-gpu-equal, two-gpu-tp2-colocated")
    p.add_argument("--speculative", type=split, default=["none", "eagle3", "ngram-copy"],
                   help="the target's: none, eagle3, dflash, ngram, ngram-copy, ngram-copy-h (NGRAM copying the "
                        "held share h of the previous summary from the prompt)")
    p.add_argument("--methods", type=split, default=["speccompact", "target_self", "hermes", "openclaw"])
    p.add_argument("--modes", type=split, default=["sync", "ahead"])
    p.add_argument("--priority", choices=sorted(PRIORITY), default="both",
                   help="ahead of time: the agent's requests at a higher sglang priority than the prepare's")
    p.add_argument("--prepare-yield-s", type=lambda v: [float(x) for x in v.split(",")], default=[0.0],
                   help="ahead of time: a prepare's target request waits while an agent request runs, at most this "
                        "many seconds (the service's --prepare-yield-s); a comma list runs each, 0 = never waits")
    p.add_argument("--hold", type=lambda v: [float(x) for x in v.split(",")],
                   help="evolving summaries: the share h of the previous summary's lines that still holds, a comma "
                        "list runs each (default: a fresh summary per compaction)")
    p.add_argument("--hermes-tokens", type=lambda v: [int(x) for x in v.split(",")],
                   help="Hermes-style summary lengths, a comma list (default: the paper's 2048 and Hermes's own)")
    p.add_argument("--p-accept", type=float, default=0.7)
    rates = lambda v: [float(x) for x in v.split(",")]
    p.add_argument("--false-accept", type=rates, default=[0.0],
                   help="the simulated judge accepts a line that does not hold (stale, wrong) with this probability; "
                        "a comma list runs each, paired in order with --false-reject (bench/sim/mistakes.py)")
    p.add_argument("--false-reject", type=rates, default=[0.0],
                   help="the simulated judge rejects a line that holds with this probability; a comma list runs each, "
                        "paired in order with --false-accept (one value pairs with every one)")
    p.add_argument("--evidence-check", choices=sorted(EVIDENCE), default="on",
                   help="the evidence check before the judge (on: the package's default evidence_check): an invented "
                        "line is refused at --evidence-catch before the judge's false-accept draw; both: each judge "
                        "error pair without and with it (bench/sim/mistakes.py)")
    p.add_argument("--evidence-catch", type=float, default=None,
                   help="the share of invented lines the evidence check refuses (default: the judge set's measured "
                        "share, bench/sim/mistakes.py EVIDENCE_CATCH)")
    p.add_argument("--held-positions", choices=["first", "drawn"], default="first",
                   help="where the lines that still hold sit in their slot: first, or at drawn places among the new ones")
    p.add_argument("--repeat", type=float, default=0.0,
                   help="a writer that passes a carried line (held lines at drawn places) writes it again with "
                        "this probability (the method pays for it and drops or repairs the duplicate)")
    p.add_argument("--window", type=int, default=64_000, help="the agent's context window (Hermes's minimum: 64000)")
    p.add_argument("--session-tokens", type=int, default=90_000, help="tokens one session adds in all")
    p.add_argument("--prepare-ratio", type=float, default=0.8, help="prepare at this share of the trigger")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=8, help="seeds per cell (workload draws)")
    p.add_argument("--local-tokenizer", action="store_true",
                   help="the client tokenizes with the served tokenizer (no /tokenize requests; its time charged)")
    p.add_argument("--merged-lora", action="store_true", help="the drafter's adapter merged: no LoRA cost per pass")
    p.add_argument("--tokenizer", help="tokenizer directory (default: the emulator's default)")
    p.add_argument("--host-cpu", default=host_cpu.COMMITTED, metavar="PATH|none|committed",
                   help="add the compacting process's CPU (a bench/host.py JSON's fit, MEASURED (CPU)) to each "
                   "compaction (default: the newest committed bench/results/host-*.json; none: device time only)")
    p.add_argument("--out", help="JSON path (default bench/results/session-<timestamp>.json)")
    p.add_argument("--no-plots", dest="plots", action="store_false")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report = run(args)
    print(format_tables(report))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = runs.write_json(report, args.out or str(runs.RESULTS_DIR / f"session-{stamp}.json"))
    print(f"wrote {path}")
    if args.plots:
        for png in plot(report, Path(path).with_suffix("")):
            print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
