"""bench/ledger.py on a small history: the memo comparison it reports (numbers, not timings, are checked)."""

from __future__ import annotations

from bench import ledger
from tests.support.methods import tool_loop


def test_the_memo_row_counts_what_the_next_compaction_looked_up():
    messages = tool_loop(20, lines=5)
    row = ledger.measure("loop", messages, 1024, lambda texts: [len(t) // 4 for t in texts], 1, with_memo=True)
    first = int(len(messages) * ledger.SESSION_SHARE)
    assert row["memo_first_messages"] == first and row["budget_holds"]
    assert row["memo_hits"] == first - 1  # the first compaction's messages (the system prompt is no source)
    assert row["memo_misses"] == len(messages) - first  # only the messages it had not seen are extracted
    assert row["extract_next_cpu_s"] >= 0 and row["extract_again_cpu_s"] >= 0
