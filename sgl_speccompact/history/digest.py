"""The drafter's digest of a history: long tool outputs cut to their head and tail (pure).

With ``CompactConfig.drafter_digest`` on, SpecCompact's drafter reads this
digest instead of the whole history; the target still reads, judges and
repairs against the whole history, so a line the digest misled the drafter
into is rejected like any other wrong draft.  The digest costs acceptance,
never correctness, and makes every drafter pass cheaper (the drafter is
KV-bound at long context).

A tool output longer than ``2 * keep`` tokens keeps its first and last
``keep`` tokens (estimated from its characters per token) around a marker
that says how much was cut::

    [... 812 tokens of tool output clipped for the drafter ...]

Every other turn (system, user, assistant prose and tool calls) is kept
whole: those hold the task and the decisions.  The caller's turns are only
read; clipped turns are copies.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from .messages import Turn

MARKER = "\n[... {n} tokens of tool output clipped for the drafter ...]\n"


def clip_text(text: str, tokens: int, keep: int) -> str:
    """``text`` (``tokens`` long) cut to about ``keep`` tokens at each end.

    Characters per token are estimated from the whole text, so the cut is
    in characters; a text of at most ``2 * keep`` tokens is returned whole.

    >>> clip_text("a" * 100, 10, 2)
    'aaaaaaaaaaaaaaaaaaaa\\n[... 6 tokens of tool output clipped for the drafter ...]\\naaaaaaaaaaaaaaaaaaaa'
    >>> clip_text("short", 3, 2)
    'short'
    """
    if tokens <= 2 * keep or not text:
        return text
    chars = max(1, round(len(text) * keep / tokens))
    return text[:chars] + MARKER.format(n=tokens - 2 * keep) + text[-chars:]


def drafter_digest(turns: Sequence[Turn], keep: int, count: Callable[[list[str]], list[int]]) -> tuple[Turn, ...]:
    """The turns with every tool output longer than ``2 * keep`` tokens clipped (:func:`clip_text`).

    ``count`` gives the length of each text in tokens (one call for all
    tool outputs).

    >>> t = (Turn("user", "fix a.py"), Turn("tool", "x" * 400, tool_call_id="c1"))
    >>> out = drafter_digest(t, 10, lambda texts: [len(x) // 4 for x in texts])
    >>> out[0] is t[0], len(out[1].content) < 400, "clipped" in out[1].content, len(t[1].content)
    (True, True, True, 400)
    """
    tools = [i for i, t in enumerate(turns) if t.role == "tool" and t.content]
    sizes = dict(zip(tools, count([turns[i].content for i in tools]))) if tools else {}
    return tuple(replace(t, content=clip_text(t.content, sizes[i], keep)) if i in sizes else t
                 for i, t in enumerate(turns))
