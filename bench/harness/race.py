"""The evolving-session race's tables and what they are computed from (SIMULATED; Markdown).

A race report is ``bench/session.py --hold ...``: one cell per method, the
target's speculative decoding, held share ``h`` and judge error pair (false
accept, false reject).  ``bench/regenerate.py --tables`` prints these tables
from the committed JSONs, and ``bench/figures.py`` plots the same numbers:

* :func:`race_tables`: per ``h``, every method's device-seconds per
  compaction, sync stall, carried share, retention of the true summary and
  staleness; the fewest, each delta method's crossover, and ``auto`` raced
  on what the service observes (:func:`auto_race`);
* :func:`ahead_tables`: the race ahead of time;
* :func:`judge_tables`: the race per judge setting (false accept, false
  reject, and the evidence check's catch rate: 0 without it): the judging
  methods' device-seconds, retention and staleness, and Target-delta's
  crossover by ``h`` with the seed spread of its ratio to the best other
  method (:func:`crossover`).

Seeds are counted from the rows, so a table says what was run.
"""

from __future__ import annotations

import statistics
from typing import Callable

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
JUDGING = ("speccompact", "target_delta")  # the labels whose rows move with the judge's errors
AUTO_HISTORY_TAIL = 1.5  # auto's history: the trigger prompt less this many tails (the middle the policy cuts)
# per target (the race's speculative label): auto's algorithm there, and the row each method it may pick is priced
# from; on the NGRAM target Target-delta decodes no copied text (plain NGRAM) and SpecCompact was raced on EAGLE3 only
AUTO_TARGETS = {
    "eagle3": ("eagle3", {"speccompact": ("speccompact", "eagle3"), "target_self": ("target_self", "eagle3"),
                          "target_delta": ("target_delta", "eagle3"), "hermes": ("hermes@2048", "eagle3"),
                          "openclaw": ("openclaw", "eagle3")}),
    "ngram-copy-h": ("ngram", {"speccompact": ("speccompact", "eagle3"), "target_self": ("target_self", "ngram-copy-h"),
                               "target_delta": ("target_delta", "ngram"), "hermes": ("hermes@2048", "ngram-copy-h"),
                               "openclaw": ("openclaw", "ngram-copy-h")}),
}


def _s(x) -> str:
    """Seconds or a ratio for a race table (three digits under 1).

    >>> _s(None), _s(0.5834), _s(1.2449)
    ('-', '0.583', '1.24')
    """
    return "-" if x is None else (f"{x:.3f}" if abs(x) < 1 else f"{x:.2f}")


def seeds_label(report: dict) -> str:
    """The seeds a report's rows ran, in words.

    >>> seeds_label({"rows": [{"seed": 1}, {"seed": 0}]}), seeds_label({"rows": [{"seed": 3}]})
    ('2 seeds (0-1)', '1 seed (3)')
    """
    got = sorted({r["seed"] for r in report["rows"]})
    span = f"{got[0]}-{got[-1]}" if len(got) > 1 and got == list(range(got[0], got[-1] + 1)) \
        else ", ".join(map(str, got))
    return f"{len(got)} seed{'s' if len(got) != 1 else ''} ({span})"


NO_ERRORS = (0.0, 0.0, 0.0)  # the perfect judge, no evidence check: a report from before the settings existed


def setting(x: dict) -> tuple[float, float, float]:
    """A row's or cell's judge setting: ``(false accept, false reject, evidence check's catch rate)``.

    >>> setting({"false_accept": 0.05, "false_reject": 0.05}), setting({"evidence_catch": 0.3})
    ((0.05, 0.05, 0.0), (0.0, 0.0, 0.3))
    """
    return (x.get("false_accept") or 0.0, x.get("false_reject") or 0.0, x.get("evidence_catch") or 0.0)


def judge_label(errors: tuple[float, ...]) -> str:
    """A judge setting in words: the error pair, and the evidence check's catch rate when it ran.

    >>> judge_label((0.15, 0.15, 0.0)), judge_label((0.15, 0.15, 21 / 62))
    ('0.15, 0.15', '0.15, 0.15 + evidence check 0.34')
    """
    base = f"{errors[0]:g}, {errors[1]:g}"
    return base + (f" + evidence check {errors[2]:.2f}" if len(errors) > 2 and errors[2] else "")


