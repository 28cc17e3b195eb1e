"""Trajectory formats: every shared trajectory parses, conversions are exact."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from sgl_speccompact.errors import HistoryFormatError
from sgl_speccompact.history.formats import detect_format, list_trials, load_history, trajectory_id
from sgl_speccompact.history.convert import convert_messages
from sgl_speccompact.history.messages import parse_messages

TRAJ_DIR = Path(__file__).resolve().parents[3] / "shared/data/trajectories"
NOT_TRAJECTORIES = {"tasks.json"}


def _files() -> list[Path]:
    if not TRAJ_DIR.is_dir():
        return []
    return sorted(p for p in TRAJ_DIR.iterdir() if p.suffix in (".json", ".traj"))


needs_data = pytest.mark.skipif(
    not TRAJ_DIR.is_dir(), reason=f"shared trajectories not found at {TRAJ_DIR} (clone ../shared beside the repo)"
)


def _is_trajectory(p: Path) -> bool:
    return not any(p.name.endswith(n) for n in NOT_TRAJECTORIES)


@needs_data
def test_data_folder_has_every_format():
    fmts = {detect_format(json.loads(p.read_text())) for p in _files() if _is_trajectory(p)}
    assert fmts == {"openai", "swe_agent", "tau2"}
    assert len([p for p in _files() if _is_trajectory(p)]) >= 8


@needs_data
@pytest.mark.parametrize("path", [p for p in _files() if _is_trajectory(p)], ids=lambda p: p.name[:60])
def test_every_trajectory_parses(path):
    for t in list_trials(path):
        msgs = load_history(path, trial=t.index)
        turns = parse_messages(msgs)
        assert len(turns) == len(msgs) > 0
        # each tool result answers exactly one distinct earlier call
        answered = [m["tool_call_id"] for m in msgs if m["role"] == "tool"]
        assert len(answered) == len(set(answered))


@needs_data
def test_tasks_json_is_a_clear_format_error():
    path = next(p for p in _files() if p.name.endswith("tasks.json"))
    with pytest.raises(HistoryFormatError, match="task list") as ei:
        load_history(path)
    assert ei.value.field == str(path)


@needs_data
def test_input_objects_are_not_mutated():
    for path in _files():
        if not _is_trajectory(path):
            continue
        obj = json.loads(path.read_text())
        before = copy.deepcopy(obj)
        for t in list_trials(obj):
            out = load_history(obj, trial=t.index)
            out[0]["content"] = "changed"  # output shares nothing with the input
        assert obj == before, path.name


@needs_data
def test_swe_agent_reused_ids_are_renamed_and_bound_to_latest_call():
    path = next(p for p in _files() if "marshmallow" in p.name)
    raw = json.loads(path.read_text())["history"]
    msgs = load_history(path)
    ids = [c["id"] for m in msgs for c in m.get("tool_calls", [])]
    assert len(ids) == len(set(ids)) == 11
    assert "call_5iDdbOYybq7L19vqXmR0DPaU#4" in ids
    for i, m in enumerate(msgs):
        if m["role"] == "tool":  # result follows its own call
            assert msgs[i - 1]["tool_calls"][0]["id"] == m["tool_call_id"]
            assert m["content"] == raw[i]["content"]
    assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id", "name"} for m in msgs)


@needs_data
def test_tau2_trials_listed_and_selectable():
    path = next(p for p in _files() if "simulations" in p.name)
    trials = list_trials(path)
    assert len(trials) == 10
    assert {t.task_id for t in trials} == {"32"}
    assert sorted(t.trial for t in trials) == list(range(10))
    first, second = load_history(path), load_history(path, trial=1)
    assert first == load_history(path, trial=0) and first != second
    call = first[2]["tool_calls"][0]
    assert call["function"] == {"name": "get_user_details", "arguments": '{"user_id": "ivan_rossi_8555"}'}
    assert first[3] == {
        "role": "tool", "content": json.loads(path.read_text())["simulations"][0]["messages"][3]["content"],
        "tool_call_id": call["id"], "name": "get_user_details",
    }
    with pytest.raises(HistoryFormatError, match="out of range"):
        load_history(path, trial=10)


@needs_data
def test_trajectory_id_is_stable_across_path_and_object():
    path = _files()[0]
    assert trajectory_id(path) == trajectory_id(json.loads(path.read_text())) == trajectory_id(str(path))
    assert trajectory_id(path, trial=3).endswith("-t3")
    ids = {trajectory_id(p) for p in _files()}
    assert len(ids) == len(_files())


def test_tool_call_ids_list_gives_one_message_per_id():
    hist = {"history": [
        {"role": "user", "content": "go", "agent": "main", "message_type": "observation"},
        {"role": "assistant", "content": "two calls", "thought": "t", "action": "a",
         "tool_calls": [{"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
                        {"id": "b", "type": "function", "function": {"name": "cat", "arguments": {"p": 1}}}]},
        {"role": "tool", "content": "out", "tool_call_ids": ["a", "b"], "agent": "main"},
    ]}
    msgs = load_history(hist)
    assert [m.get("tool_call_id") for m in msgs] == [None, None, "a", "b"]
    assert [m.get("name") for m in msgs[2:]] == ["ls", "cat"]
    assert msgs[1]["tool_calls"][1]["function"]["arguments"] == '{"p": 1}'
    parse_messages(msgs)


def test_orphan_and_user_side_tool_results_become_user_messages():
    raw = [
        {"role": "user", "content": "hi", "tool_calls": [{"id": "u1", "name": "toggle", "arguments": {}}]},
        {"role": "tool", "id": "u1", "content": "done", "requestor": "user"},
        {"role": "tool", "id": "nope", "content": "lost"},
    ]
    msgs = convert_messages(raw)
    assert [m["role"] for m in msgs] == ["user", "user", "user"]
    assert "[tool call toggle id=u1]" in msgs[0]["content"]
    assert msgs[2]["content"] == "[tool result id=nope]\nlost"
    parse_messages(msgs)


def test_content_parts_and_old_swe_agent_turns():
    msgs = convert_messages([
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}]},
        {"role": "assistant", "content": "", "thought": "look", "action": "ls -a\n"},
    ])
    assert msgs[0]["content"] == "a[image_url omitted]"
    assert msgs[1]["content"] == "look\n```\nls -a\n```"


def test_mini_swe_agent_dict_form():
    obj = {"info": {"exit_status": "Submitted"}, "messages": [
        {"role": "system", "content": "s"}, {"role": "user", "content": "u", "extra": {"x": 1}}]}
    assert detect_format(obj) == "mini_swe_agent"
    assert load_history(obj) == [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


@pytest.mark.parametrize("obj,match", [
    ({"foo": 1}, "unknown trajectory format"),
    ([], "empty list"),
    ([1, 2], "not of chat messages"),
    ("x", None),
    (42, "expected a path"),
])
def test_unknown_shapes_raise_format_error(obj, match, tmp_path):
    if obj == "x":
        with pytest.raises(HistoryFormatError, match="cannot read"):
            load_history(tmp_path / "missing.json")
        bad = tmp_path / "bad.json"
        bad.write_text("{not json")
        with pytest.raises(HistoryFormatError, match="not JSON") as ei:
            load_history(bad)
        assert ei.value.field == str(bad)
        return
    with pytest.raises(HistoryFormatError, match=match):
        load_history(obj)


def test_bad_role_names_the_field():
    with pytest.raises(HistoryFormatError) as ei:
        load_history({"history": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]})
    assert ei.value.field == "history.history[1].role"


def test_trial_must_be_zero_for_single_conversation():
    with pytest.raises(HistoryFormatError, match="trial must be 0"):
        load_history([{"role": "user", "content": "a"}], trial=1)


def test_a_string_that_cannot_be_a_path_is_a_typed_error():
    with pytest.raises(HistoryFormatError, match="not a usable file path"):
        load_history("\x00")
