"""Where a history may be cut: never between an assistant's tool calls and their results.

Every cut of a history in the package goes through this module:

* :func:`tool_groups` gives the ``[start, end)`` spans of parsed turns
  that must stay together (a call with all its results, matched by id);
  chunking packs whole spans into blocks;
* :func:`group_start` and :func:`past_tool_results` move one cut index over
  OpenAI message dicts the way Hermes Agent aligns its compression
  boundaries (by role: a cut just after tool results moves back to the
  assistant turn that called them); the session simulator cuts with them.

The Hermes plugin (``integrations/hermes``) runs inside Hermes's own Python
with the standard library only, so it keeps a copy of the last two; a test
checks the copy agrees with these on the shared trajectories.
"""

from __future__ import annotations

from .messages import Turn


def tool_groups(turns: tuple[Turn, ...]) -> list[tuple[int, int]]:
    """``[start, end)`` spans of turns that must stay together: a tool call with all its results.

    >>> from .messages import ToolCall
    >>> t = (Turn("user", "go"), Turn("assistant", "", (ToolCall("c1", "ls", ""),)),
    ...      Turn("tool", "a", tool_call_id="c1"), Turn("assistant", "done"))
    >>> tool_groups(t)
    [(0, 1), (1, 3), (3, 4)]
    """
    spans: list[list[int]] = []
    group_of: dict[str, int] = {}  # tool call id -> index of the span holding the call
    for i, t in enumerate(turns):
        g = group_of.get(t.tool_call_id) if t.role == "tool" else None
        if g is not None:  # a result joins its call's span, and every span since then
            spans[g][1] = i + 1
            del spans[g + 1:]
            group_of = {k: min(v, g) for k, v in group_of.items()}
            continue
        spans.append([i, i + 1])
        for c in t.tool_calls:
            group_of[c.id] = len(spans) - 1
    return [(a, b) for a, b in spans]


def group_start(messages: list[dict], i: int) -> int:
    """A cut at ``i`` pulled back so an assistant's tool calls stay with their results.

    >>> m = [{"role": "user"}, {"role": "assistant", "tool_calls": [{}]}, {"role": "tool"}, {"role": "user"}]
    >>> group_start(m, 2), group_start(m, 3), group_start(m, 1)
    (1, 1, 1)
    """
    if i <= 0 or i >= len(messages):
        return i
    j = i - 1
    while j >= 0 and messages[j].get("role") == "tool":
        j -= 1
    return j if j >= 0 and messages[j].get("role") == "assistant" and messages[j].get("tool_calls") else i


def past_tool_results(messages: list[dict], i: int) -> int:
    """A cut at ``i`` moved forward past any tool results there.

    >>> past_tool_results([{"role": "user"}, {"role": "tool"}, {"role": "tool"}, {"role": "user"}], 1)
    3
    """
    while i < len(messages) and messages[i].get("role") == "tool":
        i += 1
    return i