def errors_of(report: dict) -> list[tuple[float, float, float]]:
    """The judge settings (:func:`setting`) of a report's cells, in order (:data:`NO_ERRORS` before they existed)."""
    return list(dict.fromkeys(setting(c) for c in report["summary"]))


def cells(report: dict, errors: tuple[float, float, float] = NO_ERRORS) -> dict:
    """``{(label, speculative, h): cell}`` at one judge setting; a method that never judges at any setting."""
    out = {}
    for c in report["summary"]:
        at = setting(c)
        key = (c["label"], c["speculative"], c["hold"])
        if at == errors or (c["label"] not in JUDGING and key not in out):
            out[key] = c
    return out


def per_seed(report: dict, label: str, spec: str, hold: float, errors: tuple[float, float, float]) -> dict[int, float]:
    """``{seed: device-seconds per compaction}`` of one race row (a method that never judges: any setting)."""
    out = {}
    for r in report["rows"]:
        at = setting(r)
        if (r["label"], r["speculative"], r.get("hold")) == (label, spec, hold) and r["compactions"] \
                and (at == errors or label not in JUDGING) and r.get("mode", "sync") == "sync":
            out.setdefault(r["seed"], r["device_s"] / r["compactions"])
    return out


def device_s(report: dict) -> tuple[str, Callable[[dict], str]]:
    """A race table's device-seconds title (the seeds that ran) and its cell."""
    return (f"device-seconds per compaction, median of the {seeds_label(report)} session means [min-max]",
            lambda c: f"{_s(c['device_s_per_compaction_median'])} [{_s(c['device_s_per_compaction_min'])}-"
                      f"{_s(c['device_s_per_compaction_max'])}]")


def truth_cell(c: dict) -> str:
    """Retention of the true summary [seed min-max] / staleness, or why it is not shown."""
    if c["label"].startswith("hermes"):
        return "not modelled"  # Hermes-style's simulated text is length-matched filler
    if c.get("truth_retention") is None:
        return "-"
    return (f"{c['truth_retention']:.2f} [{c['truth_retention_min']:.2f}-{c['truth_retention_max']:.2f}] / "
            f"{c['staleness']:.3f}")


def by_hold(report: dict, tables: list[tuple[str, Callable[[dict], str]]],
            errors: tuple[float, float, float] = NO_ERRORS) -> list[str]:
    """Markdown tables of one model pair's cells: one row per :data:`RACE_ROWS` method, one column per h."""
    got = cells(report, errors)
    holds = sorted({c["hold"] for c in report["summary"]})
    pair = report["conditions"]["model_pairs"][0].split(":")[0]
    out = []
    for title, cell in tables:
        out += [f"**{pair}: {title}** (SIMULATED)", "", "| method | " + " | ".join(f"h = {h:g}" for h in holds)
                + " |", "|---|" + "---|" * len(holds)]
        for label, spec, name in RACE_ROWS:
            row = [got.get((label, spec, h)) for h in holds]
            if any(row):
                out.append(f"| {name} | " + " | ".join(cell(c) if c else "-" for c in row) + " |")
        out.append("")
    return out


def ahead_tables(report: dict) -> str:
    """The evolving-session race ahead of time (Markdown, SIMULATED): per h, device-seconds per compaction,
    the stall at the trigger and the agent's slowdown while a prepare runs, at the run's judge setting."""
    return "\n".join(by_hold(report, [
        device_s(report),
        ("stall s at the trigger, p50 over every compaction [seed medians min-max]",
         lambda c: f"{_s(c['stall_p50_s'])} [{_s(c['seed_median_min_s'])}-{_s(c['seed_median_max_s'])}]"),
        ("agent slowdown while a prepare runs, median (max) / carried share of later compactions' content lines",
         lambda c: f"{_s(c['agent_slowdown_median'])} ({_s(c['agent_slowdown_max'])}) / "
                   f"{c['carried_share_later']:.2f}"),
    ], errors_of(report)[0])).rstrip("\n")


