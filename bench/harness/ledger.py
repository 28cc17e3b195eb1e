"""What the exact-ledger benchmark shares: a 2 MB history, a local token counter, CPU-time measurement.

``bench/ledger.py`` stays thin; the tests reuse :func:`big_history` for the
budget check on a 2 MB history.  Nothing here is a measurement by itself.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable

TWO_MB = 2_000_000  # bytes of message text the big history holds at least


def big_history(histories: list[list[dict]], min_chars: int = TWO_MB) -> list[dict]:
    """The shared trajectories one after another, over and over, until their texts hold ``min_chars``.

    Each copy renames its tool-call ids (so every result still answers its
    own call) and ends each tool output with one line of identifiers of its
    own (a path, a job id, a commit-like hash), so the copies add entries
    instead of only referencing the first copy's.
    """
    out: list[dict] = []
    size, k = 0, 0
    while size < min_chars:
        for messages in histories:
            for j, m in enumerate(messages):
                m = dict(m)
                if m.get("tool_calls"):
                    m["tool_calls"] = [{**c, "id": f"{c.get('id')}-r{k}"} for c in m["tool_calls"]]
                if m.get("role") == "tool":
                    m["tool_call_id"] = f"{m.get('tool_call_id')}-r{k}"
                    m["content"] = (f"{m.get('content') or ''}\nbatch {k}: wrote /data/run{k}/part{j}.csv, "
                                    f"job JOB{k:04d}X{j:03d}, build {k:05x}{j:03x}f")
                if m.get("role") in ("system", "developer") and out:
                    continue  # one system prompt, at the start
                out.append(m)
                size += len(str(m.get("content") or "")) + sum(len(str(c)) for c in m.get("tool_calls") or [])
        k += 1
    return out


def token_counter(tokenizer_dir: str) -> Callable[[list[str]], list[int]]:
    """Texts -> their lengths in the tokenizer at ``tokenizer_dir`` (its ``tokenizer.json``), no special tokens."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    return lambda texts: [len(e.ids) for e in tok.encode_batch(list(texts), add_special_tokens=False)]


def cpu_seconds(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """The median CPU time of ``repeats`` calls of ``fn`` in this process (other processes' load does not
    count), and the last call's result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return statistics.median(times), out
