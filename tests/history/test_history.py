"""History validation and verbatim rendering, on hand-made and real trajectories."""

import copy
import json
from pathlib import Path

import pytest

from sgl_speccompact.errors import HistoryTooLongError, InvalidHistoryError
from sgl_speccompact.history.messages import content_text, environment_outputs, parse_messages, render_history

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


def test_content_text_reads_parts_with_the_callers_joiner_and_skips_other_parts():
    parts = [{"type": "text", "text": "fix"}, {"type": "image_url", "image_url": {"url": "x"}}, "a.py"]
    sent = copy.deepcopy(parts)
    assert content_text(parts) == "fixa.py" and content_text(parts, " ") == "fix a.py"
    assert content_text(parts, other=lambda p: "[img]") == "fix[img]a.py"
    assert content_text("as is") == "as is" and content_text(None) == content_text(7) == ""
    assert parts == sent


def test_every_reader_of_content_parts_goes_through_content_text():
    """The parser, the converter, pruning, the auto picker, chunking and the trajectory sources agree."""
    from sgl_speccompact.history.convert import _content
    from sgl_speccompact.history.pruning import prune_tool_outputs
    from sgl_speccompact.methods.autopick import estimate_tokens
    from sgl_speccompact.methods.chunking import SMALL_HISTORY_BYTES, small
    from bench.sim.sources import action_outcomes

    parts = [{"type": "text", "text": "x" * 300}, {"type": "text", "text": "y" * 100}]
    text = content_text(parts)
    assert parse_messages([{"role": "user", "content": parts}])[0].content == text
    assert _content(parts, "m") == text
    assert estimate_tokens([{"role": "user", "content": parts}]) == 100
    call = {"id": "c", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
    out, _ = prune_tool_outputs([{"role": "assistant", "content": "", "tool_calls": [call]},
                                 {"role": "tool", "tool_call_id": "c", "content": parts}], keep=0)
    assert f"({len(text)} chars)" in out[1]["content"]
    # chunking sizes the parts' text, not the list's repr (which holds every key and quote)
    n = SMALL_HISTORY_BYTES - 10
    assert small([{"role": "user", "content": [{"type": "text", "text": "z" * n}, {"type": "text", "text": "z"}]}],
                 None)
    assert action_outcomes([{"role": "assistant", "content": "run"},
                            {"role": "tool", "content": [{"type": "text", "text": "Traceback"}]}]) == [False]
