"""What the recall exam's script shares: compacting on the emulators, grading with and without the ledger,
the per-method table, and the exam of a CPU-model report.

``bench/recall_exam.py`` stays thin.  The probes and their grading are
:mod:`bench.evaluation.exam`'s; nothing here is a measurement by itself.
"""

from __future__ import annotations

from typing import Callable

from bench.evaluation.exam import CATEGORIES, grade, probes
from bench.harness import runs

METHODS = ("speccompact", "target_self", "hermes", "openclaw", "auto")  # every method on the whole history
GATED = ("continuation", "decisions")  # categories held to MIN_SCORE with the ledger on, for every method
MIN_SCORE = 0.95  # the acceptance line of those categories


def exam_row(method: str, trajectory: str, messages: list[dict], summary: str) -> dict:
    """One summary graded, as written (the ledger included) and without its ledger section (what the
    models wrote: no model sees the ledger, so the sections are the same with the ledger off)."""
    from sgl_speccompact.core.ledger import strip_ledger

    asked = probes(messages)
    return {"method": method, "trajectory": trajectory, "probes": len(asked),
            "with_ledger": grade(asked, summary), "without_ledger": grade(asked, strip_ledger(summary) or "")}


def run_emulated(trajectories, methods: tuple[str, ...], tokenizer: str,
                 log: Callable[[str], None] = lambda m: None) -> list[dict]:
    """Every method on every trajectory, one compaction each, on two SGLang-API emulators (SIMULATED)."""
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, EmulatedServer
    from sgl_speccompact.methods.registry import run_method

    rows = []
    with EmulatedServer(tokenizer, policy=ControlledAcceptancePolicy(seed=1),
                        model_path=runs.EMULATED_MODELS["target"]) as t, \
            EmulatedServer(tokenizer, policy=ControlledAcceptancePolicy(seed=2),
                           model_path=runs.EMULATED_MODELS["drafter"], lora_paths=[runs.EMULATOR_LORA]) as d:
        target = SpecCompactEndpoint(t.url, timeout_s=300)
        drafter = SpecCompactEndpoint(d.url, lora_path=runs.EMULATOR_LORA, timeout_s=300)
        for method in methods:
            for traj in trajectories:
                res = run_method(method, traj.messages, target=target, drafter=drafter)
                rows.append(exam_row(method, traj.name, traj.messages, res.summary))
                log(f"{method} {traj.name}: {score_line(rows[-1]['with_ledger'])}")
    return rows


def from_cpu_report(report: dict) -> list[dict]:
    """The exam of every run of a ``bench/cpu_model.py`` report (its rows carry the history's file and the
    summary; the history is cut as that run cut it: ``bench.harness.cpu_model.every_history``)."""
    from bench.harness import cpu_model

    folder = cpu_model.find_trajectories()
    histories = cpu_model.every_history(folder) if folder is not None else {}
    return [exam_row(r["method"], r["trajectory"], histories[r["trajectory"]], r["summary"])
            for r in report["runs"] if r.get("summary") and not r.get("sjc") and r["trajectory"] in histories]


def from_summaries(golden: dict, cases: tuple[str, ...] = METHODS) -> list[dict]:
    """The exam of a file of summaries in the golden file's shape (``{trajectory: {case: {"sections",
    "ledger"}}}``, ``tests/methods/golden_summaries.json``): the whole-history cases, on each trajectory."""
    from sgl_speccompact.history.formats import load_history

    return [exam_row(case, name, load_history(runs.TRAJECTORY_DIR / name),
                     golden[name][case]["sections"] + golden[name][case]["ledger"])
            for case in cases for name in golden if case in golden[name]]


def score_line(graded: dict) -> str:
    """``recall 9/10, artifacts 1/1, ...`` of one graded summary."""
    return ", ".join(f"{c} {graded[c]['answered']}/{graded[c]['probes']}" for c in CATEGORIES)


def by_method(rows: list[dict]) -> list[dict]:
    """Per method and category: answered / probes over every trajectory, with and without the ledger.

    >>> g = {c: {"probes": 2, "answered": 1, "missed": ["x"]} for c in CATEGORIES}
    >>> by_method([{"method": "m", "with_ledger": g, "without_ledger": g}])[0]["continuation"]
    0.5
    """
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        row: dict = {"method": method, "trajectories": len(mine)}
        for side, suffix in (("with_ledger", ""), ("without_ledger", " w/o ledger")):
            for c in CATEGORIES:
                asked = sum(r[side][c]["probes"] for r in mine)
                row[c + suffix] = round(sum(r[side][c]["answered"] for r in mine) / asked, 3) if asked else None
        row["probes"] = {c: sum(r["with_ledger"][c]["probes"] for r in mine) for c in CATEGORIES}
        out.append(row)
    return out


def failures(table: list[dict]) -> list[str]:
    """The methods whose continuation or decision score with the ledger is under :data:`MIN_SCORE`."""
    return [f"{r['method']} {c} {r[c]}" for r in table for c in GATED if r[c] is not None and r[c] < MIN_SCORE]


def markdown_table(cols: list[str], rows: list[list]) -> str:
    """Rows under a header as a markdown table ("-" for None).

    >>> print(markdown_table(["a", "b"], [[1, None]]))
    | a | b |
    |---|---|
    | 1 | - |
    """
    def cell(v):
        return "-" if v is None else str(v)
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                     + ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows])


def method_table(table: list[dict]) -> str:
    """The per-method scores as a markdown table."""
    cols = ["method", "trajectories"] + [c for c in CATEGORIES] + [c + " w/o ledger" for c in CATEGORIES]
    return markdown_table(cols, [[r[c] for c in cols] for r in table])


def trajectory_table(rows: list[dict]) -> str:
    """Per trajectory and method: answered / probes per category with the ledger (without it in brackets)."""
    cols = ["trajectory", "method"] + list(CATEGORIES)

    def cell(r: dict, c: str) -> str:
        w, wo = r["with_ledger"][c], r["without_ledger"][c]
        return "-" if not w["probes"] else f"{w['answered']}/{w['probes']} ({wo['answered']})"
    return markdown_table(cols, [[r["trajectory"], r["method"]] + [cell(r, c) for c in CATEGORIES] for r in rows])
