"""Which messages a compaction summarizes, and the message list Hermes continues with.

Pure functions on OpenAI-style message dicts, following hermes-agent
0.19.0's ``ContextCompressor`` so a Hermes user sees the same hygiene:

* the head (system prompt, then the first ``protect_first_n`` messages on
  the first compaction only) is kept verbatim;
* the tail is kept by a token budget (about 20% of the trigger threshold,
  at least 3 messages, up to 1.5x the budget not to cut inside a large
  message), never splitting an assistant's tool calls from their results,
  and always holding the latest user message and the latest assistant reply;
* the summary message starts with Hermes's ``SUMMARY_PREFIX``, ends with its
  end marker, carries ``_compressed_summary: True`` and takes the role that
  keeps roles alternating (merged into the first tail message when neither
  role can);
* tool calls and results left without their partner are removed;
* kept messages lose Hermes's ``_db_persisted`` marker (its fix for
  #57491: a copied marker makes Hermes skip the row when it writes the new
  session).  Its other ``_`` keys stay: ``_*_synthetic`` flags tell Hermes
  which user-role messages are its own scaffolding, and ``_compressed_summary``
  marks summaries; Hermes strips every ``_`` key before a request leaves.

Nothing here does I/O or imports Hermes; the Hermes constants are passed in
(:class:`Markers`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

MIN_TAIL, MAX_TAIL_FLOOR = 3, 8  # messages always kept in the tail (Hermes's floor and its cap)
SOFT_CEILING = 1.5  # the tail may exceed its token budget by this factor (ratio)
SUMMARY_KEY = "_compressed_summary"  # Hermes's metadata key of a summary message
STRIPPED_KEYS = ("_db_persisted",)  # Hermes's session-store markers, never copied into a compacted list


@dataclass(frozen=True)
class Markers:
    """Hermes's summary framing strings (``agent.context_compressor``)."""

    prefix: str  # SUMMARY_PREFIX: first text of every summary message
    end: str  # _SUMMARY_END_MARKER: last line of every summary message
    merged_header: str  # _MERGED_PRIOR_CONTEXT_HEADER: opens a tail message the summary is merged into
    merged_delimiter: str  # _MERGED_SUMMARY_DELIMITER: separates that message's own text from the summary


@dataclass(frozen=True)
class Split:
    """Where one compaction cuts a message list."""

    start: int  # first summarized message (after the protected head)
    end: int  # first message of the protected tail
    previous_summary: str | None  # body of a summary message found before the tail, if any
    summarize_from: int  # first message sent to the service (after that summary message)


def text_of(content: Any, joiner: str = "\n") -> str:
    """The text of a message content: a string as it is, content parts' texts joined by ``joiner``.

    The plugin's one reading of content parts (Hermes joins them with a
    newline where it shows them, and sizes them by their texts alone: ``""``).

    >>> text_of([{"type": "text", "text": "a"}, {"type": "image_url"}, "b"]), text_of(None), text_of(["a", "b"], "")
    ('a\\n\\nb', '', 'ab')
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return joiner.join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def rough_tokens(msg: dict) -> int:
    """Hermes's size of one message in its tail walk: :func:`speccompact_hermes.prune.budget_tokens`."""
    from .prune import budget_tokens

    return budget_tokens(msg)


def kept(msg: dict) -> dict:
    """A deep copy of a kept message without Hermes's persistence markers."""
    return {k: copy.deepcopy(v) for k, v in msg.items() if k not in STRIPPED_KEYS}


def middle(messages: list[dict], cut: "Split") -> list[dict]:
    """The messages a compaction summarizes.

    When the previous summary was merged into an assistant message that made
    tool calls, its results open the middle: those calls come first (without
    the summary text), or the service would see results without their call.

    >>> M = Markers("[S]", "[E]", "[H]", "[D]")
    >>> ms = [{"role": "assistant", "content": "[S] old", "_compressed_summary": True,
    ...        "tool_calls": [{"id": "c1", "function": {"name": "t", "arguments": "{}"}}]},
    ...       {"role": "tool", "tool_call_id": "c1", "content": "r"}, {"role": "user", "content": "u"}]
    >>> [m["role"] for m in middle(ms, Split(0, 2, "old", 1))]
    ['assistant', 'tool']
    """
    out = messages[cut.summarize_from:cut.end]
    before = messages[cut.summarize_from - 1] if cut.summarize_from > cut.start else None
    if before is not None and before.get("tool_calls") and out and out[0].get("role") == "tool":
        out = [{"role": "assistant", "content": None, "tool_calls": before["tool_calls"]}] + out
    return out


