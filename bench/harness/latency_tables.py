"""Summaries, speedups, tables and goals of the latency benchmark (its figures are SIMULATED).

A cell's statistic is over every (draw, history) run of a method: median,
min and max of the end-to-end, and the median of its per-run speedups
against each reference on the same run (same draw, history, cell).
"""

from __future__ import annotations

import statistics

from .latency_cases import PARTS, SESSION_NOTE, WAIT_PARTS

CELL = ("model_pair", "speculative", "deployment", "p_accept")
# The goals (issue "Race the fair field"), checked in equal-GPU deployments with speculative decoding on:
GOALS = (("qwen3-32b", "speccompact", "target_self", 1.5), ("qwen3-8b", "auto", "hermes@1200", 5.0),
         ("qwen3-32b", "auto", "hermes@1200", 10.0))
EQUAL_GPU = ("one-gpu", "two-gpu-equal", "two-gpu-tp2-colocated")


def _cell(r: dict) -> tuple:
    return tuple(r.get(k, "none" if k == "speculative" else None) for k in CELL)


def add_speedups(rows: list[dict]) -> None:
    """Speedups = reference e2e / row e2e on the same run (cell, draw, history).

    ``speedups`` maps each reference to it: every Hermes-style label that ran
    (``hermes``, ``hermes@N``, ``hermes@slots``) and ``target_self`` (the
    Target-self row on the row's own layout, else its first one).
    """
    key = lambda r: (*_cell(r), r.get("draw", 0), r["path"])
    hermes, selfs = {}, {}
    for r in rows:
        if not r.get("e2e_s") or r.get("method") == "auto":
            continue
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


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(rows: list[dict]) -> list[dict]:
    """Per cell and case label: median / min / max end-to-end over runs, median speedups and breakdown."""
    out, groups = [], {}
    for r in rows:
        if "e2e_s" in r:
            groups.setdefault((*_cell(r), r.get("label", r["method"])), []).append(r)
    for (*cell, label), rs in groups.items():
        e2e = [r["e2e_s"] for r in rs]
        refs = list(dict.fromkeys(k for r in rs for k in r.get("speedups", {})))
        parts = ({k: statistics.median(r["parts"][k] for r in rs) for k in PARTS if k in rs[0]["parts"]}
                 if rs[0].get("parts") else None)  # a run made before a part existed has none of it
        split = ({k: statistics.median(r["waiting_split"][k] for r in rs) for k in WAIT_PARTS}
                 if rs[0].get("waiting_split") else None)
        first = [r["first_target"] for r in rs if r.get("first_target")]
        picks = sorted({r["pick"] for r in rs if r.get("pick")})
        out.append({**dict(zip(CELL, cell)), "method": rs[0]["method"], "label": label,
                    "layout": rs[0].get("layout"), "hermes_tokens": rs[0].get("hermes_tokens"),
                    "seeds": len({r.get("draw", 0) for r in rs}), "runs": len(rs),
                    "histories": len({r["path"] for r in rs}),
                    "e2e_median_s": statistics.median(e2e), "e2e_min_s": min(e2e), "e2e_max_s": max(e2e),
                    "median_speedups": {k: _median(r["speedups"].get(k) for r in rs) for k in refs},
                    "median_parts_s": parts, "median_waiting_split_s": split,
                    "mean_requests": {s: statistics.fmean(r[s]["requests"] for r in rs) for s in ("target", "drafter")},
                    "mean_tokens": {s: statistics.fmean(r[s]["prompt_tokens"] + r[s]["completion_tokens"]
                                                        for r in rs) for s in ("target", "drafter")},
                    "mean_target_tokens": {k: statistics.fmean(r["target"][k] for r in rs)
                                           for k in ("prompt_tokens", "cached_tokens")},
                    "mean_first_target": {k: _median(f[k] for f in first) for k in ("prompt_tokens", "cached_tokens")}
                    if first else None,
                    "mean_session_s": _median((r.get("session") or {}).get("session_s") for r in rs),
                    "summary_tokens_median": _median(r.get("summary_tokens") for r in rs),
                    "target_speculative": rs[0].get("target_speculative"),
                    "drafter_speculative": rs[0].get("drafter_speculative"),
                    **({"pick": picks[0] if len(picks) == 1 else picks} if picks else {})})
    return out


