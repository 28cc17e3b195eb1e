"""Old tool outputs replaced by one-line stubs, as Hermes's built-in compressor does first.

hermes-agent 0.19.0's ``ContextCompressor._prune_old_tool_results`` runs
before every summary, over the whole list (the head and tail it keeps
included): older copies of an identical tool output become a back-reference,
every tool output outside the protected recent messages becomes a one-line
stub (``[read_file] read src/a.py from line 1 (22,000 chars)``), and long
tool-call arguments there are shortened.

One difference, so a pruned prefix stays byte-identical as the history
grows (what an ahead-of-time compaction needs): back-references are made
only inside the protected recent messages.  An older output is stubbed from
its own call and content alone, so a newer duplicate appearing later never
rewrites it (Hermes would turn its stub into the back-reference, and the
prefix the service prepared would no longer match).  Without it a single user request
that turns into a long tool loop keeps every result after that request
whole, and the prompt outgrows the window.

Pure functions; Hermes's own stub wording is used when Hermes is importable.
Only ``content`` (and long call arguments) change, never a ``tool_call_id``,
so tool-call pairs stay whole.  A cut never keeps part of a word: a secret
cut in two matches no redaction pattern, so it goes whole or not at all
(and Hermes's own stubs are made from redacted arguments).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from .messages import text_of

CHARS_PER_TOKEN = 4  # Hermes's rough chars per token: the plugin's one token estimate (budget_tokens)
MIN_PRUNE_CHARS = 200  # shorter tool outputs are left as they are (chars)
MAX_ARGS_CHARS = 500  # longer tool-call arguments outside the protected tail are shortened (chars)
ARGS_KEEP_CHARS = 200  # chars kept of each long string inside shortened arguments
DUPLICATE = "[Duplicate tool output — same content as a more recent call]"  # Hermes's back-reference
REPLAY_KEYS = ("reasoning", "reasoning_content", "reasoning_details", "codex_reasoning_items",
               "codex_message_items")  # provider replay fields Hermes counts in a message's size


def budget_tokens(msg: dict) -> int:
    """Hermes's size of one message in its tail walks: content/4 + 10, plus the whole tool calls.

    The plugin's one rough token estimate (Hermes's own, rounded down).  The
    ``sgl_speccompact`` package has its own,
    ``sgl_speccompact.history.estimate.chars_to_tokens`` (the same four
    characters a token, rounded up, no per-message overhead): the plugin
    installs into Hermes's Python alone and imports no ``sgl_speccompact``,
    and the package does not depend on the plugin.

    >>> budget_tokens({"role": "tool", "content": "x" * 400})
    110
    """
    tokens = len(text_of(msg.get("content") or "", "")) // CHARS_PER_TOKEN + 10
    tokens += sum(len(str(tc)) // CHARS_PER_TOKEN for tc in msg.get("tool_calls") or [] if isinstance(tc, dict))
    for key in REPLAY_KEYS:
        if msg.get(key):
            tokens += len(json.dumps(msg[key], default=str)) // CHARS_PER_TOKEN
    return tokens


_BASE64_LINE = re.compile(r"[ \t]*[A-Za-z0-9+/=]{16,}[ \t]*")  # a line of key material, maybe


def _head(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters without keeping part of a word, or part of a line after the first.

    Base64 lines left at the end go too: they may be a private key whose
    END line (what makes them recognisable) was cut off.

    >>> _head("export URL=postgres://u:pw@db", 14), _head("short", 14), _head("key\\n" + "QUJD" * 8 + "\\n-----END", 40)
    ('export', 'short', 'key')
    """
    if len(text) <= limit:
        return text
    cut = text[:limit]
    if "\n" in cut and text[limit] != "\n":  # inside a later line: all of it goes (a PEM END line, cut)
        cut = cut[:cut.rindex("\n")]
    elif not text[limit].isspace():
        cut = re.sub(r"\S*$", "", cut)
    lines = cut.rstrip().split("\n")
    while lines and _BASE64_LINE.fullmatch(lines[-1]):
        lines.pop()
    return "\n".join(lines).rstrip()


def _local_stub(name: str, args_json: str, content: str) -> str:
    """A stub in Hermes's wording for the common tools, generic otherwise.

    >>> _local_stub("read_file", '{"path": "a.py"}', "x" * 1200)
    '[read_file] read a.py from line 1 (1,200 chars)'
    """
    try:
        args = json.loads(args_json) if args_json else {}
    except (json.JSONDecodeError, TypeError):
        args = {}
    args = args if isinstance(args, dict) else {}
    lines = content.count("\n") + 1 if content.strip() else 0
    if name == "read_file":
        return f"[read_file] read {args.get('path', '?')} from line {args.get('offset', 1)} ({len(content):,} chars)"
    if name == "terminal":
        cmd = str(args.get("command", ""))
        cmd = _head(cmd, 77) + "..." if len(cmd) > 80 else cmd
        return f"[terminal] ran `{cmd}` -> {lines} lines output"
    first = "".join(f" {k}={_head(str(v), 40)}" for k, v in list(args.items())[:2])
    return f"[{name}]{first} ({len(content):,} chars result)"


