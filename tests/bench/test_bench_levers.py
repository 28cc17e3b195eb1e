"""bench/levers.py: a lever's medians against the baseline's, and whether it kept the decisions."""

from __future__ import annotations

from tests.support.bench_scripts import load_bench


def report(e2e: dict, digest: str = "d") -> dict:
    rows = [{"model_pair": "qwen3-8b:qwen3-0.6b", "deployment": "one-gpu", "method": m, "draw": k, "e2e_s": t,
             "decisions": digest if m == "target_self" else "s"}
            for m, ts in e2e.items() for k, t in enumerate(ts)]
    return {"rows": rows, "conditions": {"seeds": 3, "speculative": ["eagle3"], "p_accept": [0.7]}}


def test_a_lever_row_gives_both_medians_the_speedup_and_the_decisions_check():
    levers = load_bench("levers")
    base = report({"target_self": [1.0, 2.0, 9.0], "speccompact": [3.0, 3.0, 3.0], "hermes": [5.0, 5.0, 5.0]})
    lever = report({"target_self": [1.0, 1.0, 1.0], "speccompact": [4.0, 6.0, 6.0], "hermes": [5.0, 5.0, 5.0]}, "x")
    rows = levers.table(base, "L", lever)
    assert rows == ["| L | qwen3-8b | one-gpu | SpecCompact | 3.00 (3.00-3.00) | 6.00 (4.00-6.00) | 0.50x | yes |",
                    "| L | qwen3-8b | one-gpu | Target-self | 2.00 (1.00-9.00) | 1.00 (1.00-1.00) | 2.00x | no |"]
