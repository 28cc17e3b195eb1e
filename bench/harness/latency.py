"""The latency benchmark's simulated runs (every figure SIMULATED; ``bench/latency.py`` is the CLI).

One *cell* is (model pair, speculative decoding, deployment, acceptance rate).
In a cell every method runs on every history for ``seeds`` workload draws on
the one-clock simulator (:mod:`.simulator`).

* **Seeding rule** (:func:`draw_seed`, shared with ``bench/ablation.py``):
  draw ``j`` of history ``k`` uses seed ``base + j + 1000 * k`` for the
  workload (true summary, verdicts) and, for a synthetic history, for the
  history itself.  No two histories or draws share verdicts.
* **Speculative decoding** (:func:`server_spec`): the cell's algorithm on
  every server that supports it (a draft network is modelled for its model,
  and sglang accepts the server's LoRA adapter with it); the drafter may get
  its own (``drafter_speculative``, a SpecCompact lever).
* **Deployments**: ``one-gpu`` (both servers share one GPU), ``two-gpu``
  (the paper's: the drafter's GPU is idle for single-model methods) and
  ``two-gpu-equal`` (equal hardware: single-model methods run the target with
  TP=2 on both GPUs; SpecCompact as in ``two-gpu``, its row reused from
  that run when ``two-gpu`` is in the sweep) and ``two-gpu-tp2-colocated``
  (equal hardware, SpecCompact's other layout: its target with TP=2 across
  both GPUs and the drafter's passes taking turns with it; single-model
  methods as in ``two-gpu-equal``, their rows reused from it).
* ``auto`` (:mod:`sgl_speccompact.methods.auto`) picks a method per cell from the
  closed-form model; its row is the picked method's run on the same draw
  (the simulator is deterministic: a second run gives the same end-to-end
  bit for bit), with ``pick`` and ``predicted_s``.
* ``hermes@slots``: Hermes-style writing as many tokens as Target-self wrote
  on the same draw (same work), next to its ``--hermes-tokens`` lengths.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from .latency_cases import CaseRunner, cases, slot_tokens

SEED_STRIDE = 1000  # seeds of history k start at base + 1000 * k
SINGLE_MODEL = ("hermes", "openclaw", "target_self", "target_delta")  # methods that use only the target
DEPLOYMENT_NAMES = ("one-gpu", "two-gpu", "two-gpu-equal", "two-gpu-tp2-colocated")
TP2_SINGLE = ("two-gpu-equal", "two-gpu-tp2-colocated")  # single-model methods: the target at TP=2 on both GPUs


def draw_seed(base: int, draw: int, history: int = 0) -> int:
    """Workload (and synthetic-history) seed of draw ``draw`` of history ``history``.

    >>> draw_seed(0, 0), draw_seed(0, 7), draw_seed(5, 1, 2)
    (0, 7, 2006)
    """
    return base + draw + SEED_STRIDE * history


def effective_accept(p: float, history_tokens: int, train_tokens: int, fall_per_doubling: float) -> float:
    """Acceptance of a drafter reading ``history_tokens`` when trained on ``train_tokens``.

    Past its training length the acceptance loses ``fall_per_doubling`` of
    itself per doubling of the history.

    >>> effective_accept(0.8, 8000, 16384, 0.1), effective_accept(0.8, 32768, 16384, 0.1)
    (0.8, 0.72)
    """
    if history_tokens <= train_tokens or fall_per_doubling <= 0:
        return p
    return round(p * max(0.0, 1.0 - fall_per_doubling * math.log2(history_tokens / train_tokens)), 6)


@dataclass(frozen=True)
class Cell:
    """One cell of the sweep."""

    pair: str  # "target:drafter" presets, e.g. qwen3-8b:qwen3-0.6b
    speculative: str  # the cell's algorithm name (lower case) or "none"
    deployment: str  # one of DEPLOYMENT_NAMES
    p: float  # nominal acceptance rate


def server_spec(algorithm: str, model: str, lora: bool):
    """``(SpecDecoding or None, note)`` for a server of ``model`` asked to run ``algorithm``.

    >>> server_spec("eagle3", "qwen3-0.6b", True)[1]
    'no EAGLE3 draft network for qwen3-0.6b'
    >>> server_spec("standalone", "qwen3-0.6b", True)[0] is None
    True
    """
    from sgl_speccompact.core.specdecode import LORA_REFUSED, available, make

    algo = (algorithm or "none").upper()
    if algo == "NONE":
        return None, "off"
    if not available(algo, model):
        return None, f"no {algo} draft network for {model}"
    if lora and algo in LORA_REFUSED:
        return None, f"sglang refuses LoRA adapters with {algo}"
    return make(algo, model), algo


def costs_for(cell: Cell, args):
    """``{"target": CostModel, "drafter": CostModel}`` and the spec notes of a cell."""
    from sgl_speccompact.core.costmodel import LoraCost
    from sgl_speccompact.emulator.cost import CLIENT_S_PER_REQUEST, CLIENT_S_PER_TOKEN, CostModel

    t_name, d_name = cell.pair.split(":")
    t_spec, t_note = server_spec(cell.speculative, t_name, lora=False)
    d_algo = args.drafter_speculative or cell.speculative
    d_spec, d_note = server_spec(d_algo, d_name, lora=True)
    client = {"client_s_per_request": CLIENT_S_PER_REQUEST, "client_s_per_token": CLIENT_S_PER_TOKEN}
    lora = LoraCost(rank=args.drafter_lora_rank, modules=tuple(args.drafter_lora_modules),
                    merged=getattr(args, "drafter_lora_merged", False)) if args.drafter_lora_rank > 0 else None
    costs = {"target": CostModel.for_model(t_name, spec=t_spec, **client),
             "drafter": CostModel.for_model(d_name, spec=d_spec, lora=lora, **client)}
    return costs, {"target": t_note, "drafter": d_note}


def simulate(args, methods: list[str], runner, trajs: list, tokenizer: str, lines: list[str], log=print):
    """Every cell's rows (see the module doc); ``(rows, info)``.

    ``args`` carries the bench's options (``model_pairs``, ``speculative``,
    ``deployments``, ``p_accept``, ``seeds``, ``seed``, ...); ``trajs`` are
    objects with ``name``, ``path``, ``messages`` (synthetic ones are added
    per draw); ``lines`` the workload's pool of real lines.
    """
    from sgl_speccompact.methods.auto import Deployment, choose
    from sgl_speccompact.emulator.cost import DEPLOYMENTS, Scheduling
    from bench.sim.simulator import build_simulation
    from bench.sim.workload import SummaryWorkload

    from .runs import loaded_tokenizer

    sched = Scheduling(schedule_policy=args.schedule_policy, chunked_prefill_size=args.chunked_prefill_size or None,
                       **({"tokenizer_tokens_per_s": args.tokenizer_rate} if args.tokenizer_rate is not None else {}))
    rows, done = [], {}
    info = {"spec_notes": {}, "auto": {}}
    runner_obj = CaseRunner(args, runner, tokenizer)
    loaded = loaded_tokenizer(tokenizer)  # once per process: loading takes seconds
    for pair in args.model_pairs:
        built: dict = {}  # one simulation per GPU layout, reconfigured per cell (its caches reset per run)

        def sim_for(layout, costs, key=None, built=built):
            key = key or layout
            if key not in built:
                built[key] = build_simulation(tokenizer, {"target": None, "drafter": None}, costs,
                                              DEPLOYMENTS[layout], sched, tokenizer=loaded)
            return configure(built[key], costs)

        for spec in args.speculative:
            for dep in args.deployments:
                cell0 = Cell(pair, spec, dep, args.p_accept[0])
                costs, notes = costs_for(cell0, args)
                info["spec_notes"][f"{pair}/{spec}"] = notes
                if dep in TP2_SINGLE:
                    from dataclasses import replace

                    tp2 = {**costs, "target": replace(costs["target"], tp=2)}
                    slot = sim_for("two-gpu", costs) if dep == "two-gpu-equal" else sim_for(dep, tp2)
                    sims = {"single": sim_for("two-gpu", tp2, "tp2"), "slot": slot}
                else:
                    sims = {"single": sim_for(dep, costs), "slot": None}
                for p in args.p_accept:
                    cell = Cell(pair, spec, dep, p)
                    rows += run_cell(cell, args, methods, runner_obj, sims, trajs, lines, notes, done, info, log,
                                     SummaryWorkload, Deployment, choose)
    return rows, info


def configure(sim, costs: dict):
    """Give ``sim``'s servers these cost models (speculative decoding, TP, LoRA, client cost); returns it."""
    from sgl_speccompact.emulator.cost import deployed

    costs = deployed(costs, sim.deployment)
    for name, srv in sim.servers.items():
        srv.cost = costs[name]
        srv.sched.spec = costs[name].spec
        srv.sched.request_overhead_s = costs[name].request_overhead_s
    return sim


