"""The deterministic hand-off that replaces the middle when the service gives no summary.

Hermes's built-in compressor, with ``compression.abort_on_summary_failure``
left at its default (False), drops the middle it could not summarize and
inserts a locally built "summary unavailable" hand-off (recent user asks,
tool actions, files, errors; at most 8,000 characters), so the prompt
still shrinks.  The plugin does the same on the pruned list it already
computed: inside Hermes with Hermes's own builder
(``ContextCompressor._build_static_fallback_summary``), outside it with a
look-alike under the same headings.  The previous summary, when the middle
held one, is carried along so the next real summary can build on it.

Pure functions; the text is redacted by the caller like any summary.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

from . import hermes_body
from .messages import text_of
from .prune import stub

MAX_CHARS = 8_000  # Hermes's _FALLBACK_SUMMARY_MAX_CHARS: the hand-off's cap (chars)
TURN_CHARS = 700  # Hermes's _FALLBACK_TURN_MAX_CHARS: one dropped turn's cap (chars)
PREVIOUS_HEADING = "## Earlier Compaction Summary"  # the carried previous summary, last in the body
ERROR = re.compile(r"\b(error|failed|exception|traceback|timeout|timed out|fatal)\b", re.I)


def _short(text: str, cap: int = TURN_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= cap else text[:cap - 15].rstrip() + " ...[truncated]"


def _bullets(items: list[str], limit: int) -> str:
    seen: list[str] = []
    for item in items:
        if item and item not in seen:
            seen.append(item)
    return "\n".join(f"- {x}" for x in seen[:limit]) or hermes_body.NONE


def local_body(turns: list[dict], reason: str | None) -> str:
    """A hand-off under Hermes's headings, built from the dropped ``turns`` alone.

    >>> body = local_body([{"role": "user", "content": "fix a.py"},
    ...     {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": {
    ...      "name": "read_file", "arguments": '{"path": "a.py"}'}}]},
    ...     {"role": "tool", "tool_call_id": "c", "content": "x" * 300}], "unreachable")
    >>> [line for line in body.split("\\n") if line.startswith(("User", "1.", "2.", "- a.py"))]
    ["User asked: 'fix a.py'", '1. Called tool(s): read_file', '2. [read_file] read a.py from line 1 (300 chars)', '- a.py']
    """
    calls = {str(tc.get("id", "")): ((tc.get("function") or {}).get("name") or "unknown",
                                     (tc.get("function") or {}).get("arguments") or "")
             for m in turns for tc in m.get("tool_calls") or [] if isinstance(tc, dict)}
    asks, actions, blockers = [], [], []
    for m in turns:
        text = text_of(m.get("content"))
        if m.get("role") == "user" and text.strip():
            asks.append(_short(text))
        elif m.get("role") == "assistant":
            names = [(tc.get("function") or {}).get("name") or "?" for tc in m.get("tool_calls") or []]
            actions.append("Called tool(s): " + ", ".join(names[:6]) if names else _short(text))
        elif m.get("role") == "tool":
            name, args = calls.get(str(m.get("tool_call_id", "")), ("unknown", ""))
            actions.append(stub(name, args if isinstance(args, str) else json.dumps(args), text))
            if ERROR.search(text):
                blockers.append(_short(text, 500))
    done = "\n".join(f"{i}. {a}" for i, a in enumerate([a for a in actions if a][:12], 1))
    files = hermes_body.tool_paths(turns)
    sections = {
        "Historical Task Snapshot": f"User asked: {asks[-1]!r}" if asks else "Unknown from deterministic fallback.",
        "Goal": ("Recovered from a deterministic fallback because the compaction service gave no summary"
                 + (f" ({reason})" if reason else "") + ". Continue from the recent messages after this summary "
                 "and check current files and state for exact details."),
        "Constraints & Preferences": "- Built locally without a summary model; secrets were redacted.",
        "Completed Actions": done or "None recoverable from compacted turns.",
        "Active State": "Unknown from deterministic fallback.",
        "Blocked": _bullets(blockers, 5),
        "Historical Pending User Asks": _bullets(asks[-3:], 3),
        "Relevant Files": _bullets(files, 12),
    }
    return "\n\n".join(f"## {h}\n{sections.get(h, hermes_body.NONE)}" for h in hermes_body.HEADINGS)


def hermes_body_or_local(turns: list[dict], reason: str | None) -> str:
    """Hermes's own hand-off text inside Hermes (its wording), :func:`local_body` outside it."""
    try:
        from agent.context_compressor import ContextCompressor

        # the builder reads only these two from its instance; the prefix is added by messages.assemble
        me = SimpleNamespace(_previous_summary=None, _with_summary_prefix=ContextCompressor._strip_summary_prefix)
        text = ContextCompressor._build_static_fallback_summary(me, turns, reason=reason)
        if isinstance(text, str) and text.strip():
            return text.strip()
    except Exception:  # noqa: BLE001 - outside Hermes, or a Hermes whose builder changed: the look-alike
        pass
    return local_body(turns, reason)


def handoff(turns: list[dict], reason: str | None, previous: str | None) -> str:
    """The summary body that replaces the dropped ``turns``: the hand-off, then ``previous`` kept.

    >>> text = handoff([{"role": "user", "content": "go"}], "timeout", "## Goal\\n- parse tabs")
    >>> text.endswith("## Earlier Compaction Summary\\n## Goal\\n- parse tabs"), len(text) < MAX_CHARS
    (True, True)
    """
    body = hermes_body_or_local(turns, reason)
    if len(body) > MAX_CHARS:
        body = body[:MAX_CHARS - 15].rstrip() + " ...[truncated]"
    if previous and previous.strip():
        body += f"\n\n{PREVIOUS_HEADING}\n{previous.strip()[:2 * MAX_CHARS]}"
    return body
