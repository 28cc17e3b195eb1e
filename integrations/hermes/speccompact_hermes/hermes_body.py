"""The summary body under Hermes's own headings, with its task snapshot and auto-focus.

Hermes's ``SUMMARY_PREFIX`` tells the model to discard stale items under
``## Historical Task Snapshot`` / ``## Historical In-Progress State`` /
``## Historical Pending User Asks`` / ``## Historical Remaining Work``; its
built-in compressor writes 13 sections in a fixed order.  The service's
default schema is OpenClaw's six slots, and a request body cannot choose
another schema, so the plugin renders the slots under Hermes's headings
(least change: no service field, and the service's lines are kept word for
word).  Which slot goes where:

======================================  =====================================
service section                         Hermes heading
======================================  =====================================
Goal, Constraints & Preferences,        the same heading
Key Decisions, Critical Context
Progress / ### Done                     Completed Actions
Progress / ### In Progress              Historical In-Progress State
Progress / ### Blocked                  Blocked
Next Steps                              Historical Remaining Work
Exact Ledger                            itself, last, byte for byte
any other section                       a ``### title`` block in Critical Context
======================================  =====================================

The exact ledger (the service's files, commands, identifiers and side
effects, copied from the history) keeps its own heading and lines, after
Hermes's sections, in both directions: the service reads it back from the
next compaction's previous summary by that heading, and no model rewrites it.

As the built-in does, the task snapshot is written locally from the newest
real user turn among the compacted messages (kept from the previous summary
when none is there), and ``Relevant Files`` lists the paths the compacted
tool calls named.  After them it says which files the agent need not read
again: the service's read set (``ledger.read_set`` of its result, every file
read or changed with its last read and whether it changed after), as
"Already read, unchanged since: ..." and "Read, then changed: ..." lines
(:func:`read_note`).  They are for the agent only: reading a summary back
for the service drops them (:func:`to_slots`), so no model carries them.  A body already in Hermes's shape (``method: hermes``)
keeps its sections; only the snapshot is grounded.  Pure functions.
"""

from __future__ import annotations

import json

from .messages import text_of

HEADINGS = ("Historical Task Snapshot", "Goal", "Constraints & Preferences", "Completed Actions", "Active State",
            "Historical In-Progress State", "Blocked", "Key Decisions", "Resolved Questions",
            "Historical Pending User Asks", "Relevant Files", "Historical Remaining Work", "Critical Context")
SLOT_TO_HERMES = {"Next Steps": "Historical Remaining Work", "Done": "Completed Actions",
                  "In Progress": "Historical In-Progress State", "Blocked": "Blocked"}  # service title -> heading
HERMES_TO_SLOT = {"Completed Actions": ("Progress", "Done"), "Active State": ("Progress", "In Progress"),
                  "Historical In-Progress State": ("Progress", "In Progress"), "Blocked": ("Progress", "Blocked"),
                  "Historical Remaining Work": ("Next Steps", None),
                  "Historical Pending User Asks": ("Next Steps", None),
                  "Relevant Files": ("Critical Context", None), "Resolved Questions": ("Critical Context", None),
                  "Historical Task Snapshot": (None, None)}  # Hermes heading -> (service section, sub-section)
SLOT_ORDER = ("Goal", "Constraints & Preferences", "Progress", "Key Decisions", "Next Steps", "Critical Context")
PATH_KEYS = ("path", "file_path", "file", "filename")  # tool-call arguments that name a file
SNAPSHOT_MAX_CHARS, MAX_FILES = 1400, 12  # Hermes's snapshot cap (chars); paths listed
FOCUS_TURNS, FOCUS_TURN_CHARS, FOCUS_MAX_CHARS = 3, 260, 700  # Hermes's auto-focus: turns, chars per turn, chars
SYNTHETIC_FLAGS = ("_todo_snapshot_synthetic", "_empty_recovery_synthetic", "_verification_stop_synthetic",
                   "_pre_verify_synthetic")  # Hermes's markers of user-role scaffolding
SYNTHETIC_PREFIXES = ("[System: ", "[Your active task list was preserved", "[IMPORTANT: Background process ")
NONE = "None."  # body of a section with nothing in it
LEDGER = "Exact Ledger"  # the service's exact ledger section (its heading is "## Exact Ledger"): kept as written
UNCHANGED = "Already read, unchanged since: "  # the read-set line of files the agent need not read again
CHANGED = "Read, then changed (read again before relying on it): "  # files changed after their last read
MAX_READ = 12  # files named per read-set line (the newest)