def is_summary(msg: dict, markers: Markers) -> bool:
    """Whether ``msg`` is a compaction summary (by metadata or by its prefix)."""
    if msg.get(SUMMARY_KEY):
        return True
    text = text_of(msg.get("content")).lstrip()
    if markers.merged_delimiter in text:
        text = text.split(markers.merged_delimiter, 1)[1].lstrip()
    return text.startswith(markers.prefix)


def summary_body(msg: dict, markers: Markers) -> str:
    """A summary message's text without the merged tail text, the prefix and the end marker."""
    text = text_of(msg.get("content")).strip()
    if markers.merged_delimiter in text:
        text = text.split(markers.merged_delimiter, 1)[1].strip()
    if text.startswith(markers.prefix):
        text = text[len(markers.prefix):].lstrip()
    if text.endswith(markers.end):
        text = text[: -len(markers.end)].rstrip()
    return text


def _tool_group_start(messages: list[dict], idx: int) -> int:
    """Pull a tail cut back so an assistant's tool calls stay with their results.

    A copy of ``sgl_speccompact.history.tool_groups.group_start`` (this plugin
    imports only the standard library); tests/integrations/test_hermes_cutter.py
    checks the two agree.
    """
    if idx <= 0 or idx >= len(messages):
        return idx
    check = idx - 1
    while check >= 0 and messages[check].get("role") == "tool":
        check -= 1
    if check >= 0 and messages[check].get("role") == "assistant" and messages[check].get("tool_calls"):
        return check
    return idx


def _past_tool_results(messages: list[dict], idx: int) -> int:
    while idx < len(messages) and messages[idx].get("role") == "tool":
        idx += 1
    return idx


def _last(messages: list[dict], start: int, role: str, markers: Markers) -> int:
    """Index of the last real ``role`` message at or after ``start`` (-1 if none).

    Summaries are not user turns; an assistant reply with text beats one with
    only tool calls.
    """
    any_idx = -1
    for i in range(len(messages) - 1, start - 1, -1):
        m = messages[i]
        if m.get("role") != role or is_summary(m, markers):
            continue
        if role == "user" or text_of(m.get("content")).strip():
            return i
        any_idx = any_idx if any_idx >= 0 else i
    return any_idx


def tail_start(messages: list[dict], head_end: int, budget_tokens: int, protect_last_n: int,
               markers: Markers) -> int:
    """First index of the protected tail (Hermes's token-budget walk, simplified).

    >>> m = [{"role": "user", "content": "u%d" % i} if i % 2 == 0 else {"role": "assistant", "content": "a"}
    ...      for i in range(10)]
    >>> M = Markers("[S]", "[E]", "[H]", "[D]")
    >>> tail_start(m, 0, 10, 6, M)  # a tiny budget: the floor of 6 messages
    4
    """
    n = len(messages)
    available = max(0, n - head_end - 1)
    floor = min(max(MIN_TAIL, min(protect_last_n, MAX_TAIL_FLOOR)), max(MIN_TAIL, available - 2), available)
    floor = floor if available > 1 else 0
    used, cut = 0, n
    for i in range(n - 1, head_end - 1, -1):
        size = rough_tokens(messages[i])
        if used + size > budget_tokens * SOFT_CEILING and n - i >= floor:
            break
        used, cut = used + size, i
    if cut <= head_end:  # everything fits: cut at the plain budget so something is summarized
        used = 0
        for i in range(n - 1, head_end - 1, -1):
            size = rough_tokens(messages[i])
            if used + size > budget_tokens and n - i >= floor:
                cut = i
                break
            used, cut = used + size, i
    cut = min(cut, n - floor)
    if cut <= head_end:
        cut = max(n - floor, head_end + 1)
    cut = _tool_group_start(messages, cut)
    last_user = _last(messages, head_end, "user", markers)
    if 0 <= last_user < cut:
        cut = last_user if last_user > head_end else _turn_end(messages, last_user)
    last_reply = _last(messages, head_end, "assistant", markers)
    if 0 <= last_reply < cut:
        cut = max(_tool_group_start(messages, last_reply), head_end + 1)
    return _past_tool_results(messages, max(cut, head_end + 1))


