"""The exact ledger's entries: what a history did, copied from it without a model (pure).

For each message of a compaction's history (redacted before it gets here,
so no secret can enter), :func:`ledger_entries` lists, in message order:

* ``read`` / ``wrote`` / ``edited`` / ``deleted`` / ``touched``: a file a
  tool call named (:data:`~.actions.PATH_KEYS`), with the tool that touched it;
* ``ran``: a shell command (a shell tool's ``command``, or a program line of
  a fenced block in the assistant's text, where text-action agents put their
  commands), with the exit status or error its result shows;
* ``did``: any other tool call whose name leads with a verb that changes
  the world (``book_reservation``, ``update_ticket``), with its arguments;
* ``error``: an exception or errno name, with the traceback location
  (``File "x.py", line 3``) before it in the same message;
* the identifiers of :mod:`~.identifiers` (``url``, ``path``, ``hash``,
  ``id``, ``number``, ``command``) in the same sources the retention
  evaluation reads: user messages, tool results, the assistant's tool calls
  and fenced blocks (never the system prompt, never the assistant's prose).

A write, an edit, a deletion, a ``did`` and a command that changes
something (:func:`~.actions.command_effect`) are ``done`` unless their
result shows a failure: an agent must not repeat them.

Every string an entry holds is an exact substring of its message (content,
tool name or arguments as sent, JSON escapes included; an outcome, of the
result it came from), one line, cut at a space to :data:`MAX_VALUE_CHARS`
when longer: each is a slice of the text it was found in, never rebuilt.
Extraction is linear in the history: each text is scanned once by linear
patterns, and a call's arguments are searched at most once per named file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from . import actions
from .identifiers import commands, extract
from .messages import Turn

MAX_VALUE_CHARS = 160  # an entry's value longer than this is cut at a space (chars)
MAX_ARGS_CHARS = 80  # a `did` action's arguments are cut at a space to this (chars)
FILE_KINDS = ("read", "wrote", "edited", "deleted", "touched")  # what a tool did to a file
CHANGES = frozenset({"wrote", "edited", "deleted"})  # file kinds that are side effects
IDENTIFIER_KINDS = ("url", "path", "hash", "id", "number", "command")  # identifier kinds listed as they are
KINDS = FILE_KINDS + ("ran", "did", "error") + IDENTIFIER_KINDS  # every entry kind, the ledger's vocabulary
SOURCE_ROLES = frozenset({"user", "tool"})  # roles whose whole text is a source of identifiers
_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_TRACE = re.compile(r'File "([^"\n]{1,400}", line \d+)')  # a traceback frame's location, as written


@dataclass(frozen=True)
class LedgerEntry:
    """One fact of the ledger: a kind and the exact strings that show it."""

    index: int  # the message it came from: its index in the compaction's messages
    kind: str  # one of KINDS
    value: str  # the exact string (a path, a command line, a tool name, an identifier): one line
    via: str = ""  # the tool call that touched a file (its name)
    args: str = ""  # a ``did`` action's arguments, as sent (cut at a space)
    at: str = ""  # an error's location as written (``/r/a.py", line 3``)
    exit: str = ""  # the exit status its result shows, as written ("" when none)
    error: str = ""  # the error its result shows (a name, or the result's first line)
    done: bool = False  # a side effect that did not fail: not to be repeated
    cut: bool = False  # ``value`` or ``args`` was cut at MAX_VALUE_CHARS
    refs: int = field(default=1, compare=False)  # messages that named it (superseding adds them up)
    carried: bool = field(default=False, compare=False)  # read back from the previous summary's ledger

    @property
    def failed(self) -> bool:
        """Its result shows a failure: a non-zero exit status, or an error."""
        return self.exit not in ("", "0") or bool(self.error)

    @property
    def key(self) -> tuple:
        """What a later entry with the same key supersedes: a file's reads or changes, the same command
        run again, the same action, error or identifier named again."""
        if self.kind in FILE_KINDS:
            return ("file", self.kind in CHANGES, self.value)
        if self.kind == "did":
            return ("did", self.value, self.args)
        if self.kind == "error":
            return ("error", self.value, self.at)
        return (self.kind, self.value)

    def strings(self) -> tuple[str, ...]:
        """The exact strings it shows (each one a substring of its message)."""
        return tuple(s for s in (self.value, self.via, self.args, self.at, self.exit, self.error) if s)


# ---------------------------------------------------------------- one message


def _identifiers(index: int, texts: Iterable[str], skip: set[tuple[str, str]]) -> list[LedgerEntry]:
    """Identifier and error entries of ``texts`` (pieces of one message), without those in ``skip``."""
    out, seen = [], set(skip)
    for text in texts:
        located = _locations(text)
        for ident in extract(text):
            value, cut = actions.cut(ident.text, MAX_VALUE_CHARS)
            kind = "error" if ident.kind == "error" else ident.kind
            if not value or (kind, value) in seen or (kind, ident.value) in seen:
                continue
            seen.add((kind, value))
            out.append(LedgerEntry(index, kind, value, at=located.get(ident.value, "") if kind == "error" else "",
                                   cut=cut))
    return out


def _locations(text: str) -> dict[str, str]:
    """Error name -> the traceback location written before its first line-start occurrence in ``text``."""
    if "line " not in text:
        return {}
    frames = [(m.start(), m.group(1)) for m in _TRACE.finditer(text)]
    out: dict[str, str] = {}
    k, last = 0, ""
    for m in actions.ERROR_LINE.finditer(text):
        while k < len(frames) and frames[k][0] < m.start():
            last, k = frames[k][1], k + 1
        if last:
            out.setdefault(m.group(1), last)
    return out


def _call(index: int, name: str, raw: str) -> list[LedgerEntry]:
    """The entries of one tool call: a command run, files touched, or an action taken."""
    args = actions.arguments(raw)
    command = next((args[k] for k in actions.COMMAND_KEYS if isinstance(args.get(k), str)), None)
    if name.lower() in actions.SHELL_TOOLS and command and command.strip():
        line, more = actions.first_line(command.strip())
        value, cut = actions.cut(actions.exact(line, raw), MAX_VALUE_CHARS)
        return [LedgerEntry(index, "ran", value, done=actions.command_effect(command), cut=cut or more)] if value else []
    paths = actions.file_paths(args)
    if paths:
        kind = actions.file_action(name, args)
        out = []
        for path in paths:
            value, cut = actions.cut(actions.exact(path.strip(), raw), MAX_VALUE_CHARS)
            if value:
                out.append(LedgerEntry(index, kind, value, via=name, done=kind in CHANGES, cut=cut))
        return out
    if actions.is_effect(name):
        shown, cut = actions.cut(raw.strip(), MAX_ARGS_CHARS) if raw.strip() not in ("", "{}") else ("", False)
        return [LedgerEntry(index, "did", name, args=shown, done=True, cut=cut)]
    return []


def _assistant(index: int, turn: Turn) -> tuple[list[LedgerEntry], dict[str, list[int]], list[int]]:
    """A message's entries; which of them wait for each call id's result; which wait for the next message."""
    out: list[LedgerEntry] = []
    by_call: dict[str, list[int]] = {}
    blocks = [m.group(1) for m in _FENCE.finditer(turn.content)] if "```" in turn.content else []
    for block in blocks:  # a text-action agent's commands: program lines of its fenced blocks
        for ident in extract_commands(block):
            value, cut = actions.cut(ident, MAX_VALUE_CHARS)
            if value:
                out.append(LedgerEntry(index, "ran", value, done=actions.command_effect(ident), cut=cut))
    text_actions = list(range(len(out)))
    pieces = list(blocks)
    for call in turn.tool_calls:
        start = len(out)
        out += _call(index, call.name, call.arguments)
        by_call.setdefault(call.id, []).extend(range(start, len(out)))
        pieces += [call.name, *actions.escape_free(call.arguments)]
    skip = {("path", e.value) for e in out if e.kind in FILE_KINDS} | {("command", e.value) for e in out
                                                                       if e.kind == "ran"}
    out += _identifiers(index, pieces, skip)
    return out, by_call, text_actions[-1:]  # a block's outcome is its last command's


def extract_commands(block: str) -> list[str]:
    """The program lines of a fenced block, as written (:func:`~.identifiers.commands`)."""
    return [c.text for c in commands("```\n" + block + "```")]


def _with_outcome(entry: LedgerEntry, result: str) -> LedgerEntry:
    """``entry`` with the exit status or error its result shows; a failed side effect is not done."""
    status, error = actions.outcome(result, MAX_VALUE_CHARS)
    if entry.kind != "ran" and not error:
        return entry  # a file tool or an action: only an error result says anything about it
    entry = replace(entry, exit=status if entry.kind == "ran" else "", error=error)
    return replace(entry, done=entry.done and not entry.failed)


# ---------------------------------------------------------------- a history


def ledger_entries(turns: Sequence[Turn], indices: Sequence[int] | None = None) -> list[LedgerEntry]:
    """Every ledger entry of ``turns``, in message order (duplicates within a message removed).

    Parameters
    ----------
    turns : sequence of Turn
        The compaction's parsed history, already redacted.
    indices : sequence of int, optional
        Each turn's index in the caller's messages (a chunked block's); by default 0, 1, ...

    Returns
    -------
    list of LedgerEntry
        Each one's strings are exact substrings of its message.

    >>> from .messages import ToolCall
    >>> t = (Turn("user", "fix tests/test_a.py"),
    ...      Turn("assistant", "", (ToolCall("c1", "bash", '{"command": "pytest -x"}'),)),
    ...      Turn("tool", "<returncode>1</returncode> 3 failed", tool_call_id="c1"))
    >>> [(e.index, e.kind, e.value, e.exit) for e in ledger_entries(t)]
    [(0, 'path', 'tests/test_a.py', ''), (1, 'ran', 'pytest -x', '1')]
    """
    out: list[LedgerEntry] = []
    waiting: dict[str, list[int]] = {}  # call id -> positions in out of the entries its result completes
    text_actions: list[int] = []  # positions of the last assistant text action, completed by the next message
    for pos, turn in enumerate(turns):
        index = indices[pos] if indices is not None else pos
        if turn.role == "assistant":
            found, by_call, last = _assistant(index, turn)
            base = len(out)
            out += found
            for call_id, positions in by_call.items():
                waiting[call_id] = [base + p for p in positions]
            text_actions = [base + p for p in last]
            continue
        if turn.role not in SOURCE_ROLES:
            text_actions = []
            continue
        completes = waiting.pop(turn.tool_call_id, []) if turn.role == "tool" else text_actions
        for p in completes:
            out[p] = _with_outcome(out[p], turn.content)
        text_actions = []
        out += _identifiers(index, [turn.content], set())
    return out
