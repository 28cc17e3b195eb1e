"""Redaction of values the earlier detectors missed: tool-call arguments sent as JSON objects, and
Django-style keys whose quoted value holds punctuation.  Every probe here failed before its fix."""

from __future__ import annotations

import copy
import json

import pytest

from tests.support.secret_cases import LISTED_FORMATS, SECRET_CASES, leaked
from sgl_speccompact.methods.request import AgentLayout, MethodRequest
from sgl_speccompact.history.redaction import find_secrets, redact, redact_messages

OPENAI = "sk-proj-Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6"


def _call_with(arguments) -> list[dict]:
    return [{"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "deploy", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]


@pytest.mark.parametrize("arguments", [
    {"key": OPENAI},
    {"env": {"OPENAI_API_KEY": OPENAI, "n": 3}},
    {"steps": [{"run": ["curl", "-H", f"Authorization: Bearer {OPENAI}"]}]},
    [[[{"deep": [[OPENAI]]}]]],
    {OPENAI: "the key as a key"},
], ids=["flat", "nested", "list", "deep", "as-key"])
def test_object_arguments_are_redacted_at_any_depth(arguments):
    msgs = _call_with(arguments)
    sent = copy.deepcopy(msgs)
    shown = redact_messages(msgs)
    assert OPENAI not in json.dumps(shown) and msgs == sent  # the caller's messages are untouched
    args = shown[1]["tool_calls"][0]["function"]["arguments"]
    assert type(args) is type(arguments)  # still an object: the chat template renders it as one
    assert "[REDACTED:" in json.dumps(args)


def test_object_arguments_without_a_secret_stay_the_callers_objects():
    msgs = _call_with({"path": "src/a.py", "lines": [1, 2]})
    assert redact_messages(msgs)[1] is msgs[1]


def test_agent_layout_prompt_holds_no_object_argument_secret(make_emulated_server, qwen3_tokenizer_path):
    """The agent layout renders the messages themselves through the chat template (Qwen3's renders arguments)."""
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.methods.registry import run_method
    from sgl_speccompact.emulator import ScriptedPolicy

    policy = ScriptedPolicy(default_output="- deployed with config/deploy.yaml\n")
    server = make_emulated_server(policy=policy, model_path="Qwen/Qwen3-8B")
    msgs = _call_with({"env": {"OPENAI_API_KEY": OPENAI}, "target": "config/deploy.yaml"})
    result = run_method("target_self", MethodRequest(msgs, layout=AgentLayout("agent", chat_template=qwen3_tokenizer_path)),
                        target=SpecCompactEndpoint(server.url, timeout_s=60))
    prompts = [p for _, p in policy.calls]
    assert prompts and any("config/deploy.yaml" in p for p in prompts)
    assert not [p for p in prompts if OPENAI[:12] in p]
    assert result.redactions.get("openai_key") == 1


DJANGO = [c for c in SECRET_CASES if c[0].startswith("django") and c[0] != "django_secret_key"]  # that one was redacted before


@pytest.mark.parametrize("name,text,secrets", DJANGO, ids=[c[0] for c in DJANGO])
def test_django_secret_keys_with_punctuation_are_redacted(name, text, secrets):
    out, counts = redact(text)
    assert counts == {"password": 1} and not leaked([out], [(name, text, secrets)]), out


@pytest.mark.parametrize("line", [  # quoted placeholders, references and calls stay as they are
    'password: "<your password>"', "SECRET_KEY = '${DJANGO_SECRET_KEY}'", "token: '{{ vault_token }}'",
    "password = '%(db_password)s'", "SECRET_KEY = 'changeme'", "api_key = '...'", "token = '********'",
    "password = get_password('db')", "token = tokens['main']", "SECRET_KEY = env('SECRET_KEY')",
    "password_file = '/run/secrets/db'", "SECRET_KEY = $DJANGO_SECRET_KEY",
])
def test_placeholders_and_code_are_still_kept(line):
    assert find_secrets(line) == [], line


def _bulleted(text: str) -> str:
    return "\n".join(f"- {line}" for line in text.splitlines())


@pytest.mark.parametrize("shape", ["raw", "bulleted"])
@pytest.mark.parametrize("name,text,secrets", SECRET_CASES, ids=[c[0] for c in SECRET_CASES])
def test_no_secret_of_a_previous_summary_reaches_a_prompt(name, text, secrets, shape):
    """A previous summary is written as list items: each line of a secret may sit behind a bullet."""
    summary = "## Critical Context\n" + (text if shape == "raw" else _bulleted(text))
    shown, _ = redact(summary)
    assert not leaked([shown], [(name, text, secrets)]), shown


def test_previous_summary_secrets_never_reach_the_emulated_servers(make_emulated_server):
    """End to end: every listed secret, bulleted, in the previous summary; no prompt of either server holds one."""
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.methods.registry import run_method
    from sgl_speccompact.emulator import ScriptedPolicy

    previous = "## Critical Context\n" + "\n".join(_bulleted(text) for _, text, _ in SECRET_CASES)
    target_policy = ScriptedPolicy(default_output="- kept the deploy config\n")
    drafter_policy = ScriptedPolicy(default_output="- kept the deploy config\n")
    target = make_emulated_server(policy=target_policy, model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(policy=drafter_policy, model_path="Qwen/Qwen3-0.6B")
    msgs = _call_with({"target": "config/deploy.yaml"})
    for method in ("speccompact", "target_self", "hermes"):
        run_method(method, msgs, target=SpecCompactEndpoint(target.url, timeout_s=60),
                   drafter=SpecCompactEndpoint(drafter.url, timeout_s=60), previous_summary=previous)
    prompts = [p for _, p in target_policy.calls + drafter_policy.calls]
    assert prompts and any("deploy" in p for p in prompts)
    assert not leaked(prompts)


ESCAPED = [c for c in SECRET_CASES + [c for c in LISTED_FORMATS if c[0].startswith("sts_")]]


@pytest.mark.parametrize("name,text,secrets", ESCAPED, ids=[c[0] for c in ESCAPED])
def test_secrets_in_json_string_arguments_are_redacted_where_escapes_hid_them(name, text, secrets):
    """Arguments sent as a JSON string: a quoted value reads \\"...\\" and a tab \\t there, which hid
    SECRET_KEY = "...", a JSON password and an AWS key between tabs from every pattern (they reached the
    rendered history, so every prompt, before this fix)."""
    from sgl_speccompact.history.messages import parse_messages, render_history
    from sgl_speccompact.history.redaction import redact_turns

    msgs = _call_with(json.dumps({"command": text, "nested": {"env": [text]}}))
    turns, counts = redact_turns(parse_messages(msgs))
    assert counts and not leaked([render_history(turns)], [(name, text, secrets)])
    shown = redact_messages(msgs)[1]["tool_calls"][0]["function"]["arguments"]
    assert not leaked([shown], [(name, text, secrets)]) and json.loads(shown)  # still JSON