def _turn_end(messages: list[dict], user_idx: int) -> int:
    """Index after a user message, its assistant reply and that reply's tool results."""
    idx = user_idx + 1
    if idx < len(messages) and messages[idx].get("role") == "assistant":
        idx = _past_tool_results(messages, idx + 1)
    return idx


def split(messages: list[dict], *, protect_first_n: int, protect_last_n: int, tail_budget_tokens: int,
          markers: Markers) -> Split:
    """Where to cut: protected head, summarized middle, protected tail."""
    head = 1 if messages and messages[0].get("role") == "system" else 0
    start = _past_tool_results(messages, head + protect_first_n)
    end = tail_start(messages, start, tail_budget_tokens, protect_last_n, markers)
    previous, first = None, start
    for i in range(end - 1, head - 1, -1):  # the latest summary before the tail
        if is_summary(messages[i], markers):
            previous, first = summary_body(messages[i], markers) or None, max(start, i + 1)
            break
    return Split(start=start, end=end, previous_summary=previous, summarize_from=first)


def summary_role(messages: list[dict], start: int, end: int) -> str | None:
    """Role of a standalone summary message, or None when it must merge into the tail.

    >>> summary_role([{"role": "assistant"}, {"role": "tool"}, {"role": "assistant"}], 1, 2)
    'user'
    """
    head_role = messages[start - 1].get("role", "user") if start > 0 else "user"
    tail_role = messages[end].get("role", "user") if end < len(messages) else "user"
    survives = any(m.get("role") == "user" for m in messages[:start] + messages[end:])
    force_user = head_role == "system" or not survives
    role = "user" if head_role in ("assistant", "tool") or force_user else "assistant"
    if role == tail_role:
        flipped = "assistant" if role == "user" else "user"
        if flipped != head_role and not force_user:
            return flipped
        return None
    return role


def pair_tools(messages: list[dict]) -> list[dict]:
    """Drop tool results without their call and tool calls without their result."""
    def call_id(tc: dict) -> str:
        return tc.get("call_id") or tc.get("id") or ""

    calls = {call_id(tc) for m in messages if m.get("role") == "assistant" for tc in m.get("tool_calls") or []}
    results = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    out = [m for m in messages if not (m.get("role") == "tool" and m.get("tool_call_id") not in calls)]
    for m in out:
        tcs = m.get("tool_calls")
        if m.get("role") != "assistant" or not tcs:
            continue
        kept = [tc for tc in tcs if call_id(tc) in results]
        if len(kept) == len(tcs):
            continue
        if kept:
            m["tool_calls"] = kept
        else:
            m.pop("tool_calls", None)
            if not text_of(m.get("content")).strip():
                m["content"] = "(tool call removed)"
    return out


def assemble(messages: list[dict], cut: Split, summary: str, markers: Markers) -> list[dict]:
    """Head + summary message + tail: the list Hermes continues with (new dicts)."""
    head = [kept(m) for m in messages[:cut.start]]
    tail = [kept(m) for m in messages[cut.end:]]
    framed = f"{markers.prefix}\n{summary.strip()}"
    role = summary_role(messages, cut.start, cut.end)
    if role is None and tail:  # neither role alternates: merge into the first tail message
        first = tail[0]
        own = text_of(first.get("content"))
        first["content"] = (f"{markers.merged_header}\n{own}\n\n{markers.merged_delimiter}\n\n"
                            f"{framed}\n\n{markers.end}")
        first[SUMMARY_KEY] = True
        first.pop("api_content", None)  # Hermes's sidecar of the text sent before: stale now
        summary_msgs = []
    else:
        summary_msgs = [{"role": role or "user", "content": f"{framed}\n\n{markers.end}", SUMMARY_KEY: True}]
    return pair_tools(head + summary_msgs + tail)