def stub(name: str, args_json: str, content: str) -> str:
    """One line describing a tool call and its output (Hermes's ``_summarize_tool_result`` inside Hermes)."""
    try:
        from agent.context_compressor import _summarize_tool_result
    except ImportError:
        return _local_stub(name, args_json, content)
    from .framing import redact  # Hermes's stub cuts its arguments: redact them whole first

    return _summarize_tool_result(name, redact(args_json), content)


def protected_from(messages: list[dict], tail_tokens: int, tail_count: int) -> int:
    """First index whose tool outputs stay whole: the recent messages within ``tail_tokens``, at least ``tail_count``.

    >>> protected_from([{"role": "tool", "content": "x" * 400}] * 5, 250, 1)
    2
    """
    n = len(messages)
    floor = min(tail_count, n)
    boundary, used = n, 0
    for i in range(n - 1, -1, -1):
        size = budget_tokens(messages[i])
        if used + size > tail_tokens and n - i >= floor:
            boundary = i  # as Hermes: the message that crosses the budget is protected too
            break
        used, boundary = used + size, i
    return n - max(n - boundary, floor)


def _shorten_args(args: str) -> str:
    """Long string values inside JSON arguments cut to their head, the JSON kept valid."""
    try:
        obj = json.loads(args)
    except (json.JSONDecodeError, TypeError):
        return args

    def shrink(v: Any) -> Any:
        if isinstance(v, str) and len(v) > ARGS_KEEP_CHARS:
            return _head(v, ARGS_KEEP_CHARS) + "...[truncated]"
        if isinstance(v, dict):
            return {k: shrink(x) for k, x in v.items()}
        if isinstance(v, list):
            return [shrink(x) for x in v]
        return v

    return json.dumps(shrink(obj), ensure_ascii=False)


def prune(messages: list[dict], tail_tokens: int, tail_count: int) -> tuple[list[dict], int]:
    """``(new list, outputs pruned)``: old tool outputs stubbed, duplicates back-referenced.

    The input is never changed; rewritten messages are new dicts without
    Hermes's stale ``api_content`` sidecar.

    >>> call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
    >>> ms = [{"role": "assistant", "content": "", "tool_calls": [call]},
    ...       {"role": "tool", "tool_call_id": "c1", "content": "x" * 900}, {"role": "user", "content": "next"}]
    >>> out, n = prune(ms, tail_tokens=10, tail_count=1)
    >>> n, out[1]["content"][:26], ms[1]["content"][:3]
    (1, '[read_file] read a.py from', 'xxx')
    """
    out = list(messages)
    calls: dict[str, tuple[str, str]] = {}
    for m in out:
        for tc in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            fn = (tc.get("function") if isinstance(tc, dict) else None) or {}
            args = fn.get("arguments", "")
            calls[str(tc.get("id", ""))] = (str(fn.get("name") or "unknown"),
                                            args if isinstance(args, str) else json.dumps(args))
    boundary = protected_from(out, tail_tokens, tail_count)
    pruned, seen = 0, set()

    def rewrite(i: int, **changes: Any) -> None:
        out[i] = {k: v for k, v in out[i].items() if k != "api_content"} | changes

    for i in range(len(out) - 1, boundary - 1, -1):  # the newest copy of an output stays whole
        content = out[i].get("content")
        if out[i].get("role") != "tool" or not isinstance(content, str) or len(content) < MIN_PRUNE_CHARS:
            continue
        digest = hashlib.md5(content.encode("utf-8", "replace")).hexdigest()
        if digest in seen:
            rewrite(i, content=DUPLICATE)
            pruned += 1
        seen.add(digest)
    for i in range(boundary):
        m, content = out[i], out[i].get("content")
        if m.get("role") == "tool" and isinstance(content, str) and len(content) > MIN_PRUNE_CHARS \
                and not content.startswith("[Duplicate tool output"):
            rewrite(i, content=stub(*calls.get(str(m.get("tool_call_id", "")), ("unknown", "")), content))
            pruned += 1
        elif m.get("role") == "assistant" and m.get("tool_calls"):
            tcs = [dict(tc, function=dict(tc["function"], arguments=_shorten_args(tc["function"]["arguments"])))
                   if isinstance(tc, dict) and isinstance((tc.get("function") or {}).get("arguments"), str)
                   and len(tc["function"]["arguments"]) > MAX_ARGS_CHARS else tc for tc in m["tool_calls"]]
            if tcs != m["tool_calls"]:
                rewrite(i, tool_calls=tcs)
    return out, pruned
