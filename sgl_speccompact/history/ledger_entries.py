"""The exact ledger's entries: what a history did, copied from it without a model (pure).

For each message of a compaction's history (redacted before it gets here,
so no secret can enter), :func:`ledger_entries` lists, in message order:

* ``read`` / ``wrote`` / ``edited`` / ``deleted`` / ``touched``: a file a
  tool call named (:data:`~.actions.PATH_KEYS`), with the tool that touched it;
  an editor tool that names no file (SWE-agent's ``edit``) edited the file its
  result shows open (:func:`~.actions.shown_file`);
* ``ran``: a shell command (a shell tool's ``command``, or a program line of
  a fenced block in the assistant's text, where text-action agents put their
  commands), with the exit status or error its result shows; an editor
  command that names no file (``edit 3:5``) with the file its result shows
  open (``at``);
* ``did``: any other tool call whose name leads with a verb that changes
  the world (``book_reservation``, ``update_ticket``), with its arguments;
* ``called``: any other tool call (a lookup: ``get_user_details``,
  ``find_file``), with its arguments;
* ``error``: an exception or errno name, with the traceback location
  (``File "x.py", line 3``) before it in the same message;
* the identifiers of :mod:`~.identifiers` (``url``, ``path``, ``hash``,
  ``id``, ``number``, ``command``) in the same sources the retention
  evaluation reads: user messages, tool results, the assistant's tool calls
  and fenced blocks (never the system prompt, never the assistant's prose);
* ``example``: a command a prompt shows (the task's instructions, a
  simulated user): an example or a request, never a command of the session.
  A prompt's delimited demonstrations (:func:`~.provenance.demonstration_spans`)
  are left out whole.

Each entry records its **source** (:func:`~.provenance.message_sources`: the
agent's own ``call``, a ``result``, a ``prompt``) and whether it is
**boilerplate** (``noise``: a markup namespace, a hex dump or system listing
line, a system path, :mod:`~.provenance`), which the budget ranks by
(:mod:`sgl_speccompact.core.ledger_budget`).

A write, an edit, a deletion, a ``did`` and a command that changes
something (:func:`~.actions.command_effect`) are ``done`` unless their
result shows a failure: an agent must not repeat them.

Every string an entry holds is an exact substring of its message (content,
tool name or arguments as sent, JSON escapes included; an outcome, or the
file an editor showed open, of the result it came from), one line, cut at a
space to :data:`MAX_VALUE_CHARS` when longer: each is a slice of the text it
was found in, never rebuilt.  Extraction is linear in the history: each text
is scanned once by linear patterns (twice when it holds boilerplate lines),
and a call's arguments are searched at most once per named file.  With a
:class:`~.memo.Memo`, what one message yields is extracted once per session:
a compaction extracts only the messages it has not seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from . import actions
from ..result import (ACTION_KINDS, CHANGES, EXAMPLE, FILE_KINDS, IDENTIFIER_KINDS, KINDS,  # noqa: F401
                      LedgerEntry)
from .identifiers import commands, extract
from .memo import Memo, digest
from .messages import Turn
from .provenance import (CALL, PROMPT, RESULT, demonstration_spans, is_noise_value, message_sources, noise_lines,
                         without_spans)

MAX_VALUE_CHARS = 160  # an entry's value longer than this is cut at a space (chars)
MAX_ARGS_CHARS = 80  # a `did` action's arguments are cut at a space to this (chars)
SOURCE_ROLES = frozenset({"user", "tool"})  # roles whose whole text is a source of identifiers
MEMO_WEIGHT = 200_000  # the process-wide memo's bound: its messages plus their entries (about 100 MB at most)
_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_TRACE = re.compile(r'File "([^"\n]{1,400}", line \d+)')  # a traceback frame's location, as written


@dataclass(frozen=True)
class Found:
    """What one message yields by itself (its result not yet seen): the unit the memo keeps."""

    entries: tuple[LedgerEntry, ...] = ()  # in order, each with index 0 (set when used)
    by_call: tuple[tuple[str, tuple[int, ...]], ...] = ()  # call id -> positions its result completes
    last_action: tuple[int, ...] = ()  # positions the next message completes: the last text action's
    open_file: frozenset[int] = frozenset()  # positions whose file is the one their result shows open
    outcome: tuple[str, str] = ("", "")  # a result's exit status and error (actions.outcome)
    shown: str = ""  # the file a result shows an editor had open (actions.shown_file), cut
    shown_cut: bool = False  # it was cut at MAX_VALUE_CHARS


# the process-wide memo compactions share (methods.pipeline passes it): a message weighs 1 + its entries
SHARED_MEMO = Memo(MEMO_WEIGHT, weigh=lambda found: 1 + len(found.entries))


# ---------------------------------------------------------------- one message


def _identifiers(texts: Iterable[str], skip: set[tuple[str, str]], source: str,
                 failing: bool = False) -> list[LedgerEntry]:
    """Identifier and error entries of ``texts`` (pieces of one message), without those in ``skip``.

    A prompt's commands are examples; an identifier a result or a prompt showed only on boilerplate
    lines, or boilerplate by its value, is marked ``noise`` (never one the agent wrote itself); the errors
    of a ``failing`` result were ``hit``.
    """
    out, seen = [], set(skip)
    for text in texts:
        located = _locations(text)
        found = extract(text)
        clean = _off_noise_lines(text) if source == RESULT else None
        for ident in found:
            value, cut = actions.cut(ident.text, MAX_VALUE_CHARS)
            kind = EXAMPLE if ident.kind == "command" and source == PROMPT else ident.kind
            if not value or (kind, value) in seen or (kind, ident.value) in seen:
                continue
            seen.add((kind, value))
            noise = source != CALL and (is_noise_value(kind, ident.value) or (clean is not None and ident not in clean))
            out.append(LedgerEntry(0, kind, value, at=located.get(ident.value, "") if kind == "error" else "",
                                   cut=cut, source=source, noise=noise, hit=failing and kind == "error"))
    return out


def _off_noise_lines(text: str) -> set | None:
    """The identifiers of ``text`` outside its boilerplate lines; None when it has none (all are outside)."""
    noise = noise_lines(text)
    if not noise:
        return None
    kept, pos = [], 0
    for line in noise:  # in order of appearance, each found once from where the last one ended
        at = text.find(line, pos)
        if at < 0:
            continue
        kept.append(text[pos:at])
        pos = at + len(line)
    kept.append(text[pos:])
    return set(extract("\n".join(kept)))


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


def _call(name: str, raw: str) -> tuple[list[LedgerEntry], bool]:
    """The entries of one tool call (a command run, files touched, or an action taken), and whether its
    one entry waits for the file its result shows open (an editor that named none)."""
    args = actions.arguments(raw)
    command = next((args[k] for k in actions.COMMAND_KEYS if isinstance(args.get(k), str)), None)
    if name.lower() in actions.SHELL_TOOLS and command and command.strip():
        line, more = actions.first_line(command.strip())
        value, cut = actions.cut(actions.exact(line, raw), MAX_VALUE_CHARS)
        return ([LedgerEntry(0, "ran", value, done=actions.command_effect(command), cut=cut or more, source=CALL)]
                if value else []), False
    paths = actions.file_paths(args)
    kind = actions.file_action(name, args)
    if paths:
        out = []
        for path in paths:
            value, cut = actions.cut(actions.exact(path.strip(), raw), MAX_VALUE_CHARS)
            if value:
                out.append(LedgerEntry(0, kind, value, via=name, done=kind in CHANGES, cut=cut, source=CALL))
        return out, False
    editor = kind == "edited"  # an editor naming no file edits the one it has open: its result says which
    effect = editor or actions.is_effect(name)
    shown, cut = actions.cut(raw.strip(), MAX_ARGS_CHARS) if raw.strip() not in ("", "{}") else ("", False)
    return [LedgerEntry(0, "did" if effect else "called", name, args=shown, done=effect, cut=cut, source=CALL)], editor


def _assistant(turn: Turn) -> Found:
    """What an assistant message yields: its commands, calls and the identifiers they name."""
    out: list[LedgerEntry] = []
    by_call: dict[str, list[int]] = {}
    open_file: set[int] = set()
    blocks = [m.group(1) for m in _FENCE.finditer(turn.content)] if "```" in turn.content else []
    for block in blocks:  # a text-action agent's commands: program lines of its fenced blocks
        for ident in extract_commands(block):
            value, cut = actions.cut(ident, MAX_VALUE_CHARS)
            if value:
                if actions.edits_open_file(value):
                    open_file.add(len(out))
                out.append(LedgerEntry(0, "ran", value, done=actions.command_effect(ident), cut=cut, source=CALL))
    text_actions = list(range(len(out)))
    pieces = list(blocks)
    for call in turn.tool_calls:
        start = len(out)
        found, editor = _call(call.name, call.arguments)
        out += found
        if editor:
            open_file.add(start)
        by_call.setdefault(call.id, []).extend(range(start, len(out)))
        pieces += [call.name, *actions.escape_free(call.arguments)]
    skip = {("path", e.value) for e in out if e.kind in FILE_KINDS} | {("command", e.value) for e in out
                                                                       if e.kind == "ran"}
    out += _identifiers(pieces, skip, CALL)
    return Found(tuple(out), tuple((k, tuple(v)) for k, v in by_call.items()), tuple(text_actions[-1:]),
                 frozenset(open_file))


def _other(turn: Turn, source: str) -> Found:
    """What a user or tool message yields: its identifiers (a prompt's demonstrations left out)."""
    texts = [turn.content]
    if source == PROMPT:
        texts = without_spans(turn.content, demonstration_spans(turn.content))
    if source != RESULT:
        return Found(tuple(_identifiers(texts, set(), source)))
    outcome = actions.outcome(turn.content, MAX_VALUE_CHARS)
    shown, cut = actions.cut(actions.shown_file(turn.content), MAX_VALUE_CHARS)
    return Found(tuple(_identifiers(texts, set(), source, any(outcome))), outcome=outcome, shown=shown,
                 shown_cut=cut and bool(shown))


def extract_commands(block: str) -> list[str]:
    """The program lines of a fenced block, as written (:func:`~.identifiers.commands`)."""
    return [c.text for c in commands("```\n" + block + "```")]


def _with_outcome(entry: LedgerEntry, result: Found, open_file: bool) -> LedgerEntry:
    """``entry`` with the exit status or error its result shows (and, for an editor that named no file,
    the file the result shows open); a failed side effect is not done."""
    if open_file and result.shown:
        if entry.kind == "ran":  # a text action: the command stays, the file is where it acted
            entry = replace(entry, at=result.shown)
        else:  # a tool: it edited that file
            entry = LedgerEntry(entry.index, "edited", result.shown, via=entry.value, done=True, cut=result.shown_cut,
                                source=CALL)
    status, error = result.outcome
    if entry.kind != "ran" and not error:
        return entry  # a file tool or an action: only an error result says anything about it
    entry = replace(entry, exit=status if entry.kind == "ran" else "", error=error)
    return replace(entry, done=entry.done and not entry.failed)


def _placed(found: Found, index: int) -> list[LedgerEntry]:
    """``found``'s entries with their message index (copied field by field: ``dataclasses.replace`` runs
    ``__init__`` again, which costs more than extracting a short message)."""
    out = []
    for e in found.entries:
        if e.index != index:
            moved = object.__new__(LedgerEntry)
            moved.__dict__.update(e.__dict__, index=index)
            e = moved
        out.append(e)
    return out


def _message_key(turn: Turn, source: str) -> tuple:
    """What a message's entries depend on -- its source, text and calls (ids included: results find them) --
    as a digest, so the memo never holds a message's text."""
    return (source, digest(turn.content, *(s for c in turn.tool_calls for s in (c.id, c.name, c.arguments))))


# ---------------------------------------------------------------- a history


def ledger_entries(turns: Sequence[Turn], indices: Sequence[int] | None = None,
                   memo: Memo | None = None) -> list[LedgerEntry]:
    """Every ledger entry of ``turns``, in message order (duplicates within a message removed).

    Parameters
    ----------
    turns : sequence of Turn
        The compaction's parsed history, already redacted.
    indices : sequence of int, optional
        Each turn's index in the caller's messages (a chunked block's); by default 0, 1, ...
    memo : Memo, optional
        Keeps what each message yields by itself across calls (:data:`SHARED_MEMO` for a process's
        compactions), so a message seen before is not scanned again; None: every message is scanned.

    Returns
    -------
    list of LedgerEntry
        Each one's strings are exact substrings of its message (or of the result that completed it).

    >>> from .messages import ToolCall
    >>> t = (Turn("user", "fix tests/test_a.py"),
    ...      Turn("assistant", "", (ToolCall("c1", "bash", '{"command": "pytest -x"}'),)),
    ...      Turn("tool", "<returncode>1</returncode> 3 failed", tool_call_id="c1"))
    >>> [(e.index, e.kind, e.value, e.exit, e.source) for e in ledger_entries(t)]
    [(0, 'path', 'tests/test_a.py', '', 'prompt'), (1, 'ran', 'pytest -x', '1', 'call')]
    """
    out: list[LedgerEntry] = []
    waiting: dict[str, list[int]] = {}  # call id -> positions in out of the entries its result completes
    text_actions: list[int] = []  # positions of the last assistant text action, completed by the next message
    open_file: set[int] = set()  # positions in out whose file is the one their result shows open
    sources = message_sources(turns)
    for pos, turn in enumerate(turns):
        index = indices[pos] if indices is not None else pos
        source = sources[pos]
        if turn.role not in SOURCE_ROLES and turn.role != "assistant":
            text_actions = []
            continue
        compute = (lambda t=turn: _assistant(t)) if turn.role == "assistant" else (lambda t=turn, s=source: _other(t, s))
        found = memo.get(_message_key(turn, source), compute) if memo is not None else compute()
        base = len(out)
        if turn.role == "assistant":
            out += _placed(found, index)
            for call_id, positions in found.by_call:
                waiting[call_id] = [base + p for p in positions]
            text_actions = [base + p for p in found.last_action]
            open_file.update(base + p for p in found.open_file)
            continue
        completes = waiting.pop(turn.tool_call_id, []) if turn.role == "tool" else text_actions
        for p in completes:  # a result (a tool message, or a text action's answer): its found has the outcome
            out[p] = _with_outcome(out[p], found, p in open_file)
            open_file.discard(p)
        text_actions = []
        out += _placed(found, index)
    return out
