"""The session benchmark's layouts, tool times and tables (SIMULATED; ``bench/session.py`` is the CLI).

* **Layouts** (:func:`layout`): the servers one method's session runs on in
  one deployment.  ``two-gpu-equal`` gives single-model methods the target
  with TP=2 on both GPUs and SpecCompact the paper's layout (target on one,
  drafter on the other); ``two-gpu-tp2-colocated`` gives SpecCompact the
  target with TP=2 and the drafter on the same GPUs (single-model methods as
  in ``two-gpu-equal``); ``one-gpu`` and ``two-gpu`` as in the latency
  benchmark.  The agent always runs on the target the method uses.
* **Speculative decoding** runs on the target server (the agent's turns and
  every method's target work); ``ngram-copy`` is NGRAM with a higher mean
  acceptance (:data:`NGRAM_COPY_TAU`), for summaries that copy carried text
  from the prompt; ``ngram-copy-h`` is NGRAM whose mean acceptance follows
  the share of an evolving summary that the previous one holds
  (:func:`copy_tau`, the harmonic mix): the held lines copy from the previous
  summary in the prompt, the new ones do not.  Both are set per compaction
  (:func:`copy_speed`): a session's first compaction has no previous summary
  to copy from and decodes at NGRAM's plain acceptance.
* **Tool time** (:func:`tool_times`): the ``execution_time`` SWE-agent
  records per step, read from the shared trajectories; the i-th tool call
  of a session takes the i-th recorded time, cycling.
* **Device-seconds**: pass time shared out over the requests of each pass,
  times the GPUs that server's pass holds (TP=2: 2; a pass on a TP=2 pair
  that the drafter shares holds both GPUs).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from sgl_speccompact.core.specdecode import DEFAULTS, NGRAM_COPY_TAU, copy_tau

SINGLE = ("target_self", "target_delta", "hermes", "openclaw")  # methods that use only the target


def hermes_own_tokens(window: int) -> int:
    """Hermes's own summary length: ``max(2000, min(5% of the context, 10000))`` tokens.

    >>> hermes_own_tokens(64_000), hermes_own_tokens(1_000_000)
    (3200, 10000)
    """
    return max(2000, min(window // 20, 10_000))


def layout(deployment: str, method: str) -> tuple[str, int]:
    """``(simulator deployment, target TP)`` for ``method`` in ``deployment``.

    >>> layout("two-gpu-equal", "target_self"), layout("two-gpu-equal", "speccompact")
    (('two-gpu', 2), ('two-gpu', 1))
    >>> layout("two-gpu-tp2-colocated", "speccompact")
    ('two-gpu-tp2-colocated', 2)
    """
    if deployment in ("two-gpu-equal", "two-gpu-tp2-colocated"):
        if method in SINGLE:
            return "two-gpu", 2
        return ("two-gpu", 1) if deployment == "two-gpu-equal" else (deployment, 2)
    if deployment not in ("one-gpu", "two-gpu"):
        raise ValueError(f"unknown session deployment {deployment!r}")
    return deployment, 1


def held(sim_deployment: str, target_tp: int) -> dict[str, int]:
    """GPUs one pass of each server holds (device-seconds).

    >>> held("two-gpu-tp2-colocated", 2), held("one-gpu", 1)
    ({'target': 2, 'drafter': 2}, {'target': 1, 'drafter': 1})
    """
    shared_pair = sim_deployment == "two-gpu-tp2-colocated"
    return {"target": target_tp, "drafter": 2 if shared_pair else 1}


def target_spec(algorithm: str, model: str, hold: float | None = None):
    """The target server's speculative decoding for a session label (None: off; ``hold``: ngram-copy-h's h)."""
    from sgl_speccompact.core.specdecode import make
    from .latency import server_spec

    if algorithm == "ngram-copy":
        return make("NGRAM", model, tau=NGRAM_COPY_TAU)
    if algorithm == "ngram-copy-h":
        return make("NGRAM", model, tau=copy_tau(hold))
    return server_spec(algorithm, model, lora=False)[0]


def copy_speed(algorithm: str, workload, first: bool) -> float | None:
    """NGRAM's tokens per step for one compaction on a copying target (None: ``algorithm`` does not copy).

    ``first``: the session's first compaction, with no previous summary in its
    prompt: nothing to copy, NGRAM's plain tau.  Later ones: ``ngram-copy`` at
    its stated :data:`NGRAM_COPY_TAU`; ``ngram-copy-h`` at :func:`copy_tau` of
    the copied share, the share of the true summary's tokens the previous one
    holds (``workload.copied_share()``).

    >>> from types import SimpleNamespace as N
    >>> wl = N(copied_share=lambda: 0.6)
    >>> copy_speed("eagle3", wl, False), copy_speed("ngram-copy-h", wl, True), round(copy_speed("ngram-copy-h", wl, False), 2)
    (None, 1.8, 2.69)
    >>> copy_speed("ngram-copy", wl, True), copy_speed("ngram-copy", wl, False)
    (1.8, 4.0)
    """
    if algorithm not in ("ngram-copy", "ngram-copy-h"):
        return None
    if first:
        return DEFAULTS["NGRAM"]["tau"]
    return NGRAM_COPY_TAU if algorithm == "ngram-copy" else copy_tau(workload.copied_share())


def retune(sim, tau: float) -> None:
    """Set the simulated target's NGRAM acceptance to ``tau`` for the next compaction."""
    from dataclasses import replace

    srv = sim.servers["target"]
    srv.cost = replace(srv.cost, spec=replace(srv.cost.spec, tau=tau))
    srv.sched.spec = srv.cost.spec


