"""A real language model on the CPU: SmolLM2-135M-Instruct on one real sglang CPU server.

What ``tests/real_model`` asserts on and ``bench/cpu_model.py`` reports
(MEASURED (CPU)): every method compacts the same real trajectories on one
``sglang.launch_server`` process that serves both roles, target and drafter
(two 135M servers would double the memory and halve the cores each gets on a
2-core machine).  The server is started with the launcher's own command
(:func:`sgl_speccompact.launch.servers.server_command`, ``--device cpu``) from
the checkpoint :mod:`sgl_speccompact.launch.packaged` converts once.

Around every compaction the server's own Prometheus counters are read
(``--enable-metrics``), so what the result's stats say was sent can be held
against what the server saw.
"""

from __future__ import annotations

import copy
import os
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

MODEL = "smollm2-135m-instruct"  # the packaged model (sgl_speccompact.launch.packaged.PACKAGED)
# three real trajectories, each its first messages (file, messages): 730-1,230 tokens in SmolLM2's
# tokenizer, inside the tier's 400-2,500; a prefill of a whole 2-3K-token file takes minutes on 2 cores
TRAJECTORIES = (
    ("blakeelias__tau2-bench__data__simulations__2025-10-13T13:51:25.241970_airline_llm_agent_grok-4_"
     "user_simulator_grok-4_task_32.json", 5),
    ("SWE-agent__mini-swe-agent__tests__test_data__github_issue.traj.json", 5),
    ("princeton-nlp__SWE-agent__trajectories__demonstrations__function_calling_simple.traj", 3),
)
METHODS = ("openclaw", "hermes", "target_self", "speccompact", "auto")  # run in this order: one-shots first
SJC_METHODS = ("speccompact",)  # also run with Source-Judged Compaction, on the first trajectory
# The real-model tier's runs (tests/real_model), (method, trajectory index, sjc): each of its guarantees needs a
# method once, not on every trajectory.  Every method on one trajectory, the three covered; auto once, after
# SpecCompact on the same trajectory; SpecCompact with SJC once.  bench/cpu_model.py runs the whole grid
# (:func:`plan_runs`).
TIER_RUNS = (("openclaw", 2, False), ("hermes", 0, False), ("target_self", 1, False), ("speccompact", 1, False),
             ("auto", 1, False), ("speccompact", 0, True))
# Small budgets: 16 compactions must fit in minutes on 2 cores, where one decode step of the
# 135M model takes a quarter to a third of a second, and a 135M model often repeats itself until
# a cap stops it, so every cap bounds a run's decode steps.  Hermes's length target keeps
# hermes-agent's 2,000-token floor; its cap is a tenth of that.
BUDGETS = {
    "max_lines_per_slot": 2,  # lines per slot
    "max_tokens_per_slot": 48,  # tokens per slot
    "max_new_tokens": 24,  # tokens per draft or repair request
    "max_summary_tokens": 384,  # the assembled summary
    "monolithic_max_tokens": 160,  # OpenClaw's one generation
    "hermes_cap_ratio": 0.08,  # Hermes's cap: 160 tokens of its 2,000-token target
    "agent_context_tokens": 8192,  # SmolLM2's window: Hermes's target stays at its floor
    "target_context_tokens": 8192,  # chunking: the server's --context-length
    "report_cut_off": True,  # a one-shot summary its cap cut off comes back truncated, not as an error
}
# the exact ledger's run (bench/cpu_model.py --ledger): every shared trajectory, the same small caps on what
# the model writes, the summary budget at its default so the ledger gets its default room
LEDGER_BUDGETS = {**BUDGETS, "max_summary_tokens": 2048}
LEDGER_HISTORY_CHARS = 4500  # each trajectory's first messages up to this many rendered characters (~1,100 tokens)
CONTEXT_LENGTH = 8192  # the server's --context-length: SmolLM2's max_position_embeddings
KV_TOKENS = 32768  # the server's KV pool (tokens)
SERVER_ARGS = ("--enable-metrics", "--log-level", "warning")  # beyond the launcher's CPU flags
COUNTERS = {  # what the server counts -> Prometheus sample (sglang 0.5.23, --enable-metrics)
    "requests": 'sglang:http_requests_total{endpoint="/generate",method="POST"}',
    "prompt_tokens": "sglang:prompt_tokens_total",
    "completion_tokens": "sglang:generation_tokens_total",
}


def find_trajectories(start: Path | None = None) -> Path | None:
    """The shared trajectories folder: ``shared/data/trajectories`` in the nearest folder above the clone."""
    for parent in (start or Path(__file__).resolve()).parents:
        folder = parent / "shared" / "data" / "trajectories"
        if folder.is_dir():
            return folder
    return None