def auto_check(summary: list[dict]) -> list[dict]:
    """Per cell: auto's median against the fastest method's median (the acceptance rule: within 5%)."""
    out = []
    for cell in dict.fromkeys(_cell(s) for s in summary):
        sub = [s for s in summary if _cell(s) == cell]
        auto = next((s for s in sub if s["method"] == "auto"), None)
        rivals = [s for s in sub if s["method"] not in ("auto",) and not s["label"].startswith("hermes@slots")]
        if auto is None or not rivals:
            continue
        best = min(rivals, key=lambda s: s["e2e_median_s"])
        ratio = auto["e2e_median_s"] / best["e2e_median_s"]
        out.append({**dict(zip(CELL, cell)), "pick": auto.get("pick"), "fastest": best["label"],
                    "auto_median_s": auto["e2e_median_s"], "fastest_median_s": best["e2e_median_s"],
                    "ratio": ratio, "within_5pct": ratio <= 1.05 + 1e-12})
    return out


def goal_rows(summary: list[dict]) -> list[dict]:
    """The goals in equal-GPU deployments with speculative decoding on (median speedups)."""
    out = []
    for s in summary:
        if s["deployment"] not in EQUAL_GPU or s.get("speculative", "none") == "none":
            continue
        target = s["model_pair"].split(":")[0]
        for t, method, ref, goal in GOALS:
            if t != target or s["method"] != method or s["p_accept"] != 0.7 and method == "speccompact":
                continue
            value = (s.get("median_speedups") or {}).get(_ref_label(summary, s, ref))
            out.append({**{k: s[k] for k in CELL}, "method": method, "reference": ref, "speedup": value,
                        "goal": goal, "met": None if value is None else value >= goal})
    return out


def _ref_label(summary: list[dict], s: dict, ref: str) -> str:
    """The label of reference ``ref`` in ``s``'s cell: ``hermes@N`` is the Hermes row that wrote N tokens."""
    if not ref.startswith("hermes@"):
        return ref
    n = int(ref.split("@")[1])
    return next((x["label"] for x in summary if _cell(x) == _cell(s) and x["method"] == "hermes"
                 and x.get("hermes_tokens") == n and x["label"] != "hermes@slots"), ref)


def _title(pair: str) -> str:
    t, d = pair.split(":")
    fix = lambda x: x.replace("qwen3-", "Qwen3-").replace("b", "B")
    return f"{fix(t)} target + {fix(d)} drafter"


