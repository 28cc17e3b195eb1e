"""Incremental examples for drafter SFT: a history cut in two (pure helpers).

With a previous summary, SpecCompact's slot requests ask to keep the
earlier summary's facts that still hold (``prompts.KEEP_PREVIOUS``).  The
drafter learns that from examples of the same shape: the history is cut
into an earlier and a later part, the target summarizes the earlier part
(every slot, assembled as the summary SpecCompact would return), and the
example is the later part's slot prompt with that summary as
``previous_summary``, answered by the target.

A cut never separates a tool call from its result, and leading system
messages are kept in both parts (an agent keeps its system prompt across
compactions).
"""

from __future__ import annotations

import random
from typing import Iterable

MIN_PART = 2  # non-system messages each part needs


def cut_point(messages: list[dict]) -> int | None:
    """Index where ``messages`` can be cut, nearest the middle; None when no cut is valid.

    A valid cut starts the later part at a user or assistant message, after
    every earlier tool call has its result, with at least
    :data:`MIN_PART` non-system messages on each side.

    >>> call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
    ...         "function": {"name": "ls", "arguments": "{}"}}]}
    >>> m = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}, call,
    ...      {"role": "tool", "tool_call_id": "c1", "content": "x"}, {"role": "assistant", "content": "b"},
    ...      {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]
    >>> cut_point(m)
    4
    >>> cut_point(m[:5]) is None
    True
    """
    start = _leading_system(messages)
    open_calls: set[str] = set()
    valid = []
    for i in range(start, len(messages)):
        m = messages[i]
        if (i - start >= MIN_PART and len(messages) - i >= MIN_PART and not open_calls
                and m.get("role") in ("user", "assistant")):
            valid.append(i)
        for call in m.get("tool_calls") or ():
            open_calls.add(str(call.get("id", "")))
        if m.get("role") == "tool":
            open_calls.discard(str(m.get("tool_call_id", "")))
    if not valid:
        return None
    middle = start + (len(messages) - start) / 2
    return min(valid, key=lambda i: (abs(i - middle), i))


def split_history(messages: list[dict], cut: int) -> tuple[list[dict], list[dict]]:
    """``(earlier, later)``: the leading system messages head both parts.

    >>> m = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
    ...      {"role": "assistant", "content": "b"}]
    >>> [[x["content"] for x in part] for part in split_history(m, 2)]
    [['s', 'a'], ['s', 'b']]
    """
    system = messages[:_leading_system(messages)]
    return messages[:cut], system + messages[cut:]


def pick_incremental(keys: Iterable[str], fraction: float, seed: int) -> set[str]:
    """The trajectory ids that also give incremental examples, deterministically.

    >>> pick_incremental(["a", "b", "c", "d"], 0.5, 1) == pick_incremental(["d", "c", "b", "a"], 0.5, 1)
    True
    >>> pick_incremental(["a", "b"], 0.0, 1)
    set()
    """
    order = sorted(set(keys))
    random.Random(seed).shuffle(order)
    return set(order[:round(len(order) * fraction)])


def _leading_system(messages: list[dict]) -> int:
    n = 0
    while n < len(messages) and messages[n].get("role") in ("system", "developer"):
        n += 1
    return n
