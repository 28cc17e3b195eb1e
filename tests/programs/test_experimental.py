"""The experimental levers' module: the drafter's digest (long tool outputs keep their head and tail, every
other turn stays whole) and its hook."""

from sgl_speccompact.config import CompactConfig
from sgl_speccompact.history.messages import render_history
from sgl_speccompact.programs.experimental import drafter_digest, drafter_history
from sgl_speccompact.history.messages import Turn, ToolCall

def count(texts):  # one token per word
    return [len(t.split()) for t in texts]

def test_long_tool_outputs_keep_head_and_tail_only():
    output = " ".join(f"w{i}" for i in range(1000))
    turns = (Turn("system", "You are an agent."), Turn("user", "fix a.py " * 200),
             Turn("assistant", "", (ToolCall("c1", "cat", '{"path": "a.py"}'),)),
             Turn("tool", output, tool_call_id="c1", name="cat"),
             Turn("tool", "short output", tool_call_id="c2", name="cat"))
    got = drafter_digest(turns, 50, count)
    assert got[:3] == turns[:3] and got[4] == turns[4]  # prose, requests, calls and short outputs: whole
    clipped = got[3].content
    assert clipped.startswith("w0 w1 w2") and clipped.endswith("w998 w999")
    assert "w500" not in clipped and "900 tokens of tool output clipped" in clipped
    assert 90 <= len(clipped.split()) <= 130  # about 2 x 50 words kept, plus the marker
    assert (got[3].tool_call_id, got[3].name) == ("c1", "cat")
    assert turns[3].content == output  # the caller's turns are only read

def test_an_output_of_at_most_twice_keep_is_whole():
    turns = (Turn("tool", " ".join(["x"] * 100), tool_call_id="c1"),)
    assert drafter_digest(turns, 50, count) == turns
    assert drafter_digest(turns, 49, count) != turns


def test_the_digest_hook_renders_the_clipped_turns():
    turns = (Turn("user", "fix a.py"), Turn("tool", " ".join(["w"] * 400), tool_call_id="c1"))
    clipped = drafter_history(turns, CompactConfig(drafter_digest=True, drafter_digest_tokens=50), count)
    assert clipped == render_history(drafter_digest(turns, 50, count)) and "clipped" in clipped
