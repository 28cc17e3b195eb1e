"""Tool-output pruning: old outputs become stubs, the newest stay whole, pairs stay intact."""

import copy
import doctest

import pytest

from sgl_speccompact.history import pruning
from sgl_speccompact.config import CompactConfig
from sgl_speccompact.history.messages import parse_messages
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.history.pruning import prune_tool_outputs, stub

from tests.support.methods import baseline_target

FILES = {f"/repo/f{i}.py": f"# file {i}\n" + f"x{i} = {i}\n" * 200 for i in range(5)}


def reading_session() -> list[dict]:
    """A user request that turns into five read_file calls, one per assistant turn."""
    msgs = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Read every file in /repo"}]
    for i, (path, text) in enumerate(FILES.items()):
        msgs.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": f'{{"path": "{path}"}}'}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "name": "read_file", "content": text})
    msgs.append({"role": "assistant", "content": "All five files are read."})
    return msgs


def test_doctests():
    failed, attempted = doctest.testmod(pruning, optionflags=doctest.ELLIPSIS)
    assert failed == 0 and attempted > 0


def test_old_outputs_become_stubs_and_the_newest_stay_whole():
    msgs = reading_session()
    before = copy.deepcopy(msgs)
    out, report = prune_tool_outputs(msgs, keep=2)
    assert msgs == before  # the caller's history is only read
    assert len(out) == len(msgs) and [m["role"] for m in out] == [m["role"] for m in msgs]
    tools = [m for m in out if m["role"] == "tool"]
    assert [t["content"] for t in tools[-2:]] == list(FILES.values())[-2:]
    for i, t in enumerate(tools[:3]):
        assert t["content"].startswith("[pruned tool output: read_file args#")
        assert f'"# file {i}"' in t["content"] and f"({len(FILES[f'/repo/f{i}.py'])} chars)" in t["content"]
        assert "\n" not in t["content"]
    assert report.messages_pruned == 3
    assert report.chars_saved == sum(len(v) for v in list(FILES.values())[:3]) - sum(len(t["content"]) for t in tools[:3])
    # every result still answers its call: the pruned history parses
    turns = parse_messages(out)
    assert [t.tool_call_id for t in turns if t.role == "tool"] == [f"c{i}" for i in range(5)]


def test_stub_digest_tells_calls_apart_and_short_outputs_are_kept():
    assert stub("read_file", '{"path": "a"}', "x") != stub("read_file", '{"path": "b"}', "x")
    msgs = reading_session()
    msgs[3] = {**msgs[3], "content": "ok"}  # shorter than any stub
    out, report = prune_tool_outputs(msgs, keep=0)
    assert out[3]["content"] == "ok" and report.messages_pruned == 4


@pytest.mark.parametrize("keep", [0, 5, 9])
def test_keep_bounds(keep):
    out, report = prune_tool_outputs(reading_session(), keep=keep)
    assert report.messages_pruned == max(0, 5 - keep)


def test_pipeline_prunes_only_when_asked_and_reports_the_effect():
    msgs = reading_session()
    target = baseline_target()
    off = run_method("openclaw", msgs, target=target)
    assert off.pruning is None and "x0 = 0" in target.kinds("generate")[0]
    target = baseline_target()
    on = run_method("openclaw", msgs, target=target, config={"prune_tool_outputs": True, "keep_tool_outputs": 1})
    prompt = target.kinds("generate")[0]
    assert "x0 = 0" not in prompt and "x4 = 4" in prompt  # only the newest output is whole
    assert prompt.count("[pruned tool output: read_file") == 4
    assert on.pruning["messages_pruned"] == 4
    assert on.pruning["chars_saved"] > 0 and on.pruning["tokens_saved"] > 0
    assert msgs == reading_session()


def test_the_pipeline_keeps_the_newest_keep_tool_outputs_whole_by_default():
    target = baseline_target()
    out = run_method("openclaw", reading_session(), target=target, config={"prune_tool_outputs": True})
    prompt = target.kinds("generate")[0]
    assert out.pruning["messages_pruned"] == 5 - CompactConfig().keep_tool_outputs
    assert "x0 = 0" not in prompt and all(f"x{i} = {i}" in prompt for i in range(1, 5))