def real_user_turns(messages: list[dict], is_summary) -> list[str]:
    """Texts of real user turns, newest first (no summaries, no Hermes scaffolding)."""
    out = []
    for m in reversed(messages):
        text = text_of(m.get("content")).strip()
        if m.get("role") != "user" or not text or is_summary(m) or any(m.get(f) for f in SYNTHETIC_FLAGS):
            continue
        if not text.startswith(SYNTHETIC_PREFIXES):
            out.append(" ".join(text.split()))
    return out


def auto_focus(messages: list[dict], is_summary) -> str | None:
    """Hermes's focus hint from the three most recent real user turns.

    >>> auto_focus([{"role": "user", "content": "fix  the parser"}, {"role": "user", "content": "and tests"}],
    ...            lambda m: False)
    'Recent user focus:\\n- fix the parser\\n- and tests'
    """
    turns = [t if len(t) <= FOCUS_TURN_CHARS else t[:FOCUS_TURN_CHARS - 1].rstrip() + "…"
             for t in real_user_turns(messages, is_summary)[:FOCUS_TURNS]]
    if not turns:
        return None
    focus = "Recent user focus:\n" + "\n".join(f"- {t}" for t in reversed(turns))
    return focus if len(focus) <= FOCUS_MAX_CHARS else focus[:FOCUS_MAX_CHARS - 1].rstrip() + "…"


def task_snapshot(turns: list[dict], is_summary) -> str | None:
    """The built-in's deterministic snapshot line from the newest real user turn of ``turns``."""
    users = real_user_turns(turns, is_summary)
    if not users:
        return None
    text = users[0] if len(users[0]) <= SNAPSHOT_MAX_CHARS else users[0][:SNAPSHOT_MAX_CHARS - 15].rstrip() + \
        " ...[truncated]"
    return (f"User asked (deterministic, from compacted turns): {text!r}\n"
            "Historical only; newer protected-tail messages after this summary win.")


def tool_paths(turns: list[dict]) -> list[str]:
    """Files named by the tool calls of ``turns``, newest last, without repeats."""
    out: list[str] = []
    for m in turns:
        for tc in m.get("tool_calls") or []:
            try:
                args = json.loads(((tc.get("function") or {}).get("arguments")) or "{}")
            except (json.JSONDecodeError, TypeError, AttributeError):
                continue
            for key in PATH_KEYS if isinstance(args, dict) else ():
                if isinstance(args.get(key), str) and args[key].strip():
                    path = args[key].strip()
                    out = [p for p in out if p != path] + [path]
    return out[-MAX_FILES:]


def read_note(read_set: list[dict] | None) -> list[str]:
    """The read-set lines for the agent, from the service's ``ledger.read_set``: the files read and not
    changed since (with the message of the last read), then those changed after their last read.

    >>> read_note([{"path": "a.py", "last_read": 3, "changed_after": False},
    ...            {"path": "b.py", "last_read": 2, "changed_after": True, "changed_at": 5},
    ...            {"path": "c.py", "last_read": None, "changed_after": True, "changed_at": 1}])
    ['Already read, unchanged since: `a.py` (m3)', 'Read, then changed (read again before relying on it): `b.py` (read m2, changed m5)']
    """
    unchanged, changed = [], []
    for f in read_set or []:
        if not isinstance(f, dict) or not isinstance(f.get("path"), str) or f.get("last_read") is None:
            continue  # changed and never read: nothing to say about a read
        path = "`" + f["path"].replace("`", "'") + "`"
        if f.get("changed_after"):
            changed.append(f"{path} (read m{f['last_read']}, changed m{f.get('changed_at')})")
        else:
            unchanged.append(f"{path} (m{f['last_read']})")
    return ([UNCHANGED + ", ".join(unchanged[-MAX_READ:])] if unchanged else []) + (
        [CHANGED + ", ".join(changed[-MAX_READ:])] if changed else [])


def parse(body: str) -> dict[str, list[str]]:
    """``{title: lines}`` of the ``## `` sections of a body (text before the first heading: ``""``).

    >>> parse("## Goal\\n- a\\n## Next Steps\\n1. b")
    {'Goal': ['- a'], 'Next Steps': ['1. b']}
    """
    out: dict[str, list[str]] = {}
    title = ""
    for line in body.strip().split("\n"):
        if line.startswith("## "):
            title = line[3:].strip()
            out.setdefault(title, [])
        elif line.strip() or out.get(title):
            out.setdefault(title, []).append(line)
    return {t: _trim(ls) for t, ls in out.items() if t or _trim(ls)}


