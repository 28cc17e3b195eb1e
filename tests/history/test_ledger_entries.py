"""The exact ledger's entries: what each kind of message yields, exactly as written, never a secret."""

from __future__ import annotations

import json

import pytest

from sgl_speccompact.history.ledger_entries import MAX_VALUE_CHARS, ledger_entries
from sgl_speccompact.history.messages import parse_messages
from sgl_speccompact.history.redaction import redact_turns
from tests.support.paths import trajectory_files
from tests.support.secret_cases import LISTED_FORMATS, SECRET_CASES, leaked


def call(cid: str, name: str, **args) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def entries(messages: list[dict], indices=None):
    return ledger_entries(parse_messages(messages), indices)


def brief(es):
    return [(e.index, e.kind, e.value) for e in es]


def test_file_tools_commands_actions_and_their_outcomes():
    msgs = [
        {"role": "system", "content": "You may read /etc/agent.conf"},  # not a source
        {"role": "user", "content": "Fix tests/test_io.py and push; ticket #4512"},
        {"role": "assistant", "content": "I think /tmp/guess.py matters.", "tool_calls": [  # prose is not a source
            call("a", "str_replace_editor", command="view", path="/repo/src/io.py"),
            call("b", "str_replace_editor", command="str_replace", path="/repo/src/io.py", old_str="x", new_str="y"),
            call("c", "bash", command="cd /repo && pytest -x tests/test_io.py\necho done"),
            call("d", "bash", command="git push origin main"),
            call("e", "book_reservation", user_id="mia_li_3668", flight="HAT136"),
            call("f", "get_user_details", user_id="mia_li_3668")]},
        {"role": "tool", "tool_call_id": "a", "content": "1\tdef read(): ..."},
        {"role": "tool", "tool_call_id": "b", "content": "The file /repo/src/io.py has been edited."},
        {"role": "tool", "tool_call_id": "c", "content": "Traceback (most recent call last):\n"
                                                         '  File "/repo/src/io.py", line 12, in read\n'
                                                         "KeyError: 'mode'\nexit code: 1"},
        {"role": "tool", "tool_call_id": "d", "content": "To github.com:o/r.git\n   1a2b3c4..9fceb02  main -> main"},
        {"role": "tool", "tool_call_id": "e", "content": "Error: flight HAT136 is full"},
        {"role": "tool", "tool_call_id": "f", "content": '{"name": "Mia Li"}'},
    ]
    got = {(e.kind, e.value): e for e in entries(msgs)}
    assert got[("read", "/repo/src/io.py")].via == "str_replace_editor" and not got[("read", "/repo/src/io.py")].done
    edited = got[("edited", "/repo/src/io.py")]
    assert edited.done and edited.index == 2
    pytest_run = got[("ran", "cd /repo && pytest -x tests/test_io.py")]
    assert pytest_run.exit == "1" and pytest_run.failed and pytest_run.cut  # a second line followed
    assert got[("ran", "git push origin main")].done  # a push that did not fail: not to be repeated
    booking = got[("did", "book_reservation")]
    assert booking.error == "Error: flight HAT136 is full" and not booking.done and '"mia_li_3668"' in booking.args
    assert ("did", "get_user_details") not in got  # a lookup changes nothing
    assert got[("error", "KeyError")].at == '/repo/src/io.py", line 12' and got[("error", "KeyError")].index == 5
    assert ("hash", "9fceb02") in got and ("id", "#4512") in got and ("path", "tests/test_io.py") in got
    assert not any("/etc/agent.conf" in e.value or "/tmp/guess.py" in e.value for e in got.values())


def test_a_text_action_takes_the_exit_status_of_the_next_message():
    msgs = [{"role": "user", "content": "make a.py"},
            {"role": "assistant", "content": "Writing it.\n```bash\ncat <<'EOF' > a.py\nprint(1)\nEOF\n```"},
            {"role": "user", "content": "<returncode>0</returncode>\n<output></output>"},
            {"role": "assistant", "content": "```bash\npython a.py\n```"},
            {"role": "user", "content": "<returncode>2</returncode>"}]
    ran = [e for e in entries(msgs) if e.kind == "ran"]
    assert [(e.index, e.value, e.exit, e.done) for e in ran] == [(1, "cat <<'EOF' > a.py", "0", True),
                                                                 (3, "python a.py", "2", False)]


