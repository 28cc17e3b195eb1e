"""Where the simulated workload's text comes from (benchmark inputs, no policy).

* :func:`trajectory_lines`: the distinct content lines of the shared agent
  trajectories, the lines every simulated summary is made of;
* :func:`trajectory_section_sizes`: Progress sub-section sizes read from the
  trajectories' actions and their outcomes (:func:`action_outcomes`);
* :func:`synthetic_history`: an agent history of a given size built from
  those lines, for histories longer or shorter than the real ones.

:mod:`.workload` draws its summaries from these.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from sgl_speccompact.history.messages import content_text

LINE_CHARS = (24, 180)  # usable trajectory line lengths, characters


def trajectory_lines(paths: list[Path]) -> list[str]:
    """Distinct content lines of the trajectories' message texts, in file order."""
    from sgl_speccompact.history.formats import load_history

    out: dict[str, None] = {}
    for path in paths:
        try:
            messages = load_history(path)
        except Exception:  # noqa: BLE001 - a file that is not a trajectory adds no lines
            continue
        for m in messages:
            text = content_text(m.get("content"), " ")
            for line in text.splitlines():
                line = " ".join(line.split()).replace("<", "(").replace(">", ")")
                if LINE_CHARS[0] <= len(line) <= LINE_CHARS[1] and any(c.isalpha() for c in line):
                    out.setdefault(line)
    return list(out)


_FAILED_RE = re.compile(r"(?i)\b(error|traceback|exception|failed|not found)\b|<returncode>[1-9]")


def action_outcomes(messages: list[dict]) -> list[bool]:
    """Whether each action of an agent history came back without an error, in order.

    An action's result is a ``tool`` message, or (agents that put the action
    in the assistant text) the ``user`` message right after an assistant one.

    >>> action_outcomes([{"role": "user", "content": "task"}, {"role": "assistant", "content": "ls"},
    ...                  {"role": "user", "content": "a.py"}, {"role": "assistant", "content": "run"},
    ...                  {"role": "tool", "content": "Traceback: boom"}])
    [True, False]
    """
    out, prev = [], None
    for m in messages:
        role, text = m.get("role"), content_text(m.get("content"), " ")
        if role == "tool" or (role == "user" and prev == "assistant"):
            out.append(not _FAILED_RE.search(text))
        prev = role
    return out


def trajectory_section_sizes(paths: list[Path]) -> list[tuple[int, int, int]]:
    """``(done, in progress, blocked)`` Progress sizes, one per trajectory that has actions.

    Done: the actions that came back without an error; Blocked: the failed
    ones; In Progress: one (the work the history stops in).  An upper-end
    estimate of what a Progress section lists, taken from real histories.
    """
    from sgl_speccompact.history.formats import load_history

    out = []
    for path in paths:
        try:
            outcomes = action_outcomes(load_history(path))
        except Exception:  # noqa: BLE001 - a file that is not a trajectory has no sizes
            continue
        if outcomes:
            out.append((sum(outcomes), 1, len(outcomes) - sum(outcomes)))
    return out


def synthetic_history(lines: list[str], tokens: int, count, seed: int = 0) -> list[dict]:
    """An agent history of about ``tokens`` tokens (``count(text) -> tokens``) from real lines.

    Alternating user / assistant / tool turns of 6-20 trajectory lines each.
    """
    rng = random.Random(seed)
    roles = ("user", "assistant", "tool")
    messages, total, i = [{"role": "system", "content": "You are a coding agent."}], 0, 0
    while total < tokens:
        body = "\n".join(rng.choice(lines) for _ in range(rng.randint(6, 20)))
        role = roles[i % 3]
        msg = {"role": role, "content": body}
        if role == "assistant":
            msg["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                                  "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]
        if role == "tool":
            msg["tool_call_id"] = f"call_{i - 1}"
        messages.append(msg)
        total += count(body)
        i += 1
    if messages[-1]["role"] == "assistant":
        messages.append({"role": "tool", "tool_call_id": f"call_{i - 1}", "content": "done"})
    return messages