def _trim(lines: list[str]) -> list[str]:
    keep = [i for i, line in enumerate(lines) if line.strip()]
    return lines[keep[0]:keep[-1] + 1] if keep else []


def _subsections(lines: list[str]) -> list[tuple[str | None, list[str]]]:
    parts: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in lines:
        if line.startswith("### "):
            parts.append((line[4:].strip(), []))
        else:
            parts[-1][1].append(line)
    return [(t, _trim(ls)) for t, ls in parts if t is not None or _trim(ls)]


def to_hermes(body: str, snapshot: str | None, previous: str | None, files: list[str],
              read_set: list[dict] | None = None) -> str:
    """A service summary body rendered under Hermes's 13 headings, in Hermes's order; ``read_set`` (the
    service's ``ledger.read_set``) ends ``Relevant Files`` (:func:`read_note`).

    >>> out = to_hermes("## Goal\\n- g\\n## Progress\\n### Done\\n- [x] a\\n### Blocked\\n- (none)\\n"
    ...                 "## Next Steps\\n1. n", "User asked: 'x'", None, ["a.py"])
    >>> [line for line in out.split("\\n") if line and not line.startswith("## ")][:7]
    ["User asked: 'x'", '- g', 'None.', '- [x] a', 'None.', 'None.', '- (none)']
    >>> [line for line in out.split("\\n") if line and not line.startswith("## ")][7:]
    ['None.', 'None.', 'None.', '- a.py', '1. n', 'None.']
    """
    got: dict[str, list[str]] = {h: [] for h in HEADINGS}
    extra: list[str] = []
    ledger: list[str] = []
    for title, lines in parse(body).items():
        if title == LEDGER:
            ledger = lines
        elif title in got:
            got[title] += lines
        elif title == "Progress":
            for sub, sub_lines in _subsections(lines):
                target = SLOT_TO_HERMES.get(sub or "", "Completed Actions")
                got[target] += sub_lines
        elif title in SLOT_TO_HERMES:
            got[SLOT_TO_HERMES[title]] += lines
        elif lines:
            extra += ([f"### {title}"] if title else []) + lines
    got["Critical Context"] += extra
    old = parse(previous or "").get("Historical Task Snapshot")
    got["Historical Task Snapshot"] = [snapshot] if snapshot else (got["Historical Task Snapshot"] or old or [])
    if not got["Relevant Files"] and files:
        got["Relevant Files"] = [f"- {p}" for p in files]
    got["Relevant Files"] += read_note(read_set)
    out = "\n\n".join(f"## {h}\n" + ("\n".join(got[h]) if got[h] else NONE) for h in HEADINGS)
    return out + (f"\n\n## {LEDGER}\n" + "\n".join(ledger) if ledger else "")


def is_hermes_shaped(body: str) -> bool:
    """Whether a body already has Hermes's sections (the ``hermes`` method, or a summary this plugin wrote)."""
    return sum(1 for t in parse(body) if t in HERMES_TO_SLOT) >= 2


def to_slots(body: str) -> str:
    """A Hermes-shaped body back in the service's six sections (for ``previous_summary``).

    >>> to_slots("## Goal\\n- g\\n## Completed Actions\\n1. a\\n## Blocked\\nNone.\\n"
    ...          "## Historical Remaining Work\\n1. n")
    '## Goal\\n- g\\n\\n## Progress\\n### Done\\n1. a\\n\\n## Next Steps\\n1. n'
    """
    slots: dict[str, list[str]] = {t: [] for t in (*SLOT_ORDER, LEDGER)}
    progress: dict[str, list[str]] = {"Done": [], "In Progress": [], "Blocked": []}
    for title, lines in parse(body).items():
        if title == LEDGER:
            slots[LEDGER] = lines
            continue
        lines = [line for line in lines if line.strip() != NONE and not line.startswith((UNCHANGED, CHANGED))]
        slot, sub = HERMES_TO_SLOT.get(title, (title if title in slots else "Critical Context", None))
        if not lines or slot is None:
            continue
        if sub:
            progress[sub] += lines
        else:
            slots[slot] += lines
    slots["Progress"] = [line for sub, ls in progress.items() if ls for line in [f"### {sub}", *ls]]
    return "\n\n".join(f"## {t}\n" + "\n".join(ls) for t, ls in slots.items() if ls)