def load_histories(folder: Path) -> dict[str, list]:
    """The :data:`TRAJECTORIES`' messages, by file name (their first messages only)."""
    from sgl_speccompact.history.formats import load_history

    return {name: load_history(folder / name)[:n] for name, n in TRAJECTORIES}


def every_history(folder: Path, max_chars: int = LEDGER_HISTORY_CHARS) -> dict[str, list]:
    """Every trajectory in ``folder``, its first messages up to ``max_chars`` rendered characters (never
    between a tool call and its results; at least two messages), its system prompt left out: no source of
    identifiers, and most of a short prefix's tokens in the SWE-agent files (a prefill of minutes here)."""
    from sgl_speccompact.errors import HistoryFormatError
    from sgl_speccompact.history.formats import load_history
    from sgl_speccompact.history.messages import parse_messages, render_history
    from sgl_speccompact.history.tool_groups import group_start

    out = {}
    for path in sorted(folder.iterdir()):
        try:
            messages = [m for m in load_history(path) if m.get("role") not in ("system", "developer")]
        except HistoryFormatError:
            continue  # a task list, not a trajectory
        n = 2
        while n < len(messages) and len(render_history(parse_messages(messages[:n + 1]))) <= max_chars:
            n += 1
        out[path.name] = messages[:max(2, group_start(messages, n))]
    return out


def server_spec(model_path: str, port: int, host: str = "127.0.0.1"):
    """The one CPU server, as the launcher would start it (``--device cpu``)."""
    from sgl_speccompact.launch.servers import ServerSpec

    return ServerSpec("target", model_path, host, port, 0.5, context_length=CONTEXT_LENGTH, device="cpu",
                      max_total_tokens=KV_TOKENS, extra_args=SERVER_ARGS)


def parse_counters(text: str) -> dict[str, float]:
    """The :data:`COUNTERS` in a ``/metrics`` text, summed over their label sets.

    >>> parse_counters('sglang:prompt_tokens_total{a="1"} 6.0\\nsglang:prompt_tokens_total{a="2"} 2.0')["prompt_tokens"]
    8.0
    """
    out = {k: 0.0 for k in COUNTERS}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        for key, want in COUNTERS.items():
            if name == want or ("{" not in want and re.fullmatch(re.escape(want) + r"(\{.*\})?", name)):
                out[key] += float(value)
    return out


def server_counters(url: str, get: Callable | None = None) -> dict[str, float]:
    """The server's own counters now (``GET /metrics``)."""
    import httpx

    res = (get or httpx.get)(url.rstrip("/") + "/metrics", timeout=60)
    res.raise_for_status()
    return parse_counters(res.text)


@dataclass
class Run:
    """One compaction on the real model, with the server's own count of it."""

    method: str  # the method asked for (auto included)
    trajectory: str  # file name
    sjc: bool  # Source-Judged Compaction ran after it
    messages: list  # the history compacted
    result: Any = None  # CompactionResult; None when it raised
    error: str | None = None  # the exception, when it raised
    wall_s: float = 0.0  # measured around the call (s)
    server: dict = field(default_factory=dict)  # the server's counters: after minus before
    mutated: bool = False  # the caller's messages differ after the call
    events: list = field(default_factory=list)  # the compaction's events (on_event), in order

    @property
    def key(self) -> str:
        return f"{self.method}{'+sjc' if self.sjc else ''}-{self.trajectory[:24]}"


def client_counts(result) -> dict[str, int]:
    """What the result's stats say was sent, over both roles (one server serves both)."""
    totals = [result.stats.totals(role) for role in result.stats.requests]
    return {k: sum(getattr(t, k) for t in totals) for k in COUNTERS}


def plan_runs(histories: dict[str, list], methods: tuple[str, ...] = METHODS) -> list[tuple[str, str, bool]]:
    """(method, trajectory, sjc) of every run: each method on each trajectory, SJC on the first.

    >>> len(plan_runs({"a": [], "b": [], "c": []})), len(plan_runs({"a": [], "b": []}, ("hermes",)))
    (16, 2)
    """
    names = list(histories)
    runs = [(m, t, False) for t in names for m in methods]
    return runs + [(m, names[0], True) for m in SJC_METHODS if m in methods]


