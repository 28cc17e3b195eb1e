"""Tool-output pruning: old tool results become one-line stubs (pure, method-independent).

An agent that reads many files carries every file it ever read.  Before a
compaction summarises the history, each tool result except the newest
``keep`` ones is replaced by a stub that still says what was run and what
came back::

    [pruned tool output: read_file args#3f2a9c01 -> "import os" (21958 chars)]

Messages are never removed or reordered, so every tool result still answers
its assistant tool call: a tool-call pair is never broken.  A stub that
would be longer than the output it replaces is not used.  The caller's
messages are only read; pruned messages are copies.

This is the step Hermes's own compressor runs first
(``_prune_old_tool_results``); here it is a compaction pre-step that any
method gets when ``CompactConfig.prune_tool_outputs`` is on.

It is not the Hermes plugin's pruning (``speccompact_hermes.prune``), and
its stub is not the plugin's.  The plugin installs into Hermes's Python
alone and imports no ``sgl_speccompact``; this package does not depend on
the plugin, so neither can call the other.  Their stubs differ on purpose:
the plugin's are Hermes's own wording (inside Hermes, Hermes's
``_summarize_tool_result`` writes them), so a Hermes user's history looks
the same with either compressor and a prepared prefix matches the one
Hermes would send; this one quotes the output's first line and a digest of
the arguments, redacted first, for a summarizer that has no other view of
the output.  The format is :data:`STUB`, written here only.

With ``redact_secrets`` the output is redacted *before* its first line is
cut (a secret cut at the 77th character, or with its quotes swapped, no
longer matches its pattern), and the stub is redacted again after.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Mapping

from .messages import Turn, content_text
from .redaction import add_counts, redact

FIRST_LINE_CHARS = 80  # longest first line a stub quotes (chars)
STUB = '[pruned tool output: {name} args#{digest} -> "{first}" ({size} chars)]'  # the package's one stub format


@dataclass(frozen=True)
class PruneReport:
    """What pruning did to one history."""

    messages_pruned: int = 0  # tool results replaced by a stub
    chars_before: int = 0  # characters of those results before
    chars_after: int = 0  # characters of their stubs
    replaced: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # (redacted output, stub) per pruned message
    redactions: dict[str, int] = field(default_factory=dict)  # secrets replaced in the pruned outputs, per kind

    @property
    def chars_saved(self) -> int:
        """Characters removed from the history."""
        return self.chars_before - self.chars_after


def _calls(messages: list) -> dict[str, tuple[str, str]]:
    """tool_call_id -> (tool name, arguments as sent), over every assistant message."""
    out: dict[str, tuple[str, str]] = {}
    for m in messages:
        if not isinstance(m, Mapping) or not isinstance(m.get("tool_calls"), list):
            continue
        for c in m["tool_calls"]:
            fn = c.get("function") if isinstance(c, Mapping) else None
            if isinstance(fn, Mapping) and isinstance(c.get("id"), str):
                args = fn.get("arguments", "")
                out[c["id"]] = (str(fn.get("name", "")), args if isinstance(args, str) else repr(args))
    return out


def stub(name: str, arguments: str, output: str) -> str:
    """The one-line stand-in of a tool output: tool, arguments digest, first line, size.

    >>> stub("read_file", '{"path": "a.py"}', "import os\\nimport sys\\n")
    '[pruned tool output: read_file args#b882bfed -> "import os" (21 chars)]'
    """
    digest = hashlib.sha256(arguments.encode("utf-8", "replace")).hexdigest()[:8]
    first = next((line.strip() for line in output.splitlines() if line.strip()), "")
    if len(first) > FIRST_LINE_CHARS:
        first = first[:FIRST_LINE_CHARS - 3] + "..."
    first = first.replace('"', "'")
    return STUB.format(name=name or "tool", digest=digest, first=first, size=len(output))


def prune_tool_outputs(messages: list, keep: int, *, redact_secrets: bool = False) -> tuple[list, PruneReport]:
    """``messages`` with every tool output but the newest ``keep`` replaced by a stub.

    Parameters
    ----------
    messages : list of dict
        OpenAI chat messages; read only.  Malformed entries are passed
        through untouched (the history parser reports them).
    keep : int
        Newest tool outputs kept whole (0 prunes every one).
    redact_secrets : bool
        Redact each pruned output before its stub is made, and the stub after.

    Returns
    -------
    (list of dict, PruneReport)
        The pruned copy (same length, same order; unchanged messages are the
        caller's own objects) and what was removed.

    >>> msgs = [{"role": "assistant", "content": "", "tool_calls": [
    ...     {"id": "c1", "function": {"name": "cat", "arguments": "a"}},
    ...     {"id": "c2", "function": {"name": "cat", "arguments": "b"}}]},
    ...     {"role": "tool", "tool_call_id": "c1", "content": "x" * 500},
    ...     {"role": "tool", "tool_call_id": "c2", "content": "y" * 500}]
    >>> out, report = prune_tool_outputs(msgs, keep=1)
    >>> out[1]["content"][:28], out[2] is msgs[2], report.messages_pruned
    ('[pruned tool output: cat arg', True, 1)
    """
    tools = [i for i, m in enumerate(messages) if isinstance(m, Mapping) and m.get("role") == "tool"]
    old = tools[:max(0, len(tools) - keep)]
    if not old:
        return list(messages), PruneReport()
    calls = _calls(messages)
    out, replaced, found, before = list(messages), [], {}, 0
    for i in old:
        m = messages[i]
        output = content_text(m.get("content"))
        name, args = calls.get(m.get("tool_call_id"), (m.get("name") or "", ""))
        shown, counts = redact(output) if redact_secrets else (output, {})
        short = stub(m.get("name") or name, args, shown)
        if redact_secrets:
            short, more = redact(short)  # what the cut and the quote swap made of the redacted text
            counts = add_counts(counts, more)
        if len(short) >= len(output):
            continue  # already short: the stub would say less in more characters
        out[i] = {**m, "content": short}
        replaced.append((shown, short))
        found, before = add_counts(found, counts), before + len(output)
    return out, PruneReport(len(replaced), before, sum(len(b) for _, b in replaced), tuple(replaced), found)


def with_stubs(turns: tuple[Turn, ...], messages: list, pruned: list) -> tuple[Turn, ...]:
    """``turns`` (parsed from ``messages``) with the stubs :func:`prune_tool_outputs` put in ``pruned``.

    A stub is plain text, so the turn takes it as its content; the
    messages are not parsed again.

    >>> msgs = [{"role": "user", "content": "long"}]
    >>> with_stubs((Turn("user", "long"),), msgs, [{"role": "user", "content": "short"}])[0].content
    'short'
    """
    return tuple(t if new is old else replace(t, content=new["content"])
                 for t, old, new in zip(turns, messages, pruned))


def report_dict(report: PruneReport, count) -> dict:
    """The result's ``pruning`` entry; ``count`` (texts -> token lengths) measures the tokens saved.

    >>> report_dict(PruneReport(1, 10, 4, (("a b c d e", "a b"),)), lambda ts: [len(t.split()) for t in ts])
    {'messages_pruned': 1, 'chars_saved': 6, 'tokens_saved': 3}
    """
    before = count([a for a, _ in report.replaced]) if report.replaced else []
    after = count([b for _, b in report.replaced]) if report.replaced else []
    return {"messages_pruned": report.messages_pruned, "chars_saved": report.chars_saved,
            "tokens_saved": sum(before) - sum(after)}