def auto_race(report: dict, errors: tuple[float, float, float] = NO_ERRORS) -> dict:
    """``auto`` raced on what the service observes, per h and target: ``{(h, target): {...}}``.

    Each seed's session is walked compaction by compaction.  Compaction k is
    picked by the cost model (``methods/auto.py``, the race's deployment: two
    GPUs, equal hardware) for that compaction's trigger prompt less
    :data:`AUTO_HISTORY_TAIL` tails, told the share of the previous summary
    that the session's previous compaction kept (``observed_held`` of the
    method it picked then: None until a compaction has had a previous summary),
    never the true held share; it costs that method's device-seconds for
    compaction k of the same seed.  Returns per cell ``per_compaction`` (one
    value per seed) and ``picks`` (method -> compactions).
    """
    from collections import Counter
    from dataclasses import replace

    from sgl_speccompact.methods.auto import Deployment, choose

    target, drafter = report["conditions"]["model_pairs"][0].split(":")
    tail, p = report["policy"]["tail_tokens"], report["conditions"]["p_accept"]
    hermes = (report["conditions"].get("hermes_tokens") or [2048])[0]
    rows = {}
    for r in report["rows"]:
        at = setting(r)
        if r.get("mode", "sync") == "sync" and (at == errors or r["label"] not in JUDGING):
            rows.setdefault((r["label"], r["speculative"], r.get("hold"), r["seed"]), r)
    holds = sorted({c["hold"] for c in report["summary"]})
    seeds = sorted({r["seed"] for r in report["rows"]})
    out = {}
    for h in holds:
        for race, (algo, priced) in AUTO_TARGETS.items():
            dep = replace(Deployment.named(target=target, drafter=drafter, gpus=2, speculative=algo,
                                           equal_hardware=True), hermes_tokens=hermes)
            per, picks = [], Counter()
            for seed in seeds:
                runs = {m: rows[(*row, h, seed)] for m, row in priced.items() if (*row, h, seed) in rows}
                if not runs:
                    continue
                n = min(len(r["records"]) for r in runs.values())
                spent, seen = 0.0, None
                for k in range(n):
                    prompt = next(iter(runs.values()))["records"][k]["prompt_tokens"]
                    pick = choose(dep, max(int(prompt - AUTO_HISTORY_TAIL * tail), 0), p, methods=tuple(runs),
                                  held=seen).method
                    rec = runs[pick]["records"][k]
                    spent, seen = spent + rec["device_s"], rec.get("observed_held")
                    picks[pick] += 1
                if n:
                    per.append(spent / n)
            out[(h, race)] = {"per_compaction": per, "picks": dict(picks)}
    return out


def crossover(report: dict, delta: str, errors: tuple[float, float, float] = NO_ERRORS) -> dict:
    """Per h: the fewest device-seconds per compaction, and ``delta``'s (a label on EAGLE3) against the best other.

    Returns ``{h: {"fewest": (label, spec), "ratio": median ratio, "ratio_min", "ratio_max"}}``;
    the ratio is ``delta``'s median over the best other method's (the fewest among the methods that are not
    ``delta``), its spread the per-seed ratio of the two on the same seed.
    """
    got = cells(report, errors)
    out = {}
    for h in sorted({c["hold"] for c in report["summary"]}):
        here = {(lab, sp): got[(lab, sp, h)]["device_s_per_compaction_median"] for lab, sp, _ in RACE_ROWS
                if (lab, sp, h) in got}
        if (delta, "eagle3") not in here:
            continue
        rival = min((k for k in here if k[0] != delta), key=here.get, default=None)
        mine, theirs = per_seed(report, delta, "eagle3", h, errors), per_seed(report, *rival, h, errors) \
            if rival else {}
        ratios = [mine[s] / theirs[s] for s in mine if s in theirs]
        out[h] = {"fewest": min(here, key=here.get), "rival": rival,
                  "ratio": here[(delta, "eagle3")] / here[rival] if rival else None,
                  "ratio_min": min(ratios, default=None), "ratio_max": max(ratios, default=None)}
    return out