def tier_plan(histories: dict[str, list], runs: tuple[tuple[str, int, bool], ...] = TIER_RUNS
              ) -> list[tuple[str, str, bool]]:
    """(method, trajectory, sjc) of the real-model tier's runs (:data:`TIER_RUNS`): each method once.

    >>> tier_plan({"a": [], "b": [], "c": []})[:2]
    [('openclaw', 'c', False), ('hermes', 'a', False)]
    >>> {m for m, _, _ in tier_plan({"a": [], "b": [], "c": []})} == set(METHODS)
    True
    """
    names = list(histories)
    return [(method, names[i], sjc) for method, i, sjc in runs]


def compact_all(url: str, histories: dict[str, list], *, timeout_s: float | None = None,
                log: Callable[[str], None] = lambda msg: None,
                after_each: Callable[[list[Run]], None] = lambda runs: None, config: dict = BUDGETS,
                methods: tuple[str, ...] = METHODS, plan: list[tuple[str, str, bool]] | None = None) -> list[Run]:
    """Run ``plan`` (default: :func:`plan_runs` of ``methods``) on the server at ``url`` (target and drafter),
    one at a time, under ``config``.

    ``after_each(runs so far)`` is called after every run (a report written as it goes).
    """
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.launch.cpu import CPU_SERVICE_DEFAULTS
    from sgl_speccompact.launch.templates import CHATML_TEMPLATE
    from sgl_speccompact.methods.registry import run_method
    from sgl_speccompact.methods.request import MethodRequest

    timeout = timeout_s or CPU_SERVICE_DEFAULTS["request_timeout_s"]
    target = SpecCompactEndpoint(url, chat_template=CHATML_TEMPLATE, timeout_s=timeout)
    drafter = SpecCompactEndpoint(url, chat_template=CHATML_TEMPLATE, timeout_s=timeout)
    out = []
    for method, name, sjc in plan if plan is not None else plan_runs(histories, methods):
        messages = histories[name]
        before_msgs = copy.deepcopy(messages)
        run = Run(method, name, sjc, messages)
        before = server_counters(url)
        t0 = time.perf_counter()
        try:
            run.result = run_method(method, MethodRequest(messages, on_event=run.events.append, source_judge=sjc),
                                    target=target, drafter=drafter, config=config, source_judge=sjc)
        except Exception as exc:  # noqa: BLE001 -- recorded; the tests and the page report it
            run.error = f"{type(exc).__name__}: {exc}"
        run.wall_s = time.perf_counter() - t0
        after = server_counters(url)
        run.server = {k: int(after[k] - before[k]) for k in COUNTERS}
        run.mutated = messages != before_msgs
        log(f"{run.key}: {run.wall_s:.0f} s, {run.error or 'ok'}")
        out.append(run)
        after_each(out)
    return out


# ---------------------------------------------------------------- the MEASURED (CPU) report


def conditions(url: str, budgets: dict = BUDGETS, histories: dict[str, list] | None = None) -> dict:
    """What the figures were measured under: model, the server's dtype, cores, load, budgets, trajectories."""
    import httpx

    info = httpx.get(url.rstrip("/") + "/server_info", timeout=60).json()
    files = [{"file": n, "messages": len(m)} for n, m in histories.items()] if histories is not None else [
        {"file": n, "messages": k} for n, k in TRAJECTORIES]
    return {"label": "MEASURED (CPU)", "model": MODEL, "server_dtype": info.get("dtype"),
            "server_device": info.get("device"), "sleep_on_idle": info.get("sleep_on_idle"),
            "cpu_cores": os.cpu_count(), "load_average_at_start": os.getloadavg(),
            "one_server_serves_target_and_drafter": True, "budgets": budgets, "trajectories": files}


def report(runs: list[Run], conds: dict) -> dict:
    """The JSON report of ``runs``: conditions (with the load average at the end) and one row per run."""
    rows = [run_row(r) for r in runs]
    return {"conditions": {**conds, "load_average_at_end": os.getloadavg()}, "by_method": by_method(rows),
            "runs": rows}