def format_tables(summary: list[dict], kind: str = "simulated") -> str:
    """Per (pair, speculative, deployment): median [min-max] e2e and median speedups; critical-path medians."""
    label = "SIMULATED" if kind == "simulated" else "MEASURED"
    out = []
    for grp in dict.fromkeys((s["model_pair"], s.get("speculative"), s["deployment"]) for s in summary):
        cell = [s for s in summary if (s["model_pair"], s.get("speculative"), s["deployment"]) == grp]
        ps = sorted({s["p_accept"] for s in cell}, key=lambda x: (x is None, x))
        n = max(s["seeds"] for s in cell)
        out.append(f"\n{label} end-to-end, deployment {grp[2]}, speculative {grp[1]}, {_title(grp[0])} "
                   f"(median [min-max] over {n} seeds x {max(s['histories'] for s in cell)} histories, s; "
                   "median speedup vs Target-self / vs Hermes-style first length)")
        out.append("| method | " + " | ".join(f"p={p}" for p in ps) + " |")
        out.append("|---" * (len(ps) + 1) + "|")
        for name in dict.fromkeys(s["label"] for s in cell):
            cells = []
            for p in ps:
                s = next((x for x in cell if x["label"] == name and x["p_accept"] == p), None)
                if s is None:
                    cells.append("-")
                    continue
                sp = s["median_speedups"]
                h = next((v for k, v in sp.items() if k.startswith("hermes")), None)
                pick = f" -> {s['pick']}" if s.get("pick") else ""
                cells.append(f"{s['e2e_median_s']:.2f} [{s['e2e_min_s']:.2f}-{s['e2e_max_s']:.2f}] "
                             f"({_x(sp.get('target_self'))} / {_x(h)}){pick}")
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        mid = ps[len(ps) // 2]
        sub = [s for s in cell if s["p_accept"] == mid and s["median_parts_s"]]
        out.append(f"\n{label} critical path, deployment {grp[2]}, speculative {grp[1]}, {_title(grp[0])}, p={mid} "
                   "(median over runs, s)")
        shown = [k for k in PARTS if sub and k in sub[0]["median_parts_s"]]
        out.append("| method | e2e | " + " | ".join(shown) + " | T reqs | D reqs |")
        out.append("|---" * (len(shown) + 4) + "|")
        for s in sub:
            parts = " | ".join(f"{s['median_parts_s'][k]:.2f}" for k in shown)
            out.append(f"| {s['label']} | {s['e2e_median_s']:.2f} | {parts} | {s['mean_requests']['target']:.0f} | "
                       f"{s['mean_requests']['drafter']:.0f} |")
    return "\n".join(out)


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def format_checks(goals: list[dict], checks: list[dict]) -> str:
    """The goal table and auto's within-5% check, both SIMULATED."""
    out = ["\nSIMULATED goals (equal-GPU deployments, speculative decoding on; median speedup over seeds)",
           "| model pair | speculative | deployment | p | method | reference | speedup | goal | met |",
           "|---|---|---|---|---|---|---|---|---|"]
    for g in goals:
        met = "-" if g["met"] is None else ("yes" if g["met"] else "NO")
        out.append(f"| {g['model_pair']} | {g['speculative']} | {g['deployment']} | {g['p_accept']} | {g['method']} | "
                   f"{g['reference']} | {_x(g['speedup'])} | >= {g['goal']:g}x | {met} |")
    out += ["\nSIMULATED auto check (auto's median / fastest method's median; rule: <= 1.05)",
            "| model pair | speculative | deployment | p | pick | fastest | ratio | ok |", "|---|---|---|---|---|---|---|---|"]
    for c in checks:
        out.append(f"| {c['model_pair']} | {c['speculative']} | {c['deployment']} | {c['p_accept']} | {c['pick']} | "
                   f"{c['fastest']} | {c['ratio']:.3f} | {'yes' if c['within_5pct'] else 'NO'} |")
    return "\n".join(out)


def format_cache_table(summary: list[dict]) -> str:
    """Per (pair, deployment, p) and case: the target's cached tokens, e2e and the session's time."""
    out = []
    for cell in dict.fromkeys((s["model_pair"], s["deployment"], s["p_accept"]) for s in summary):
        rows = [s for s in summary if (s["model_pair"], s["deployment"], s["p_accept"]) == cell]
        if not any(s.get("mean_first_target") for s in rows):
            continue
        out.append(f"\nSIMULATED agent session then compaction, deployment {cell[1]}, {cell[0]}, p={cell[2]} "
                   f"(median over {rows[0]['runs']} runs; {SESSION_NOTE})")
        out.append("| method | layout | e2e s | T first req prompt | T first req cached | T prompt total | "
                   "T cached total | session s (not in e2e) |")
        out.append("|---|---|---|---|---|---|---|---|")
        for s in rows:
            f, t = s["mean_first_target"], s["mean_target_tokens"]
            sess = s.get("mean_session_s")
            out.append(f"| {s['label']} | {s['layout']} | {s['e2e_median_s']:.2f} | {f['prompt_tokens']:.0f} | "
                       f"{f['cached_tokens']:.0f} | {t['prompt_tokens']:.0f} | {t['cached_tokens']:.0f} | "
                       f"{'-' if sess is None else f'{sess:.2f}'} |")
    return "\n".join(out)
