#!/usr/bin/env python
"""The documentation's figures, rendered from the committed results JSONs (matplotlib, PNG).

Method: each entry of :data:`FIGURES` reads committed JSONs under
``bench/results`` and plots them into ``docs/benchmarks/figures/<name>.png``,
labelled as its numbers are (SIMULATED: the one-clock simulator; MEASURED
(CPU)).  Renders are byte-stable: the Agg backend, matplotlib's default style
(no user ``matplotlibrc``), no date or software stamp in the PNG.  Each PNG
carries what it plots (``plotted``: the numbers drawn, a digest of this
script and matplotlib's version) in its ``Description`` text chunk, so
``--check`` (and ``python -m bench.regenerate --check``) re-renders every
figure into a temporary folder and names the ones whose data or pixels
differ from the committed PNG.  A figure whose JSON is absent is skipped,
and an absent committed PNG for a figure that can be rendered is stale.

* ``session-race``: the evolving-session race, device-seconds per compaction
  by held share per method, 8B and 32B, the seed spread as bars
  (``session-evolving*.json``; SIMULATED);
* ``session-stall``: the agent-perceived stall of every compaction, sync and
  ahead of time, per method (``session.json``; SIMULATED);
* ``session-judge``: Target-delta over the best other method by held share,
  one line per judge error rate, with the per-seed spread, and the retention
  of the true summary (``session-evolving-judge*.json``; SIMULATED);
* ``judge-label-mass-<name>``: per judge, the label mass (p+ + p-) of every
  judgement and the AUC, from ``bench/results/judge-bench-<name>.json`` (written
  by ``bench/judge_bench.py``) when it
  exists; its label (``MEASURED (CPU)`` or ``SIMULATED``) comes from the
  JSON.  The schema (one file per judge benchmark run)::

      {"benchmark": "judge",
       "label": "MEASURED (CPU)",              # how the numbers were made
       "model": "SmolLM2-135M-Instruct",       # optional: what judged
       "judges": {"<judge name>": {"label_mass": [0.0031, ...],  # p+ + p- per judgement
                                   "auc": 0.61}}}                 # or null

Usage::

    python -m bench.figures            # render every figure into docs/benchmarks/figures
    python -m bench.figures --check    # re-render into a temp folder, compare with the committed PNGs
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Callable

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
FIGURES_DIR = BENCH.parent / "docs" / "benchmarks" / "figures"
LABELS = ("SIMULATED", "MEASURED (CPU)")  # what a figure may say its numbers are
DPI = 100


def _source_digest() -> str:
    """A digest of this script: a figure rendered by other code is not current."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _load(name: str) -> dict | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.is_file() else None


def _round(x, digits: int = 6):
    """Plotted numbers as stored: rounded, so the embedded data reads the same on every machine."""
    if isinstance(x, float):
        return round(x, digits)
    if isinstance(x, (list, tuple)):
        return [_round(v, digits) for v in x]
    if isinstance(x, dict):
        return {k: _round(v, digits) for k, v in x.items()}
    return x


# ---------------------------------------------------------------- the figures

def race_data() -> dict | None:
    """Per model pair and race row: h, the median and the seed min-max of device-seconds per compaction."""
    from bench.harness.race import RACE_ROWS, cells, errors_of, seeds_label, short

    out = {}
    for file in ("session-evolving.json", "session-evolving-32b.json"):
        report = _load(file)
        if report is None:
            continue
        got = cells(report, errors_of(report)[0])
        holds = sorted({c["hold"] for c in report["summary"]})
        rows = {}
        for label, spec, _ in RACE_ROWS:
            here = [got.get((label, spec, h)) for h in holds]
            if any(here):
                rows[short(label, spec)] = [[h, c["device_s_per_compaction_median"], c["device_s_per_compaction_min"],
                                             c["device_s_per_compaction_max"]] for h, c in zip(holds, here) if c]
        out[report["conditions"]["model_pairs"][0].split(":")[0]] = {"seeds": seeds_label(report), "rows": rows,
                                                                     "json": file}
    return out or None


