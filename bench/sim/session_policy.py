"""An agent session under Hermes's compaction policy, on token counts (pure; SIMULATED sessions).

What ``bench/session.py`` replays: an agent that sends its whole context
before every assistant turn, and compacts the way the Hermes plugin in
``integrations/hermes/`` does (hermes-agent 0.19.0's policy).  The trigger
and the pruning are the plugin's own code, imported, not a model of it:

* the trigger is ``speccompact_hermes.policy.hermes_trigger``
  (``max(int(window * pct), 64000)`` with ``pct`` raised to 0.75 under a
  512K window, 85% of the window when the floor reaches it); compaction
  runs after the response whose prompt reached it;
* old tool outputs are pruned by ``speccompact_hermes.policy.pruned_view``:
  one-line stubs in Hermes's wording outside the recent messages
  (``target_ratio`` of the trigger by Hermes's rough estimate, at least
  ``protect_last_n``), identical outputs inside them back-referenced;
* the head is the system prompt (plus the first three messages on the first
  compaction), the tail ``target_ratio`` of the trigger (at least three
  messages, never splitting a tool call from its results, always holding the
  latest user message), and the middle becomes one summary message (this
  cut is modelled here on token counts);
* an ahead-of-time compaction covers the middle up to the prune boundary,
  the part that does not change before the trigger.

The shared trajectories are far shorter than Hermes's smallest trigger
(64K), so a session plays its trajectory's turns again and again (fresh
tool-call ids, each pass's tool outputs tagged) until it reaches
``session_tokens``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

from speccompact_hermes.policy import hermes_trigger, pruned_view

from sgl_speccompact.history.messages import content_text
from sgl_speccompact.history.tool_groups import group_start, past_tool_results

MESSAGE_OVERHEAD = 4  # chat-template tokens around one message


@dataclass(frozen=True)
class Policy:
    """Hermes's compaction settings for one session."""

    window: int  # the agent's context window (tokens)
    threshold: float = 0.50  # compression.threshold
    target_ratio: float = 0.20  # compression.target_ratio: the tail as a share of the trigger
    protect_first_n: int = 3  # compression.protect_first_n (first compaction only)
    protect_last_n: int = 20  # compression.protect_last_n: recent messages never pruned
    prepare_ratio: float = 0.80  # ahead of time: prepare once the prompt reaches this share of the trigger

    @property
    def trigger(self) -> int:
        return hermes_trigger(self.window, self.threshold)

    @property
    def tail_tokens(self) -> int:
        return int(self.trigger * self.target_ratio)

    @property
    def soft(self) -> int:
        return int(self.trigger * self.prepare_ratio)


def looped_session(messages: list[dict], session_tokens: int, tokens: Callable[[dict], int]) -> list[dict]:
    """The trajectory's turns played again and again until ``session_tokens``; the system prompt once.

    >>> ms = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
    ...       {"role": "assistant", "content": "a"}]
    >>> [m["content"] for m in looped_session(ms, 4, lambda m: 1)]
    ['s', 'u', 'a', 'u', 'a']
    """
    system = [m for m in messages[:1] if m.get("role") == "system"]
    body = messages[len(system):]
    out, total, k = copy.deepcopy(system), sum(tokens(m) for m in system), 0
    while body and total < session_tokens:
        for m in body:
            m = copy.deepcopy(m)
            if k:
                for tc in m.get("tool_calls") or []:
                    tc["id"] = f"{tc.get('id', '')}~{k}"
                if m.get("role") == "tool":
                    m["tool_call_id"] = f"{m.get('tool_call_id', '')}~{k}"
                    m["content"] = f"[pass {k}] {m.get('content') or ''}"
            out.append(m)
            total += tokens(m)
        k += 1
    return out


