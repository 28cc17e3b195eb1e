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
  the held share ``h`` of an evolving summary (:func:`copy_tau`): the held
  lines copy from the previous summary in the prompt, the new ones do not.
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
from typing import Callable

from sgl_speccompact.core.specdecode import NGRAM_COPY_TAU, copy_tau
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


CELL = ("model_pair", "deployment", "speculative", "label", "mode", "priority", "yield_s", "hold")


def summarize(rows: list[dict]) -> list[dict]:
    """Per cell (pair, deployment, speculative decoding, method, mode): stalls, device-seconds, spread."""
    cells: dict = {}
    for r in rows:
        cells.setdefault(tuple(r.get(k) for k in CELL), []).append(r)
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
                    "retention": retained / facts if facts else None})
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


RACE_ROWS = (  # (label, speculative, row name) of the evolving-session race, in table order
    ("speccompact", "eagle3", "SpecCompact: carried lines judged, new ones drafted (EAGLE3 target)"),
    ("target_self", "eagle3", "Target-self, previous summary in the prompt (EAGLE3)"),
    ("target_self", "ngram-copy-h", "Target-self, previous summary, NGRAM copy"),
    ("target_delta", "eagle3", "Target-delta: carried lines judged and copied, new ones written (EAGLE3)"),
    ("target_delta", "ngram", "Target-delta, NGRAM (no copy: it decodes only new lines)"),
    ("hermes@2048", "eagle3", "Hermes-style iterative update @2048 (EAGLE3)"),
    ("hermes@2048", "ngram-copy-h", "Hermes-style iterative update @2048, NGRAM copy"),
    ("openclaw", "eagle3", "OpenClaw-style, previous summary in the prompt (EAGLE3)"),
    ("openclaw", "ngram-copy-h", "OpenClaw-style, previous summary, NGRAM copy"),
)
AUTO_HISTORY_TAIL = 1.5  # auto's history: the trigger prompt less this many tails (the middle the policy cuts)


def auto_row(report: dict) -> dict:
    """Per h and target speculative decoding: the method ``auto`` picks on the race's deployment (two GPUs,
    equal hardware), told the held share the session's compactions realized (what the session remembers),
    for the median trigger prompt less the tail: ``{(h, spec): {"method", "held", "history_tokens"}}``."""
    from sgl_speccompact.methods.auto import Deployment, choose

    target, drafter = report["conditions"]["model_pairs"][0].split(":")
    tail = report["policy"]["tail_tokens"]
    prompts = [rec["prompt_tokens"] for r in report["rows"] for rec in r["records"]]
    history = int(statistics.median(prompts) - AUTO_HISTORY_TAIL * tail)
    out = {}
    for c in report["summary"]:
        if c["label"] != "speccompact":
            continue
        held = c.get("held_realized") if c["hold"] else None
        for spec, algo in (("eagle3", "eagle3"), ("ngram-copy-h", "ngram")):
            dep = Deployment.named(target=target, drafter=drafter, gpus=2, speculative=algo, equal_hardware=True)
            pick = choose(dep, history, report["conditions"]["p_accept"], held=held)
            out[(c["hold"], spec)] = {"method": pick.method, "held": held, "history_tokens": history}
    return out


def _s(x) -> str:
    """Seconds or a ratio for a race table (three digits under 1).

    >>> _s(None), _s(0.5834), _s(1.2449)
    ('-', '0.583', '1.24')
    """
    return "-" if x is None else (f"{x:.3f}" if abs(x) < 1 else f"{x:.2f}")


DEVICE_S = ("device-seconds per compaction, median of the 8 seeds' session means [min-max]",
            lambda c: f"{_s(c['device_s_per_compaction_median'])} [{_s(c['device_s_per_compaction_min'])}-"
                      f"{_s(c['device_s_per_compaction_max'])}]")  # a race table: its title and its cell


