"""Where a ledger entry came from: the agent's calls, a result, a prompt; boilerplate; a prompt's demonstrations."""

from __future__ import annotations

import json

from sgl_speccompact.history.ledger_entries import ledger_entries
from sgl_speccompact.history.messages import parse_messages
from sgl_speccompact.history.provenance import (demonstration_spans, is_noise_value, message_sources, noise_lines,
                                                specificity)

# the worked example SWE-agent's demonstration template puts in a prompt (its markers, a demonstration's actions)
DEMONSTRATION = """We're currently solving the following issue within our repository.
Here is a demonstration of how to correctly accomplish this task.
It is included to show you how to correctly use the interface.
You do not need to follow exactly what is done in the demonstration.
--- DEMONSTRATION ---
We're currently solving the following issue: TimeDelta serialization precision
Let's open the file.
```
open src/marshmallow/fields.py 1474
```
[File: /marshmallow-code__marshmallow/src/marshmallow/fields.py (1997 lines total)]
```
edit 1475:1475
        return int(round(value.total_seconds() / base_unit.total_seconds()))
end_of_edit
```
```
create reproduce.py
```
--- END OF DEMONSTRATION ---
ISSUE:
KeyError in parse_config of app/config.py; run it with `python -m app.config --check` to see it.
"""


def call(cid: str, name: str, **args) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def test_a_demonstration_in_a_prompt_is_no_action_of_the_session():
    msgs = [{"role": "system", "content": "Example:\n```\nls -a\n```"},  # the system prompt is no source at all
            {"role": "user", "content": DEMONSTRATION},
            {"role": "assistant", "content": "Let me look.\n```\nopen app/config.py\n```"},
            {"role": "user", "content": "[File: /repo/app/config.py (40 lines total)]\n1:import os"}]
    found = ledger_entries(parse_messages(msgs))
    values = " ".join(s for e in found for s in e.strings())
    for demo in ("fields.py", "edit 1475:1475", "create reproduce.py", "ls -a", "1997 lines"):
        assert demo not in values, demo  # the demonstration's strings are no facts of this session
    assert [(e.index, e.value) for e in found if e.kind == "ran"] == [(2, "open app/config.py")]
    example = [e for e in found if e.kind == "example"]  # a command the prompt asks for: marked, not run
    assert [(e.index, e.value, e.source) for e in example] == [(1, "python -m app.config --check", "prompt")]
    assert ("path", "app/config.py") in {(e.kind, e.value) for e in found if e.index == 1}  # the task stays


def test_demonstration_spans_close_at_their_own_end_or_run_to_the_end():
    t = "a\n<example>\n$ rm -rf /\n</example>\nb\n-- EXAMPLES --\nc"
    spans = demonstration_spans(t)
    assert [t[a:b] for a, b in spans] == ["<example>\n$ rm -rf /\n</example>", "-- EXAMPLES --\nc"]


def test_sources_follow_the_agent_loop():
    msgs = [{"role": "user", "content": "task"},
            {"role": "assistant", "content": "", "tool_calls": [call("a", "bash", command="ls")]},
            {"role": "tool", "tool_call_id": "a", "content": "a.py"},
            {"role": "assistant", "content": "```bash\ncat a.py\n```"},
            {"role": "user", "content": "print(1)"},  # answers the text action
            {"role": "assistant", "content": "Done. Anything else?"},
            {"role": "user", "content": "no"}]  # the user again
    assert message_sources(parse_messages(msgs)) == ["prompt", "call", "result", "call", "result", "call",
                                                     "prompt"]


def test_boilerplate_lines_and_values():
    output = "\n".join([
        "Disassembly of section .text:", "0000000000401126 <main>:",
        "  401126:\t55                   \tpush   %rbp", "  401127:\t48 89 e5             \tmov    %rsp,%rbp",
        "00000010: 6865 6c6c 6f0a 776f  hello.wo", "root:x:0:0:root:/root:/bin/bash",
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">',
        "1474:        return int(value.total_seconds())", "src/app.py:12:4: E501 line too long"])
    found = noise_lines(output)
    assert len(found) == 5 and not any(line.startswith(("1474:", "src/app.py", "Disassembly")) for line in found)
    assert [line.split(":")[0].strip() for line in found[:3]] == ["0000000000401126 <main>", "401127", "00000010"]
    assert is_noise_value("url", "http://www.w3.org/1999/xhtml") and is_noise_value("path", "/usr/sbin/nologin")
    assert not is_noise_value("url", "https://github.com/o/r/issues/3") and not is_noise_value("path", "/repo/a.py")


def test_specificity_ranks_what_singles_a_thing_out_not_repetition():
    assert specificity("hash", "9fceb02") > specificity("path", "setup.py") > specificity("number", "10 lines")
    assert specificity("path", "src/marshmallow/fields.py") > specificity("path", "fields.py")
    assert specificity("id", "HAT136") == specificity("id", "HAT136")  # a value's alone: no count enters


def test_what_only_boilerplate_lines_show_is_marked_and_the_rest_is_not():
    dump = "\n".join(f"{16 * k:08x}: a1b2 c3d4 e5f6 0718  ........" for k in range(40))
    msgs = [{"role": "user", "content": "disassemble it"},
            {"role": "assistant", "content": "", "tool_calls": [call("a", "bash", command="xxd build/app.bin")]},
            {"role": "tool", "tool_call_id": "a", "content": dump + "\nbuild id 3f9a2c71b0 ok\n"
                                                             "root:x:0:0:root:/root:/bin/bash\n"
                                                             '<svg xmlns="http://www.w3.org/2000/svg"/>'}]
    found = {(e.kind, e.value): e for e in ledger_entries(parse_messages(msgs))}
    assert found[("hash", "3f9a2c71b0")].noise is False  # on a plain line too
    assert found[("url", "http://www.w3.org/2000/svg")].noise
    assert found[("path", "/root")].noise and found[("path", "/bin/bash")].noise  # a passwd line's
    assert all(e.noise for (k, v), e in found.items() if k == "hash" and v != "3f9a2c71b0")
    assert found[("ran", "xxd build/app.bin")].source == "call" and not found[("ran", "xxd build/app.bin")].noise
