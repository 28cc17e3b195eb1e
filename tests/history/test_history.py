"""History validation and verbatim rendering, on hand-made and real trajectories."""

import copy
import json
from pathlib import Path

import pytest

from sgl_speccompact.errors import HistoryTooLongError, InvalidHistoryError
from sgl_speccompact.history.messages import environment_outputs, parse_messages, render_history

TRAJ = Path(__file__).resolve().parents[3] / "shared" / "data" / "trajectories"
OPENAI_FILE = TRAJ / "All-Hands-AI__agent-sdk__tests__fixtures__llm_data__fncall-llm-message.json"


@pytest.fixture
def openai_messages():
    if not OPENAI_FILE.exists():
        pytest.skip(f"shared trajectories not found at {TRAJ}")
    return json.loads(OPENAI_FILE.read_text())


def test_real_openai_trajectory_keeps_tools_paths_and_errors(openai_messages):
    before = copy.deepcopy(openai_messages)
    text = render_history(parse_messages(openai_messages))
    assert openai_messages == before
    for m in openai_messages:
        for call in m.get("tool_calls") or []:
            assert f"[tool call {call['function']['name']} id={call['id']}]" in text
            assert call["function"]["arguments"] in text  # arguments verbatim
        if isinstance(m.get("content"), str):
            assert m["content"] in text
    assert "[Errno 2] No such file or directory: '/workspace/hello.py'" in text
    assert "/workspace/hello.py" in text


@pytest.mark.parametrize("bad, field", [
    ([{"content": "hi"}], "messages[0].role"),
    ([{"role": "robot", "content": "hi"}], "messages[0].role"),
    ([{"role": "user", "content": 42}], "messages[0].content"),
    ([{"role": "tool", "tool_call_id": "x", "content": "out"}], "messages[0].tool_call_id"),
    ([{"role": "user", "content": "hi", "colour": "red"}], "messages[0]"),
    ([{"role": "assistant", "tool_calls": [{"id": "a", "function": {"arguments": "{}"}}]}],
     "messages[0].tool_calls[0].function"),
    ([], "messages"),
    ("not a list", "messages"),
])
def test_malformed_messages_name_the_field(bad, field):
    with pytest.raises(InvalidHistoryError) as err:
        parse_messages(bad)
    assert err.value.field == field


def test_size_limits_are_typed():
    msgs = [{"role": "user", "content": "x" * 100}] * 3
    with pytest.raises(HistoryTooLongError):
        parse_messages(msgs, max_messages=2)
    with pytest.raises(HistoryTooLongError):
        parse_messages(msgs, max_chars=250)


def test_content_parts_and_dict_arguments():
    turns = parse_messages([
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"k": 1}}}]},
    ])
    assert turns[0].content == "ab" and turns[1].tool_calls[0].arguments == '{"k": 1}'


def test_environment_outputs_drop_assistant_prose(openai_messages):
    env = environment_outputs(parse_messages(openai_messages))
    prose = [m["content"] for m in openai_messages if m["role"] == "assistant" and m.get("content")]
    assert prose and not any(p in env for p in prose)
    assert "Ran into [Errno 2]" in env
