"""The judge set through sglang's own decision route, ``POST /v1/decisions`` (MEASURED (CPU)).

Method: every case of :mod:`bench.evaluation.judge_set` becomes one ``yes_no``
question, :data:`QUESTION` filled with the case's line; the cases of one
history cut go in one request whose ``input`` is that history rendered by
:func:`sgl_speccompact.history.messages.render_history` (the text the
package's judges read).  The server renders each question with the model's
own chat template, scores the two label tokens of every question in one call
and returns, per question, ``probabilities`` (``yes`` and ``no``, normalised
over the two labels) and ``label_mass`` (the labels' share of the whole
next-token distribution).  Per case the report keeps p(yes), p(no), the label
mass and p(yes) over the whole vocabulary (p(yes) x label mass); it then gives
the label mass range and the AUC of supported against contradicted lines,
ranked by p(yes) and by whole-vocabulary p(yes).  Requests go one at a time;
wall times are client-side, around each request, on a shared CPU; the
server's own counters (``/metrics``) give the prompt tokens its radix cache
served per request.

Conditions are printed first and written to the JSON: the model, the server's
dtype and device, the date, the machine's cores and load.

Usage:
    python -m bench.judge_set_decisions              # converts SmolLM2, starts its CPU server, runs, stops it
    python -m bench.judge_set_decisions --url http://127.0.0.1:30000   # a server started as the launcher does
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
from sgl_speccompact.history.messages import parse_messages, render_history

QUESTION = "The conversation above supports this line of its summary: {line}"  # the yes_no question per case
OUT = RESULTS_DIR / "judge-set-decisions-smollm2.json"  # the committed report
ETA = 0.7  # the acceptance threshold the package applies to r; here r is p(yes)


def requests_for(cases: list[JudgeCase], history=history_of) -> list[dict]:
    """One ``/v1/decisions`` body per history cut, its cases as ``yes_no`` questions, in file order."""
    groups: dict[tuple, list[JudgeCase]] = {}
    for c in cases:
        groups.setdefault((c.file, c.trial, c.upto), []).append(c)
    return [{"input": render_history(parse_messages(history(group[0]))),
             "questions": [{"id": c.id, "type": "yes_no", "question": QUESTION.format(line=c.line)} for c in group]}
            for group in groups.values()]


def rows_for(cases: list[JudgeCase], answers: dict[str, dict]) -> list[dict]:
    """One row per case: its label and the route's answer."""
    rows = []
    for c in cases:
        a = answers[c.id]
        p_yes, mass = a["probabilities"]["yes"], a["label_mass"]
        rows.append({"id": c.id, "file": c.file, "upto": c.upto, "slot": c.slot, "supported": c.supported,
                     "p_yes": p_yes, "p_no": a["probabilities"]["no"], "label_mass": mass,
                     "p_yes_vocab": p_yes * mass})
    return rows


def summary(rows: list[dict]) -> dict:
    """Label mass range, p(yes) by label, AUCs and the share each label would pass at :data:`ETA`."""
    def by(flag, key):
        return [r[key] for r in rows if r["supported"] is flag]

    masses = [r["label_mass"] for r in rows]
    out = {"cases": len(rows), "supported": len(by(True, "p_yes")), "contradicted": len(by(False, "p_yes")),
           "label_mass": {"min": min(masses), "median": statistics.median(masses), "max": max(masses)},
           "auc_p_yes": auc(by(True, "p_yes"), by(False, "p_yes")),
           "auc_p_yes_vocab": auc(by(True, "p_yes_vocab"), by(False, "p_yes_vocab"))}
    for flag, name in ((True, "supported"), (False, "contradicted")):
        ps = by(flag, "p_yes")
        out[f"p_yes_{name}"] = {"min": min(ps), "median": statistics.median(ps), "max": max(ps)}
        out[f"share_p_yes_at_least_eta_{name}"] = sum(p >= ETA for p in ps) / len(ps)
    return out


def conditions(url: str, get) -> dict:
    """What the figures were measured under."""
    info = get(url + "/server_info").json()
    model = get(url + "/get_model_info").json()
    return {"label": "MEASURED (CPU)", "route": "POST /v1/decisions", "model_path": model.get("model_path"),
            "sglang_version": info.get("version"), "server_dtype": info.get("dtype"),
            "server_device": info.get("device"), "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpu_cores": os.cpu_count(), "load_average_at_start": os.getloadavg(), "question": QUESTION,
            "input": "render_history(parse_messages(history_of(case))) per history cut",
            "requests": "one per history cut, one at a time"}


def server_tokens(url: str, get) -> dict[str, float]:
    """The server's prompt and cached token counters now (``GET /metrics``, ``--enable-metrics``)."""
    out = dict.fromkeys(("prompt_tokens", "cached_tokens"), 0.0)
    for line in get(url + "/metrics").text.splitlines():
        name, _, value = line.rpartition(" ")
        for key in out:
            if name.startswith(f"sglang:{key}_total"):
                out[key] += float(value)
    return out


def run(url: str, cases: list[JudgeCase], post, get, history=history_of) -> dict:
    """Send every request, one at a time; the report (conditions, per request, per case, summary)."""
    conds = conditions(url, get)
    print(f"MEASURED (CPU): {len(cases)} judge-set lines through {url}/v1/decisions.\nconditions: {conds}",
          flush=True)
    answers, per_request = {}, []
    for body in requests_for(cases, history):
        before = server_tokens(url, get)
        t0 = time.perf_counter()
        res = post(url + "/v1/decisions", json=body)
        wall = time.perf_counter() - t0
        res.raise_for_status()
        got = res.json()
        after = server_tokens(url, get)
        answers.update(got["answers"])
        per_request.append({"questions": len(body["questions"]), "input_chars": len(body["input"]),
                            "prompt_tokens": got["usage"]["prompt_tokens"], "wall_s": round(wall, 3),
                            "server_cached_tokens": after["cached_tokens"] - before["cached_tokens"],
                            "prompt_format_version": got["prompt_format_version"]})
        log(f"{per_request[-1]}", "judge_set_decisions")
    rows = rows_for(cases, answers)
    return {"conditions": conds, "requests": per_request, "summary": summary(rows), "cases": rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running server (else SmolLM2 is converted and its CPU server started here)")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    import httpx

    client = httpx.Client(timeout=1800)
    proc, url = None, args.url
    if url is None:
        from bench.cpu_model import start_server
        from bench.harness import cpu_model
        from sgl_speccompact.launch.packaged import ensure_converted

        url, proc = start_server(str(ensure_converted(cpu_model.MODEL)), None, Path(args.out).with_suffix(".logs"))
    try:
        report = run(url.rstrip("/"), load_judge_set(), client.post, client.get)
    finally:
        if proc is not None:
            from sgl_speccompact.launch.servers import stop_servers

            stop_servers([proc])
    print({k: v for k, v in report["summary"].items()})
    print(f"wrote {write_json(report, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
