"""Chat-template code stays the operator's: request template kwargs that could control the
template are refused naming the field, on the injected runner and on the real pipeline.
"""

from __future__ import annotations

import copy

import pytest
from tests.support.service import MESSAGES, make_client

from sgl_speccompact.service.app import create_app

# ==================================================================== Hardening II: template code, limits and
# types, shutdown of streams, command-line flags.  Every probe below failed before the matching fix (500/502,
# 200, a traceback or a cut stream); the comment on each says what it got.


# ------------------------------------------------------------------ template code stays the operator's

_TEMPLATE_PROBES = [  # before: 200 with a recording runner, 500 with the real one
    ("chat_template", "{% for i in range(999999) %}{% for j in range(999999) %}{% endfor %}{% endfor %}"),
    ("chat_template", "{{ raise_exception('boom') }}"),
    ("chat_template", "{{ nothing.here.at_all }}"),
    ("chat_template", "{% if %}"),
    ("tokenize", True), ("return_dict", True), ("messages", []), ("tools", []), ("conversation", []),
    ("add_generation_prompt", True), ("continue_final_message", True), ("documents", []),
    ("enable_thinking", "yes"), ("enable_thinking", {"a": 1}), ("reasoning_effort", "max"),
]


@pytest.mark.parametrize("key,value", _TEMPLATE_PROBES)
def test_template_control_kwargs_are_refused_naming_the_field(key, value):
    client, runner = make_client(chat_template="Qwen/Qwen3-8B")
    res = client.post("/v1/compact", json={"messages": MESSAGES, "layout": "agent",
                                           "chat_template_kwargs": {key: value}})
    assert res.status_code == 422, res.text
    assert res.json()["error"]["field"] == f"chat_template_kwargs.{key}"
    assert runner.calls == []


def test_allowed_template_kwargs_are_plain_values():  # passed before too: what must keep working
    from tests.support.service import LayoutRunner

    runner = LayoutRunner()
    client, _ = make_client(runner=runner, chat_template="Qwen/Qwen3-8B")
    kwargs = {"enable_thinking": False, "thinking": True, "reasoning_effort": "low"}
    res = client.post("/v1/compact", json={"messages": MESSAGES, "layout": "agent", "chat_template_kwargs": kwargs})
    assert res.status_code == 200, res.text
    assert runner.layout_args["chat_template_kwargs"] == kwargs


@pytest.fixture
def agent_service(make_emulated_server, emulator_tokenizer):
    """create_app with the real methods on emulated servers; ``make(template)`` sets the operator's template."""
    from fastapi.testclient import TestClient
    from tests.support.service import endpoints

    from sgl_speccompact.emulator import ScriptedPolicy

    policy = ScriptedPolicy()
    policy.judge(".", p_positive=0.9, regex=True)
    policy.on("", "- a line about a.py\n")
    target, drafter = endpoints(make_emulated_server(policy=policy, model_path="Qwen/Qwen3-8B"),
                                make_emulated_server(policy=policy, model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"]))

    def make(template: str | None = None) -> TestClient:
        tok = copy.copy(emulator_tokenizer)  # the shared tokenizer keeps its own template
        if template is not None:
            tok.chat_template = template
        return TestClient(create_app(target, drafter, chat_template=tok))

    return make


@pytest.mark.parametrize("key,value", _TEMPLATE_PROBES[1:10])  # not the nested loop: it held a core for minutes
def test_template_kwargs_on_the_real_pipeline_are_4xx(agent_service, key, value):
    res = agent_service().post("/v1/compact", json={"messages": MESSAGES, "layout": "agent", "method": "target_self",
                                                    "chat_template_kwargs": {key: value}})
    assert 400 <= res.status_code < 500, res.text


@pytest.mark.parametrize("template,field", [  # before: 500 internal error
    ("{{ raise_exception('roles must alternate') }}", "messages"),
    ("{% for m in messages %}{{ m.nothing.deeper }}{% endfor %}", "messages"),
    ("{% for m in messages %}{{ m.content }", "chat_template"),
])
def test_operator_template_errors_are_4xx(agent_service, template, field):
    res = agent_service(template).post("/v1/compact", json={"messages": MESSAGES, "layout": "agent",
                                                            "method": "target_self"})
    assert 400 <= res.status_code < 500, res.text
    assert res.json()["error"]["field"] == field
