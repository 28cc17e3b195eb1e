"""The Hermes plugin's own pruning stubs hold no cut secret.

The plugin prunes before it sends (a terminal command cut at 77 characters,
other tools' argument values at 40, long argument strings at 200), and the
service's redaction cannot recognise a secret cut there.  What reaches a
prompt is the service's redaction of the stub: the probes failed before the
plugin's cuts stopped keeping part of a word.
"""

import json


from tests.support.secret_cases import SECRET_CASES, leaked
from speccompact_hermes.prune import prune

from sgl_speccompact.history.redaction import redact  # the service's, on what the plugin sends


def test_hermes_plugin_stubs_hold_no_cut_secret():
    """The plugin prunes on its side (a terminal command cut at 77 characters, argument values at 40)."""
    found = []
    for name, text, secrets in SECRET_CASES:
        if "\n" in text:
            continue  # one command line per call
        for offset in range(0, 80, 6):
            for tool, args in (("terminal", {"command": "o" * offset + " " + text}),
                               ("web_fetch", {"url": "o" * (offset % 40) + text, "mode": text})):
                call = {"id": "c1", "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
                msgs = [{"role": "assistant", "content": "", "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": "c1", "content": "x" * 900},
                        {"role": "user", "content": "next"}]
                out, n = prune(msgs, tail_tokens=10, tail_count=1)
                assert n == 1
                found += [(tool, offset, p) for _, p in leaked([redact(out[1]["content"])[0]],
                                                               [(name, text, secrets)])]
    assert not found, found[:5]


def test_shortened_arguments_hold_no_cut_secret():
    found = []
    for name, text, secrets in SECRET_CASES:
        for offset in range(40, 205, 4):
            args = json.dumps({"content": "o" * offset + " " + text + " " + "z" * 600})
            call = {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": args}}
            msgs = [{"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "c1", "content": "ok"}, {"role": "user", "content": "next"}]
            out, _ = prune(msgs, tail_tokens=10, tail_count=1)
            sent = out[0]["tool_calls"][0]["function"]["arguments"]
            assert sent != args and len(sent) < len(args)
            found += [(offset, p) for _, p in leaked([redact(json.loads(sent)["content"])[0]], [(name, text, secrets)])]
    assert not found, found[:5]
