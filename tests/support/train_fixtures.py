"""Fixtures for the drafter-training tests: histories, a scripted target, a tiny drafter.

Everything is built locally in a temp dir: a byte-level BPE tokenizer trained
with ``tokenizers`` (ChatML special tokens and a Qwen3-style chat template
that honours ``enable_thinking``) and a randomly initialised two-layer Qwen3
model.  Nothing is downloaded.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

from sglang.lang.backend.base_backend import BaseBackend
from sglang.lang.chat_template import get_chat_template

from sgl_speccompact.backends.contract import BackendDefaults
from sgl_speccompact.core import prompts
from sgl_speccompact.schema import OPENCLAW_SLOTS

QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Qwen3's behaviour in miniature: the last assistant turn always carries a
# (possibly empty) reasoning block; the generation prompt carries the empty
# block only when thinking is disabled.
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and loop.last -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + m.content + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


def history(i: int) -> list[dict]:
    """A small agent history with a tool call; ``i`` makes it unique."""
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Fix the failing test in src/mod_{i}.py; do not touch setup.cfg."},
        {"role": "assistant", "content": "Running the tests.", "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"cmd": f"pytest tests/test_mod_{i}.py"})}},
        ]},
        {"role": "tool", "tool_call_id": f"c{i}", "name": "bash",
         "content": f"FAILED tests/test_mod_{i}.py::test_add - AssertionError: 3 != {i}"},
        {"role": "assistant", "content": f"The bug is in add() of src/mod_{i}.py."},
    ]


def write_histories(directory: Path, n: int) -> list[Path]:
    """Write ``n`` OpenAI-message JSON files and return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = directory / f"run_{i}.json"
        path.write_text(json.dumps(history(i)))
        paths.append(path)
    return paths


def slot_answer(slot: str, prompt: str) -> str:
    """The scripted target's answer: depends on the slot and the history."""
    mod = re.search(r"src/(mod_\d+)\.py", prompt)
    mod = mod.group(1) if mod else "unknown"
    return f"- {slot} for {mod}: fix add() in src/{mod}.py\n- keep setup.cfg unchanged"


class ScriptedTarget(BackendDefaults, BaseBackend):
    """A target that answers slot requests deterministically and records every prompt.

    ``truncate_slot`` names a slot whose answer is reported as cut at
    ``max_tokens`` (``finish_reason`` ``length``), with a half line appended;
    requests for ``fail_slot`` raise, as a dead server would.
    """

    def __init__(self, model: str = "Qwen/Qwen3-8B", truncate_slot: str | None = None,
                 fail_slot: str | None = None, model_type: str | None = "qwen3"):
        super().__init__()
        self.chat_template = get_chat_template("qwen")
        self.model = model
        self.model_info = {"model_path": model, "model_type": model_type}  # as /get_model_info reports it
        self.truncate_slot = truncate_slot
        self.fail_slot = fail_slot
        self.prompts: list[str] = []
        self.params: list = []
        self._lock = threading.Lock()

    def get_model_name(self):
        return self.model

    def get_chat_template(self):
        return self.chat_template

    def generate(self, s, sampling_params):
        prompt = s.text_
        with self._lock:
            self.prompts.append(prompt)
            self.params.append(sampling_params)
        slot = re.search(r"Generate only the (\w+) slot", prompt).group(1)
        if slot == self.fail_slot:
            raise ConnectionError("target went away")
        text = slot_answer(slot, prompt)
        if slot == self.truncate_slot:
            return text + "\n- a half li", {"finish_reason": {"type": "length", "length": 8}}
        return text, {"finish_reason": {"type": "stop", "matched": 151645}}


def _corpus() -> list[str]:
    texts = [prompts.SUMMARIZER_SYSTEM, prompts.DRAFTER_CONTEXT, prompts.DRAFTER_SLOT_REQUEST]
    texts += [f"{s.name} {s.title} {s.contract} {s.body_format}" for s in OPENCLAW_SLOTS]
    texts += [json.dumps(history(i)) + slot_answer(s.name, f"src/mod_{i}.py") for i in range(4) for s in OPENCLAW_SLOTS]
    return texts * 3


def build_tokenizer(directory: Path):
    """Train a byte-level BPE tokenizer locally and save it as a transformers tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Qwen2/3's split pattern, so token boundaries fall where the real drafter's do.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=800, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"], chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(directory)
    return fast


def build_tiny_drafter(directory: Path) -> Path:
    """A randomly initialised two-layer Qwen3 and its tokenizer, saved in ``directory``."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_tokenizer(directory)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(directory)
    return directory