def run_cell(cell, args, methods, runner_obj, sims, trajs, lines, notes, done, info, log, workload_cls,
             deployment_cls, choose) -> list[dict]:
    """One cell: every draw of every history, every case; the auto rows."""
    from sgl_speccompact.schema import OPENCLAW_SLOTS
    from bench.sim.sources import synthetic_history

    slots = tuple(s.name for s in OPENCLAW_SLOTS)
    out = []
    plain = [m for m in methods if m != "auto"]
    for draw in range(args.seeds):
        histories = list(trajs)
        model = sims["single"].servers["target"].model
        count = lambda text, m=model: len(m.encode(text))
        for k, n in enumerate(args.synthetic_tokens):
            seed = draw_seed(args.seed, draw, len(trajs) + k)
            if (n, seed) not in runner_obj.synthetic:  # the same history in every cell of this draw
                runner_obj.synthetic[(n, seed)] = synthetic_history(lines, n, count, seed=seed)
            histories.append(_Synthetic(f"synthetic:{n}", f"synthetic {n // 1000}k", 0,
                                        runner_obj.synthetic[(n, seed)]))
        for h, traj in enumerate(histories):
            seed = draw_seed(args.seed, draw, h)
            tokens = runner_obj.history_tokens(traj, count)
            p_eff = effective_accept(cell.p, tokens, args.drafter_train_tokens, args.acceptance_fall)
            wl = workload_cls(lines, slots, p_accept=p_eff, clustered=args.clustered, seed=seed,
                              hermes_tokens=args.hermes_tokens[0], section_sizes=getattr(args, "section_sizes", None))
            for sim in filter(None, sims.values()):
                for srv in sim.servers.values():
                    srv.model.policy = wl
                wl.bind(sim.servers["target"].model)
            base = {"deployment": cell.deployment, "model_pair": cell.pair, "speculative": cell.speculative,
                    "target_speculative": notes["target"], "drafter_speculative": notes["drafter"],
                    "p_accept": cell.p, "p_effective": p_eff, "history_tokens": tokens, "seed": seed, "draw": draw,
                    "trajectory": traj.name, "path": traj.path, "messages": len(traj.messages),
                    "acceptance": "clustered" if args.clustered else "independent", "scenario": args.scenario}
            got = {}
            for case in cases(plain, args.layouts, args.hermes_tokens, getattr(args, "hermes_slots", True)):
                if case["label"] == "hermes@slots":
                    case = {**case, "hermes_tokens": slot_tokens(got)}
                    if not case["hermes_tokens"]:
                        continue
                single = case["method"] in SINGLE_MODEL
                sim = sims["single"] if single or sims["slot"] is None else sims["slot"]
                key = (cell.pair, cell.speculative, cell.p, draw, traj.path, case["label"], case["hermes_tokens"])
                if single:  # no drafter: the same run at every acceptance rate (the true summary is p-free)
                    dep_key = "two-gpu-equal" if cell.deployment in TP2_SINGLE else cell.deployment
                    key = (cell.pair, cell.speculative, dep_key, draw, traj.path, case["label"], case["hermes_tokens"])
                elif cell.deployment == "two-gpu-tp2-colocated":
                    key = (*key, cell.deployment)  # its own servers
                # SpecCompact's servers are the same in two-gpu and two-gpu-equal, never in one-gpu
                reuse = done.get(key) if single or cell.deployment != "one-gpu" else None
                if reuse is not None:  # the same servers and requests ran already
                    row = {**reuse, **base, "realized_acceptance": round(wl.acceptance, 4),
                           "reused_from": f"{reuse['deployment']} p={reuse['p_accept']}"}
                else:
                    log(f"{cell.pair} {cell.speculative} {cell.deployment} p={cell.p} draw {draw} "
                        f"{traj.name} {case['label']}")
                    tp2 = (single and cell.deployment in TP2_SINGLE) or (not single and cell.deployment ==
                                                                         "two-gpu-tp2-colocated")
                    row = {**base, **runner_obj.run(sim, case, traj, wl, tp2, tokens)}
                    if single or cell.deployment != "one-gpu":
                        done[key] = row  # SpecCompact in two-gpu-equal runs on two-gpu's servers
                got[case["label"]] = row
                out.append(row)
            if "auto" in methods:
                out.append(auto_row(cell, args, got, base, tokens, p_eff, deployment_cls, choose, info))
    return out