def cut(ctx: list[dict], tokens: Callable[[dict], int], policy: Policy, head: int) -> tuple[int, int]:
    """``(start, end)`` of the middle: after the head, before the tail (start == end: nothing to compact)."""
    n = len(ctx)
    start = past_tool_results(ctx, head)
    floor = min(max(3, min(policy.protect_last_n, 8)), max(3, n - start - 3), max(0, n - start - 1))
    used, end = 0, n
    for i in range(n - 1, start - 1, -1):
        if used + tokens(ctx[i]) > policy.tail_tokens * 1.5 and n - i >= floor:
            break
        used, end = used + tokens(ctx[i]), i
    end = max(min(end, n - floor), start + 1)
    end = group_start(ctx, end)
    users = [i for i in range(start, n) if ctx[i].get("role") == "user" and not ctx[i].get("summary")]
    if users and users[-1] < end:
        end = users[-1] if users[-1] > start else past_tool_results(ctx, users[-1] + 2)
    return start, min(past_tool_results(ctx, max(end, start)), n)


def paired(messages: list[dict]) -> list[dict]:
    """Without tool results whose call is absent, and without calls whose results are absent."""
    calls = {tc.get("id") for m in messages for tc in m.get("tool_calls") or []}
    results = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    out = []
    for m in messages:
        if m.get("role") == "tool" and m.get("tool_call_id") not in calls:
            continue
        if m.get("tool_calls"):
            kept = [tc for tc in m["tool_calls"] if tc.get("id") in results]
            m = {k: v for k, v in m.items() if k != "tool_calls"} | ({"tool_calls": kept} if kept else {})
            if not kept and not m.get("content"):
                m["content"] = "(tool call)"
        out.append(m)
    return out


@dataclass
class Step:
    """What one compaction at the trigger works on."""

    ctx: list  # the pruned context
    start: int  # first middle message (after the head and the previous summary)
    end: int  # first tail message
    boundary: int  # prune boundary: the middle before it is final
    previous: str | None  # the previous summary's text


def plan(ctx: list[dict], tokens: Callable[[dict], int], policy: Policy, first: bool) -> Step:
    """The compaction the plugin would run on ``ctx`` now: its pruning, then the cut on ``tokens``."""
    pruned, _, boundary = pruned_view(ctx, tail_tokens=policy.tail_tokens, protect_last_n=policy.protect_last_n)
    head = (1 if pruned and pruned[0].get("role") == "system" else 0) + (policy.protect_first_n if first else 0)
    start, end = cut(pruned, tokens, policy, head)
    previous = None
    for i in range(end - 1, -1, -1):
        if pruned[i].get("summary"):
            previous, start = pruned[i]["content"], max(start, i + 1)
            break
    return Step(pruned, start, end, boundary, previous)


def middle(step: Step) -> list[dict]:
    """The messages a compaction at the trigger sends."""
    return paired(step.ctx[step.start:step.end]) if step.end > step.start else []


def prefix(step: Step) -> list[dict]:
    """What an ahead-of-time compaction covers: the middle before the prune boundary, whole tool groups.

    Pruning does not change these messages again before the trigger, so
    the compaction there starts with exactly them.
    """
    end = group_start(step.ctx, min(step.end, step.boundary))
    return step.ctx[step.start:end] if end > step.start else []


def assemble(step: Step, summary: str) -> list[dict]:
    """Head, one summary message, tail."""
    head = [m for m in step.ctx[:step.start] if not m.get("summary")]
    return head + [{"role": "user", "content": summary, "summary": True}] + step.ctx[step.end:]


def wire(messages: list[dict]) -> list[dict]:
    """Messages without this module's markers (what a service or a server is sent)."""
    return [{k: v for k, v in m.items() if k != "summary"} for m in messages]


def message_tokens(count: Callable[[str], int]) -> Callable[[dict], int]:
    """A memoised token count of one message (content, tool calls, template overhead).

    Memoised by the message object and by its text: a copy of a message
    (``wire``, ``paired``) is counted once, like the message itself.
    """
    memo: dict[int, tuple[dict, int]] = {}
    by_text: dict[str, int] = {}

    def tokens(m: dict) -> int:
        hit = memo.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        text = content_text(m.get("content")) + "".join(
            (tc.get("function") or {}).get("name", "") + str((tc.get("function") or {}).get("arguments", ""))
            for tc in m.get("tool_calls") or [])
        n = by_text.get(text)
        if n is None:
            n = by_text[text] = count(text) + MESSAGE_OVERHEAD
        memo[id(m)] = (m, n)
        return n

    return tokens
