"""Redaction and the ledger's identifier extraction, before their prefilter and now, in one run (MEASURED (CPU)).

Method (printed first, with the conditions):

1. The code before the prefilter (``--baseline``, a git revision): its
   ``history/`` modules, read with ``git show``, and their ``redaction`` and
   ``identifiers`` imported under another package name beside today's.
2. Per shared trajectory and on a 2 MB history (the trajectories repeated,
   each copy with identifiers of its own: :func:`bench.harness.ledger.big_history`),
   parsed once, then ``--repeats`` rounds; in each round every variant below
   runs once, and each variant's figure is its least CPU time over the rounds
   (``time.process_time`` of this process: other processes' load does not
   count, a shared machine's caches do):

   * redaction of the parsed turns (``redact_turns``, as a compaction does it):
     the baseline; today's with hyperscan, its cache emptied first (a
     session's first compaction); today's with the cache holding the
     history's first 90% of messages (the next compaction of a grown
     history); today's without hyperscan (cache emptied: every pattern on
     every text);
   * identifier extraction: every text the ledger hands the extractor
     (``extract`` and ``commands``), with the baseline's, today's, and
     today's without hyperscan;
   * the ledger's whole extraction (``ledger_entries`` of the redacted turns)
     with the baseline's extractor, with today's, and with one that finds
     nothing (the ledger's own work apart from identifiers and their entries).
3. Compiling the hyperscan databases, once per process, apart.

Usage:
    python -m bench.redaction                      # every shared trajectory and the 2 MB history
    python -m bench.redaction --repeats 5 --big-chars 4000000
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib import import_module
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from bench.harness import runs
from bench.harness.ledger import TWO_MB, big_history

BASELINE = "25b556419582c9e9a51b8601cb1c7690a148ccc5"  # the last revision before the prefilter
GROWN = 0.9  # share of a history's messages the previous compaction saw (the warm-cache variant)
TARGET_S = 0.1  # the aim for redaction plus ledger extraction of the 2 MB history, CPU seconds


def baseline_modules(rev: str) -> SimpleNamespace:
    """The redaction and identifiers modules of ``rev``, imported as the package ``baseline_history``.

    Every module of ``sgl_speccompact/history/`` at ``rev`` is copied, so
    their imports of each other resolve inside the copy.
    """
    root = Path(tempfile.mkdtemp(prefix="bench-redaction-"))
    package = root / "baseline_history"
    package.mkdir()
    folder = "sgl_speccompact/history/"
    names = subprocess.run(["git", "ls-tree", "--name-only", rev, folder], cwd=runs.REPO, check=True,
                           capture_output=True, text=True).stdout.split()
    for path in names:
        if path.endswith(".py") and not path.endswith("__init__.py"):
            source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=runs.REPO, check=True,
                                    capture_output=True, text=True).stdout
            (package / Path(path).name).write_text(source)
    (package / "__init__.py").write_text("")
    sys.path.insert(0, str(root))
    return SimpleNamespace(redaction=import_module("baseline_history.redaction"),
                           identifiers=import_module("baseline_history.identifiers"))


def cpu_s(fn: Callable[[], object]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


class Plain:
    """Today's code as it runs where hyperscan does not import."""

    def __enter__(self):
        from sgl_speccompact.history import prefilter
        self.saved, prefilter.hyperscan = prefilter.hyperscan, None

    def __exit__(self, *exc):
        from sgl_speccompact.history import prefilter
        prefilter.hyperscan = self.saved


def identifier_texts(turns) -> list[tuple[str, str]]:
    """``(function, text)`` for every call the ledger makes to the extractor on ``turns``."""
    from sgl_speccompact.history import ledger_entries as ledger

    seen: list[tuple[str, str]] = []
    saved = ledger.extract, ledger.commands
    ledger.extract = lambda text: (seen.append(("extract", text)), saved[0](text))[1]
    ledger.commands = lambda text: (seen.append(("commands", text)), saved[1](text))[1]
    try:
        ledger.ledger_entries(turns)
    finally:
        ledger.extract, ledger.commands = saved
    return seen


# an extractor that finds nothing: what the ledger's extraction costs without identifiers
NO_IDENTIFIERS = SimpleNamespace(extract=lambda text: [], commands=lambda text: [])


