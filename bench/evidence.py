#!/usr/bin/env python
"""The evidence check on the judge set: alone, and before each judge; and what it costs (MEASURED (CPU)).

Method (printed first, with the conditions):

1. **The check alone.**  Every case of the labelled judge set
   (:mod:`bench.evaluation.judge_set`: 128 lines over 8 real trajectories,
   66 that their history supports, 62 that it contradicts) is checked
   (:func:`sgl_speccompact.core.evidence.check`) against its history cut,
   parsed, redacted and rendered as a compaction renders it.  Reported: the
   share of contradicted lines the check refuses; every supported line it
   refuses (a false reject), with the strings it found no source for; and
   the contradicted lines it lets through, split into those that name no
   exact string and those whose every named string has a source.
2. **Before each judge.**  Per judge, the per-line scores committed by the
   model runs (no model is run here): the program judge
   (``bench/judge_bench.py --judges program`` on all 128 lines, the
   engine's own prompt, r from the label words' logprobs) and sglang's
   decision route (``bench/judge_set_decisions.py``, the route's own
   question, r = p(yes)).  A verdict accepts at r >= eta (0.7) when its
   label mass reaches ``min_label_mass`` (0.1), the engine's gate; below
   it there is no verdict (a drafted line is then rewritten, as after a
   rejection).  With the check, a line it refuses is rejected before the
   judge is asked: no judge request, score 0 for the AUC.  Reported per
   judge, without and with the check: AUC (supported above contradicted,
   ties half), and the shares of each label accepted, rejected (by the
   judge, or by the check) and left without a verdict.
3. **Cost.**  CPU time in this process (``time.process_time``; other
   processes' load does not count, their cache pressure does): building the
   source index (median of ``--repeats``) and checking each judge-set line
   against it (median of 5 per line; median, 99th percentile and maximum
   over lines), on the 2 MB history of the ledger benchmark
   (:func:`bench.harness.ledger.big_history`) and on a ~100K-token one (the
   same, to ``SMALL_CHARS``).

Usage::

    python -m bench.evidence                  # writes bench/results/evidence-judge-set-smollm2.json
    python -m bench.evidence --table bench/results/evidence-judge-set-smollm2.json   # the page's tables
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.evaluation.judge_set import JudgeCase, auc, history_of, load_judge_set
from bench.harness.runs import RESULTS_DIR, write_json

OUT = RESULTS_DIR / "evidence-judge-set-smollm2.json"  # the committed report
SCORES = {  # judge -> (committed per-line scores, how a row reads as (r, label mass))
    "program": (RESULTS_DIR / "judge-set-program-smollm2.json", "judge_bench"),
    "decisions": (RESULTS_DIR / "judge-set-decisions-smollm2.json", "judge_set_decisions"),
}
SMALL_CHARS = 350_000  # the ~100K-token history: about 3.5 characters per Qwen3 token
LINE_REPEATS = 5  # checks of each line, the median kept


def source_text(case: JudgeCase, history=history_of) -> str:
    """A case's history cut as a compaction renders it: parsed, redacted, rendered."""
    from sgl_speccompact.history.messages import parse_messages, render_history
    from sgl_speccompact.history.redaction import redact_turns

    return render_history(redact_turns(parse_messages(history(case)))[0])


def check_cases(cases: list[JudgeCase], history=history_of) -> list[dict]:
    """Per case: its label, what it names and what has no source (one index per history cut)."""
    from sgl_speccompact.core.evidence import SourceIndex, check

    indexes: dict = {}
    rows = []
    for c in cases:
        key = (c.file, c.trial, c.upto)
        if key not in indexes:
            indexes[key] = SourceIndex.build(source_text(c, history))
        ev = check(c.line, indexes[key])
        rows.append({"id": c.id, "supported": c.supported, "line": c.line,
                     "named": [{"kind": n.kind, "text": n.text} for n in ev.named], "missing": list(ev.missing)})
    return rows


