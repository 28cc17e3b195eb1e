"""A recall exam for a compacted history: the questions an agent asks after a compaction, with exact answers.

Factory's compaction evaluation asks what an agent needs to carry on; this
exam asks the same four kinds of question, each answered by one exact string
of the history, and checks whether the summary contains it:

* **recall** -- which file, command or id: every file the agent named in a
  call, every command it ran, the ids its calls sent, and up to
  :data:`OUTPUT_IDS` ids only tool output showed (spread evenly over them);
* **artifacts** -- which files were changed: the files written, edited,
  created, removed or moved by a call or a command, and the files a patch in
  a tool output names (``diff --git a/x b/x``);
* **continuation** -- the last failing action, and its error;
* **decisions** -- what was already done and must not be repeated: every
  action that changes something and did not fail.

The probes come from the history's own structure -- its tool calls and
their results, the commands of text-action agents (the first line of each
fenced block in an assistant message, answered by the message after it),
exit statuses and tracebacks -- by the rules of this module, which reads no
part of the package's ledger (its extraction, its ranking, its grammar).  A
summary answers a probe when it contains the answer verbatim, not inside a
longer word (:func:`contains`: ``edit`` is not answered by ``edited``).  How
an answer is written:

* a command: its first line, at most :data:`MAX_COMMAND` characters (cut at a
  space);
* a tool call that is no shell (for continuation and decisions): the file it
  names, else the tool's name;
* a changed file (artifacts): its name, the last path component, since
  "which files" is answered by naming them, whatever folder a summary gives;
* an error: the last exception or error class its result names
  (``ValueError``), else the errno message (``[Errno 2] No such file or
  directory``).

Pure: messages in, probes out.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

CATEGORIES = ("recall", "artifacts", "continuation", "decisions")
MAX_COMMAND = 100  # characters of a command's first line an answer holds
OUTPUT_IDS = 5  # ids only tool output showed, asked for at most (spread over them)
SHELLS = frozenset("bash shell sh terminal execute_bash run run_command execute_command run_shell_command exec".split())
PATH_ARGS = ("path", "file_path", "filepath", "file", "filename", "target_file", "notebook_path")
# words a tool's name holds when it changes something; str_replace_editor's commands that do
MUTATING = re.compile(r"create|write|edit|insert|replace|delete|remove|submit|transfer|book|cancel|update|send|"
                      r"commit|push|install|apply|patch|move|rename|upload|deploy|modify", re.IGNORECASE)
EDITOR_CHANGES = frozenset("create str_replace insert undo_edit write edit delete".split())
# programs of a command line that change something, and (program, first argument) pairs that do
CHANGING_PROGRAMS = frozenset("rm mv cp touch mkdir tee create edit insert append submit patch rmdir ln".split())
CHANGING_PAIRS = {"pip": {"install", "uninstall"}, "pip3": {"install", "uninstall"}, "npm": {"install", "ci"},
                  "git": {"commit", "push", "apply", "checkout", "reset", "rm", "mv", "merge", "rebase"},
                  "apt": {"install"}, "apt-get": {"install"}, "sed": {"-i"}}
_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_STATUS = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>|exit(?:ed)? (?:with )?(?:code|status)\s*:?\s*(-?\d+)",
                     re.IGNORECASE)
# an exception or error class starting a line (a traceback's last line, a linter's "- E999 IndentationError: ...")
_EXCEPTION = re.compile(r"^\s*(?:[-*]\s+)?(?:[A-Z]\d{3,4}\s+)?(?:\w+\.)*([A-Z][A-Za-z0-9]*(?:Error|Exception))\b",
                        re.MULTILINE)
_ERRNO = re.compile(r"\[Errno \d+\] [^:\n']+")
_FAIL_LINE = re.compile(r"^\s*(?:error|failed|failure)\b|\[Errno \d+\]|No such file or directory|command not found"
                        r"|syntax error", re.IGNORECASE)
_TRACEBACK = "Traceback (most recent call last)"
_DIFF = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.MULTILINE)
_SHOWN_FILE = re.compile(r"^\[File: ([^\n()]+?) \(\d+ lines total\)\]", re.MULTILINE)
_REDIRECT = re.compile(r"(?<![0-9&>])>>?\s*([^\s<>|&;'\"]+)")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")  # a quoted string of a command line (no redirection inside)
_PATHISH = re.compile(r"^[\w.~/@+-]*[\w@+-]\.[A-Za-z0-9]{1,8}$")
# an id: a token of 5-40 letters, digits, "_" and "-" with two digits, or a digit and a capital (HAT136, OWZ4XL,
# mia_li_3668), standing alone: not part of a path, a file name, a time or a JSON key
_ID = re.compile(r"(?<![\w./:-])(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9][A-Za-z0-9_-]{4,39}"
                 r"(?![\w./:-]|\":)")


@dataclass(frozen=True)
class Action:
    """One thing the agent did: a tool call or a text action, with the result that answered it."""

    index: int  # the message it was issued in
    tool: str  # the tool's name ("" for a text action)
    command: str  # a shell's or a text action's first line ("" for another tool)
    path: str  # the file a tool call names ("" when none)
    args: dict  # the call's arguments ({} for a text action)
    result: str  # the result's text ("" when none came)


@dataclass(frozen=True)
class Probe:
    """One question with its exact answer."""

    category: str  # one of CATEGORIES
    question: str  # what is asked, in words
    answer: str  # the exact string a summary must contain
    index: int  # the message it was derived from


def _text(content) -> str:
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return content if isinstance(content, str) else ""


def _args(raw) -> dict:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def actions(messages: list[dict]) -> list[Action]:
    """The agent's actions in order: each tool call with its result, and each fenced block's first line
    in an assistant message, answered by the message after it."""
    results = {m.get("tool_call_id"): _text(m.get("content")) for m in messages if m.get("role") == "tool"}
    out: list[Action] = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            name, args = str(fn.get("name") or ""), _args(fn.get("arguments"))
            command = args.get("command") if name.lower() in SHELLS else None
            command = command if isinstance(command, str) else args.get("cmd") if name.lower() in SHELLS else None
            path = next((args[k] for k in PATH_ARGS if isinstance(args.get(k), str) and args[k].strip()), "")
            out.append(Action(i, name, first_line(command) if isinstance(command, str) else "", path.strip(), args,
                              results.get(tc.get("id"), "")))
        nxt = messages[i + 1] if i + 1 < len(messages) else {}
        answer = _text(nxt.get("content")) if nxt.get("role") == "user" else ""
        for block in _FENCE.findall(_text(m.get("content"))):
            line = first_line(block)
            if line:
                out.append(Action(i, "", line, "", {}, answer))
    return out


def first_line(text: str) -> str:
    """The first non-blank line, stripped.

    >>> first_line("\\n  cd /r && pytest\\nexit")
    'cd /r && pytest'
    """
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def command_answer(command: str) -> str:
    """A command as an answer: its first line, at most :data:`MAX_COMMAND` characters, cut at a space
    when longer (a word is never split).

    >>> command_answer("pytest " + "tests/test_a.py " * 10), len(command_answer("x" * 300))
    ('pytest tests/test_a.py tests/test_a.py tests/test_a.py tests/test_a.py tests/test_a.py', 100)
    """
    if len(command) <= MAX_COMMAND:
        return command
    space = command.rfind(" ", 0, MAX_COMMAND + 1)
    return command[:space].rstrip() if space > 0 else command[:MAX_COMMAND]


def failed(result: str) -> bool:
    """Whether a result shows a failure: a non-zero exit status, a traceback, or a first line that says so.

    >>> failed("<returncode>1</returncode>"), failed("exit code 0"), failed("Error: not found"), failed("ok")
    (True, False, True, False)
    """
    status = _STATUS.search(result)
    if status:
        return (status.group(1) or status.group(2)) != "0"
    head = first_line(result)
    return _TRACEBACK in result or bool(_FAIL_LINE.search(head))


def error_of(result: str) -> str:
    """A failed result's error: the last exception name that starts a line, else its errno message; ""
    when it names none.

    >>> error_of("Traceback ...\\nKeyError: 'a'"), error_of("Ran into [Errno 2] No such file or directory: 'x'")
    ('KeyError', '[Errno 2] No such file or directory')
    """
    names = _EXCEPTION.findall(result)
    if names:  # a traceback names its cause last
        return names[-1]
    errno = _ERRNO.search(result)
    return errno.group(0).strip() if errno else ""


def changes(a: Action) -> bool:
    """Whether an action changes something (by this module's own rules, see the module docstring)."""
    if a.command:
        words = a.command.split()
        if _REDIRECT.search(_QUOTED.sub(" ", a.command)) and "/dev/null" not in a.command:
            return True
        for part in re.split(r"&&|\|\||;|\|", a.command):
            w = part.split()
            if w and (w[0] in CHANGING_PROGRAMS or any(x in CHANGING_PAIRS.get(w[0], ()) for x in w[1:3])):
                return True
        return bool(words) and words[0] in CHANGING_PROGRAMS
    command = a.args.get("command")
    if isinstance(command, str) and a.path:
        return command in EDITOR_CHANGES
    return bool(MUTATING.search(a.tool))


def changed_files(a: Action) -> list[str]:
    """The files an action changed (as written): a mutating file tool's path, a command's targets, or the
    file its result shows the editor had open when the action names none."""
    if not changes(a) or failed(a.result):
        return []
    if a.path:
        return [a.path]
    out = [m.group(1) for m in _REDIRECT.finditer(_QUOTED.sub(" ", a.command))] if a.command else []
    words = _words(a.command)
    if words and words[0] in ("rm", "touch", "create", "mv", "cp", "tee"):
        out += [w for w in words[1:] if not w.startswith("-") and _PATHISH.match(w)]
    if words and words[0] == "sed" and "-i" in words:
        out += [w for w in words[words.index("-i") + 2:] if _PATHISH.match(w)]  # after the script
    if not out:
        shown = _SHOWN_FILE.search(a.result)
        out += [shown.group(1).strip()] if shown else []
    return out


def _words(command: str) -> list[str]:
    """A command line's words, quotes honoured (split on spaces when they do not pair)."""
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _answer(a: Action) -> str:
    return command_answer(a.command) or a.path or a.tool


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def probes(messages: list[dict]) -> list[Probe]:
    """Every probe of a history (module docstring), each answer once per category, in message order."""
    acts = actions(messages)
    out: list[Probe] = []
    for a in acts:  # recall: the files the agent named, the commands it ran, the ids its calls sent
        if a.path:
            out.append(Probe("recall", "which file did it work on", a.path, a.index))
        if a.command:
            out.append(Probe("recall", "which command did it run", command_answer(a.command), a.index))
        for value in _strings(a.args):
            for m in _ID.finditer(value):
                if _is_id(m.group(0)):
                    out.append(Probe("recall", "which id did it use", m.group(0), a.index))
    own = {p.answer for p in out}
    shown = [(i, m.group(0)) for i, msg in enumerate(messages) if msg.get("role") == "tool"
             for m in _ID.finditer(_text(msg.get("content"))) if m.group(0) not in own and _is_id(m.group(0))]
    shown = list({v: (i, v) for i, v in reversed(shown)}.values())[::-1]  # first appearance of each
    picks = sorted({round(k * (len(shown) - 1) / (OUTPUT_IDS - 1)) for k in range(OUTPUT_IDS)}) if shown else []
    out += [Probe("recall", "which id did a tool show", shown[k][1], shown[k][0]) for k in picks]
    for a in acts:  # artifacts: the files changed, and those a patch names
        for path in changed_files(a):
            out.append(Probe("artifacts", "which file was changed", _name(path), a.index))
    for i, msg in enumerate(messages):
        if msg.get("role") == "tool":
            for m in _DIFF.finditer(_text(msg.get("content"))):
                out.append(Probe("artifacts", "which file does the patch change", _name(m.group(2)), i))
    failing = [a for a in acts if a.result and failed(a.result)]
    if failing:  # continuation: the last failing action, and its error
        last = failing[-1]
        out.append(Probe("continuation", "which action failed last", _answer(last), last.index))
        if error_of(last.result):
            out.append(Probe("continuation", "with which error", error_of(last.result), last.index))
    for a in acts:  # decisions: what changed something and did not fail
        if changes(a) and not failed(a.result):
            out.append(Probe("decisions", "what was already done", _answer(a), a.index))
    seen: set[tuple[str, str]] = set()
    return [p for p in out if (p.category, p.answer) not in seen and not seen.add((p.category, p.answer))]


def _is_id(token: str) -> bool:
    """Two digits, or a digit and a capital letter (see _ID)."""
    digits = sum(c.isdigit() for c in token)
    return digits >= 2 or (digits >= 1 and any(c.isupper() for c in token))


def _strings(value) -> list[str]:
    """Every string inside a call's arguments (nested ones too)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def contains(summary: str, answer: str) -> bool:
    """Whether ``summary`` holds ``answer`` verbatim with no letter, digit or ``_`` glued to either end.

    >>> contains("via `edit` done", "edit"), contains("- m4 edited `a.py`", "edit"), contains("x/a.py:3", "a.py")
    (True, False, True)
    """
    start = summary.find(answer)
    while start >= 0:
        end = start + len(answer)
        before = summary[start - 1] if start else " "
        after = summary[end] if end < len(summary) else " "
        if not (_glued(before) and _glued(answer[0])) and not (_glued(after) and _glued(answer[-1])):
            return True
        start = summary.find(answer, start + 1)
    return False


def _glued(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def grade(probes_: list[Probe], summary: str) -> dict[str, dict]:
    """Per category: probes, answered (the summary contains the answer: :func:`contains`), and the answers
    it lacks.

    >>> g = grade([Probe("recall", "q", "a.py", 1), Probe("recall", "q", "b.py", 2)], "- read `a.py`")
    >>> g["recall"]["answered"], g["recall"]["probes"], g["recall"]["missed"]
    (1, 2, ['b.py'])
    """
    out = {}
    for c in CATEGORIES:
        mine = [p for p in probes_ if p.category == c]
        missed = [p.answer for p in mine if not contains(summary, p.answer)]
        out[c] = {"probes": len(mine), "answered": len(mine) - len(missed), "missed": missed}
    return out
