"""The retention benchmark's tables and quality-latency plots (``bench/retention.py``)."""

from __future__ import annotations

import json
from pathlib import Path

from .runs import RESULTS_DIR

PLUMBING_NOTE = ("PLUMBING ONLY: the emulator's scripted model wrote these summaries and answered the questions; "
                 "the numbers show that the evaluation runs end to end, not how good any method is")


def _f(x, pct=False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if pct else (f"{x:.2f}" if isinstance(x, float) else str(x))


def format_summary(agg: dict) -> str:
    """One line per method label: the headline numbers."""
    head = ["method", "traj", "recall", "recall micro", "invented", "w/o ledger", "w/o inv", "ledger inv",
            "ledger share", "facts kept", "facts answered", "adequacy", "next tool", "next key", "sjc deleted",
            "del w/ invented", "del next-step", "errors"]
    table = [head]
    for label, a in agg.items():
        table.append([label, str(a["trajectories"]), _f(a["recall_macro"], True), _f(a["recall_micro"], True),
                      _f(a["invented"]), _f(a.get("recall_macro_without_ledger"), True),
                      _f(a.get("invented_without_ledger")), _f(a.get("ledger_invented")),
                      _f(a.get("ledger_share"), True), _f(a["probe_presence"], True), _f(a["probe_answered"], True),
                      _f(a["adequacy_mean"]), _f(a["continuation_tool"], True), _f(a["continuation_key"], True),
                      _f(a["sjc_deleted"]), _f(a["sjc_deleted_with_invented"]), _f(a["sjc_deleted_next_step"]),
                      str(a["errors"])])
    return _align(table)


def format_slots(agg: dict) -> str:
    """Per-slot identifier recall (mean over trajectories) per method label."""
    names = list(dict.fromkeys(n for a in agg.values() for n in a["slot_recall"]))
    table = [["method"] + names]
    for label, a in agg.items():
        table.append([label] + [_f(a["slot_recall"].get(n), True) for n in names])
    return _align(table)


def format_rows(rows: list[dict]) -> str:
    """One line per (trajectory, method label)."""
    table = [["trajectory", "method", "recall", "kept/ids", "invented", "w/o ledger", "ledger tok", "facts kept",
              "adequacy", "next tool/key"]]
    for r in rows:
        if "error" in r:
            table.append([r["trajectory"], r["label"], "ERROR " + r["error"][:80]])
            continue
        rec = (r.get("recall") or {}).get("summary") or {}
        facts = [f for f in (r.get("probes") or {}).get("facts", []) if f.get("message_index") is not None]
        conts = r.get("continuation") or []
        table.append([r["trajectory"], r["label"], _f(rec.get("recall"), True),
                      f"{rec.get('kept_count', '-')}/{rec.get('source_identifiers', '-')}",
                      _f(rec.get("invented_count")),
                      _f(((r.get("recall") or {}).get("without_ledger") or {}).get("recall"), True),
                      _f((r.get("ledger") or {}).get("tokens")), f"{sum(f['present'] for f in facts)}/{len(facts)}",
                      _f((r.get("adequacy") or {}).get("score")),
                      " ".join(f"{int(c.get('tool_match', 0))}/{int(c.get('key_match', 0))}" for c in conts) or "-"])
    return _align(table)


def _align(table: list[list[str]]) -> str:
    width = [max(len(t[i]) for t in table if i < len(t)) for i in range(len(table[0]))]
    out = ["  ".join(c.ljust(width[i]) if i < 2 else c.rjust(width[i]) for i, c in enumerate(t)).rstrip()
           for t in table]
    out.insert(1, "-" * len(out[0]))
    return "\n".join(out)


def latency_reports(paths: list[str] | None, results_dir: Path = RESULTS_DIR) -> list[Path]:
    """``--latency-json`` files, else the newest ``latency-*.json`` in bench/results/ per target model."""
    if paths:
        return [Path(p) for p in paths]
    files = sorted(Path(results_dir).glob("latency-*.json"))
    newest: dict[str, Path] = {}
    for f in files:  # sorted by timestamp in the name: later files win
        try:
            model = ((json.loads(f.read_text()).get("servers") or {}).get("target") or {}).get("model_path")
        except (OSError, ValueError):
            continue
        newest[model or f.name] = f
    return list(newest.values())


def make_plots(agg: dict, args, stamp: str, emulator: bool, results_dir: Path = RESULTS_DIR) -> list[dict]:
    """One quality-latency PNG per target model; a clear message when no latency report is there."""
    from bench.evaluation.frontier import latency_by_model

    reports = latency_reports(args.latency_json, results_dir)
    if not reports:
        msg = (f"no latency report in {results_dir} (run python -m bench.latency first, or pass --latency-json PATH); "
               "quality-latency plot skipped")
        print(f"NOTE: {msg}")
        return [{"skipped": msg}]
    out = []
    for path in reports:
        try:
            cells = latency_by_model(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            print(f"NOTE: latency report {path} unreadable ({exc}); its plot skipped")
            out.append({"latency_json": str(path), "skipped": str(exc)})
            continue
        out += [_plot_one(lat, path, agg, args, stamp, emulator, results_dir) for lat in cells]
    return out


def _plot_one(lat: dict, path: Path, agg: dict, args, stamp: str, emulator: bool, results_dir: Path) -> dict:
    """One target model's quality-latency PNG."""
    from bench.evaluation.frontier import QUALITY_METRICS, plot_frontier, points

    pts = points(lat, agg, args.plot_metric)
    slug = "".join(c if c.isalnum() else "-" for c in lat["model"]).strip("-")
    png = Path(args.plot_dir or results_dir) / f"retention-{stamp}-{slug}.png"
    notes = [f"latency: {lat['label']} ({Path(path).name})",
             "quality: " + (PLUMBING_NOTE if emulator else "this retention run")]
    if any(lb.endswith("+sjc") for lb in agg) and not any(lb.endswith("+sjc") for lb in lat["seconds"]):
        notes.append("no +sjc points: that latency report ran without --source-judge")
    note = ". ".join(notes) + "."
    if not pts:
        print(f"NOTE: no method has both a latency in {path} and a {args.plot_metric}; plot skipped")
        return {"latency_json": str(path), "skipped": "no common methods"}
    plot_frontier(pts, png, title=f"quality vs latency, target {lat['model']}"
                  + (" (PLUMBING ONLY)" if emulator else ""),
                  xlabel=f"end-to-end latency, s ({lat['kind']}; {lat['field']})",
                  ylabel=QUALITY_METRICS[args.plot_metric], note=note)
    print(f"plot: {png} ({len(pts)} methods; latency {lat['kind']}, from {Path(path).name})")
    return {"png": str(png), "latency_json": str(path), "model": lat["model"], "latency_kind": lat["kind"],
            "metric": args.plot_metric, "points": [{"label": lb, "latency_s": x, "quality": y}
                                                   for lb, x, y in pts]}
