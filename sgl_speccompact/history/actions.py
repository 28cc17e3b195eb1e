"""What an agent's tool call or command did, read from its name, arguments and result (pure).

The ledger (:mod:`~.ledger_entries`) needs four facts about an action, none
of which takes a model:

* which kind of tool it was: a shell (:data:`SHELL_TOOLS`, its command in
  :data:`COMMAND_KEYS`), a file tool (a path in :data:`PATH_KEYS`, its
  action from the tool's name or its ``command`` argument: :func:`file_action`),
  or another action;
* whether it has a side effect an agent must not repeat (:func:`is_effect`
  for a tool, :func:`command_effect` for a shell command line): a write, a
  booking, a push, a deployment;
* the exit status or error its result shows (:func:`outcome`);
* which files it read or changed: a file tool's path, the file an editor
  that names none shows open in its result (:func:`shown_file`), or the
  files a shell command line reads or writes (:func:`command_files`);
* every string it returns is an exact substring of its input, so the ledger
  never shows a byte the history did not hold (:func:`first_line`,
  :func:`escape_free`).

Every pattern here is linear in its input: literal prefixes, or classes
that cannot overlap what follows them.
"""

from __future__ import annotations

import json
import re

from .untrusted import LINE_BREAKS

SHELL_TOOLS = frozenset("bash shell sh execute_bash terminal run run_command execute_command run_shell_command "
                        "exec".split())  # tool names whose calls run a command line (lower case)
COMMAND_KEYS = ("command", "cmd")  # argument holding a shell tool's command line
PATH_KEYS = ("path", "file_path", "filepath", "file", "filename", "target_file", "notebook_path")  # name a file
MAX_PATHS = 8  # file arguments read per call (bounds the work on a call with thousands of keys)

# a file tool's ``command`` argument (str_replace_editor, OpenHands' file_editor) -> what it did to the file
EDITOR_COMMANDS = {"view": "read", "create": "wrote", "write": "wrote", "str_replace": "edited",
                   "insert": "edited", "undo_edit": "edited", "edit": "edited", "delete": "deleted"}
# the leading verb of a file tool's name -> what it did to the file
FILE_VERBS = {
    **dict.fromkeys("read view open cat get show load list ls search find grep glob head tail".split(), "read"),
    **dict.fromkeys("write create save put new".split(), "wrote"),
    **dict.fromkeys("edit replace insert patch append update modify apply str".split(), "edited"),
    **dict.fromkeys("delete remove rm unlink".split(), "deleted"),
}
# leading verbs of tool names that change the world (book_reservation, update_ticket, send_email, submit)
EFFECT_VERBS = frozenset((
    "add apply approve book buy cancel charge checkout close commit create delete deploy drop exchange grant "
    "insert install kill merge modify move open pay post publish purchase push put rebase refund register "
    "release remove rename reopen reset restart revoke rollback schedule send set start stop submit tag "
    "terminate transfer update upgrade upload write"
).split())
# shell programs whose every run changes something; then (program, subcommand) pairs that do
SHELL_WRITERS = frozenset("rm mv cp mkdir touch chmod chown ln tee dd kill pkill rmdir truncate install patch "
                          "edit create submit insert append".split())
SHELL_SUBCOMMANDS = {
    "git": "commit push merge rebase reset tag checkout switch stash apply cherry-pick revert rm mv am pull clone "
           "init restore",
    "docker": "push run build rm rmi stop kill start tag compose", "kubectl": "apply delete create scale rollout "
    "patch set replace edit", "npm": "publish install uninstall ci i add", "yarn": "add remove publish install",
    "pnpm": "add remove publish install", "pip": "install uninstall", "pip3": "install uninstall",
    "uv": "add remove pip sync", "poetry": "add remove install publish", "cargo": "publish install",
    "helm": "install upgrade uninstall rollback", "terraform": "apply destroy import", "gh": "pr release issue repo",
    "apt": "install remove purge", "apt-get": "install remove purge", "brew": "install uninstall upgrade",
    "sed": "-i", "str_replace_editor": "create str_replace insert undo_edit", "aws": "s3 cloudformation deploy",
}
SHELL_SUBCOMMANDS = {k: frozenset(v.split()) for k, v in SHELL_SUBCOMMANDS.items()}