def short(label: str, spec: str) -> str:
    """A race row's short name.

    >>> short("target_self", "ngram-copy-h"), short("target_delta", "eagle3")
    ('Target-self (NGRAM copy)', 'Target-delta (EAGLE3)')
    """
    names = {"speccompact": "SpecCompact", "target_self": "Target-self", "target_delta": "Target-delta",
             "hermes@2048": "Hermes-style @2048", "openclaw": "OpenClaw-style"}
    specs = {"eagle3": "EAGLE3", "ngram-copy-h": "NGRAM copy", "ngram": "NGRAM, no copy"}
    return f"{names.get(label, label)} ({specs.get(spec, spec)})"


def first_win(table: dict, delta: str) -> str:
    """The h from which ``delta`` has the fewest device-seconds, in words, from a :func:`crossover` table."""
    wins = [h for h, x in table.items() if x["fewest"][0] == delta]
    if not wins:
        return f"none in {min(table, default=0):g}-{max(table, default=0):g}"
    return f"h = {wins[0]:g} (fewest at h = {', '.join(f'{h:g}' for h in wins)})"


def race_tables(report: dict) -> str:
    """The evolving-session race of one model pair (Markdown, SIMULATED): per h, every method's device-seconds
    per compaction, sync stall, carried share, retention and staleness, the crossover and auto's race."""
    errors = errors_of(report)[0]
    got = cells(report, errors)
    holds = sorted({c["hold"] for c in report["summary"]})
    out = by_hold(report, [
        device_s(report),
        ("sync stall s, p50 over every compaction [seed medians min-max]",
         lambda c: f"{_s(c['stall_p50_s'])} [{_s(c['seed_median_min_s'])}-{_s(c['seed_median_max_s'])}]"),
        ("held share realized / carried share of later compactions' content lines / retention of the true "
         "summary [seed min-max] / staleness (lines kept that do not hold)",
         lambda c: ("-" if c.get("held_realized") is None else f"{c['held_realized']:.2f}")
         + f" / {c['carried_share_later']:.2f} / " + truth_cell(c)),
    ], errors)
    autos = auto_race(report, errors)
    for h in holds:
        here = {(lab, sp): got[(lab, sp, h)]["device_s_per_compaction_median"] for lab, sp, _ in RACE_ROWS
                if (lab, sp, h) in got}
        best = min(here, key=here.get)
        spec = here.get(("speccompact", "eagle3"))
        rival = min((v for k, v in here.items() if k[0] != "speccompact"), default=None)
        line = f"- h = {h:g}: fewest device-seconds {best[0]} ({best[1]}) {_s(here[best])}"
        if spec is not None and rival:
            line += f"; SpecCompact {_s(spec)} = {spec / rival:.2f}x the best competitor's {_s(rival)}"
        parts = []
        for race in AUTO_TARGETS:
            a = autos.get((h, race), {})
            if a.get("per_compaction"):
                med = statistics.median(a["per_compaction"])
                picks = ", ".join(f"{m} x{n}" for m, n in sorted(a["picks"].items()))
                parts.append(f"on the {race} target {_s(med)} [{_s(min(a['per_compaction']))}-"
                             f"{_s(max(a['per_compaction']))}] = {med / here[best]:.2f}x ({picks})")
        if parts:
            line += "; auto on the share it observed at the previous compaction: " + "; ".join(parts) + \
                " of the fewest"
        out.append(line)
    for name, label in (("SpecCompact", "speccompact"), ("Target-delta", "target_delta")):  # the delta methods
        if any(k[0] == label for k in got):
            out.append(f"- crossover (the h from which {name} has the fewest device-seconds per compaction): "
                       + first_win(crossover(report, label, errors), label))
    return "\n".join(out)