def auto_row(cell, args, got, base, tokens, p_eff, deployment_cls, choose, info) -> dict:
    """The ``auto`` row: the method :func:`~sgl_speccompact.methods.auto.choose` picks, as it ran on this draw."""
    t, d = cell.pair.split(":")
    dep = replace(deployment_cls.named(target=t, drafter=d, gpus=1 if cell.deployment == "one-gpu" else 2,
                                       speculative=None if cell.speculative == "none" else cell.speculative,
                                       drafter_speculative=args.drafter_speculative,
                                       equal_hardware=cell.deployment != "two-gpu",
                                       colocated_tp2=cell.deployment == "two-gpu-tp2-colocated"),
                  hermes_tokens=args.hermes_tokens[0])
    ran = [m for m in ("speccompact", "target_self", "hermes", "openclaw") if _label(m, got)]
    choice = choose(dep, tokens, p_eff, methods=tuple(ran))
    info["auto"][f"{cell.pair}/{cell.speculative}/{cell.deployment}/{cell.p}"] = {
        "pick": choice.method, "predicted_s": choice.predicted_s, "reason": choice.reason}
    picked = got[_label(choice.method, got)]
    keep = {k: v for k, v in picked.items() if k not in ("method", "label")}
    return {**keep, **base, "method": "auto", "label": "auto", "pick": choice.method,
            "predicted_s": choice.predicted_s, "reason": choice.reason}


