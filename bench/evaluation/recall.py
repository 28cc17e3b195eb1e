"""Identifier recall and invention: what a summary keeps of the history, and what it makes up.

* **Sources** (:func:`source_text`): the user messages, the tool results and
  the assistant's actions (each tool call's name and argument values; a shell
  tool's ``command`` also as a ``$ command`` line; fenced code blocks of
  assistant text, where text-action agents put their commands).  The system
  prompt and the assistant's prose are not sources: nothing there was
  established by the environment or asked for by the user.
* **Recall**: the share of the sources' identifiers that the summary keeps.
  An identifier is kept when the summary contains it (its canonical form or
  the text as written, as a whole word), or names the same thing: same kind
  and canonical value, or for paths the same file by a ``/``-aligned suffix
  (``src/a.py`` keeps ``/repo/src/a.py``) with the same line number when
  the history's identifier has one.
* **Invention**: the summary's identifiers that appear nowhere in the
  history (the whole rendered history, system prompt and assistant prose
  included, by the same matching rules).  A made-up path or line number is
  the cheapest hallucination signal there is.
* **With and without the exact ledger**: the ledger is part of the summary,
  so recall counts it, found by the same extractor that finds the history's
  identifiers (nothing else of the ledger is read).  :func:`ledger_split`
  gives the summary without its ledger (what the models wrote) and the
  ledger alone (whose invention must be zero).
"""

from __future__ import annotations

import json
import re
from typing import Iterable, Mapping

from sgl_speccompact.core.ledger import HEADING, strip_ledger
from sgl_speccompact.history import parse_messages, render_history
from sgl_speccompact.history.actions import COMMAND_KEYS, SHELL_TOOLS
from sgl_speccompact.history.identifiers import KINDS, Identifier, extract



def _call_text(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments) if arguments else {}
    except ValueError:
        args = None
    if not isinstance(args, dict):
        return f"{name} {arguments}"
    lines = [name] + [v if isinstance(v, str) else json.dumps(v) for v in args.values()]
    cmd = next((args[k] for k in COMMAND_KEYS if isinstance(args.get(k), str)), None)
    if name.lower() in SHELL_TOOLS and cmd and cmd.strip():
        lines.append("$ " + cmd.strip().split("\n", 1)[0])
    return "\n".join(lines)


def source_text(messages: list[dict]) -> str:
    """The history's sources of identifiers as one text (see the module docstring).

    >>> msgs = [{"role": "system", "content": "docs at /etc/x.conf"},
    ...         {"role": "user", "content": "fix a.py"},
    ...         {"role": "assistant", "content": "I bet b.py", "tool_calls": [{"id": "c1", "type": "function",
    ...          "function": {"name": "bash", "arguments": '{"command": "pytest a.py"}'}}]},
    ...         {"role": "tool", "tool_call_id": "c1", "content": "1 failed in 0.50s"}]
    >>> print(source_text(msgs))
    fix a.py
    bash
    pytest a.py
    $ pytest a.py
    1 failed in 0.50s
    """
    parts = []
    for t in parse_messages(messages):
        if t.role in ("user", "tool"):
            parts.append(t.content)
        elif t.role == "assistant":
            parts.extend(f"```\n{block}```" for block in re.findall(r"```[^\n`]*\n(.*?)```", t.content, re.DOTALL))
            parts.extend(_call_text(c.name, c.arguments) for c in t.tool_calls)
    return "\n".join(p for p in parts if p)


def history_text(messages: list[dict]) -> str:
    """Everything the history says (for the invention check)."""
    return render_history(parse_messages(messages))


def _split_path(value: str) -> tuple[str, str | None]:
    head, sep, tail = value.rpartition(":")
    return (head, tail) if sep and tail.isdigit() else (value, None)


def _same_file(a: str, b: str) -> bool:
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def names_same(history: Identifier, written: Identifier, *, need_line: bool) -> bool:
    """Whether ``written`` names the thing ``history`` names (same kind; paths by suffix).

    ``need_line``: the line numbers must agree when ``history`` has one (recall)
    rather than when ``written`` has one (invention).

    >>> h, s = Identifier("path", "/repo/tests/a.py:7"), Identifier("path", "tests/a.py")
    >>> names_same(h, s, need_line=True), names_same(h, s, need_line=False)
    (False, True)
    """
    if history.kind != written.kind:
        return False
    if history.kind != "path":
        return history.value == written.value
    (hp, hl), (wp, wl) = _split_path(history.value), _split_path(written.value)
    line_ok = (hl is None or hl == wl) if need_line else (wl is None or wl == hl)
    return line_ok and _same_file(hp, wp)