def judge_tables(report: dict) -> str:
    """The race per judge setting (Markdown, SIMULATED): the judging methods' device-seconds, retention and
    staleness per setting and h (the error pair, with and without the evidence check where both ran), the
    methods that never judge once, and the crossover by h per setting."""
    pairs = errors_of(report)
    holds = sorted({c["hold"] for c in report["summary"]})
    who = report["conditions"]["model_pairs"][0].split(":")[0]
    cond = report["conditions"]
    head = ("| method | judge errors (false accept, false reject) [+ evidence check: share of invented lines it "
            "refuses first] | " + " | ".join(f"h = {h:g}" for h in holds) + " |")
    rule = "|---|---|" + "---|" * len(holds)
    setting = (f"held lines {cond.get('held_positions', 'first')} in their slot, a writer repeats a carried line it "
               f"passes at rate {cond.get('repeat', 0.0):g}")
    out = []
    for title, cell in (device_s(report), ("retention of the true summary [seed min-max] / staleness", truth_cell)):
        out += [f"**{who}: {title}; {setting}** (SIMULATED)", "", head, rule]
        for label, spec, name in RACE_ROWS:
            if label in JUDGING:
                for e in pairs:
                    got = cells(report, e)
                    row = [got.get((label, spec, h)) for h in holds]
                    if any(row):
                        out.append(f"| {name} | {judge_label(e)} | "
                                   + " | ".join(cell(c) if c else "-" for c in row) + " |")
            else:
                got = cells(report, pairs[0])
                row = [got.get((label, spec, h)) for h in holds]
                if any(row):
                    out.append(f"| {name} | never judges | " + " | ".join(cell(c) if c else "-" for c in row) + " |")
        out.append("")
    out += [f"**{who}: the fewest device-seconds per compaction by judge errors, and Target-delta's (EAGLE3) "
            f"beside the best other method's; {seeds_label(report)}** (SIMULATED)", "",
            "| judge errors (false accept, false reject) [+ evidence check] | "
            + " | ".join(f"h = {h:g}" for h in holds)
            + " | crossover: Target-delta | crossover: SpecCompact |", "|---|" + "---|" * (len(holds) + 2)]
    ratios = []
    for e in pairs:
        table, got = crossover(report, "target_delta", e), cells(report, e)
        row = []
        for h in holds:
            x = table.get(h)
            if x is None or x["rival"] is None:
                row.append("-")
                continue
            med = {k: _s(got[(*k, h)]["device_s_per_compaction_median"])
                   for k in (x["fewest"], x["rival"], ("target_delta", "eagle3"))}
            row.append(f"{short(*x['fewest'])} {med[x['fewest']]}; Target-delta {med[('target_delta', 'eagle3')]}"
                       f" vs {short(*x['rival'])} {med[x['rival']]}")
        spec = crossover(report, "speccompact", e)
        out.append(f"| {judge_label(e)} | " + " | ".join(row) + f" | {first_win(table, 'target_delta')} | "
                   f"{first_win(spec, 'speccompact') if spec else '-'} |")
        ratios.append(f"- judge errors {judge_label(e)}: Target-delta over the best other method, median "
                      "[per-seed min-max]: " + "; ".join(
                          f"h = {h:g}: {x['ratio']:.2f}x [{_s(x['ratio_min'])}-{_s(x['ratio_max'])}] vs "
                          f"{short(*x['rival'])}" for h, x in table.items() if x["ratio"] is not None))
        here = {h: min(c["device_s_per_compaction_median"] for k, c in got.items() if k[2] == h) for h in holds}
        autos = auto_race(report, e)
        ratios.append(f"- judge errors {judge_label(e)}: auto on the share it observed at the previous compaction, "
                      "EAGLE3 target: " + "; ".join(
                          f"h = {h:g}: {_s(statistics.median(a['per_compaction']))} = "
                          f"{statistics.median(a['per_compaction']) / here[h]:.2f}x the fewest ("
                          + ", ".join(f"{m} x{n}" for m, n in sorted(a["picks"].items())) + ")"
                          for h in holds if (a := autos.get((h, "eagle3"), {})).get("per_compaction")))
    out += [""] + ratios
    return "\n".join(out)