def check_alone(rows: list[dict]) -> dict:
    """The check's refusals by label, each refused supported line, and what it lets through.

    >>> s = check_alone([{"id": "a", "supported": True, "line": "-", "named": [], "missing": []},
    ...                  {"id": "b", "supported": False, "line": "-", "named": [{"kind": "path", "text": "x.py"}],
    ...                   "missing": ["x.py"]}])
    >>> s["caught"], s["caught_share"], s["false_rejects"]
    (1, 1.0, 0)
    """
    sup = [r for r in rows if r["supported"]]
    con = [r for r in rows if not r["supported"]]
    let = [r for r in con if not r["missing"]]
    return {"cases": len(rows), "supported": len(sup), "contradicted": len(con),
            "caught": sum(bool(r["missing"]) for r in con),
            "caught_share": sum(bool(r["missing"]) for r in con) / len(con),
            "false_rejects": sum(bool(r["missing"]) for r in sup),
            "false_reject_share": sum(bool(r["missing"]) for r in sup) / len(sup),
            "refused_supported": [{"id": r["id"], "line": r["line"], "missing": r["missing"]} for r in sup
                                  if r["missing"]],
            "refused_contradicted": [{"id": r["id"], "missing": r["missing"]} for r in con if r["missing"]],
            "let_through_naming_nothing": [r["id"] for r in let if not r["named"]],
            "let_through_every_string_sourced": [r["id"] for r in let if r["named"]]}


def verdicts(path: Path, reader: str) -> dict[str, tuple[float, float]]:
    """``{case id: (r, label mass)}`` from a committed judge run."""
    report = json.loads(path.read_text())
    if reader == "judge_bench":
        rows = next(iter(report["judges"].values()))["rows"]
        return {r["id"]: (r["r"], r["label_mass"]) for r in rows}
    return {r["id"]: (r["p_yes"], r["label_mass"]) for r in report["cases"]}


def with_and_without(rows: list[dict], scores: dict[str, tuple[float, float]], eta: float,
                     min_mass: float) -> dict:
    """One judge's AUC and verdict shares per label, without and with the check before it.

    >>> rows = [{"id": "s", "supported": True, "missing": []}, {"id": "c", "supported": False, "missing": ["x"]}]
    >>> got = with_and_without(rows, {"s": (0.6, 0.5), "c": (0.9, 0.5)}, 0.7, 0.1)
    >>> got["without"]["auc"], got["with"]["auc"], got["with"]["contradicted"]["refused_by_check"]
    (0.0, 1.0, 1.0)
    """
    out = {"cases": sum(r["id"] in scores for r in rows)}
    for mode in ("without", "with"):
        score, shares = {}, {}
        for flag, name in ((True, "supported"), (False, "contradicted")):
            mine = [r for r in rows if r["supported"] is flag and r["id"] in scores]
            counts = dict.fromkeys(("accepted", "rejected_by_judge", "refused_by_check", "no_verdict"), 0)
            for r in mine:
                s, mass = scores[r["id"]]
                if mode == "with" and r["missing"]:
                    counts["refused_by_check"] += 1
                    score[r["id"]] = 0.0
                    continue
                score[r["id"]] = s
                counts["no_verdict" if mass < min_mass else "accepted" if s >= eta else "rejected_by_judge"] += 1
            shares[name] = {k: v / len(mine) for k, v in counts.items()}
            shares[name]["lines"] = len(mine)
        sup = [score[r["id"]] for r in rows if r["supported"] and r["id"] in score]
        con = [score[r["id"]] for r in rows if not r["supported"] and r["id"] in score]
        out[mode] = {"auc": auc(sup, con), **shares,
                     "judge_requests": sum(1 for r in rows if r["id"] in scores and not (mode == "with" and r["missing"]))}
    return out


def cost(histories: list[list[dict]], lines: list[str], repeats: int) -> list[dict]:
    """Index build and per-line check CPU time on the 2 MB history and on the ~100K-token one."""
    from bench.harness.ledger import TWO_MB, big_history, cpu_seconds
    from sgl_speccompact.core.evidence import SourceIndex, check
    from sgl_speccompact.history.messages import parse_messages, render_history
    from sgl_speccompact.history.redaction import redact_turns

    out = []
    for name, size in (("~100K tokens", SMALL_CHARS), ("2 MB", TWO_MB)):
        messages = big_history(histories, size)
        text = render_history(redact_turns(parse_messages(messages, max_messages=10**7, max_chars=2**31))[0])
        build_s, index = cpu_seconds(lambda text=text: SourceIndex.build(text), repeats)
        per = sorted(cpu_seconds(lambda line=line, index=index: check(line, index), LINE_REPEATS)[0] for line in lines)
        out.append({"history": name, "messages": len(messages), "history_chars": len(text),
                    "build_cpu_s": round(build_s, 4), "lines": len(per),
                    "line_cpu_us_median": round(statistics.median(per) * 1e6, 1),
                    "line_cpu_us_p99": round(per[min(len(per) - 1, int(0.99 * len(per)))] * 1e6, 1),
                    "line_cpu_us_max": round(per[-1] * 1e6, 1)})
    return out


