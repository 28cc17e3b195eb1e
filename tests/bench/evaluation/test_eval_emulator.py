"""Retention questions over HTTP: the SGLang-API emulator as target, and an OpenAI-compatible judge client."""

from __future__ import annotations

import pytest

from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.errors import BackendError, BackendUnavailableError
from bench.evaluation import adequacy, continuation, probes
from bench.evaluation.ask import OpenAIChatAsker, SglangAsker
from bench.evaluation.runner import EvalSettings, evaluate_trajectory
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.emulator import ScriptedPolicy
from bench.evaluation.evaluator import EvaluationPolicy


def _call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


HISTORY = [
    {"role": "user", "content": "tests/test_io.py fails with KeyError; fix it."},
    {"role": "assistant", "content": "", "tool_calls": [_call("c1", "bash", '{"command": "pytest -x"}')]},
    {"role": "tool", "tool_call_id": "c1", "content": "KeyError: 'size' in src/io.py:88"},
    {"role": "assistant", "content": "", "tool_calls": [_call("c2", "bash", '{"command": "python fix.py"}')]},
    {"role": "tool", "tool_call_id": "c2", "content": "patched"},
]


@pytest.fixture
def target(make_emulated_server):
    """An emulated target whose summaries come from ``script`` and whose questions EvaluationPolicy answers."""
    def make(summary: str):
        srv = make_emulated_server(policy=EvaluationPolicy(ScriptedPolicy(default_output=summary)))
        return SpecCompactEndpoint(srv.url)
    return make


def _continuation(endpoint):
    settings = EvalSettings(methods=("hermes",), sjc=(False,), measures=("continuation",), cut_depths=(0.7,))
    rows = evaluate_trajectory(
        HISTORY, settings, compact=lambda m, msgs: run_method(m, msgs, target=endpoint),
        sjc=lambda r, msgs: r, ask_target=SglangAsker(endpoint).ask, ask_judge=SglangAsker(endpoint).ask)
    return rows[0]["continuation"][0]


def test_continuation_on_the_emulator_recognises_the_right_tool(target):
    item = _continuation(target("## Next Steps\n- run `python fix.py` to patch src/io.py\n"))
    assert item["real"] == {"tool": "bash", "key": "python fix.py"} and item["prefix_messages"] == 3
    assert "python fix.py" in item["summary"]
    assert item["reply"] == "bash: python fix.py" and item["tool_match"] and item["key_match"]


def test_continuation_on_the_emulator_misses_when_the_summary_has_no_action(target):
    item = _continuation(target("## Progress\n- a test failed\n"))
    assert item["reply"] == "unknown" and not item["tool_match"] and not item["key_match"]


def test_recall_probes_and_adequacy_questions_over_http(target):
    endpoint = target("unused")
    fact = probes.make_facts(1, depths=(0.5,))[0]
    with_fact = f"## Critical Context\n- {fact.text}\n"
    asker = SglangAsker(endpoint)
    replies = asker.ask([(probes.PROBE_SYSTEM, probes.probe_prompt(with_fact, fact)),
                         (probes.PROBE_SYSTEM, probes.probe_prompt("## Goal\n- fix the tests", fact)),
                         (adequacy.ADEQUACY_SYSTEM, adequacy.adequacy_prompt("[user]\nfix", with_fact))])
    assert probes.answered(replies[0], fact) and not probes.answered(replies[1], fact)
    assert adequacy.parse_adequacy(replies[2]).score is not None  # every criterion answered


class FakeSession:
    """Records posts; answers with ``status`` and ``payload`` (or raises ``exc``)."""

    def __init__(self, status=200, payload=None, exc=None):
        self.status, self.payload, self.exc, self.posts = status, payload, exc, []

    def post(self, url, json, timeout):
        self.posts.append((url, json))
        if self.exc:
            raise self.exc
        outer = self

        class Res:
            status_code = outer.status
            text = str(outer.payload)

            def json(self):
                return outer.payload
        return Res()


def test_openai_compatible_judge_sends_chat_completions_and_reads_the_reply():
    session = FakeSession(payload={"choices": [{"message": {"content": "1. yes\n2. no\n3. yes\n4. yes\n5. no"}}]})
    judge = OpenAIChatAsker("http://judge:8000/v1", "judge-model", session, max_tokens=64)
    (reply,) = judge.ask([("sys", "question")])
    assert adequacy.parse_adequacy(reply).score == 3
    url, body = session.posts[0]
    assert url == "http://judge:8000/v1/chat/completions"
    assert body == {"model": "judge-model", "messages": [{"role": "system", "content": "sys"},
                                                        {"role": "user", "content": "question"}],
                    "max_tokens": 64, "temperature": 0.0}


def test_openai_compatible_judge_failures_are_typed():
    import requests

    with pytest.raises(BackendError, match="HTTP 500"):
        OpenAIChatAsker("http://j", "m", FakeSession(status=500, payload="boom")).ask([("s", "q")])
    with pytest.raises(BackendError, match="not a chat completion"):
        OpenAIChatAsker("http://j", "m", FakeSession(payload={"x": 1})).ask([("s", "q")])
    with pytest.raises(BackendUnavailableError):
        OpenAIChatAsker("http://j", "m", FakeSession(exc=requests.ConnectionError("refused"))).ask([("s", "q")])


def test_next_action_prompt_lists_the_history_tools():
    prompt = continuation.continuation_prompt("## Goal\n- x", continuation.tools_of(HISTORY))
    assert "TOOL is one of: bash, and ARGUMENT" in prompt
    assert "shell command" in continuation.continuation_prompt("## Goal\n- x", [])