def _word_in(needle: str, haystack: str) -> bool:
    return bool(needle) and re.search(r"(?<![\w])" + re.escape(needle) + r"(?![\w])", haystack) is not None


def is_kept(ident: Identifier, summary_ids: Iterable[Identifier], summary: str) -> bool:
    """Whether a history identifier survives in the summary.

    >>> is_kept(Identifier("path", "/r/a.py:3", "/r/a.py:3"), extract("see a.py:3"), "see a.py:3")
    True
    >>> is_kept(Identifier("id", "#18", "#18"), extract("PR #1867"), "PR #1867")
    False
    """
    if _word_in(ident.value, summary) or _word_in(ident.text, summary):
        return True
    return any(names_same(ident, s, need_line=True) for s in summary_ids)


def is_invented(ident: Identifier, history_ids: Iterable[Identifier], history: str) -> bool:
    """Whether a summary identifier appears nowhere in the history.

    >>> hist = "Traceback: /r/a.py, line 3"
    >>> [is_invented(i, extract(hist), hist) for i in extract("a.py:3 a.py:4 b.py")]
    [False, True, True]
    """
    if _word_in(ident.value, history) or _word_in(ident.text, history):
        return False
    return not any(names_same(h, ident, need_line=False) for h in history_ids)


def retention(source_ids: list[Identifier], history_ids: list[Identifier], history: str, text: str) -> dict:
    """Kept, lost and invented identifiers of one text (a summary or one slot of it).

    Returns a JSON-ready dict: ``recall`` (kept / source identifiers, None
    without any), ``kept``/``lost``/``invented`` as ``kind:value`` strings,
    and per-kind counts.

    >>> src = extract("error in /r/a.py:3: KeyError")
    >>> r = retention(src, src, "error in /r/a.py:3: KeyError", "a.py:3 raised KeyError; see c.py")
    >>> r["recall"], r["invented"]
    (1.0, ['path:c.py'])
    """
    found = extract(text)
    kept = [i for i in source_ids if is_kept(i, found, text)]
    invented = [i for i in found if is_invented(i, history_ids, history)]
    kept_set = set(kept)
    by_kind = {}
    for kind in KINDS:
        total = sum(i.kind == kind for i in source_ids)
        if total or any(i.kind == kind for i in invented):
            by_kind[kind] = {"source": total, "kept": sum(i.kind == kind for i in kept),
                             "invented": sum(i.kind == kind for i in invented)}
    return {
        "source_identifiers": len(source_ids),
        "kept_count": len(kept),
        "recall": len(kept) / len(source_ids) if source_ids else None,
        "invented_count": len(invented),
        "summary_identifiers": len(found),
        "by_kind": by_kind,
        "kept": [f"{i.kind}:{i.value}" for i in kept],
        "lost": [f"{i.kind}:{i.value}" for i in source_ids if i not in kept_set],
        "invented": [f"{i.kind}:{i.value}" for i in invented],
    }


def ledger_split(summary: str) -> tuple[str, str]:
    """``(the summary without its exact ledger, the ledger section alone)``.

    >>> ledger_split("## Goal\\n- a\\n\\n## Exact Ledger\\n- m1 ran `ls`\\n")
    ('## Goal\\n- a\\n', '## Exact Ledger\\n- m1 ran `ls`\\n')
    """
    rest = strip_ledger(summary) or ""
    start = summary.find(HEADING)
    return rest, (summary[start:] if start >= 0 else "")


def summary_retention(messages: list[dict], summary: str, slots: Mapping[str, str]) -> dict:
    """Recall and invention of a whole summary and of each slot.

    ``slots`` maps slot name -> that slot's text.  Returns
    ``{"summary": retention(...), "slots": {name: retention(...)}}``; a slot's
    recall is over all of the history's identifiers.
    """
    source_ids = extract(source_text(messages))
    history = history_text(messages)
    history_ids = extract(history)
    without, ledger = ledger_split(summary)
    return {
        "summary": retention(source_ids, history_ids, history, summary),
        "without_ledger": retention(source_ids, history_ids, history, without),
        "ledger": retention(source_ids, history_ids, history, ledger) if ledger else None,
        "slots": {name: retention(source_ids, history_ids, history, text) for name, text in slots.items()},
    }