LINE_BREAK = re.compile("\r\n|[\n%s]" % LINE_BREAKS)
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_PARTS = re.compile(r"&&|\|\||[;|]")  # command separators of one shell line
_REDIRECT = re.compile(r"(?<![0-9&>])>>?[ \t]*(?!&|/dev/null)[^\s<>|&;]")  # a redirection into a file
_SENDS = re.compile(r"(?:^|\s)(?:-X[ \t]*(?:POST|PUT|PATCH|DELETE)|--data\S*|-d|-F|--form|--upload-file|-T)(?:\s|$)")
_EXIT = re.compile(r"<returncode>[ \t]*(-?\d+)[ \t]*</returncode>"
                   r"|\b(?:exit(?:ed)?(?: with)?|return)[ _]?(?:code|status)\b[ \t]*[:=]?[ \t]*(-?\d+)", re.IGNORECASE)
# an error named at the start of a line: a traceback's last line ("KeyError: 'x'"), a compiler's "SyntaxError: ...",
# a linter's list item ("- E999 IndentationError: unexpected indent")
ERROR_LINE = re.compile(r"^[^\S\n]*(?:[-*][^\S\n]+)?(?:[A-Z]\d{3,4}[^\S\n]+)?(?:[A-Za-z_]\w*\.)*"
                        r"([A-Z]\w*(?:Error|Exception))\b", re.MULTILINE)
_ERROR_START = re.compile(r"[^\S\n]*(?:error|failed|failure)\b", re.IGNORECASE)  # a tool result that is an error
# a first line that reports a failure wherever it says so: an errno, a missing file or program, a refused edit
_FAILURE_PHRASE = re.compile(r"\[Errno \d+\]|: No such file or directory|: command not found|: Permission denied"
                             r"|\bintroduced new syntax error", re.IGNORECASE)
MAX_ERROR_CHARS = 80  # a failure named only by its result's first line is cut to this (chars)
# the file an editor shows open: SWE-agent's prompt line, else the header of the window it shows
_OPEN_FILE = re.compile(r"^\(Open file: ([^\n()]+)\)[^\S\n]*$", re.MULTILINE)
_FILE_HEADER = re.compile(r"^\[File: ([^\n()]+?) \(\d+ lines total\)\]", re.MULTILINE)
# shell programs that read the files they name (one line of a command); editor commands that edit the open file
READERS = frozenset("cat head tail less more nl bat open view type".split())
OPEN_FILE_EDITORS = frozenset("edit insert append".split())
_PATHLIKE = re.compile(r"^(?:[\w.@+~-]*/)*[\w@+-][\w.@+-]*\.[A-Za-z0-9]{1,8}$|^(?:[\w.@+~-]*/)+[\w.@+-]+$")
# one token of a shell line: a quoted string, an operator, or a run of anything else (linear: classes disjoint)
_SHELL_TOKEN = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"|&&|\|\||>>|[0-9]*>&[0-9]+|[;|&<>]|[^\s'\";|&<>]+")
_ESCAPE = re.compile(r"\\(?:u[0-9A-Fa-f]{4}|.)", re.DOTALL)


def first_line(text: str) -> tuple[str, bool]:
    """The first line of ``text`` (every break :mod:`~.untrusted` knows) and whether more followed.

    >>> first_line("cd /repo\\npytest"), first_line("ls")
    (('cd /repo', True), ('ls', False))
    """
    m = LINE_BREAK.search(text)
    return (text, False) if m is None else (text[:m.start()], bool(text[m.end():].strip()))


def cut(text: str, limit: int) -> tuple[str, bool]:
    """``text``'s first line, at most ``limit`` characters cut at a space (never inside a word), and
    whether anything was cut; ``""`` when its first word alone is over four times ``limit``.

    >>> cut("pytest -x tests/test_a.py tests/test_b.py", 20), cut("x" * 50, 10)
    (('pytest -x', True), ('', True))
    """
    line, more = first_line(text)
    line = line.rstrip()
    if len(line) <= limit:
        return line, more
    space = line.rfind(" ", 0, limit + 1)
    if space <= 0:
        space = line.find(" ", limit)
        space = len(line) if space < 0 else space
        if space > 4 * limit:
            return "", True
    return line[:space].rstrip(), True


def escape_free(arguments: str) -> list[str]:
    """The pieces of a raw JSON text between its escape sequences: each is verbatim in the text
    and in what it decodes to, so an identifier found in one is an exact substring of the call.

    >>> escape_free('{"command": "cd /r\\\\npytest a.py"}')
    ['{"command": "cd /r', 'pytest a.py"}']
    """
    return [p for p in _ESCAPE.split(arguments) if p]


