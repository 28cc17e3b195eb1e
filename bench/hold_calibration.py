#!/usr/bin/env python
"""How much of a session's facts still hold later: the held share h, measured on the shared trajectories.

Method: each trajectory's messages (the system prompt left out) are split in
two halves by characters.  The facts of the first half are its identifiers
(``sgl_speccompact/history/identifiers.py``: paths, error names, hashes,
ids, numbers with units, commands, URLs), what a summary's Critical Context,
Progress and Key Decisions slots name.  A fact still holds when the second
half names it again (the same canonical value).  Per trajectory it prints the
share, per kind and in all, and the pooled share over every trajectory; the
session benchmark's ``--hold`` sweep (0, 0.3, 0.6, 0.9) is read against it.
This is a text statistic (MEASURED on the trajectories), not a latency, and
it counts a fact as holding when it is mentioned again, which is an upper
bound for "still true" (a fact mentioned to be contradicted counts) and a
lower bound for "still relevant" (a goal that holds silently does not count).

Usage::

    python -m bench.hold_calibration            # every shared trajectory
    python -m bench.hold_calibration --out bench/results/hold-calibration.json
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime



def text_of(message: dict) -> str:
    """A message's content and tool-call arguments, as one text."""
    calls = "".join(str((c.get("function") or {}).get("arguments", "")) for c in message.get("tool_calls") or [])
    return str(message.get("content") or "") + "\n" + calls


def halves(messages: list[dict]) -> tuple[str, str]:
    """The text of the first and second half of ``messages`` by characters (no system prompt).

    >>> halves([{"role": "system", "content": "s"}, {"role": "user", "content": "aaaa"},
    ...         {"role": "assistant", "content": "bb"}, {"role": "user", "content": "cc"}])
    ('aaaa\\n', 'bb\\n\\ncc\\n')
    """
    body = [text_of(m) for m in messages if m.get("role") != "system"]
    total, run, cut = sum(len(t) for t in body), 0, len(body)
    for i, t in enumerate(body):
        if run >= total / 2:
            cut = i
            break
        run += len(t)
    return "\n".join(body[:cut]), "\n".join(body[cut:])


def held(first: str, second: str) -> dict:
    """Facts of ``first`` and how many ``second`` names again, per kind and in all."""
    from sgl_speccompact.history.identifiers import extract

    later = {i for i in extract(second)}
    out: dict = {"all": [0, 0]}
    for ident in extract(first):
        for key in ("all", ident.kind):
            got = out.setdefault(key, [0, 0])
            got[0] += 1
            got[1] += ident in later
    return {k: {"facts": n, "held": h, "share": h / n if n else None} for k, (n, h) in out.items()}


def main(argv: list[str] | None = None) -> int:
    from bench.harness.runs import RESULTS_DIR, load_trajectories, write_json

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trajectories", nargs="+", metavar="PATH", help="trajectory files (default: every shared one)")
    p.add_argument("--out", help=f"JSON path (default: print only; e.g. {RESULTS_DIR}/hold-calibration.json)")
    args = p.parse_args(argv)
    trajs, skipped = load_trajectories(args.trajectories, 0, None)
    print("Method: identifiers of each trajectory's first half (by characters) named again in its second half "
          "(MEASURED on the shared trajectories; a text statistic, no latency)")
    rows, pooled = [], [0, 0]
    for t in trajs:
        got = held(*halves(t.messages))
        rows.append({"trajectory": t.name, "messages": len(t.messages), **got})
        pooled[0] += got["all"]["facts"]
        pooled[1] += got["all"]["held"]
        share = got["all"]["share"]
        kinds = ", ".join(f"{k} {v['held']}/{v['facts']}" for k, v in got.items() if k != "all")
        print(f"{t.name[:60]:60} {len(t.messages):4} messages  held {got['all']['held']:4}/{got['all']['facts']:<4} "
              f"= {'-' if share is None else f'{share:.2f}'}  ({kinds})")
    shares = sorted(r["all"]["share"] for r in rows if r["all"]["share"] is not None)
    median = shares[len(shares) // 2] if shares else None
    print(f"pooled: {pooled[1]}/{pooled[0]} = {pooled[1] / pooled[0]:.2f}; per-trajectory median "
          f"{median:.2f}, min {shares[0]:.2f}, max {shares[-1]:.2f} over {len(shares)} trajectories")
    if args.out:
        write_json({"benchmark": "hold_calibration", "kind": "measured (text statistic)",
                    "timestamp": datetime.now(UTC).isoformat(timespec="seconds"), "rows": rows,
                    "skipped": [{"path": a, "reason": b} for a, b in skipped],
                    "pooled": {"facts": pooled[0], "held": pooled[1], "share": pooled[1] / pooled[0]},
                    "per_trajectory": {"median": median, "min": shares[0], "max": shares[-1], "n": len(shares)}},
                   args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
