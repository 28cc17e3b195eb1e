"""The read set: each file's last read and whether it changed after, from the ledger, written and read back."""

from __future__ import annotations

import json

from sgl_speccompact.core.ledger import READ_SET_LABEL, parse_read, render_read, split_ledger
from sgl_speccompact.core.ledger_budget import merge
from sgl_speccompact.core.read_set import lines, read_set
from sgl_speccompact.history.ledger_entries import ledger_entries
from sgl_speccompact.history.messages import parse_messages
from sgl_speccompact.result import ReadFile


def call(cid: str, name: str, **args) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def step(cid: str, name: str, result: str, **args) -> list[dict]:
    return [{"role": "assistant", "content": "", "tool_calls": [call(cid, name, **args)]},
            {"role": "tool", "tool_call_id": cid, "content": result}]


# a file read (m1), edited (m3), read again (m5); another read by cat (m7) and then rewritten by sed -i (m9);
# a third read (m11) whose later edit failed (m13); a file written and never read (m15)
HISTORY = [{"role": "user", "content": "fix the parser"},
           *step("a", "read_file", "def parse(): ...", path="src/parser.py"),
           *step("b", "edit_file", "Edited src/parser.py", path="src/parser.py", old="x", new="y"),
           *step("c", "read_file", "def parse(): return 1", path="src/parser.py"),
           *step("d", "bash", "[tool]\nname = 'p'", command="cat pyproject.toml"),
           *step("e", "bash", "", command="sed -i 's/p/q/' pyproject.toml"),
           *step("f", "str_replace_editor", "1\tREADME", command="view", path="/repo/README.md"),
           *step("g", "str_replace_editor", "Error: old_str not found in /repo/README.md", command="str_replace",
                 path="/repo/README.md", old_str="a", new_str="b"),
           *step("h", "write_file", "ok", path="notes.md")]


def test_a_file_read_edited_and_read_again_is_unchanged_since_its_last_read():
    files = {f.path: f for f in read_set(merge([], ledger_entries(parse_messages(HISTORY))))}
    assert files["src/parser.py"] == ReadFile(path="src/parser.py", last_read=5, changed_after=False)
    assert files["pyproject.toml"] == ReadFile(path="pyproject.toml", last_read=7, changed_after=True, changed_at=9)
    assert files["/repo/README.md"] == ReadFile(path="/repo/README.md", last_read=11)  # the failed edit: no change
    assert files["notes.md"] == ReadFile(path="notes.md", changed_after=True, changed_at=15)
    assert list(files) == ["src/parser.py", "pyproject.toml", "/repo/README.md", "notes.md"]  # by latest event


def test_read_before_the_edit_it_is_changed_after():
    files = read_set(merge([], ledger_entries(parse_messages(HISTORY[:5]))))  # the read (m1), the edit (m3)
    assert files == [ReadFile(path="src/parser.py", last_read=1, changed_after=True, changed_at=3)]


def test_two_spellings_of_one_file_and_an_editor_command_that_names_none():
    msgs = [{"role": "user", "content": "task"},
            {"role": "assistant", "content": "```\nopen src/app.py\n```"},
            {"role": "user", "content": "[File: /repo/src/app.py (9 lines total)]\n1:x\n(Open file: /repo/src/app.py)"},
            {"role": "assistant", "content": "```\nedit 3:3\n    y = 2\nend_of_edit\n```"},
            {"role": "user", "content": "[File: /repo/src/app.py (9 lines total)]\n3:    y = 2\n"
                                        "(Open file: /repo/src/app.py)"}]
    found = ledger_entries(parse_messages(msgs))
    (edit,) = [e for e in found if e.value == "edit 3:3"]
    assert edit.kind == "ran" and edit.at == "/repo/src/app.py" and edit.done  # the command, and where it acted
    assert read_set(merge([], found)) == [ReadFile(path="src/app.py", last_read=1, changed_after=True, changed_at=3)]


def test_the_read_set_is_written_and_read_back_across_compactions():
    files = [ReadFile(path="a `b`.py", last_read=3), ReadFile(path="c.py", last_read=2, changed_after=True,
                                                               changed_at=6),
             ReadFile(path="d.py", changed_after=True, changed_at=1)]
    assert [parse_read(render_read(f)) for f in files] == files
    text = "## Exact Ledger\n" + "\n".join(lines(files)) + "\n"
    assert lines(files)[0] == READ_SET_LABEL
    rest, section = split_ledger("## Goal\n- g\n\n" + text)
    assert rest == "## Goal\n- g\n" and list(section.read_set) == files
    # the next compaction: c.py read again (m1 of the new messages), the carried ones stay
    later = read_set(merge([], ledger_entries(parse_messages([{"role": "user", "content": "x"},
                                                              *step("r", "read_file", "c", path="c.py")]))),
                     section.read_set)
    assert [(f.path, f.last_read, f.changed_after) for f in later] == [
        ("a `b`.py", 3, False), ("d.py", None, True), ("c.py", 1, False)]


def test_the_section_shows_the_newest_files_only():
    files = [ReadFile(path=f"f{i}.py", last_read=i) for i in range(40)]
    shown = lines(files)
    assert shown[0] == READ_SET_LABEL and shown[1] == "- `f16.py` read m16, unchanged since" and len(shown) == 25