def with_extractor(module, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` with the ledger calling ``module``'s extract and commands."""
    from sgl_speccompact.history import ledger_entries as ledger

    def run():
        saved = ledger.extract, ledger.commands
        ledger.extract, ledger.commands = module.extract, module.commands
        try:
            return fn()
        finally:
            ledger.extract, ledger.commands = saved
    return run


def measure(name: str, messages: list, old: SimpleNamespace, repeats: int) -> dict:
    """Every variant's least CPU seconds over ``repeats`` interleaved rounds (module docstring, 2)."""
    from sgl_speccompact.history import identifiers, redaction
    from sgl_speccompact.history.ledger_entries import ledger_entries
    from sgl_speccompact.history.messages import parse_messages
    from sgl_speccompact.history.redaction_cache import REDACTION_CACHE

    turns = parse_messages(messages, max_messages=10**7, max_chars=2**31)
    redacted, _ = redaction.redact_turns(turns)
    texts = identifier_texts(redacted)
    seen = turns[:int(len(turns) * GROWN)]

    def scans(module):
        return lambda: [getattr(module, fn)(text) for fn, text in texts]

    def cold(fn):
        return lambda: (REDACTION_CACHE.clear(), fn())

    def plain(fn):
        def run():
            with Plain():
                return fn()
        return run

    variants = {
        "redact_before": lambda: old.redaction.redact_turns(turns),
        "redact": cold(lambda: redaction.redact_turns(turns)),
        "redact_grown": lambda: redaction.redact_turns(turns),  # after `ready` below, outside the timing
        "redact_plain": plain(cold(lambda: redaction.redact_turns(turns))),
        "identifiers_before": scans(old.identifiers),
        "identifiers": scans(identifiers),
        "identifiers_plain": plain(scans(identifiers)),
        "ledger_before": with_extractor(old.identifiers, lambda: ledger_entries(redacted)),
        "ledger": lambda: ledger_entries(redacted),
        "ledger_no_identifiers": with_extractor(NO_IDENTIFIERS, lambda: ledger_entries(redacted)),
    }
    # what a variant's cache holds before it is timed: the messages the previous compaction saw
    ready = {"redact_grown": lambda: (REDACTION_CACHE.clear(), redaction.redact_turns(seen))}
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(repeats):
        for key, fn in variants.items():
            ready.get(key, lambda: None)()
            best[key] = min(best[key], cpu_s(fn))
    REDACTION_CACHE.clear()
    row = {"history": name, "messages": len(messages),
           "characters": sum(len(t.content) + sum(len(c.arguments) for c in t.tool_calls) for t in turns),
           "identifier_texts": len(texts)}
    row.update({f"{k}_cpu_s": round(v, 4) for k, v in best.items()})
    row["total_before_cpu_s"] = round(best["redact_before"] + best["ledger_before"], 4)
    row["total_cpu_s"] = round(best["redact"] + best["ledger"], 4)
    for what in ("redact", "identifiers", "ledger", "total"):  # before / now, measured in this run
        row[f"{what}_speedup"] = round(row[f"{what}_before_cpu_s"] / max(row[f"{what}_cpu_s"], 1e-6), 1)
    return row


def compile_seconds() -> dict:
    """CPU seconds to compile each hyperscan database (once per process; before anything is timed)."""
    from sgl_speccompact.history import identifiers, prefilter, redaction

    if not prefilter.available():
        return {}
    return {"redaction": round(cpu_s(lambda: redaction.prefilter().database._compiled()), 4),
            "identifiers": round(sum(cpu_s(db._compiled) for db in identifiers._STARTS_DBS), 4)}


COLUMNS = [("history", "history"), ("characters", "chars"),
           ("redact_before_cpu_s", "redact before"), ("redact_cpu_s", "redact"),
           ("redact_grown_cpu_s", "redact, grown"), ("redact_plain_cpu_s", "redact, no hyperscan"),
           ("identifiers_before_cpu_s", "ids before"), ("identifiers_cpu_s", "ids"),
           ("identifiers_plain_cpu_s", "ids, no hyperscan"), ("ledger_before_cpu_s", "ledger before"),
           ("ledger_cpu_s", "ledger"), ("total_before_cpu_s", "redact+ledger before"),
           ("total_cpu_s", "redact+ledger")]


def table(rows: list[dict]) -> str:
    def cell(v):
        return f"{v:,}" if isinstance(v, int) else f"{v:.4f}" if isinstance(v, float) else str(v)
    out = ["| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(out + ["| " + " | ".join(cell(r[k]) for k, _ in COLUMNS) + " |" for r in rows])


def summary(big: dict, chars: int) -> list[str]:
    """What the big history's row says (against the target on 2 MB), in ratios measured in this run."""
    def x(a, b):
        return f"{big[a]:.3f} -> {big[b]:.3f} s ({big[a] / max(big[b], 1e-6):.1f}x)"
    mine, name = big["redact_cpu_s"] + big["identifiers_cpu_s"], big["history"]
    target = (f"target {TARGET_S} s {'met' if big['total_cpu_s'] <= TARGET_S else 'NOT met'}" if chars == TWO_MB
              else f"the target ({TARGET_S} s) is for 2 MB")
    return [f"{name}, redaction: {x('redact_before_cpu_s', 'redact_cpu_s')}; the next compaction of a "
            f"grown history {big['redact_grown_cpu_s']:.3f} s; without hyperscan {big['redact_plain_cpu_s']:.3f} s",
            f"{name}, identifier extraction: {x('identifiers_before_cpu_s', 'identifiers_cpu_s')}; "
            f"without hyperscan {big['identifiers_plain_cpu_s']:.3f} s",
            f"{name}, the ledger's whole extraction: {x('ledger_before_cpu_s', 'ledger_cpu_s')}",
            f"{name}, redaction + ledger extraction: {x('total_before_cpu_s', 'total_cpu_s')}; {target}; "
            f"redaction and identifier scans {mine:.3f} s of it, the rest of the ledger's extraction "
            f"{big['ledger_cpu_s'] - big['identifiers_cpu_s']:.3f} s (without identifiers it takes "
            f"{big['ledger_no_identifiers_cpu_s']:.3f} s)"]


def main(argv: list[str] | None = None) -> int:
    from sgl_speccompact.history import prefilter

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trajectories", nargs="+", metavar="PATH", help="default: every shared trajectory")
    p.add_argument("--repeats", type=int, default=3, help="rounds; each figure is the least of them (default 3)")
    p.add_argument("--big-chars", type=int, default=TWO_MB, help="size of the big history (default 2 MB)")
    p.add_argument("--baseline", default=BASELINE, help="git revision of the code before the prefilter")
    p.add_argument("--out", help="JSON output (default bench/results/redaction-<timestamp>.json)")
    args = p.parse_args(argv)
    old = baseline_modules(args.baseline)
    trajectories, skipped = runs.load_trajectories(args.trajectories, 0, None)
    hyperscan = getattr(prefilter.hyperscan, "__version__", None)
    compiled = compile_seconds()
    conditions = {"label": "MEASURED (CPU)", "cpu_count": os.cpu_count(), "load_average_start": os.getloadavg(),
                  "python": platform.python_version(), "hyperscan": hyperscan, "baseline": args.baseline,
                  "repeats": args.repeats, "clock": "time.process_time, least of the rounds",
                  "compile_cpu_s": compiled}
    print("Method: redaction (redact_turns) and the ledger's identifier extraction of each shared trajectory "
          f"and of a {args.big_chars / 1e6:g} MB history, the code before the prefilter (git {args.baseline[:12]}) "
          "against today's with hyperscan (cache emptied; and the next compaction of a history grown by 10%) and "
          "without it; CPU seconds of this process, the least of interleaved rounds")
    print("Conditions: " + ", ".join(f"{k}={v}" for k, v in conditions.items()), flush=True)
    rows = [measure(t.name, t.messages, old, args.repeats) for t in trajectories]
    big = measure(f"{args.big_chars / 1e6:g} MB history", big_history([t.messages for t in trajectories],
                                                                       args.big_chars), old, args.repeats)
    conditions["load_average_end"] = os.getloadavg()
    print(table(rows + [big]))
    lines = summary(big, args.big_chars)
    print("\n".join(lines))
    print(f"Load average at the end: {conditions['load_average_end']}")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report = {"benchmark": "redaction", "conditions": conditions, "timestamp": stamp, "trajectories": rows,
              "big_history": big, "summary": lines, "skipped": [p for p, _ in skipped]}
    path = runs.write_json(report, args.out or str(runs.RESULTS_DIR / f"redaction-{stamp}.json"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
