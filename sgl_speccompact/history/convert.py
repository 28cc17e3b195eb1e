"""Framework chat messages in, new OpenAI chat messages out (pure).

:func:`convert_messages` turns one conversation of any format
:mod:`sgl_speccompact.history.formats` reads into messages that
:func:`sgl_speccompact.history.messages.parse_messages` accepts.

Conversion rules, chosen so every output passes ``parse_messages``:

- framework fields (``thought``, ``action``, ``agent``, ``message_type``,
  ``turn_idx``, ``raw_data``, ...) are dropped; content is kept verbatim;
- a reused call id is renamed ``<id>#<n>`` at its n-th use, and a result is
  bound to the latest call with that id, so each result answers one call;
- a result listing several ids becomes one tool message per id;
- a result with no matching assistant call (a truncated log, or a tau2 call
  made by the simulated user) becomes a ``user`` message headed
  ``[tool result ...]``, because the chat format has no other place for it;
- content given as parts is joined to one string; non-text parts become a
  ``[<type> omitted]`` marker.

The input is only read: every output dict and list is new.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from ..errors import HistoryFormatError
from .messages import content_text

_ROLES = ("system", "developer", "user", "assistant", "tool")


def _content(raw: Any, where: str) -> str | None:
    """Content as one string (or None), keeping text verbatim."""
    if raw is None or isinstance(raw, str):
        return raw
    if isinstance(raw, (list, tuple)):
        def omitted(part: Any) -> str:
            if isinstance(part, Mapping):
                return f"[{part.get('type', 'part')} omitted]"
            raise HistoryFormatError("content parts must be strings or objects", field=where)

        return content_text(raw, other=omitted)
    raise HistoryFormatError(f"content must be text, not {type(raw).__name__}", field=where)


def _arguments(raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    return json.dumps(raw if raw is not None else {}, ensure_ascii=False)


def _call_fields(raw: Any, where: str) -> tuple[str, str, str]:
    """(id, name, arguments) of an OpenAI-shaped or flat (tau2) tool call."""
    if not isinstance(raw, Mapping):
        raise HistoryFormatError("a tool call must be an object", field=where)
    fn = raw.get("function")
    if isinstance(fn, Mapping):
        name, args = fn.get("name"), fn.get("arguments")
    else:
        name, args = raw.get("name"), raw.get("arguments")
    if not isinstance(name, str) or not name:
        raise HistoryFormatError("a tool call needs a function name", field=where)
    call_id = raw.get("id")
    return (call_id if isinstance(call_id, str) else ""), name, _arguments(args)


def _result_ids(m: Mapping) -> list[str]:
    """Call ids a tool result answers, in any of the frameworks' spellings."""
    if isinstance(m.get("tool_call_id"), str):
        return [m["tool_call_id"]]
    if isinstance(m.get("tool_call_ids"), (list, tuple)):
        return [i for i in m["tool_call_ids"] if isinstance(i, str)]
    if isinstance(m.get("id"), str):  # tau2
        return [m["id"]]
    return []


class _Converter:
    """Walks raw messages once, keeping call ids consistent."""

    def __init__(self, label: str):
        self.label = label
        self.out: list[dict] = []
        self.used_ids: set[str] = set()
        self.latest: dict[str, tuple[str, str, bool]] = {}  # raw id -> (unique id, name, by assistant)

    def _unique(self, call_id: str) -> str:
        if call_id not in self.used_ids:
            return call_id
        n = 2
        while f"{call_id}#{n}" in self.used_ids:
            n += 1
        return f"{call_id}#{n}"

    def _calls(self, raw_calls: Iterable, where: str, *, by_assistant: bool) -> list[dict]:
        calls = []
        for j, raw in enumerate(raw_calls):
            call_id, name, args = _call_fields(raw, f"{where}.tool_calls[{j}]")
            if call_id:
                unique = self._unique(call_id)
                self.used_ids.add(unique)
                self.latest[call_id] = (unique, name, by_assistant)
                call_id = unique
            calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": args}})
        return calls

    def add(self, m: Any, i: int) -> None:
        where = f"{self.label}[{i}]"
        if not isinstance(m, Mapping):
            raise HistoryFormatError("a message must be an object", field=where)
        role = m.get("role")
        if role not in _ROLES:
            raise HistoryFormatError(f"role must be one of {list(_ROLES)}, got {role!r}", field=f"{where}.role")
        content = _content(m.get("content"), f"{where}.content")
        if role == "tool":
            self._tool_result(m, content or "", where)
            return
        if role == "assistant" and not content and not m.get("tool_calls"):
            content = _thought_action(m)  # old SWE-agent turns kept only these
        msg: dict = {"role": role, "content": content}
        if isinstance(m.get("name"), str):
            msg["name"] = m["name"]
        raw_calls = m.get("tool_calls") or []
        if not isinstance(raw_calls, (list, tuple)):
            raise HistoryFormatError("tool_calls must be a list", field=f"{where}.tool_calls")
        if raw_calls and role == "assistant":
            msg["tool_calls"] = self._calls(raw_calls, where, by_assistant=True)
        elif raw_calls:  # e.g. tau2 user-side tools: chat format allows calls on assistants only
            calls = self._calls(raw_calls, where, by_assistant=False)
            msg["content"] = "\n".join([content or ""] + [_call_text(c) for c in calls]).strip("\n")
        self.out.append(msg)

    def _tool_result(self, m: Mapping, content: str, where: str) -> None:
        bound = [self.latest.get(i) for i in _result_ids(m)]
        matched = [b[:2] for b in bound if b and b[2]]  # only calls an assistant made
        if not matched:
            ids = ",".join(_result_ids(m))
            head = f"[tool result id={ids}]" if ids else "[tool result]"
            self.out.append({"role": "user", "content": f"{head}\n{content}"})
            return
        for unique, name in matched:
            self.out.append({"role": "tool", "content": content, "tool_call_id": unique, "name": name})


def _call_text(call: dict) -> str:
    fn = call["function"]
    return f"[tool call {fn['name']} id={call['id']}]\n{fn['arguments']}"


def _thought_action(m: Mapping) -> str:
    thought = m.get("thought") if isinstance(m.get("thought"), str) else ""
    action = m.get("action") if isinstance(m.get("action"), str) else ""
    if not action:
        return thought
    return f"{thought}\n```\n{action.rstrip()}\n```".lstrip("\n")


def convert_messages(messages: Iterable[Any], *, label: str = "history") -> list[dict]:
    """Convert framework messages to new OpenAI chat messages.

    Parameters
    ----------
    messages : iterable of dict
        Raw messages of any supported framework.
    label : str
        Prefix of field names in errors, e.g. ``history`` -> ``history[3].role``.

    Returns
    -------
    list of dict
        New messages; the input is not modified.

    >>> convert_messages([{"role": "tool", "content": "ok", "tool_call_ids": ["c"]}])
    [{'role': 'user', 'content': '[tool result id=c]\\nok'}]
    """
    conv = _Converter(label)
    for i, m in enumerate(messages):
        conv.add(m, i)
    if not conv.out:
        raise HistoryFormatError("holds no messages", field=label)
    return conv.out
