#!/usr/bin/env python
"""Judge benchmark on a real model: label mass, AUC and cost of each judge (MEASURED (CPU)).

Method: every case of the labelled judge set (:mod:`bench.evaluation.judge_set`:
lines a real trajectory supports or contradicts, each with its history cut)
is judged as the engine judges a drafted line: the first line of the case's
slot in a compaction of its history cut, on the slot program's own shared
prefix and slot opening, with the judge's own question
(:func:`sgl_speccompact.methods.judge_probe.first_line_verdict`, the
launcher's probe).  So each judge is asked exactly what a compaction asks
it.  Three judges (:data:`JUDGES`):

* ``program``: the default judge, the label words' next-token logprobs after
  the engine's question, with the configured labels (``positive``/``negative``);
* ``program_yes_no``: the same prompts with ``positive_label: yes``,
  ``negative_label: no``;
* ``decisions``: sglang 0.5.23's ``POST /v1/decisions`` with the engine's
  claim (the route's own wording and chat-template rendering).

Per judge: every verdict's label mass (p+ + p-), its r = p+/(p+ + p-) and p+
(the positive label's whole-vocabulary probability) by label, the AUC of
supported against contradicted lines ranked by r and by p+, and how many
verdicts pass the health gate (``min_label_mass``) and accept at eta.  Cost
per judge over the whole set, one case at a time, the radix cache flushed
before each judge (cases of one history cut share its prefix): the judge's
requests and the server's prompt tokens as each request reports them, the
prompt and cached tokens the server counted (``/metrics``, the server runs
with ``--enable-metrics``), and the client's wall time per case (building the
case's prompts included; ``/tokenize`` calls of the program judge, which
sends prompts as token ids, included).

Conditions are printed first and written to the JSON: model, server dtype
and device, date, cores and load.  The figures are MEASURED on a shared
2-core CPU with a 135M model: they rank the judges for this model, not for a
GPU deployment.

Usage::

    python -m bench.judge_bench                 # converts SmolLM2, starts its CPU server, runs, stops it
    python -m bench.judge_bench --url http://127.0.0.1:30000   # a server started as the launcher does
    python -m bench.judge_bench --cases 6       # the first six cases (what the real-model tier runs)
    python -m bench.judge_bench --every 2       # every second case: 64 lines over every trajectory
    python -m bench.judge_bench --judges program --out bench/results/judge-set-program-smollm2.json
                                                # one judge on every line (the evidence check's per-line scores)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from bench.evaluation.judge_set import JudgeCase, auc, history_of, load_judge_set
from bench.harness.runs import RESULTS_DIR, log, write_json
from bench.judge_set_decisions import server_tokens
from sgl_speccompact.config import CompactConfig, make_config

JUDGES = {  # name -> the config it judges with
    "program": {"judge": "program"},  # the default: positive / negative after the engine's question
    "program_yes_no": {"judge": "program", "positive_label": "yes", "negative_label": "no"},
    "decisions": {"judge": "decisions"},  # sglang's POST /v1/decisions with the engine's claim
}
OUT = RESULTS_DIR / "judge-bench-smollm2.json"  # the committed report
TIMEOUT_S = 1800.0  # per request: a cold 3K-token prefill on a loaded 2-core CPU


def judge_cases(url: str, cases: list[JudgeCase], overrides: dict, get, post, history=history_of) -> dict:
    """One judge over every case, one at a time, on a flushed cache: per-case rows and the cost."""
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.launch.templates import CHATML_TEMPLATE
    from sgl_speccompact.methods.judge_probe import first_line_verdict

    cfg = make_config(overrides)
    target = SpecCompactEndpoint(url, chat_template=CHATML_TEMPLATE, timeout_s=TIMEOUT_S)  # SmolLM2's ChatML
    post(url + "/flush_cache")
    before = server_tokens(url, get)
    rows, requests, prompt_tokens, walls = [], 0, 0, []
    for case in cases:
        t0 = time.perf_counter()
        judged = first_line_verdict(target, cfg, history(case), case.line, case.slot)
        v = judged.verdicts[0]
        walls.append(time.perf_counter() - t0)
        requests += judged.requests
        prompt_tokens += judged.prompt_tokens
        rows.append({"id": case.id, "slot": case.slot, "supported": case.supported, "p_pos": v.p_pos,
                     "p_neg": v.p_neg, "r": v.score, "label_mass": v.label_mass, "reliable": v.reliable,
                     "accepted": v.accepted, "wall_s": round(walls[-1], 3)})
    after = server_tokens(url, get)
    cost = {"cases": len(cases), "requests": requests, "prompt_tokens": prompt_tokens,
            "server_prompt_tokens": after["prompt_tokens"] - before["prompt_tokens"],
            "server_cached_tokens": after["cached_tokens"] - before["cached_tokens"],
            "wall_s": round(sum(walls), 3), "wall_s_median_per_case": round(statistics.median(walls), 3)}
    return {"config": overrides, "cost": cost, "summary": summary(rows, cfg), "rows": rows}


def summary(rows: list[dict], cfg: CompactConfig) -> dict:
    """Label masses, r and p+ by label, AUCs, and the share the gate and eta let through.

    >>> rows = [{"supported": s, "r": r, "p_pos": r / 10, "label_mass": 0.1, "reliable": True, "accepted": r >= 0.7}
    ...         for s, r in ((True, 0.9), (True, 0.6), (False, 0.5))]
    >>> s = summary(rows, CompactConfig())
    >>> s["auc_r"], s["label_masses"], s["r_by_label"]["contradicted"]
    (1.0, [0.1, 0.1, 0.1], [0.5])
    """
    def by(flag: bool, key: str) -> list[float]:
        return [r[key] for r in rows if r["supported"] is flag]

    masses = [r["label_mass"] for r in rows]
    out = {"cases": len(rows), "supported": len(by(True, "r")), "contradicted": len(by(False, "r")),
           "label_masses": masses,
           "label_mass": {"min": min(masses), "median": statistics.median(masses), "max": max(masses)},
           "auc_r": auc(by(True, "r"), by(False, "r")), "auc_p_pos": auc(by(True, "p_pos"), by(False, "p_pos")),
           "r_by_label": {"supported": by(True, "r"), "contradicted": by(False, "r")},
           "p_pos_by_label": {"supported": by(True, "p_pos"), "contradicted": by(False, "p_pos")},
           "reliable_share": sum(r["reliable"] for r in rows) / len(rows), "min_label_mass": cfg.min_label_mass,
           "eta": cfg.eta}
    for flag, name in ((True, "supported"), (False, "contradicted")):
        picked = [r for r in rows if r["supported"] is flag]
        out[f"accepted_share_{name}"] = sum(r["accepted"] for r in picked) / len(picked)
    return out


def conditions(url: str, get, cases: int) -> dict:
    """What the figures were measured under."""
    info = get(url + "/server_info").json()
    model = get(url + "/get_model_info").json()
    return {"label": "MEASURED (CPU)", "model_path": model.get("model_path"), "sglang_version": info.get("version"),
            "server_dtype": info.get("dtype"), "server_device": info.get("device"),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu_cores": os.cpu_count(),
            "load_average_at_start": os.getloadavg(), "cases": cases,
            "question": "each case's line as the first line of its slot, the engine's own prompt per judge "
                        "(methods.judge_probe.first_line_verdict)",
            "requests": "one case at a time; the radix cache flushed before each judge"}


def run(url: str, cases: list[JudgeCase], get, post, history=history_of, judges: dict = JUDGES) -> dict:
    """Every judge over every case; the report (conditions, then per judge its cost, summary and rows)."""
    conds = conditions(url, get, len(cases))
    print(f"MEASURED (CPU): {len(cases)} judge-set lines, judges {list(judges)}, through {url}.\n"
          f"conditions: {conds}", flush=True)
    # benchmark, label, model and each judge's label_mass and auc: the schema bench/figures.py draws from
    out = {"benchmark": "judge", "label": "MEASURED (CPU)", "model": Path(conds.get("model_path") or "").name or None, "conditions": conds,
           "judges": {}}
    for name, overrides in judges.items():
        got = judge_cases(url, cases, overrides, get, post, history)
        s = got["summary"]
        out["judges"][name] = {"label_mass": s["label_masses"], "auc": s["auc_r"], **got}
        log(f"{name}: label mass {s['label_mass']}, AUC r {s['auc_r']:.3f}, cost {got['cost']}", "judge_bench")
    return out


def sample(cases: list[JudgeCase], every: int) -> list[JudgeCase]:
    """The cases of every ``every``-th pair, pairs keyed by the id without its ``s``/``c`` label, in order.

    >>> cs = [JudgeCase(id=i, file="f", upto=1, slot="goal", line="- x", supported=i.endswith("s"),
    ...                 evidence="", why="") for i in ("a-01s", "a-01c", "a-02s", "a-02c", "a-03s")]
    >>> [c.id for c in sample(cs, 2)]
    ['a-01s', 'a-01c', 'a-03s']
    """
    pairs = list(dict.fromkeys(c.id[:-1] for c in cases))
    kept = set(pairs[::every])
    return [c for c in cases if c.id[:-1] in kept]


def percent(p: float) -> str:
    """A probability as a percentage the page prints: two decimals, four below 1%.

    >>> percent(5.117e-05), percent(0.0696)
    ('0.0051%', '6.96%')
    """
    return f"{100 * p:.4f}%" if p < 0.01 else f"{100 * p:.2f}%"


def table(report: dict) -> str:
    """The page's table: one row per judge (label masses as percentages of the next-token probability)."""
    rows = ["| judge | label mass min / median / max | AUC (r) | AUC (p+) | verdicts reliable | requests | "
            "prompt tokens | cached tokens | wall s (median per line) |", "|" + " --- |" * 9]
    for name, j in report["judges"].items():
        s, c = j["summary"], j["cost"]
        m = s["label_mass"]
        rows.append(f"| `{name}` | {percent(m['min'])} / {percent(m['median'])} / {percent(m['max'])} | "
                    f"{s['auc_r']:.2f} | "
                    f"{s['auc_p_pos']:.2f} | {s['reliable_share']:.0%} | {c['requests']} | "
                    f"{c['server_prompt_tokens']:.0f} | {c['server_cached_tokens']:.0f} | "
                    f"{c['wall_s']:.0f} ({c['wall_s_median_per_case']:.2f}) |")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running server, started as the launcher does with --enable-metrics "
                                 "(else SmolLM2 is converted and its CPU server started here)")
    p.add_argument("--cases", type=int, help="only the first N cases of the judge set")
    p.add_argument("--every", type=int, default=1, help="the cases of every K-th line pair (a supported line and "
                                                        "its contradicted twin): a sample across every "
                                                        "trajectory of the set, for a slow machine")
    p.add_argument("--judges", default=",".join(JUDGES), help="judges to run, comma-separated, in this order "
                                                              f"(default: every one: {','.join(JUDGES)})")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--table", metavar="JSON", help="no runs: print the table of a report")
    args = p.parse_args(argv)
    unknown = [n for n in args.judges.split(",") if n not in JUDGES]
    if unknown:
        p.error(f"--judges: unknown {unknown}; known: {list(JUDGES)}")
    judges = {n: JUDGES[n] for n in args.judges.split(",")}
    if args.table:
        import json

        print(table(json.loads(Path(args.table).read_text())))
        return 0
    import httpx

    client = httpx.Client(timeout=TIMEOUT_S)
    proc, url = None, args.url
    if url is None:
        from bench.cpu_model import start_server
        from bench.harness import cpu_model
        from sgl_speccompact.launch.packaged import ensure_converted

        url, proc = start_server(str(ensure_converted(cpu_model.MODEL)), None, Path(args.out).with_suffix(".logs"))
    cases = sample(load_judge_set(), args.every)
    cases = cases[:args.cases] if args.cases else cases
    try:
        report = run(url.rstrip("/"), cases, client.get, client.post, judges=judges)
    finally:
        if proc is not None:
            from sgl_speccompact.launch.servers import stop_servers

            stop_servers([proc])
    print(table(report))
    print(f"wrote {write_json(report, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
