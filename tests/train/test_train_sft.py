"""LoRA SFT of a tiny random Qwen3 drafter on scripted slot data (CPU, no downloads)."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest
import torch
from tests.support.train_fixtures import ScriptedTarget, build_tiny_drafter, write_histories

from sgl_speccompact.errors import ConfigError
from sgl_speccompact.train import data, hparams, sft

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Small and fast for the test; everything else keeps the paper's defaults.
FAST = ["--learning-rate", "3e-3", "--max-steps", "6", "--grad-accum", "1", "--logging-steps", "1",
        "--no-gradient-checkpointing"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A tiny drafter and a 3-history dataset (2 train / 1 validation trajectories)."""
    root = tmp_path_factory.mktemp("sft")
    write_histories(root / "hist", 3)
    data.main([str(root / "hist"), "--target-url", "http://unused", "--out", str(root / "data"),
               "--val-fraction", "0.34"], backend=ScriptedTarget())
    build_tiny_drafter(root / "drafter")
    return root


@pytest.fixture(scope="module")
def trained(workdir):
    """One short training run with --merge, shared by the tests that inspect its outputs."""
    out = workdir / "adapter"
    summary = sft.main(["--model", str(workdir / "drafter"), "--data", str(workdir / "data"),
                        "--out", str(out), "--merge", *FAST])
    return workdir, out, summary


def _hp(**kw):
    return replace(hparams.HyperParams(), batch_size=2, grad_accum=1, max_steps=1, gradient_checkpointing=False, **kw)


def test_defaults_are_the_papers_and_every_field_is_a_flag():
    hp = hparams.HyperParams()
    assert (hp.lora_rank, hp.lora_alpha, hp.lora_dropout) == (16, 32, 0.0)
    assert (hp.learning_rate, hp.lr_scheduler, hp.warmup, hp.weight_decay, hp.max_grad_norm) == (
        1e-4, "cosine", 0.05, 0.0, 1.0)
    assert (hp.batch_size, hp.grad_accum, hp.max_length, hp.seed, hp.epochs) == (2, 16, 16384, 42, 1.0)
    assert set(hp.modules()) == set(PROJECTIONS)
    args = sft._parser().parse_args(["--model", "m", "--data", "d", "--out", "o"])
    assert hparams.hparams_from_args(args) == hp
    flags = sft._parser().format_help()
    assert all("--" + f.name.replace("_", "-") in flags for f in fields(hparams.HyperParams))
    args = sft._parser().parse_args(["--model", "m", "--data", "d", "--out", "o", "--lora-rank", "8",
                                     "--no-gradient-checkpointing"])
    assert hparams.hparams_from_args(args) == replace(hp, lora_rank=8, gradient_checkpointing=False)


def test_trainer_and_lora_configs_carry_the_hyperparameters(tmp_path):
    cfg = hparams.sft_config(hparams.HyperParams(), tmp_path, use_cpu=True, bf16=False)
    assert (cfg.learning_rate, cfg.lr_scheduler_type, cfg.warmup_steps, cfg.weight_decay) == (1e-4, "cosine", 0.05, 0.0)
    assert (cfg.max_grad_norm, cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps) == (1.0, 2, 16)
    assert (cfg.num_train_epochs, cfg.seed, cfg.completion_only_loss, cfg.bf16, cfg.use_cpu) == (1.0, 42, True, False, True)
    assert cfg.optim == "adamw_torch"
    lora = hparams.lora_config(hparams.HyperParams())
    assert (lora.r, lora.lora_alpha, lora.lora_dropout, set(lora.target_modules)) == (16, 32, 0.0, set(PROJECTIONS))


@pytest.mark.parametrize("bad", [{"target_modules": "q_proj,lm_head"}, {"warmup": 1.0}, {"lora_rank": 0},
                                 {"precision": "fp16"}])
def test_invalid_hyperparameters_are_refused(bad):
    with pytest.raises(ConfigError):
        hparams.HyperParams(**bad)


