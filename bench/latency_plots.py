"""PNG plots of a latency report (bench/latency.py): every figure in them is SIMULATED.

* ``<stem>-speedup.png``: speedup over Hermes-style (its first
  ``--hermes-tokens`` length) vs acceptance rate, one panel per deployment
  and model pair, one line per method (and layout, and Hermes length).
* ``<stem>-critical.png``: stacked bars of the critical slot's time per method
  (before-fork, drafting, verifying, repairing, generating, waiting,
  after-join) at the middle acceptance rate, one panel per deployment and
  model pair.
"""

from __future__ import annotations

from pathlib import Path



def plot(report: dict, stem: Path) -> list[Path]:
    """Write both PNGs next to ``stem``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.harness.latency_cases import PARTS

    summary = report["summary_by_cell"]
    cells = list(dict.fromkeys((s["model_pair"], s["deployment"], s.get("speculative")) for s in summary))
    name = lambda s: s.get("label", s["method"])  # a method with its layout / Hermes length
    methods = list(dict.fromkeys(name(s) for s in summary))
    out = []

    fig, axes = plt.subplots(1, len(cells), figsize=(4.2 * len(cells), 3.6), squeeze=False)
    for ax, (pair, dep, spec) in zip(axes[0], cells):
        for m in methods:
            pts = sorted((s["p_accept"], _vs_hermes(s)) for s in summary
                         if (s["model_pair"], s["deployment"], s.get("speculative")) == (pair, dep, spec)
                         and name(s) == m and _vs_hermes(s))
            if pts:
                ax.plot([p for p, _ in pts], [v for _, v in pts], marker="o", label=m)
        ax.set_title(f"{dep}, {pair}, spec {spec}", fontsize=9)
        ax.set_xlabel("acceptance rate")
        ax.set_ylabel("speedup vs Hermes-style (x)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("SIMULATED speedup over Hermes-style (one-clock simulator, H200 cost model)", fontsize=10)
    out.append(_save(fig, Path(f"{stem}-speedup.png")))

    ps = sorted({s["p_accept"] for s in summary})
    mid = ps[len(ps) // 2] if ps else None
    fig, axes = plt.subplots(1, len(cells), figsize=(4.2 * len(cells), 3.8), squeeze=False)
    for ax, (pair, dep, spec) in zip(axes[0], cells):
        sub = [s for s in summary if (s["model_pair"], s["deployment"], s.get("speculative")) == (pair, dep, spec)
               and s["p_accept"] == mid and s["median_parts_s"]]
        bottom = [0.0] * len(sub)
        for part in [k for k in PARTS if sub and k in sub[0]["median_parts_s"]]:  # the parts the run has
            vals = [s["median_parts_s"][part] for s in sub]
            ax.bar(range(len(sub)), vals, bottom=bottom, label=part)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_xticks(range(len(sub)), [name(s) for s in sub], rotation=30, fontsize=7)
        ax.set_title(f"{dep}, {pair}, spec {spec}, p={mid}", fontsize=9)
        ax.set_ylabel("critical path (s)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("SIMULATED critical-path time per method (one-clock simulator, H200 cost model)", fontsize=10)
    out.append(_save(fig, Path(f"{stem}-critical.png")))
    return out


def _vs_hermes(s: dict):
    """Median speedup over the first Hermes-style length that ran."""
    return next((v for k, v in (s.get("median_speedups") or {}).items() if k.startswith("hermes")), None)


def _save(fig, path: Path) -> Path:
    """Lay out, write and close ``fig``; the path written."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
