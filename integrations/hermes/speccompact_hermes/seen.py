"""What the agent sent, seen by Hermes's ``pre_api_request`` hook, shared by every copy of the engine.

Module level, so Hermes's per-agent ``copy.deepcopy`` of the engine copies
none of it, and every copy sees the same maps (each bounded to
``MAX_SESSIONS`` sessions).
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

# session id -> the tool schemas of the agent's latest request:
AGENT_TOOLS: dict[str, list] = {}
# session id -> the message list (without the system prompt) of the agent's latest request, as
# compress() will receive it; what an ahead-of-time compaction is made from:
AGENT_HISTORY: dict[str, list] = {}
# session id -> the thread sending the latest prepare (compress() waits for its answer):
PREPARES: dict[str, threading.Thread] = {}
MAX_SESSIONS = 64  # sessions remembered in each map
SUMMARY_GUESS = 2000  # summary size assumed before the first compaction reports one (tokens)


def _fingerprint(wire: list[dict]) -> str:
    """A digest of wire messages (or any JSON list), key order ignored."""
    return hashlib.sha256(json.dumps(wire, sort_keys=True).encode()).hexdigest()


def _bounded_put(table: dict, key: str, value: Any) -> None:
    table[key] = value
    while len(table) > MAX_SESSIONS:
        table.pop(next(iter(table)))


def remember_tools(session_id: str = "", request: dict | None = None, conversation_history: list | None = None,
                   **_: Any) -> None:
    """``pre_api_request`` hook: keep the tools the agent is sending and its message list."""
    tools = ((request or {}).get("body") or {}).get("tools")
    if session_id and isinstance(tools, list):
        _bounded_put(AGENT_TOOLS, session_id, tools)
    if session_id and isinstance(conversation_history, list):
        _bounded_put(AGENT_HISTORY, session_id, conversation_history)


def carry_over(old: str | None, new: str) -> None:
    """A new Hermes session id after a compaction keeps the old one's tools and history."""
    for table in (AGENT_TOOLS, AGENT_HISTORY):
        if old and old in table and new not in table:
            _bounded_put(table, new, table[old])
