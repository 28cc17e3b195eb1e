"""Pruning stubs carry no secret: the output is redacted before its first line is cut, the stub again after.

A stub quotes the first line of a tool output cut at 77 characters with its
double quotes swapped; a secret cut or re-quoted there no longer matches its
pattern, so redaction after pruning alone let its head through.  Every probe
here failed before: the secret formats of ``secret_cases`` at every offset
of the cut, and through the pipeline with pruning on (as the integrations
run it).
"""

from __future__ import annotations

import copy

import pytest

from tests.support.secret_cases import SECRET_CASES, leaked
from sgl_speccompact.history.pruning import FIRST_LINE_CHARS, prune_tool_outputs
from sgl_speccompact.methods.registry import run_method
from tests.support.methods import baseline_target

FILLER = "\n" + "\n".join(f"line {i} of the output" for i in range(40))
OFFSETS = range(0, FIRST_LINE_CHARS + 4, 4)  # where in the quoted first line the secret starts


def _history(first_line_prefix: str, text: str, quote: bool = False) -> list[dict]:
    body = text.replace("'", '"') if quote else text
    return [
        {"role": "user", "content": "deploy it"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "env"}'}},
            {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "bash", "content": first_line_prefix + body + FILLER},
        {"role": "tool", "tool_call_id": "c2", "name": "bash", "content": "ok"},
    ]


@pytest.mark.parametrize("name,text,secrets", SECRET_CASES, ids=[c[0] for c in SECRET_CASES])
def test_no_secret_survives_the_stub_cut_at_any_offset(name, text, secrets):
    found = []
    for offset in OFFSETS:
        for quote in (False, True):
            msgs = _history("o" * offset + " ", text, quote)
            sent = copy.deepcopy(msgs)
            out, report = prune_tool_outputs(msgs, keep=1, redact_secrets=True)
            assert msgs == sent and report.messages_pruned == 1
            stub = out[2]["content"]
            assert stub.startswith("[pruned tool output: bash")
            found += [(offset, quote, piece) for _, piece in leaked([stub], [(name, text, secrets)])]
    assert not found, found[:5]


def test_pruning_counts_what_it_redacted_and_measures_the_redacted_output():
    msgs = _history("x" * 36, "DATABASE_URL=postgres://admin:S3cr3tP4ss@db.internal:5432/app")
    out, report = prune_tool_outputs(msgs, keep=1, redact_secrets=True)
    assert report.redactions == {"connection_string": 1}
    assert all("S3cr3tP4ss" not in before for before, _ in report.replaced)  # what token counting is sent
    plain, _ = prune_tool_outputs(msgs, keep=1)  # without redact_secrets: the stub as before
    assert plain[2]["content"].startswith('[pruned tool output: bash') and "S3cr3" in plain[2]["content"]


def test_the_issue_example_reaches_no_prompt_with_pruning_on():
    """A 36-character output line, then a connection string: 7 of 7 prompts held the password's head."""
    target = baseline_target()
    msgs = _history("x" * 36, " DATABASE_URL=postgres://admin:S3cr3tP4ss@db.internal:5432/app")
    result = run_method("openclaw", msgs, target=target, config={"prune_tool_outputs": True, "keep_tool_outputs": 1})
    prompts = [text for _, text in target.requests]
    assert prompts and any("[pruned tool output: bash" in p for p in prompts)
    assert not [p for p in prompts if "S3cr3" in p]
    assert result.redactions.get("connection_string") == 1 and result.pruning["messages_pruned"] == 1


def test_no_listed_format_reaches_a_prompt_through_pruning():
    target = baseline_target()
    msgs = [{"role": "user", "content": "collect the credentials"}]
    for i, (_, text, _) in enumerate(SECRET_CASES):
        msgs.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "cat .env"}'}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "o" * (i * 5 % 70) + text + FILLER})
    msgs.append({"role": "assistant", "content": "done"})
    run_method("openclaw", msgs, target=target, config={"prune_tool_outputs": True, "keep_tool_outputs": 0})
    prompts = [text for _, text in target.requests]
    assert prompts and sum(p.count("[pruned tool output:") for p in prompts) >= len(SECRET_CASES)
    assert not leaked(prompts)