def arguments(raw: str) -> dict:
    """A tool call's arguments as a dict (``{}`` when they are not a JSON object).

    >>> arguments('{"path": "a.py"}'), arguments("not json"), arguments("[1]")
    ({'path': 'a.py'}, {}, {})
    """
    try:
        value = json.loads(raw) if raw else {}
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def exact(value: str, raw: str) -> str:
    """``value`` as it is written in ``raw`` (itself, or JSON-escaped), else ``""``.

    >>> exact('say "hi"', '{"cmd": "say \\\\"hi\\\\""}'), exact("a.py", '{"p": "a.py"}'), exact("b.py", "{}")
    ('say \\\\"hi\\\\"', 'a.py', '')
    """
    if value and value in raw:
        return value
    escaped = json.dumps(value, ensure_ascii=False)[1:-1]
    return escaped if value and escaped in raw else ""


def verb(name: str) -> str:
    """The first word of a tool name, lower case (``readFile`` -> ``read``; ``str_replace_editor`` -> ``str``).

    >>> verb("update_reservation_flights"), verb("readFile"), verb("HTTPGet"), verb("_x")
    ('update', 'read', 'http', 'x')
    """
    words = _WORDS.findall(name)
    return words[0].lower() if words else ""


def is_effect(name: str) -> bool:
    """Whether a (non-shell, non-file) tool call changes the world: its name leads with a verb such as
    book, cancel, update, send, deploy, submit.

    >>> is_effect("book_reservation"), is_effect("get_user_details"), is_effect("think")
    (True, False, False)
    """
    return verb(name) in EFFECT_VERBS


def file_action(name: str, args: dict) -> str:
    """What a file tool did to its file: ``read``, ``wrote``, ``edited``, ``deleted`` or ``touched``.

    >>> file_action("str_replace_editor", {"command": "create"}), file_action("read_file", {})
    ('wrote', 'read')
    >>> file_action("write_file", {}), file_action("mystery", {})
    ('wrote', 'touched')
    """
    command = args.get("command")
    if isinstance(command, str) and command in EDITOR_COMMANDS:
        return EDITOR_COMMANDS[command]
    return FILE_VERBS.get(verb(name), "touched")


def file_paths(args: dict) -> list[str]:
    """The file paths a tool call's arguments name (:data:`PATH_KEYS`), at most :data:`MAX_PATHS`.

    >>> file_paths({"path": "/r/a.py", "old_str": "x"}), file_paths({"file": ["a", "b"]})
    (['/r/a.py'], [])
    """
    found = [args[k] for k in PATH_KEYS if isinstance(args.get(k), str) and args[k].strip()]
    return found[:MAX_PATHS]


def command_effect(command: str) -> bool:
    """Whether a shell command line changes something: a writing program, a writing subcommand
    (``git push``, ``pip install``, ``sed -i``), a redirection into a file, or a request that sends data.

    >>> [command_effect(c) for c in ("ls -la", "git push origin main", "cat <<'EOF' > a.py", "ls 2>&1",
    ...                              "curl -X POST https://x", "cd /r && rm -rf build", "sed -n 1p a.py")]
    [False, True, True, False, True, True, False]
    """
    if _REDIRECT.search(command):
        return True
    for part in _PARTS.split(command):
        words = part.split()
        if not words:
            continue
        program = words[0].rsplit("/", 1)[-1]
        if program in SHELL_WRITERS:
            return True
        subs = SHELL_SUBCOMMANDS.get(program)
        if subs and any(w in subs for w in words[1:3]):
            return True
        if program in ("curl", "wget", "http", "https") and _SENDS.search(part):
            return True
    return False


def outcome(result: str, limit: int) -> tuple[str, str]:
    """``(exit status, error)`` a tool result shows: the exit status as written (``<returncode>1</returncode>``,
    ``exit code 2``), else the error named at a line start (a traceback's last line), else the result's
    first line when it starts with "error" or "failed"; ``""`` where it shows none.

    >>> outcome("<returncode>1</returncode>\\n<output>..", 80), outcome("Traceback ...\\nKeyError: 'a'", 80)
    (('1', ''), ('', 'KeyError'))
    >>> outcome("Error: reservation not found", 80), outcome("all good", 80)
    (('', 'Error: reservation not found'), ('', ''))
    """
    m = _EXIT.search(result)
    if m:
        return m.group(1) or m.group(2), ""
    last = None  # the last one: a traceback names its cause last
    for last in ERROR_LINE.finditer(result):  # noqa: B007 - the loop keeps the last match
        continue
    if last is not None:
        return "", last.group(1)
    if _ERROR_START.match(result):
        return "", cut(result.strip(), limit)[0]
    head = first_line(result.strip())[0]
    if _FAILURE_PHRASE.search(head):
        return "", cut(head, min(limit, MAX_ERROR_CHARS))[0]
    return "", ""