def spread(ax, pts: list, label: str, dodge: float, **kw) -> None:
    """Medians joined by a line, the seed min-max as bars, shifted by ``dodge`` on x so bars do not overlap."""
    x, med, lo, hi = zip(*pts)
    ax.errorbar([v + dodge for v in x], med, yerr=[[m - a for m, a in zip(med, lo)], [b - m for m, b in zip(med, hi)]],
                marker="o", ms=3, capsize=2, lw=1, label=label, **kw)


def race_plot(data: dict, plt) -> object:
    fig, axes = plt.subplots(1, len(data), figsize=(5.6 * len(data) + 2.4, 4.6), squeeze=False)
    for ax, (pair, d) in zip(axes[0], data.items()):
        n = len(d["rows"])
        for i, (name, pts) in enumerate(d["rows"].items()):
            spread(ax, pts, name, 0.012 * (i - (n - 1) / 2), ls="--" if "NGRAM" in name else "-")
        ax.set_yscale("log")
        ax.set_xlabel("held share h")
        ax.set_ylabel("device-seconds per compaction (SIMULATED)")
        ax.set_title(f"{pair}: evolving-session race, {d['seeds']}\nmedian, bars: seed min-max (SIMULATED)",
                     fontsize=9)
        ax.grid(True, which="both", lw=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


MODES = ("sync", "ahead, fcfs", "ahead, agent first")  # how a compaction ran, in the figure's order


def stall_data() -> dict | None:
    """Per method (and deployment where it differs) and mode: every compaction's stall (s) of every seed."""
    report = _load("session.json")
    if report is None:
        return None
    out: dict = {}
    for r in report["rows"]:
        if r.get("reused_from"):
            continue
        mode = MODES[0] if r["mode"] == "sync" else MODES[2 if r["priority"] else 1]
        who = r["label"] + (", co-located" if r["deployment"] == "two-gpu-tp2-colocated" else "")
        out.setdefault(who, {}).setdefault(mode, []).extend(r["stalls_s"])
    return {"methods": out, "seeds": len({r["seed"] for r in report["rows"]})}


def stall_plot(data: dict, plt) -> object:
    fig, ax = plt.subplots(figsize=(9.0, 4.6))
    colors = dict(zip(MODES, ("tab:red", "tab:blue", "tab:green")))
    ticks, names = [], []
    for i, (who, modes) in enumerate(data["methods"].items()):
        for j, mode in enumerate(MODES):
            if mode not in modes:
                continue
            x = i * (len(MODES) + 1) + j
            ax.boxplot([modes[mode]], positions=[x], whis=(0, 100), widths=0.6)
            ax.plot([x] * len(modes[mode]), modes[mode], ".", ms=3, alpha=0.6, color=colors[mode],
                    label=mode if i == 0 else None)
        ticks.append(i * (len(MODES) + 1) + 1)
        names.append(who)
    ax.set_xticks(ticks, names, rotation=30, fontsize=7, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("agent-perceived stall, s (SIMULATED)")
    ax.set_title(f"stall of every compaction, {data['seeds']} seeds, 8B, two GPUs: sync vs ahead of time "
                 "(SIMULATED)", fontsize=9)
    ax.grid(True, axis="y", which="both", lw=0.3)
    ax.legend(fontsize=7)
    return fig


def judge_data() -> dict | None:
    """Per model pair and judge error pair: Target-delta over the best other method per h (median, per-seed
    min-max), and the retention of the true summary of Target-delta and SpecCompact."""
    from bench.harness.race import JUDGING, cells, crossover, errors_of, seeds_label

    out = {}
    for file in ("session-evolving-judge.json", "session-evolving-judge-32b.json"):
        report = _load(file)
        if report is None:
            continue
        per = {}
        for e in errors_of(report):
            table, got = crossover(report, "target_delta", e), cells(report, e)
            per[f"{e[0]:g}/{e[1]:g}"] = {
                "ratio": [[h, x["ratio"], x["ratio_min"], x["ratio_max"]] for h, x in table.items() if x["ratio"]],
                "retention": {label: [[h, c["truth_retention"]] for (lab, sp, h), c in sorted(got.items())
                                      if lab == label and sp == "eagle3" and c.get("truth_retention") is not None]
                              for label in ("target_delta", "speccompact")}}
        never = [c["truth_retention"] for c in report["summary"]
                 if c["label"] not in JUDGING and c.get("truth_retention") is not None]
        out[report["conditions"]["model_pairs"][0].split(":")[0]] = {
            "seeds": seeds_label(report), "errors": per, "never_judging": [min(never), max(never)] if never else None}
    return out or None


def judge_plot(data: dict, plt) -> object:
    fig, axes = plt.subplots(2, len(data), figsize=(7.6 * len(data), 8.0), squeeze=False)
    for col, (pair, d) in enumerate(data.items()):
        top, bottom = axes[0][col], axes[1][col]
        for i, (e, x) in enumerate(d["errors"].items()):
            color = f"C{i}"  # one color per judge error pair, in both panels
            if x["ratio"]:
                spread(top, x["ratio"], f"judge errors {e}", 0.01 * (i - 1.5), color=color)
            for label, style in (("target_delta", "-"), ("speccompact", ":")):
                pts = x["retention"].get(label) or []
                if pts:
                    bottom.plot(*zip(*pts), style, marker="o", ms=3, lw=1, color=color,
                                label=f"{'Target-delta' if label == 'target_delta' else 'SpecCompact'}, {e}")
        top.axhline(1.0, color="black", lw=0.8)
        top.set_ylabel("Target-delta / best other method\n(device-s per compaction, SIMULATED)")
        top.set_title(f"{pair}, {d['seeds']}: Target-delta against the best other method by judge errors\n"
                      "(false accept / false reject); below 1 it has the fewest; bars: per-seed min-max "
                      "(SIMULATED)", fontsize=9)
        bottom.set_ylabel("retention of the true summary (SIMULATED)")
        bottom.set_xlabel("held share h")
        never = d.get("never_judging")
        bottom.set_title("retention: solid Target-delta, dotted SpecCompact"
                         + (f"; Target-self (never judges) {never[0]:.2f}-{never[1]:.2f}" if never else ""), fontsize=9)
        for ax in (top, bottom):
            ax.grid(True, lw=0.3)
            ax.legend(fontsize=6)
    return fig


def label_mass_data(path: Path) -> dict:
    """Per judge: its label masses (sorted) and AUC, and the file's label; raises on a file off the schema."""
    report = json.loads(path.read_text())
    label, judges = report.get("label"), report.get("judges")
    if label not in LABELS:
        raise ValueError(f"{path.name}: 'label' must be one of {LABELS}, not {label!r}")
    if not isinstance(judges, dict) or not judges:
        raise ValueError(f"{path.name}: 'judges' must map each judge's name to its label masses and AUC")
    out = {}
    for name, j in judges.items():
        masses, auc = j.get("label_mass"), j.get("auc")
        if not isinstance(masses, list) or not masses or not all(isinstance(m, (int, float)) and m > 0
                                                                    for m in masses):
            raise ValueError(f"{path.name}: judge {name!r}: 'label_mass' must be a list of positive numbers")
        if auc is not None and not isinstance(auc, (int, float)):
            raise ValueError(f"{path.name}: judge {name!r}: 'auc' must be a number or null")
        out[name] = {"label_mass": sorted(float(m) for m in masses), "auc": auc}
    return {"label": label, "model": report.get("model"), "judges": out, "json": path.name}


def label_mass_plot(data: dict, plt) -> object:
    names = list(data["judges"])
    fig, ax = plt.subplots(figsize=(7.0, 1.2 + 0.55 * len(names)))
    ax.boxplot([data["judges"][n]["label_mass"] for n in names], orientation="horizontal", whis=(0, 100), widths=0.5)
    for i, n in enumerate(names, 1):
        ms = data["judges"][n]["label_mass"]
        ax.plot(ms, [i] * len(ms), ".", ms=2, alpha=0.5, color="black")
    ax.set_yticks(range(1, len(names) + 1), [
        f"{n}\n(AUC {data['judges'][n]['auc']:.2f}, {statistics.median(data['judges'][n]['label_mass']):.3g} "
        f"median)" if data["judges"][n]["auc"] is not None else f"{n}\n(AUC -)" for n in names], fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel(f"label mass p+ + p- per judgement ({data['label']})")
    ax.set_title(f"label mass per judge{', ' + data['model'] if data.get('model') else ''} ({data['label']})",
                 fontsize=9)
    ax.grid(True, axis="x", which="both", lw=0.3)
    return fig


FIGURES: dict[str, tuple[Callable[[], dict | None], Callable]] = {  # name -> (its data, its plot)
    "session-race": (race_data, race_plot),
    "session-stall": (stall_data, stall_plot),
    "session-judge": (judge_data, judge_plot),
}


def figures() -> dict[str, tuple[Callable[[], dict | None], Callable]]:
    """:data:`FIGURES`, and one label-mass figure per ``bench/results/judge-bench-*.json``."""
    out = dict(FIGURES)
    for path in sorted(RESULTS.glob("judge-bench-*.json")):
        out[f"judge-label-mass-{path.stem[len('judge-bench-'):]}"] = (lambda p=path: label_mass_data(p), label_mass_plot)
    return out


# ---------------------------------------------------------------- rendering

def render(name: str, folder: Path) -> Path | None:
    """Render figure ``name`` into ``folder`` (None: its JSON is absent)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data_of, plot = figures()[name]
    data = data_of()
    if data is None:
        return None
    plotted = json.dumps({"figure": name, "data": _round(data), "renderer": _source_digest(),
                          "matplotlib": matplotlib.__version__}, sort_keys=True)
    with matplotlib.rc_context(matplotlib.rcParamsDefault):
        matplotlib.use("Agg")
        fig = plot(data, plt)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None, "Description": plotted})
        plt.close(fig)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    path.write_bytes(buf.getvalue())
    return path


def plotted(path: Path) -> str | None:
    """What a rendered PNG says it plots (its ``Description`` text chunk), or None."""
    from PIL import Image

    with Image.open(path) as im:
        return im.text.get("Description")


def render_all(folder: Path = FIGURES_DIR) -> list[Path]:
    """Every figure whose JSON exists, rendered into ``folder``."""
    return [p for p in (render(name, folder) for name in figures()) if p is not None]


def check(folder: Path = FIGURES_DIR) -> list[str]:
    """Every figure re-rendered from the committed JSONs into a temp folder: what differs from ``folder``."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in figures():
            fresh = render(name, Path(tmp))
            if fresh is None:
                continue
            old = folder / fresh.name
            if not old.is_file():
                out.append(f"figure {name}: {old} is missing (python -m bench.figures renders it)")
            elif plotted(old) != plotted(fresh):
                out.append(f"figure {name}: plots other data or was drawn by other code than the committed JSONs "
                           f"and this script give (python -m bench.figures)")
            elif old.read_bytes() != fresh.read_bytes():
                out.append(f"figure {name}: the same data drawn with other pixels (another matplotlib or font?)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="re-render into a temp folder and compare")
    p.add_argument("--out", type=Path, default=FIGURES_DIR, help="folder of the PNGs (default docs/benchmarks/figures)")
    args = p.parse_args(argv)
    print("Method: figures rendered from the committed results JSONs (bench/results); each labelled as its "
          "numbers are (SIMULATED or MEASURED (CPU)); Agg backend, matplotlib's default style, no timestamps")
    if args.check:
        stale = check(args.out)
        for line in stale:
            print(f"STALE {line}")
        return 1 if stale else 0
    for path in render_all(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