def tool_times(paths: list[str]) -> list[float]:
    """Recorded tool execution times (s) of the SWE-agent trajectories among ``paths``, in order."""
    out = []
    for p in paths:
        if not p.endswith(".traj") or not Path(p).is_file():
            continue
        try:
            steps = json.loads(Path(p).read_text()).get("trajectory") or []
        except (OSError, ValueError):
            continue
        out += [float(s["execution_time"]) for s in steps if isinstance(s.get("execution_time"), (int, float))]
    return out


def pct(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank) of ``values``.

    >>> pct([1, 2, 3, 4], 0.5), pct([1, 2, 3, 4], 0.95), pct([], 0.5)
    (2, 4, None)
    """
    if not values:
        return None
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))]


CELL = ("model_pair", "deployment", "speculative", "label", "mode", "priority", "yield_s", "hold", "false_accept",
        "false_reject", "evidence_catch")
UNSET = {"false_accept": 0.0, "false_reject": 0.0, "evidence_catch": 0.0}  # a row written before the field existed: its value then


def share(part: int, whole: int) -> float | None:
    """``part / whole``, None when there is no whole.

    >>> share(1, 4), share(0, 0)
    (0.25, None)
    """
    return part / whole if whole else None


def summarize(rows: list[dict]) -> list[dict]:
    """Per cell (pair, deployment, speculative decoding, method, mode): stalls, device-seconds, spread."""
    cells: dict = {}
    for r in rows:
        cells.setdefault(tuple(r.get(k, UNSET.get(k)) for k in CELL), []).append(r)
    out = []
    for key, rs in cells.items():
        stalls = [s for r in rs for s in r["stalls_s"]]
        seed_med = [r["stall_median_s"] for r in rs if r["stall_median_s"] is not None]
        dev = [r["device_s"] for r in rs]
        slow = [s for r in rs for s in r["agent_slowdowns"]]
        lines = sum(c["lines"] for r in rs for c in r["records"] if not c["aborted"])
        kept = sum(c["carried_lines"] for r in rs for c in r["records"] if not c["aborted"])
        per = [r["device_s"] / r["compactions"] for r in rs if r["compactions"]]
        facts = sum(c.get("held_facts", 0) for r in rs for c in r["records"] if not c["aborted"])
        retained = sum(c.get("retained_facts", 0) for r in rs for c in r["records"] if not c["aborted"])
        later = [c for r in rs for c in r["records"][1:] if not c["aborted"]]  # compactions with a previous one
        later_lines = sum(c.get("content_lines", c["lines"]) for c in later)
        previous = sum(c.get("previous_facts", 0) for c in later)
        done = [[c for c in r["records"] if not c["aborted"]] for r in rs]  # per session
        truth = [share(sum(c.get("true_kept", 0) for c in d), sum(c.get("true_lines", 0) for c in d)) for d in done]
        truth = [x for x in truth if x is not None]
        every = [c for d in done for c in d]
        out.append({**dict(zip(CELL, key)), "sessions": len(rs), "compactions": sum(r["compactions"] for r in rs),
                    "aborted": sum(r["aborted"] for r in rs), "stall_p50_s": pct(stalls, 0.5),
                    "stall_p95_s": pct(stalls, 0.95), "seed_median_min_s": min(seed_med, default=None),
                    "seed_median_max_s": max(seed_med, default=None),
                    "device_s_median": statistics.median(dev) if dev else None, "device_s_min": min(dev, default=None),
                    "device_s_max": max(dev, default=None), "carried_share": kept / lines if lines else 0.0,
                    "agent_slowdown_median": statistics.median(slow) if slow else None,
                    "agent_slowdown_max": max(slow, default=None),
                    "over_window": sum(r["over_window"] for r in rs),
                    "compactions_min": min((r["compactions"] for r in rs), default=0),
                    "device_s_per_compaction_median": statistics.median(per) if per else None,
                    "device_s_per_compaction_min": min(per, default=None),
                    "device_s_per_compaction_max": max(per, default=None),
                    "carried_share_later": (sum(c["carried_lines"] for c in later) / later_lines
                                            if later_lines else 0.0),  # of the content lines
                    "held_realized": sum(c.get("held_facts", 0) for c in later) / previous if previous else None,
                    "retention": retained / facts if facts else None,
                    # of the true summary, what each compaction keeps; of its lines, those that do not hold
                    "truth_retention": share(sum(c.get("true_kept", 0) for c in every),
                                             sum(c.get("true_lines", 0) for c in every)),
                    "truth_retention_min": min(truth, default=None), "truth_retention_max": max(truth, default=None),
                    "staleness": share(sum(c.get("untrue_lines", 0) for c in every),
                                       sum(c.get("text_lines", 0) for c in every)),
                    "untrue_per_compaction": share(sum(c.get("untrue_lines", 0) for c in every), len(every))})
    return out


def format_summary(summary: list[dict], note: str) -> str:
    """The per-cell table (Markdown), SIMULATED."""
    def s(x):
        return "-" if x is None else (f"{x:.3f}" if abs(x) < 1 else f"{x:.2f}")

    out = [f"SIMULATED sessions per cell (stalls over every compaction of every seed; {note})",
           "| model pair | deployment | target spec | method | mode | agent priority | sessions | stall p50 s | "
           "stall p95 s | seed medians min-max s | device-s / session (min-max) | carried share | "
           "agent slowdown median (max) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in summary:
        prio = "-" if c["mode"] == "sync" else ("higher" if c["priority"] else "equal (fcfs)")
        prio += f"; prepare yields <= {c['yield_s']:g} s" if c.get("yield_s") else ""
        out.append(f"| {c['model_pair'].split(':')[0]} | {c['deployment']} | {c['speculative']} | {c['label']} | "
                   f"{c['mode']} | {prio} | {c['sessions']} | {s(c['stall_p50_s'])} | {s(c['stall_p95_s'])} | "
                   f"{s(c['seed_median_min_s'])}-{s(c['seed_median_max_s'])} | {s(c['device_s_median'])} "
                   f"({s(c['device_s_min'])}-{s(c['device_s_max'])}) | {c['carried_share']:.2f} | "
                   f"{s(c['agent_slowdown_median'])} ({s(c['agent_slowdown_max'])}) |")
    out.append("agent slowdown: the agent's decode rate with no compaction running / with a prepare running, "
               "on the same turns from the same caches (ahead of time only; 1.00 = no slowdown)")
    return "\n".join(out)
