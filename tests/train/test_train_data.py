"""SFT data generation against a scripted SGLang backend on the real interpreter."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.support.train_fixtures import ScriptedTarget, history, slot_answer, write_histories

from sgl_speccompact.errors import BackendError, ConfigError, InvalidHistoryError
from sgl_speccompact.history.messages import parse_messages, render_history
from sgl_speccompact.core.prompts import THINK_OFF, drafter_context, drafter_messages
from sgl_speccompact.schema import OPENCLAW_SLOTS
from sgl_speccompact.train import data
from sgl_speccompact.train.history_files import load_trajectories

SLOT_NAMES = [s.name for s in OPENCLAW_SLOTS]


def _run(tmp_path, n=3, *extra, backend=None):
    hist = tmp_path / "hist"
    write_histories(hist, n)
    backend = backend or ScriptedTarget()
    out = tmp_path / "out"
    summary = data.main([str(hist), "--target-url", "http://unused", "--out", str(out), *extra], backend=backend)
    splits = {s: [json.loads(x) for x in (out / f"{s}.jsonl").read_text().splitlines()] for s in data.SPLITS}
    return summary, splits, backend


def test_one_record_per_history_and_slot_with_figure5_prompt(tmp_path):
    summary, splits, _ = _run(tmp_path, 3, "--val-fraction", "0.34")
    records = splits["train"] + splits["validation"]
    assert len(records) == 6 * 3 and summary.histories == 3
    by_traj = {}
    for r in records:
        assert set(r) == {"trajectory_id", "slot", "incremental", "prompt", "completion"}
        assert r["incremental"] is False  # these histories are too short to cut
        by_traj.setdefault(r["trajectory_id"], []).append(r)
    assert len(by_traj) == 3
    for recs in by_traj.values():
        assert [r["slot"] for r in recs] == SLOT_NAMES
        i = int(recs[0]["trajectory_id"].split("_")[1].split("-")[0])  # run_<i>-<hash>
        rendered = render_history(parse_messages(history(i)))
        for r, slot in zip(recs, OPENCLAW_SLOTS):
            assert r["prompt"] == drafter_messages(rendered, OPENCLAW_SLOTS, slot)
            assert [m["role"] for m in r["prompt"]] == ["system", "user"]
            assert r["completion"] == [{"role": "assistant", "content": slot_answer(slot.name, rendered)}]


def test_split_is_by_trajectory_and_deterministic(tmp_path):
    _, a, _ = _run(tmp_path / "a", 10, "--val-fraction", "0.3", "--seed", "7")
    _, b, _ = _run(tmp_path / "b", 10, "--val-fraction", "0.3", "--seed", "7")
    ids = {s: {r["trajectory_id"] for r in a[s]} for s in data.SPLITS}
    assert not ids["train"] & ids["validation"]
    assert len(ids["validation"]) == 3 and len(ids["train"]) == 7
    assert len(a["validation"]) == 6 * 3
    assert ids == {s: {r["trajectory_id"] for r in b[s]} for s in data.SPLITS}
    picks = {frozenset(data.validation_keys([f"t{i}" for i in range(10)], 0.3, seed)) for seed in range(5)}
    assert len(picks) > 1  # the seed matters


def test_slot_requests_of_one_history_share_the_history_prefix(tmp_path):
    _, _, backend = _run(tmp_path, 2)
    assert len(backend.prompts) == 12
    by_history = {}
    for p in backend.prompts:
        by_history.setdefault("mod_0" if "src/mod_0.py" in p else "mod_1", []).append(p)
    assert sorted(len(v) for v in by_history.values()) == [6, 6]
    for mod, texts in by_history.items():
        i = int(mod[-1])
        shared = os.path.commonprefix(texts)
        context = drafter_context(render_history(parse_messages(history(i))), OPENCLAW_SLOTS)
        # system turn + the whole conversation and schema come before anything slot-specific
        assert shared.startswith("<|im_start|>system\n") and context in shared
        assert all(t.endswith("<|im_start|>assistant\n" + THINK_OFF) for t in texts)
    other = os.path.commonprefix([by_history["mod_0"][0], by_history["mod_1"][0]])
    assert "</conversation>" not in other


def test_requests_are_greedy_and_capped(tmp_path):
    _, _, backend = _run(tmp_path, 1, "--max-tokens", "77")
    assert {(p.temperature, p.max_new_tokens) for p in backend.params} == {(0, 77)}


def test_think_block_follows_the_target_model(tmp_path):
    llama = lambda: ScriptedTarget(model="meta-llama/Llama-3.1-8B-Instruct", model_type="llama")
    _, _, plain = _run(tmp_path / "a", 1, "--chat-template", "llama-3-instruct", backend=llama())
    assert not any(THINK_OFF in p for p in plain.prompts)
    assert all(p.startswith("<|start_header_id|>system") for p in plain.prompts)  # the explicit template
    _, _, forced = _run(tmp_path / "b", 1, "--chat-template", "llama-3-instruct", "--no-think", backend=llama())
    assert all(p.endswith(THINK_OFF) for p in forced.prompts)
    _, _, qwen = _run(tmp_path / "c", 1, "--think", backend=ScriptedTarget())
    assert not any(THINK_OFF in p for p in qwen.prompts)


def test_template_comes_from_the_model_type_not_the_path(tmp_path):
    merged = ScriptedTarget(model="runs/target-merged", model_type="qwen3")
    _, _, target = _run(tmp_path / "a", 1, backend=merged)
    assert target.prompts and all(p.startswith("<|im_start|>system") and p.endswith(THINK_OFF)
                                  for p in target.prompts)
    manifest = json.loads((tmp_path / "a" / "out" / "manifest.json").read_text())
    assert manifest["chat_template"] == "qwen" and manifest["think_off"] is True
    # a Qwen3 path reporting no model_type, with no tokenizer to ask: undecidable, a typed error
    from sgl_speccompact.errors import ChatTemplateError

    with pytest.raises(ChatTemplateError, match="--chat-template"):
        _run(tmp_path / "b", 1, backend=ScriptedTarget(model="Qwen/Qwen3-8B", model_type=None))
    with pytest.raises(ChatTemplateError, match="--chat-template"):
        _run(tmp_path / "c", 1, backend=ScriptedTarget(model="meta-llama/Llama-3.1-8B", model_type="llama"))


def test_truncated_completion_loses_its_cut_line(tmp_path):
    summary, splits, _ = _run(tmp_path, 2, backend=ScriptedTarget(truncate_slot="progress"))
    progress = [r for s in splits.values() for r in s if r["slot"] == "progress"]
    assert len(progress) == 2 and summary.truncated == 2
    assert all("half li" not in r["completion"][0]["content"] for r in progress)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["summary"]["truncated"] == 2 and manifest["think_off"] is True


def test_a_failed_target_request_is_an_error(tmp_path):
    with pytest.warns(UserWarning), pytest.raises(BackendError, match="key_decisions"):
        _run(tmp_path, 1, backend=ScriptedTarget(fail_slot="key_decisions"))


def test_clean_completion_strips_reasoning():
    assert data.clean_completion("<think>\nplan\n</think>\n\n- a\n- b\n", truncated=False) == "- a\n- b"


def test_directories_skip_non_histories_but_named_files_must_be_histories(tmp_path):
    write_histories(tmp_path, 1)
    (tmp_path / "notes.json").write_text(json.dumps({"not": "a history"}))
    trajectories, skipped = load_trajectories([tmp_path])
    assert len(trajectories) == 1 and len(skipped) == 1 and "notes.json" in skipped[0]
    with pytest.raises(InvalidHistoryError):
        load_trajectories([tmp_path / "notes.json"])
    with pytest.raises(ConfigError):
        load_trajectories([tmp_path / "missing.json"])


def test_same_file_twice_is_one_trajectory(tmp_path):
    (path,) = write_histories(tmp_path / "a", 1)
    copy = tmp_path / "b" / path.name
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    trajectories, _ = load_trajectories([path, copy])
    assert len(trajectories) == 1


def test_validation_fraction_is_checked():
    with pytest.raises(ConfigError):
        data.validation_keys(["a", "b"], 1.0, 0)
    assert data.validation_keys(["a", "b"], 0.0, 0) == set()


SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "trajectories"


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"real trajectories not found at {SHARED}")
def test_real_trajectories_keep_sibling_trials_on_one_side(tmp_path):
    out = tmp_path / "out"
    summary = data.main([str(SHARED), "--target-url", "http://unused", "--out", str(out), "--val-fraction", "0.5"],
                        backend=ScriptedTarget())
    records = [json.loads(x) for s in data.SPLITS for x in (out / f"{s}.jsonl").read_text().splitlines()]
    assert len(records) == 6 * summary.histories + summary.incremental and summary.histories > 1
    assert summary.incremental > 0 and summary.incremental % 6 == 0  # the default share, every slot
    assert any("tasks.json" in s for s in summary.skipped)  # a task list is not a history
    sides = {}
    for s in data.SPLITS:
        for x in (out / f"{s}.jsonl").read_text().splitlines():
            tid = json.loads(x)["trajectory_id"]
            sides.setdefault(tid.rsplit("-t", 1)[0] if "tau2" in tid else tid, set()).add(s)
    assert all(len(v) == 1 for v in sides.values())
    assert summary.trajectories["train"] and summary.trajectories["validation"]


def long_history(i: int) -> list[dict]:
    """``history(i)`` plus a later exchange, so it can be cut in two."""
    return history(i) + [{"role": "user", "content": f"Now also document src/mod_{i}.py in docs/mod_{i}.md."},
                         {"role": "assistant", "content": f"Wrote docs/mod_{i}.md."}]


def test_incremental_examples_carry_the_summary_of_the_earlier_part(tmp_path):
    from sgl_speccompact.core.prompts import KEEP_PREVIOUS, assemble
    from sgl_speccompact.train.incremental import cut_point, split_history

    hist = tmp_path / "hist"
    hist.mkdir()
    for i in range(4):
        (hist / f"run_{i}.json").write_text(json.dumps(long_history(i)))
    backend = ScriptedTarget()
    out = tmp_path / "out"
    summary = data.main([str(hist), "--target-url", "http://unused", "--out", str(out), "--val-fraction", "0",
                         "--incremental-fraction", "0.5"], backend=backend)
    records = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
    inc = [r for r in records if r["incremental"]]
    assert summary.incremental == len(inc) == 6 * 2 and len(records) == 6 * 4 + 6 * 2
    assert len(backend.prompts) == 6 * 4 + 6 * 2 * 2  # plus the earlier parts' slots, not kept as examples
    for r in inc:
        i = int(r["trajectory_id"].split("_")[1].split("-")[0])
        messages = long_history(i)
        earlier, later = split_history(messages, cut_point(messages))
        assert earlier[-1]["role"] == "tool" and [m["role"] for m in later] == ["system", "assistant", "user", "assistant"]
        before = render_history(parse_messages(earlier))
        previous = assemble(OPENCLAW_SLOTS, {s.name: slot_answer(s.name, before).split("\n") for s in OPENCLAW_SLOTS})
        slot = next(s for s in OPENCLAW_SLOTS if s.name == r["slot"])
        assert r["prompt"] == drafter_messages(render_history(parse_messages(later)), OPENCLAW_SLOTS, slot, previous)
        assert r["prompt"][1]["content"].endswith(KEEP_PREVIOUS) and "<previous_summary>" in r["prompt"][1]["content"]
    picked = {r["trajectory_id"] for r in inc}
    rerun = data.main([str(hist), "--target-url", "http://unused", "--out", str(tmp_path / "again"),
                       "--val-fraction", "0", "--incremental-fraction", "0.5"], backend=ScriptedTarget())
    again = [json.loads(x) for x in (tmp_path / "again" / "train.jsonl").read_text().splitlines()]
    assert rerun.incremental == 12 and {r["trajectory_id"] for r in again if r["incremental"]} == picked
    with pytest.raises(ConfigError):
        data.main([str(hist), "--target-url", "http://unused", "--out", str(tmp_path / "bad"),
                   "--incremental-fraction", "1.5"], backend=ScriptedTarget())