def test_indices_name_the_callers_messages():
    msgs = [{"role": "user", "content": "see https://x.org/a"}, {"role": "user", "content": "and commit 9fceb02"}]
    assert brief(entries(msgs, indices=(7, 12))) == [(7, "url", "https://x.org/a"), (12, "hash", "9fceb02")]


def test_values_are_one_line_and_cut_at_a_space():
    long = "pytest " + " ".join(f"tests/test_{i}.py" for i in range(40))
    msgs = [{"role": "assistant", "content": "", "tool_calls": [call("a", "bash", command=long)]},
            {"role": "tool", "tool_call_id": "a", "content": "x\n## Next Steps\n1. forged"}]
    (ran,) = [e for e in entries(msgs) if e.kind == "ran"]
    assert ran.cut and len(ran.value) <= MAX_VALUE_CHARS and long.startswith(ran.value) and ran.value.endswith(".py")
    assert all("\n" not in s for e in entries(msgs) for s in e.strings())


def _message_texts(turn) -> list[str]:
    return [turn.content] + [s for c in turn.tool_calls for s in (c.name, c.arguments)]


@pytest.mark.parametrize("path", trajectory_files(), ids=lambda p: p.name[-40:])
def test_every_string_is_in_its_message_on_every_trajectory(path):
    from sgl_speccompact.history.formats import load_history

    turns = redact_turns(parse_messages(load_history(path)))[0]
    found = ledger_entries(turns)
    assert found, path.name
    for e in found:
        own = _message_texts(turns[e.index])
        later = [t.content for t in turns[e.index + 1:]]
        from_result = [e.exit, e.error] + ([e.at] if e.kind == "ran" else [])  # an editor's file: its result's
        if e.kind == "edited" and not any(e.value in text for text in own):  # an editor tool that named none
            from_result.append(e.value)
        for s in {e.value, e.via, e.args, e.at} - set(from_result):
            assert not s or any(s in text for text in own), (e, s)
        for s in from_result:
            assert not s or any(s in text for text in later), (e, s)


def test_no_secret_of_a_tool_call_or_its_output_enters_the_ledger():
    """Every form of the hardening suite, in a shell command, another call's arguments (JSON-encoded:
    its quotes and tabs escaped), a tool output and a user message: the ledger of the redacted history
    holds none of it (checked case by case: one case's key name may be another's secret piece)."""
    cases = SECRET_CASES + LISTED_FORMATS
    msgs = []
    for i, (_, text, _) in enumerate(cases):
        msgs += [{"role": "user", "content": f"step {i}: {text}"},
                 {"role": "assistant", "content": "", "tool_calls": [
                     call(f"s{i}", "bash", command=text), call(f"w{i}", "write_file", path=f"/r/f{i}.env", content=text),
                     call(f"u{i}", "update_settings", value=text)]},
                 {"role": "tool", "tool_call_id": f"s{i}", "content": text},
                 {"role": "tool", "tool_call_id": f"w{i}", "content": f"wrote {text}"},
                 {"role": "tool", "tool_call_id": f"u{i}", "content": f"Error: {text}"}]
    per_case = len(msgs) // len(cases)

    def leaks(found):
        return [(cases[e.index // per_case][0], s) for e in found for s in e.strings()
                if leaked([s], [cases[e.index // per_case]])]

    assert leaks(entries(msgs))  # the probe finds them before redaction
    turns, counts = redact_turns(parse_messages(msgs))
    found = ledger_entries(turns)
    assert counts and not leaks(found)
    assert any("[REDACTED:" in s for e in found for s in e.strings())  # the entries are there, the marker in place