def by_hold(report: dict, tables: list[tuple[str, Callable[[dict], str]]]) -> list[str]:
    """Markdown tables of one model pair's cells: one row per :data:`RACE_ROWS` method, one column per h."""
    cells = {(c["label"], c["speculative"], c["hold"]): c for c in report["summary"]}
    holds = sorted({c["hold"] for c in report["summary"]})
    pair = report["conditions"]["model_pairs"][0].split(":")[0]
    out = []
    for title, cell in tables:
        out += [f"**{pair}: {title}** (SIMULATED)", "", "| method | " + " | ".join(f"h = {h:g}" for h in holds)
                + " |", "|---|" + "---|" * len(holds)]
        for label, spec, name in RACE_ROWS:
            row = [cells.get((label, spec, h)) for h in holds]
            if any(row):
                out.append(f"| {name} | " + " | ".join(cell(c) if c else "-" for c in row) + " |")
        out.append("")
    return out


def ahead_tables(report: dict) -> str:
    """The evolving-session race ahead of time (Markdown, SIMULATED): per h, device-seconds per compaction,
    the stall at the trigger and the agent's slowdown while a prepare runs."""
    return "\n".join(by_hold(report, [
        DEVICE_S,
        ("stall s at the trigger, p50 over every compaction [seed medians min-max]",
         lambda c: f"{_s(c['stall_p50_s'])} [{_s(c['seed_median_min_s'])}-{_s(c['seed_median_max_s'])}]"),
        ("agent slowdown while a prepare runs, median (max) / carried share of later compactions' content lines",
         lambda c: f"{_s(c['agent_slowdown_median'])} ({_s(c['agent_slowdown_max'])}) / "
                   f"{c['carried_share_later']:.2f}"),
    ])).rstrip("\n")


def race_tables(report: dict) -> str:
    """The evolving-session race of one model pair (Markdown, SIMULATED): per h, every method's device-seconds
    per compaction, sync stall, carried share and retention, the crossover and auto's pick."""
    cells = {(c["label"], c["speculative"], c["hold"]): c for c in report["summary"]}
    holds = sorted({c["hold"] for c in report["summary"]})
    out = by_hold(report, [
        DEVICE_S,
        ("sync stall s, p50 over every compaction [seed medians min-max]",
         lambda c: f"{_s(c['stall_p50_s'])} [{_s(c['seed_median_min_s'])}-{_s(c['seed_median_max_s'])}]"),
        ("held share realized / carried share of later compactions' content lines / retention of what held",
         lambda c: ("-" if c.get("held_realized") is None else f"{c['held_realized']:.2f}")
         + f" / {c['carried_share_later']:.2f} / "
         + ("not modelled" if c["label"].startswith("hermes") or c["retention"] is None else f"{c['retention']:.2f}")),
    ])
    best, picks = {}, auto_row(report)
    for h in holds:
        got = {(lab, sp): cells[(lab, sp, h)]["device_s_per_compaction_median"] for lab, sp, _ in RACE_ROWS
               if (lab, sp, h) in cells}
        best[h] = min(got, key=got.get)
        spec = got.get(("speccompact", "eagle3"))
        rival = min(v for k, v in got.items() if k[0] != "speccompact")
        autos = []
        for algo in ("eagle3", "ngram-copy-h"):
            pick = picks.get((h, algo), {})
            label = {"hermes": "hermes@2048"}.get(pick.get("method"), pick.get("method"))
            # on the NGRAM target Target-delta decodes no copied text (plain NGRAM); SpecCompact raced on EAGLE3 only
            mine = got.get((label, algo)) or got.get((label, "ngram" if algo != "eagle3" else algo)) \
                or got.get((label, "eagle3"))
            autos.append(f"on the {algo} target {pick.get('method')}, {_s(mine)} = {mine / got[best[h]]:.2f}x")
        held = picks.get((h, "eagle3"), {}).get("held")
        out.append(f"- h = {h:g}: fewest device-seconds {best[h][0]} ({best[h][1]}) {_s(got[best[h]])}; SpecCompact "
                   f"{_s(spec)} = {spec / rival:.2f}x the best competitor's {_s(rival)}; auto (told held share "
                   f"{_s(held)}) picks " + "; ".join(autos) + " the fewest")
    for name, label in (("SpecCompact", "speccompact"), ("Target-delta", "target_delta")):  # the delta methods
        wins = [h for h in holds if best[h][0] == label]
        out.append(f"- crossover (the h from which {name} has the fewest device-seconds per compaction): "
                   f"{f'h = {wins[0]:g}' if wins else 'none in 0-0.9'}"
                   + (f" (fewest at h = {', '.join(f'{h:g}' for h in wins)})" if wins else ""))
    return "\n".join(out)
