"""The labelled judge set: it loads, it is balanced and varied, and every label is backed by the history.

Each check is a function returning what it found wrong, run on the committed
set and on a small broken set, so every check is shown to fail.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from bench.evaluation.judge_set import (
    SET_PATH,
    SLOT_NAMES,
    JudgeCase,
    history_of,
    load_judge_set,
    trajectory_dir,
)
from sgl_speccompact.errors import ConfigError, HistoryFormatError
from sgl_speccompact.history.messages import parse_messages, render_history

MIN_PER_LABEL = 40  # supported and contradicted lines each
MIN_TRAJECTORIES = 5
MAX_HISTORY_CHARS = 14_000  # a rendered cut: about 3,500 tokens at 4 chars a token (SmolLM2 measured 3,484 at most)

TRAJ = trajectory_dir()
needs_trajectories = pytest.mark.skipif(
    TRAJ is None, reason="shared trajectories (shared/data/trajectories) not found above the clone")


# ------------------------------------------------------------------ checks


def texts(messages: list[dict]) -> list[str]:
    """Every text of a history a fact can come from: contents, tool names and arguments."""
    out = []
    for m in messages:
        out.append(m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content")))
        for call in m.get("tool_calls") or ():
            out += [call["function"]["name"], call["function"]["arguments"]]
    return out


def label_problems(cases: list[JudgeCase]) -> list[str]:
    counts = {flag: sum(c.supported is flag for c in cases) for flag in (True, False)}
    return [f"{counts[flag]} {name} lines, fewer than {MIN_PER_LABEL}"
            for flag, name in ((True, "supported"), (False, "contradicted")) if counts[flag] < MIN_PER_LABEL]


def spread_problems(cases: list[JudgeCase]) -> list[str]:
    files = {c.file for c in cases}
    return [] if len(files) >= MIN_TRAJECTORIES else [f"{len(files)} trajectories, fewer than {MIN_TRAJECTORIES}"]


def duplicate_problems(cases: list[JudgeCase]) -> list[str]:
    seen_lines: dict[str, str] = {}
    seen_ids: set[str] = set()
    out = []
    for c in cases:
        key = re.sub(r"\s+", " ", c.line).strip().casefold()
        if key in seen_lines:
            out.append(f"{c.id}: same line as {seen_lines[key]}")
        if c.id in seen_ids:
            out.append(f"{c.id}: id repeats")
        seen_lines.setdefault(key, c.id)
        seen_ids.add(c.id)
    return out


def pair_problems(cases: list[JudgeCase]) -> list[str]:
    """A pair (``-nns``/``-nnc``) is one fact true and falsified: same history, slot and evidence."""
    by_id = {c.id: c for c in cases}
    out = []
    for c in cases:
        if not re.fullmatch(r"[a-z0-9]+-\d\d[sc]", c.id) or c.id.endswith("s") != c.supported:
            out.append(f"{c.id}: id does not say its label (<trajectory>-<nn>s or -<nn>c)")
            continue
        twin = by_id.get(c.id[:-1] + ("s" if c.id.endswith("c") else "c"))
        if twin and (twin.file, twin.trial, twin.upto, twin.slot, twin.evidence) != (
                c.file, c.trial, c.upto, c.slot, c.evidence):
            out.append(f"{c.id}: its twin {twin.id} has another history, slot or evidence")
        if not twin and not c.supported:
            out.append(f"{c.id}: a contradicted line without its supported twin")
    return out


def evidence_problems(cases: list[JudgeCase], history: callable) -> list[str]:
    out = []
    for c in cases:
        messages = history(c)
        if not any(c.evidence in t for t in texts(messages)):
            out.append(f"{c.id}: evidence {c.evidence[:60]!r} is not in the first {c.upto} messages of {c.file}")
        rendered = render_history(parse_messages(messages))
        if len(rendered) > MAX_HISTORY_CHARS:
            out.append(f"{c.id}: the history renders to {len(rendered)} characters, over {MAX_HISTORY_CHARS}")
    return out


# ------------------------------------------------------------- the set


@pytest.fixture(scope="module")
def cases() -> list[JudgeCase]:
    return load_judge_set()


def test_the_set_loads_with_valid_slots(cases):
    assert cases and all(isinstance(c, JudgeCase) for c in cases)
    assert {c.slot for c in cases} <= set(SLOT_NAMES)
    assert len({c.slot for c in cases}) == len(SLOT_NAMES)  # every slot has lines


def test_each_label_has_enough_lines(cases):
    assert label_problems(cases) == []


def test_the_lines_span_enough_trajectories(cases):
    assert spread_problems(cases) == []


def test_no_line_or_id_repeats(cases):
    assert duplicate_problems(cases) == []


def test_pairs_share_their_history_and_evidence(cases):
    assert pair_problems(cases) == []


@needs_trajectories
def test_every_trajectory_exists(cases):
    missing = sorted({c.file for c in cases if not (TRAJ / c.file).is_file()})
    assert missing == []


@needs_trajectories
def test_every_evidence_is_in_its_history_cut(cases):
    cache: dict[tuple, list] = {}

    def history(c):
        key = (c.file, c.trial, c.upto)
        return cache.setdefault(key, history_of(c))

    assert evidence_problems(cases, history) == []


@needs_trajectories
def test_history_of_cuts_and_returns_new_messages(cases):
    case = next(c for c in cases if c.file.endswith("github_issue.traj.json"))
    first = history_of(case)
    assert len(first) == case.upto and first[0]["role"] == "system"
    first[1]["content"] = "changed"
    assert history_of(case)[1]["content"] != "changed"  # nothing shared between calls
    with pytest.raises(HistoryFormatError, match="cuts at 999"):
        history_of(replace(case, upto=999))


# ------------------------------------------------- the checks can fail


def _case(**kw) -> JudgeCase:
    base = dict(id="x-01s", file="f.json", upto=2, slot="goal", line="- Do a.", supported=True,
                evidence="did a", why="it says so")
    return JudgeCase(**{**base, **kw})


def test_the_checks_catch_a_broken_set():
    few = [_case(id="x-01s"), _case(id="x-01c", supported=False, line="- Do b.")]
    assert label_problems(few) == [f"1 supported lines, fewer than {MIN_PER_LABEL}",
                                   f"1 contradicted lines, fewer than {MIN_PER_LABEL}"]
    assert spread_problems(few) == [f"1 trajectories, fewer than {MIN_TRAJECTORIES}"]
    assert duplicate_problems([_case(id="x-01s"), _case(id="x-02s", line="- do  A.")]) == [
        "x-02s: same line as x-01s"]
    assert pair_problems([_case(id="x-01c", supported=False)]) == [
        "x-01c: a contradicted line without its supported twin"]
    assert pair_problems([_case(), _case(id="x-01c", supported=False, line="- b", evidence="other")]) == [
        "x-01s: its twin x-01c has another history, slot or evidence",
        "x-01c: its twin x-01s has another history, slot or evidence"]
    history = [{"role": "user", "content": "please do a"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]}]
    assert evidence_problems([_case(evidence='{"cmd": "ls"}')], lambda c: history) == []
    assert evidence_problems([_case(evidence="did b")], lambda c: history) == [
        "x-01s: evidence 'did b' is not in the first 2 messages of f.json"]
    long = [{"role": "user", "content": "did a " * 3000}]
    assert evidence_problems([_case()], lambda c: long)[0].startswith("x-01s: the history renders to")


@pytest.mark.parametrize("line, match", [
    ("not json", "judge.jsonl:1: not JSON"),
    ('["a list"]', "is not a JSON object"),
    ('{"id": "x"}', "are not those of a JudgeCase"),
    (json.dumps({**_case().__dict__, "slot": "summary"}), "slot 'summary' is not one of"),
    (json.dumps({**_case().__dict__, "supported": "yes"}), "supported must be a bool"),
    (json.dumps({**_case().__dict__, "evidence": " "}), "must be non-blank strings"),
])
def test_a_bad_line_is_a_config_error_naming_it(tmp_path, line, match):
    path = tmp_path / "judge.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError, match=match):
        load_judge_set(path)


def test_the_committed_set_is_the_default():
    assert SET_PATH.name == "judge_set.jsonl" and SET_PATH.is_file()