def conditions(repeats: int) -> dict:
    """What the figures were measured under."""
    from sgl_speccompact.config import CompactConfig

    cfg = CompactConfig()
    sources = {}
    for judge, (path, _) in SCORES.items():
        if path.is_file():
            c = json.loads(path.read_text()).get("conditions", {})
            sources[judge] = {"file": f"bench/results/{path.name}", "label": c.get("label"),
                              "model_path": c.get("model_path"), "date_utc": c.get("date_utc")}
    return {"label": "MEASURED (CPU)", "date_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "cpu_cores": os.cpu_count(), "load_average_at_start": os.getloadavg(),
            "python": platform.python_version(), "eta": cfg.eta, "min_label_mass": cfg.min_label_mass,
            "build_repeats": repeats, "line_repeats": LINE_REPEATS, "scores": sources,
            "source": "each case's history cut, parsed, redacted and rendered (render_history)",
            "cpu_time": "time.process_time of this process"}


def run(repeats: int, history=history_of, histories=None) -> dict:
    """The report: conditions, the check alone, each judge without and with it, the cost, per case."""
    from sgl_speccompact.config import CompactConfig

    cfg = CompactConfig()
    conds = conditions(repeats)
    print("MEASURED (CPU): the evidence check on the judge set, alone and before each judge (committed per-line "
          "scores; no model runs here), and its CPU time on a 2 MB and a ~100K-token history.\n"
          f"conditions: {conds}", flush=True)
    cases = load_judge_set()
    rows = check_cases(cases, history)
    judges = {}
    for judge, (path, reader) in SCORES.items():
        if path.is_file():
            judges[judge] = {"scores": f"bench/results/{path.name}",
                             **with_and_without(rows, verdicts(path, reader), cfg.eta, cfg.min_label_mass)}
    if histories is None:
        from bench.harness.runs import load_trajectories

        histories = [t.messages for t in load_trajectories(None, 0, None)[0]]
    return {"benchmark": "evidence", "label": "MEASURED (CPU)", "conditions": conds, "check_alone": check_alone(rows),
            "judges": judges, "cost": cost(histories, [c.line for c in cases], repeats), "cases": rows}


def _p(x: float) -> str:
    return f"{100 * x:.1f}%"


def tables(report: dict) -> str:
    """The page's tables: the check alone, each judge without and with it, and the cost (Markdown)."""
    a = report["check_alone"]
    out = ["| judge set | lines | contradicted refused | supported refused (false rejects) |", "|---|---|---|---|",
           f"| the check alone | {a['cases']} | {a['caught']} of {a['contradicted']} ({_p(a['caught_share'])}) | "
           f"{a['false_rejects']} of {a['supported']} ({_p(a['false_reject_share'])}) |", "",
           "| judge | check | lines | AUC | supported: accepted / rejected by the judge / refused by the check / "
           "no verdict | contradicted: accepted / rejected by the judge / refused by the check / no verdict | "
           "judge requests |", "|---|---|---|---|---|---|---|"]
    for judge, j in report["judges"].items():
        for mode in ("without", "with"):
            m = j[mode]
            cells = [" / ".join(_p(m[k][x]) for x in ("accepted", "rejected_by_judge", "refused_by_check",
                                                       "no_verdict")) for k in ("supported", "contradicted")]
            out.append(f"| `{judge}` | {mode} | {j['cases']} | {m['auc']:.3f} | {cells[0]} | {cells[1]} | "
                       f"{m['judge_requests']} |")
    out += ["", "| history | characters | index build, CPU s | check per line, CPU us: median / p99 / max |",
            "|---|---|---|---|"]
    for c in report["cost"]:
        out.append(f"| {c['history']} | {c['history_chars']} | {c['build_cpu_s']} | {c['line_cpu_us_median']} / "
                   f"{c['line_cpu_us_p99']} / {c['line_cpu_us_max']} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="index builds per history, the median kept")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--table", metavar="JSON", help="no runs: print the tables of a report")
    args = p.parse_args(argv)
    if args.table:
        print(tables(json.loads(Path(args.table).read_text())))
        return 0
    t0 = time.perf_counter()
    report = run(args.repeats)
    report["runtime_s"] = round(time.perf_counter() - t0, 1)
    print(tables(report))
    print(f"wrote {write_json(report, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