def _label(method: str, got: dict) -> str | None:
    """The first case label of ``method`` that ran (its first layout or Hermes length)."""
    return next((lab for lab in got if lab.split("/")[0].split("@")[0] == method and "error" not in got[lab]), None)


@dataclass
class _Synthetic:
    name: str  # shown in tables
    path: str  # key of the history
    trial: int  # unused (the trajectory loader's field)
    messages: list  # the history


def timed(fn):
    """``(fn(), real seconds)``."""
    t0 = time.perf_counter()
    return fn(), time.perf_counter() - t0


BASE_FIELDS = ("deployment", "model_pair", "speculative", "target_speculative", "drafter_speculative", "p_accept",
               "p_effective", "history_tokens", "seed", "draw", "trajectory", "path", "messages", "acceptance",
               "scenario")


def repick(rows: list[dict], conditions: dict) -> tuple[list[dict], dict]:
    """Every ``auto`` row rebuilt with the current predictor from a report's own runs; ``(rows, auto info)``.

    An auto row is by construction the picked method's run on the same draw, so a new predictor
    needs no new simulation: the rows of the other methods are kept as they are.
    """
    from types import SimpleNamespace

    from sgl_speccompact.methods.auto import Deployment, choose

    args = SimpleNamespace(drafter_speculative=conditions.get("drafter_speculative"),
                           hermes_tokens=conditions.get("hermes_tokens") or [1200])
    kept = [r for r in rows if r.get("method") != "auto"]
    groups: dict = {}
    for r in kept:
        key = (r["model_pair"], r.get("speculative", "none"), r["deployment"], r["p_accept"], r.get("draw", 0),
               r["path"])
        groups.setdefault(key, {})[r["label"]] = r
    info = {"spec_notes": {}, "auto": {}}
    out = []
    for (pair, spec, dep, p, _, _), got in groups.items():
        out += list(got.values())
        first = next(iter(got.values()))
        base = {k: first.get(k) for k in BASE_FIELDS}
        out.append(auto_row(Cell(pair, spec, dep, p), args, got, base, first["history_tokens"], first["p_effective"],
                            Deployment, choose, info))
    return out, info["auto"]
