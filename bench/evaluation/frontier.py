"""The quality-latency picture: each method as a point, one plot per target model.

Latency comes from a latency benchmark report (``bench/results/latency-*.json``),
quality from a retention run.  :func:`latency_by_method` reads a report
tolerantly: the headline field it names (``headline_field``), else
``simulated_e2e_s``, ``measured_e2e_s`` or any other ``*e2e_s`` row field,
as the per-method median in its ``summary`` or, failing that, the median
over its rows.  A report run with
SJC gives the ``method+sjc`` points.  :func:`plot_frontier` draws one PNG
with matplotlib (imported only there).
"""

from __future__ import annotations

import statistics
from pathlib import Path

LATENCY_FIELDS = ("simulated_e2e_s", "measured_e2e_s")
QUALITY_METRICS = {  # aggregate key -> axis label
    "recall_macro": "identifier recall (mean over trajectories)",
    "adequacy_mean": "adequacy judge score (0-5)",
    "probe_presence": "planted facts kept (share)",
    "continuation_key": "next action matched (tool and key argument)",
}


def latency_by_method(report: dict) -> dict:
    """``{"model", "kind", "field", "seconds": {label: median s}, "label"}`` of one latency report.

    >>> rep = {"headline_field": "simulated_e2e_s", "latency_kind": "simulated",
    ...        "servers": {"target": {"model_path": "Qwen/Qwen3-8B"}}, "conditions": {"source_judge": False},
    ...        "rows": [{"method": "hermes", "simulated_e2e_s": 7.0}, {"method": "hermes", "simulated_e2e_s": 5.0}]}
    >>> out = latency_by_method(rep)
    >>> out["model"], out["seconds"]
    ('Qwen/Qwen3-8B', {'hermes': 6.0})
    """
    rows = [r for r in report.get("rows", []) if "error" not in r]
    key = report.get("headline_field")
    if key is None:
        named = [f for r in rows for f in r if f.endswith("e2e_s")]  # any other end-to-end field, first seen
        key = next((f for f in (*LATENCY_FIELDS, *named) if any(f in r for r in rows)), None)
    if key is None:
        raise ValueError("no latency field (headline_field, simulated_e2e_s, measured_e2e_s or another *e2e_s) "
                         "in the report")
    suffix = "+sjc" if (report.get("conditions") or {}).get("source_judge") else ""
    seconds = {}
    for method in dict.fromkeys(r.get("method") for r in rows):
        median = ((report.get("summary") or {}).get(method) or {}).get(f"median_{key}")
        if median is None:
            values = [r[key] for r in rows if r.get("method") == method and r.get(key) is not None]
            median = statistics.median(values) if values else None
        if median is not None:
            seconds[method + suffix] = median
    target = (report.get("servers") or {}).get("target") or {}
    model = target.get("model_path") or (report.get("conditions") or {}).get("model_pair") or "unknown model"
    kind = report.get("latency_kind") or ("simulated" if key.startswith("simulated") else "measured")
    return {"model": model, "kind": kind, "field": key, "seconds": seconds,
            "label": report.get("latency_label") or kind}


def latency_by_model(report: dict) -> list[dict]:
    """:func:`latency_by_method` per target model of a report whose rows name a ``model_pair``.

    Such a report mixes cells; each target model keeps its ``p_accept`` 0.7
    rows when there are any and its first ``deployment``.  Other reports give
    one entry.

    >>> rep = {"headline_field": "e2e_s", "rows": [
    ...     {"method": "hermes", "model_pair": "qwen3-8b:qwen3-0.6b", "p_accept": 0.7, "deployment": "two-gpu",
    ...      "e2e_s": 20.0},
    ...     {"method": "hermes", "model_pair": "qwen3-8b:qwen3-0.6b", "p_accept": 0.5, "deployment": "two-gpu",
    ...      "e2e_s": 99.0},
    ...     {"method": "hermes", "model_pair": "qwen3-32b:qwen3-0.6b", "p_accept": 0.7, "e2e_s": 40.0}]}
    >>> [(x["model"], x["seconds"]) for x in latency_by_model(rep)]
    [('qwen3-8b', {'hermes': 20.0}), ('qwen3-32b', {'hermes': 40.0})]
    """
    rows = report.get("rows", [])
    if not any("model_pair" in r for r in rows):
        return [latency_by_method(report)]
    out = []
    for pair in dict.fromkeys(r.get("model_pair") for r in rows if r.get("model_pair")):
        mine = [r for r in rows if r.get("model_pair") == pair]
        if any(r.get("p_accept") == 0.7 for r in mine):
            mine = [r for r in mine if r.get("p_accept") == 0.7]
        deployment = next((r["deployment"] for r in mine if r.get("deployment")), None)
        if deployment:
            mine = [r for r in mine if r.get("deployment") == deployment]
        one = latency_by_method({**report, "rows": mine, "summary": None})
        cell = f"{pair}" + (f", {deployment}" if deployment else "") + \
            (", p_accept 0.7" if any("p_accept" in r for r in mine) else "")
        out.append({**one, "model": pair.split(":")[0], "label": f"{one['label']} ({cell})"})
    return out


def points(latency: dict, quality: dict, metric: str) -> list[tuple[str, float, float]]:
    """``(label, seconds, quality)`` for every method with both numbers.

    >>> points({"seconds": {"a": 1.0, "b": 2.0}}, {"a": {"recall_macro": 0.5}, "c": {"recall_macro": 1}},
    ...        "recall_macro")
    [('a', 1.0, 0.5)]
    """
    return [(label, s, quality[label][metric]) for label, s in latency["seconds"].items()
            if label in quality and quality[label].get(metric) is not None]


def plot_frontier(pts: list[tuple[str, float, float]], path: str | Path, *, title: str, xlabel: str,
                  ylabel: str, note: str) -> Path:
    """Write one scatter plot (PNG) of ``(label, x, y)`` points, each labelled, with ``note`` below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    xspan = (max(x for _, x, _ in pts) - min(x for _, x, _ in pts)) or 1.0
    yspan = (max(y for *_, y in pts) - min(y for *_, y in pts)) or 1.0
    for k, (label, x, y) in enumerate(pts):
        marker = "s" if label.endswith("+sjc") else "o"
        ax.scatter([x], [y], marker=marker, s=60)
        # stack the labels of points that (nearly) coincide
        near = sum(abs(x - px) < 0.03 * xspan and abs(y - py) < 0.03 * yspan for _, px, py in pts[:k])
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, 5 + 11 * near), fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.text(0.01, 0.01, note, fontsize=7.5, wrap=True, va="bottom")
    fig.tight_layout(rect=(0, 0.11, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
