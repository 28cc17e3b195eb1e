"""The continuation check: can the agent pick its real next action from the summary alone?

Cut the history just before an assistant action, compact the prefix, ask the
target for the next action given only the summary, and compare with the
action the agent really took: the same tool, and the same key argument.

An **action** is the first tool call of an assistant message (tool = its
name, key argument = the first of :data:`KEY_ARGUMENTS` present, else its
first string argument, else ``""``), or, in text-action formats, the first
line of the assistant's first fenced code block (tool = the command's first
word, key argument = the whole line).  Cut points are the action messages
nearest to the requested depths (fractions of the history's messages).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

# a file or record the call is about comes before a command: an editor's "command" is a sub-command
KEY_ARGUMENTS = ("path", "file_name", "filename", "file", "url", "query", "search_term", "pattern", "reservation_id",
                 "user_id", "order_id", "flight_number", "id", "command", "cmd")
DEPTHS = (0.5,)  # default cut depths
_FENCED = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
CONTINUATION_SYSTEM = "You are the agent described in the summary. You decide its next action."
CONTINUATION_TOOLS = (
    "Reply with exactly one line of the form `TOOL: ARGUMENT`, where TOOL is one of: {tools}, and ARGUMENT "
    "is the call's main argument (for a shell tool, the whole command line). Nothing else."
)
CONTINUATION_SHELL = "Reply with exactly one line: the shell command you run next. Nothing else."
CONTINUATION_PROMPT = (
    "Here is the summary of your session so far:\n<summary>\n{summary}\n</summary>\n\n"
    "What is your next action?\n{instruction}"
)


@dataclass(frozen=True)
class Action:
    """One agent action, reduced to what the check compares."""

    tool: str  # tool name (or a text-action command's first word)
    key: str  # its key argument, whitespace collapsed

    def to_json(self) -> dict:
        return asdict(self)


def _norm(text: str) -> str:
    text = text.strip().strip("`").strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return " ".join(text.split())


def key_argument(arguments: str) -> str:
    """The key argument of a call's JSON arguments.

    >>> key_argument('{"security_risk": "LOW", "command": "ls -la"}'), key_argument("{}")
    ('ls -la', '')
    """
    try:
        args = json.loads(arguments) if arguments else {}
    except ValueError:
        return _norm(arguments)
    if not isinstance(args, dict):
        return _norm(str(args))
    for k in KEY_ARGUMENTS:
        if isinstance(args.get(k), (str, int)) and str(args[k]).strip():
            return _norm(str(args[k]).split("\n", 1)[0])
    first = next((v for v in args.values() if isinstance(v, str) and v.strip()), "")
    return _norm(first.split("\n", 1)[0])


def action_of(message: dict) -> Action | None:
    """The action an assistant message takes, if any.

    >>> action_of({"role": "assistant", "content": "x", "tool_calls": [{"id": "1", "type": "function",
    ...     "function": {"name": "open", "arguments": '{"path": "a.py"}'}}]})
    Action(tool='open', key='a.py')
    >>> action_of({"role": "assistant", "content": "Now:\\n```bash\\ncat  a.py\\n```"})
    Action(tool='cat', key='cat a.py')
    """
    if message.get("role") != "assistant":
        return None
    calls = message.get("tool_calls") or []
    if calls:
        fn = calls[0].get("function") or {}
        args = fn.get("arguments", "")
        return Action(fn.get("name", ""), key_argument(args if isinstance(args, str) else json.dumps(args)))
    content = message.get("content")
    m = _FENCED.search(content) if isinstance(content, str) else None
    line = next((ln for ln in (m.group(1).split("\n") if m else []) if ln.strip()), "")
    return Action(line.split()[0], _norm(line)) if line else None


def cut_points(messages: list[dict], depths=DEPTHS) -> list[int]:
    """Indices of action messages nearest to each depth, with at least one message before (deduplicated).

    >>> msgs = [{"role": "user", "content": "go"}] + [
    ...     {"role": "assistant", "content": f"```\\nls {i}\\n```"} for i in range(4)]
    >>> cut_points(msgs, (0.0, 0.5, 1.0))
    [1, 2, 4]
    """
    actions = [i for i, m in enumerate(messages) if i > 0 and action_of(m) is not None]
    out = []
    for d in depths:
        if actions:
            i = min(actions, key=lambda j: (abs(j - d * len(messages)), j))
            if i not in out:
                out.append(i)
    return out


def tools_of(messages: list[dict]) -> list[str]:
    """Tool names called anywhere in the history, in first-use order ([] for text-action histories)."""
    names = [(c.get("function") or {}).get("name", "") for m in messages for c in (m.get("tool_calls") or [])]
    return list(dict.fromkeys(n for n in names if n))


def continuation_prompt(summary: str, tools: list[str]) -> str:
    """The question to the target: its next action, from ``summary`` alone."""
    instruction = CONTINUATION_TOOLS.format(tools=", ".join(tools)) if tools else CONTINUATION_SHELL
    return CONTINUATION_PROMPT.format(summary=summary, instruction=instruction)


def parse_action(reply: str, tools: list[str]) -> Action | None:
    """The action named by a reply: ``TOOL: ARGUMENT`` for a known tool, else a command line.

    >>> parse_action("`bash: python -m pytest`", ["bash", "open"])
    Action(tool='bash', key='python -m pytest')
    >>> parse_action("python3 tests/a.py\\nbecause ...", [])
    Action(tool='python3', key='python3 tests/a.py')
    """
    line = next((ln for ln in reply.strip().split("\n") if ln.strip().strip("`")), "")
    line = _norm(line)
    head, sep, rest = line.partition(":")
    if sep and head.strip() in tools:
        return Action(head.strip(), _norm(rest))
    return Action(line.split()[0], line) if line else None


def compare(predicted: Action | None, real: Action) -> dict:
    """``tool_match`` (same tool) and ``key_match`` (same tool and key argument).

    >>> compare(Action("bash", "ls -la"), Action("bash", "ls  -la"))
    {'tool_match': True, 'key_match': True}
    >>> compare(Action("open", "b.py"), Action("open", "a.py"))
    {'tool_match': True, 'key_match': False}
    """
    tool = predicted is not None and predicted.tool.lower() == real.tool.lower()
    return {"tool_match": tool, "key_match": tool and _norm(predicted.key) == _norm(real.key)}
