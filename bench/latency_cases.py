"""The latency bench's agent-session table (the cases themselves: ``bench/harness/latency_cases.py``).

Scenario ``agent-session``: before each compaction, the agent's session
(every assistant turn of the history as one ``/v1/chat/completions``
request) runs on the simulated target in a run of its own, on a fresh
cache; the compaction then runs with the radix trees kept and its clock from
0.  The session's time is reported (``session.session_s``) and is NOT part
of the compaction's end-to-end.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.harness

from bench.harness.latency_cases import (  # noqa: F401 - re-exported for the bench scripts
    LAYOUTS,
    SESSION_NOTE,
    SLOT_METHODS,
    cases,
    first_target,
    run_session,
    runner_kwargs,
)


def format_cache_table(summary: list[dict]) -> str:
    """Per (pair, deployment, p) and case: the target's cached tokens, e2e and the session's time."""
    out = []
    for cell in dict.fromkeys((s["model_pair"], s["deployment"], s["p_accept"]) for s in summary):
        rows = [s for s in summary if (s["model_pair"], s["deployment"], s["p_accept"]) == cell]
        if not any(s.get("mean_first_target") for s in rows):
            continue
        out.append(f"\nSIMULATED agent session then compaction, deployment {cell[1]}, {cell[0]}, p={cell[2]} "
                   f"(median over {rows[0]['runs']} runs; {SESSION_NOTE})")
        out.append("| method | layout | e2e s | T first req prompt | T first req cached | T prompt total | "
                   "T cached total | session s (not in e2e) |")
        out.append("|---|---|---|---|---|---|---|---|")
        for s in rows:
            f, t = s["mean_first_target"], s["mean_target_tokens"]
            sess = s.get("mean_session_s")
            out.append(f"| {s['label']} | {s['layout']} | {s['e2e_median_s']:.2f} | {f['prompt_tokens']:.0f} | "
                       f"{f['cached_tokens']:.0f} | {t['prompt_tokens']:.0f} | {t['cached_tokens']:.0f} | "
                       f"{'-' if sess is None else f'{sess:.2f}'} |")
    return "\n".join(out)