def run_row(run) -> dict:
    """One run as JSON-ready numbers."""
    from bench.evaluation.recall import summary_retention

    row = {"method": run.method, "trajectory": run.trajectory, "sjc": run.sjc, "wall_s": round(run.wall_s, 1),
           "error": run.error, "server_counted": run.server}
    if run.result is None:
        return row
    res, stats = run.result, run.result.stats
    slots = {s.name: "\n".join(ln.text for ln in s.lines) for s in res.slots}
    retained = summary_retention(run.messages, res.summary, slots)
    kept, bare, ledger = retained["summary"], retained["without_ledger"], retained["ledger"] or {}
    judged = stats.proposed_lines - stats.unjudged_lines
    row.update({
        "ran": res.method, "truncated": res.truncated, "summary_tokens": res.summary_tokens,
        "client_counted": client_counts(res),
        "per_role": {role: {kind: c.model_dump() for kind, c in kinds.items()} for role, kinds in stats.requests.items()},
        "acceptance": stats.accepted_lines / judged if judged > 0 else None,
        "proposed_lines": stats.proposed_lines, "accepted_lines": stats.accepted_lines,
        "repaired_lines": stats.repaired_lines,
        "label_mass_min": getattr(stats, "label_mass_min", None),
        "label_mass_median": getattr(stats, "label_mass_median", None),
        "unreliable_verdicts": getattr(stats, "unreliable_verdicts", None),
        "sjc_deleted": (res.source_judge or {}).get("deleted"),
        "recall": kept["recall"], "invented": kept["invented_count"], "source_identifiers": kept["source_identifiers"],
        "recall_without_ledger": bare["recall"], "invented_without_ledger": bare["invented_count"],
        "ledger_tokens": res.ledger.tokens if res.ledger else 0, "ledger_invented": ledger.get("invented_count", 0),
        "ledger_share": round((res.ledger.tokens if res.ledger else 0) / max(res.summary_tokens, 1), 3),
        "stop_reasons": {s.name: s.stop_reason for s in res.slots},
        "summary": res.summary,
    })
    return row


def by_method(rows: list[dict]) -> list[dict]:
    """Per method (SJC apart): runs, failures and the means of the runs that returned, rounded as printed."""
    def mean(values, digits):
        values = [v for v in values if v is not None]
        return round(statistics.mean(values), digits) if values else None

    out = []
    for key in dict.fromkeys(r["method"] + ("+sjc" if r["sjc"] else "") for r in rows):
        group = [r for r in rows if r["method"] + ("+sjc" if r["sjc"] else "") == key]
        ok = [r for r in group if not r["error"]]
        row = {"method": key, "runs": len(group), "raised": len(group) - len(ok),
               "wall_s": mean([r["wall_s"] for r in ok], 0)}
        for role in ("target", "drafter"):
            for name in ("requests", "prompt_tokens", "completion_tokens"):
                row[f"{role}_{name}"] = mean([sum(c[name] for c in r["per_role"].get(role, {}).values())
                                               for r in ok], 0)
        row.update({"acceptance": mean([r["acceptance"] for r in ok], 2),
                    "label_mass_min": mean([r["label_mass_min"] for r in ok], 4),
                    "recall": mean([r["recall"] for r in ok], 2), "invented": mean([r["invented"] for r in ok], 1),
                    "recall_without_ledger": mean([r.get("recall_without_ledger") for r in ok], 2),
                    "ledger_invented": mean([r.get("ledger_invented") for r in ok], 1),
                    "ledger_share": mean([r.get("ledger_share") for r in ok], 2),
                    "recall_min": min((r["recall"] for r in ok if r["recall"] is not None), default=None),
                    "truncated": sum(bool(r.get("truncated")) for r in ok),
                    "counts_match_server": all(r["client_counted"] == r["server_counted"] for r in ok)})
        out.append(row)
    return out


COLUMNS = (("method", "method"), ("runs", "runs"), ("raised", "raised"), ("wall_s", "wall s"),
           ("target_requests", "target req"), ("target_prompt_tokens", "target prompt tok"),
           ("target_completion_tokens", "target gen tok"), ("drafter_requests", "drafter req"),
           ("drafter_prompt_tokens", "drafter prompt tok"), ("drafter_completion_tokens", "drafter gen tok"),
           ("acceptance", "acceptance"), ("label_mass_min", "label mass min"), ("recall", "id recall"),
           ("recall_min", "id recall min"), ("recall_without_ledger", "id recall w/o ledger"),
           ("invented", "ids invented"), ("ledger_invented", "ledger ids invented"), ("ledger_share", "ledger share"),
           ("truncated", "truncated"))


def table(summary: list[dict]) -> str:
    """:func:`by_method` as a Markdown table (means over a method's runs that returned)."""
    def cell(v):
        return "n/a" if v is None else f"{v:g}" if isinstance(v, float) else str(v)

    summary = [{k: r.get(k) for k, _ in COLUMNS} for r in summary]  # a report written before a column existed

    head = "| " + " | ".join(h for _, h in COLUMNS) + " |"
    rule = "|" + "---|" * len(COLUMNS)
    return "\n".join([head, rule] + ["| " + " | ".join(cell(r[k]) for k, _ in COLUMNS) + " |" for r in summary])