def shown_file(result: str) -> str:
    """The file an editor's result shows open (SWE-agent's ``(Open file: ...)`` line, its last one; else
    the ``[File: ... (N lines total)]`` header of the window it shows), as written; ``""`` when none.

    >>> shown_file("[File: /r/a.py (10 lines total)]\\n1:x\\n(Open file: /r/a.py)\\n(Current directory: /r)")
    '/r/a.py'
    >>> shown_file("[File: b.py (3 lines total)]\\n1:y"), shown_file("(Open file: n/a)"), shown_file("ok")
    ('b.py', '', '')
    """
    if "ile" not in result:
        return ""
    opened = None
    for opened in _OPEN_FILE.finditer(result):  # noqa: B007 - the loop keeps the last match
        continue
    if opened is not None and opened.group(1).strip() not in ("n/a", "None", ""):
        return opened.group(1).strip()
    header = _FILE_HEADER.search(result)
    return header.group(1).strip() if header else ""


def edits_open_file(line: str) -> bool:
    """Whether a text action edits the file its editor has open (``edit 3:5``, ``insert 7``): an editor
    command that names no file.

    >>> edits_open_file("edit 1:2"), edits_open_file("edit src/a.py"), edits_open_file("python edit.py")
    (True, False, False)
    """
    words = line.split()
    return bool(words) and words[0] in OPEN_FILE_EDITORS and not any(_PATHLIKE.match(w) for w in words[1:])


def command_files(command: str) -> tuple[list[str], list[str]]:
    """``(read, written)``: the files one shell command line names as a reader's arguments (``cat a.py``,
    ``open src/b.py 40``, ``sed -n 1p c.py``) and as what it writes (a redirection, ``tee``, ``sed -i``,
    ``rm``, ``mv``, ``cp``'s target, ``touch``, ``create``), each as written; a quoted string with a space,
    and sed's script, are no files.

    >>> command_files("cat a.py | grep x > out.txt && sed -i 's/a: b/c/g' src/c.py")
    (['a.py'], ['out.txt', 'src/c.py'])
    >>> command_files("open src/m/fields.py 1474"), command_files("rm -f build/x.o; create t.py 2>/dev/null")
    ((['src/m/fields.py'], []), ([], ['build/x.o', 't.py']))
    """
    read: list[str] = []
    written: list[str] = []
    words: list[str] = []
    redirect = False
    for m in _SHELL_TOKEN.finditer(command + ";"):
        token = m.group(0)
        if token in (">", ">>"):
            redirect = True
            continue
        if token in ("&&", "||", ";", "|", "&", "<"):
            _simple_command(words, read, written)
            words = []
            continue
        word = token[1:-1] if token[:1] in "'\"" and len(token) > 1 else token
        if redirect:
            redirect = False
            if word != "/dev/null" and _PATHLIKE.match(word):
                written.append(word)
            continue
        words.append(word if " " not in word else "")
    return list(dict.fromkeys(read)), list(dict.fromkeys(written))


def _simple_command(words: list[str], read: list[str], written: list[str]) -> None:
    """Add the files one simple command (no operators) reads and writes."""
    if not words or not words[0]:
        return
    program = words[0].rsplit("/", 1)[-1]
    args = [w for w in words[1:] if not w.startswith("-")]
    if program == "sed":
        in_place = any(w.startswith("-i") for w in words[1:])
        scripted = any(w in ("-e", "-f") or w.startswith(("--expression", "--file")) for w in words[1:])
        files = [w for w in (args if scripted else args[1:]) if _PATHLIKE.match(w)]
        (written if in_place else read).extend(files)
        return
    files = [w for w in args if _PATHLIKE.match(w)]
    if program in READERS:
        read.extend(files)
    elif program in ("tee", "rm", "touch", "truncate", "create", "rmdir", "unlink"):
        written.extend(files)
    elif program in ("cp", "install", "ln"):
        written.extend(files[-1:])
    elif program == "mv":
        written.extend(files)