def test_loss_mask_is_exactly_the_completion(workdir):
    trainer, _ = sft.build_trainer(str(workdir / "drafter"), workdir / "data", workdir / "mask", _hp())
    tok = trainer.processing_class
    records = [json.loads(x) for x in (workdir / "data" / "train.jsonl").read_text().splitlines()][:2]
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    for row, rec in enumerate(records):
        prompt = tok.apply_chat_template(rec["prompt"], add_generation_prompt=True, enable_thinking=False,
                                         tokenize=True, return_dict=True)["input_ids"]
        full = tok.apply_chat_template(rec["prompt"] + rec["completion"], enable_thinking=False,
                                       tokenize=True, return_dict=True)["input_ids"]
        ids, labels = batch["input_ids"][row].tolist(), batch["labels"][row].tolist()
        assert ids[: len(full)] == full and full[: len(prompt)] == prompt
        assert all(x == -100 for x in labels[: len(prompt)])  # whole prompt, incl. the empty <think> block
        assert labels[len(prompt): len(full)] == full[len(prompt):]  # every completion token
        assert all(x == -100 for x in labels[len(full):])  # padding
        assert tok.decode(full[len(prompt):]) == rec["completion"][0]["content"] + "<|im_end|>\n"


def test_over_long_examples_are_dropped_not_truncated(workdir):
    drafter, dataset = str(workdir / "drafter"), workdir / "data"
    full, _ = sft.build_trainer(drafter, dataset, workdir / "long", _hp())
    lengths = sorted(len(x) for x in full.train_dataset["input_ids"])
    cut = lengths[len(lengths) // 2]
    trainer, counts = sft.build_trainer(drafter, dataset, workdir / "long", _hp(max_length=cut))
    assert counts["dropped"] == sum(n > cut for n in lengths) > 0
    assert len(trainer.train_dataset) == sum(n <= cut for n in lengths)
    assert counts["tokens"] == sum(n for n in lengths if n <= cut)
    with pytest.raises(ConfigError):
        sft.build_trainer(drafter, dataset, workdir / "long", _hp(max_length=lengths[0] - 1))


@pytest.mark.slow
def test_training_lowers_the_loss(trained):
    _, out, s = trained
    assert s.steps == 6 and s.examples == 12 and s.eval_examples == 6
    assert s.first_loss is not None and s.final_loss < s.first_loss
    assert 0 < s.completion_tokens < s.tokens and s.tokens_seen > 0 and s.eval_loss is not None
    saved = json.loads((out / "train_summary.json").read_text())
    assert saved["summary"]["final_loss"] == s.final_loss and saved["hyperparams"]["lora_rank"] == 16


@pytest.mark.slow
def test_adapter_loads_with_peft_on_every_projection_at_rank_16(trained):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    workdir, out, _ = trained
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert (cfg["peft_type"], cfg["r"], cfg["lora_alpha"], set(cfg["target_modules"])) == (
        "LORA", 16, 32, set(PROJECTIONS))
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(workdir / "drafter"), out)
    adapted = {name.rsplit(".", 1)[-1]: m for name, m in model.named_modules() if hasattr(m, "lora_A")}
    assert set(adapted) == set(PROJECTIONS)
    n_layers = model.config.num_hidden_layers
    lora_layers = [m for m in model.modules() if hasattr(m, "lora_A")]
    assert len(lora_layers) == n_layers * len(PROJECTIONS)
    assert all(m.r["default"] == 16 for m in lora_layers)
    assert any(m.lora_B["default"].weight.abs().sum() > 0 for m in lora_layers)  # training moved B off zero


@pytest.mark.slow
def test_adapter_is_readable_by_sglang_lora_config(trained):
    from sglang.srt.lora.lora_config import LoRAConfig
    from sglang.srt.lora.utils import get_normalized_target_modules

    _, out, _ = trained
    cfg = LoRAConfig(str(out))
    assert (cfg.r, cfg.lora_alpha) == (16, 32)
    assert get_normalized_target_modules(cfg.target_modules) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}


@pytest.mark.slow
def test_merged_weights_give_the_logits_of_base_plus_adapter(trained):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    workdir, out, _ = trained
    ids = AutoTokenizer.from_pretrained(out / "merged")("- goal: fix add() in src/mod_1.py", return_tensors="pt")
    with torch.no_grad():
        merged = AutoModelForCausalLM.from_pretrained(out / "merged")(**ids).logits
        base = AutoModelForCausalLM.from_pretrained(workdir / "drafter")
        plain = base(**ids).logits
        adapted = PeftModel.from_pretrained(base, out)(**ids).logits
    assert torch.allclose(merged, adapted, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(merged, plain, atol=1e-5, rtol=1e-4)
