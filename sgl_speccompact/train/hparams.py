"""The drafter's SFT hyper-parameters, their command-line flags, and the configs they make.

Hyper-parameters are the paper's ("Experiments"): LoRA on all linear layers,
rank 16, alpha 32, no dropout; AdamW, lr 1e-4, cosine decay, 5% warm-up, no
weight decay, clipping at 1.0; batch 2 x 16 accumulation; bf16; 16,384
tokens; seed 42; one epoch.  Each is a field of :class:`HyperParams` and a
command-line flag built from it.

:func:`lora_config` and :func:`sft_config` turn them into PEFT's
``LoraConfig`` and TRL's ``SFTConfig``; :mod:`sgl_speccompact.train.sft`
trains with those.
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..errors import ConfigError


# Checked against sglang 0.5.23 (sglang/srt/lora/utils.py): get_normalized_target_modules
# maps q/k/v_proj -> qkv_proj and gate/up_proj -> gate_up_proj, and the server accepts
# only normalized names in _KNOWN_LORA_TARGET_MODULES, which holds qkv_proj, o_proj,
# gate_up_proj and down_proj.  So every linear projection of a Qwen3 layer can carry an
# adapter SGLang serves; nothing else is adapted (the paper adapts linear layers only).
SGLANG_LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PRECISIONS = ("auto", "bf16", "fp32")


def _hp(default, help: str, **extra):
    """A hyper-parameter: its default, and its help text with the unit."""
    return field(default=default, metadata={"help": help, **extra})


@dataclass(frozen=True)
class HyperParams:
    """SFT hyper-parameters; defaults are the paper's.  Each is a CLI flag."""

    lora_rank: int = _hp(16, "LoRA rank r (inner dimension of each adapter)")
    lora_alpha: int = _hp(32, "LoRA scale numerator; updates are scaled by alpha / rank")
    lora_dropout: float = _hp(0.0, "dropout probability on the adapter input")
    target_modules: str = _hp(",".join(SGLANG_LORA_MODULES), "comma-separated layer names to adapt")
    learning_rate: float = _hp(1e-4, "peak AdamW learning rate (per optimizer step)")
    lr_scheduler: str = _hp("cosine", "decay after warm-up (a transformers SchedulerType)")
    warmup: float = _hp(0.05, "linear warm-up, as a fraction of all optimizer steps, in [0, 1)")
    weight_decay: float = _hp(0.0, "AdamW decoupled weight decay (coefficient)")
    max_grad_norm: float = _hp(1.0, "gradient clipping threshold (global L2 norm)")
    batch_size: int = _hp(2, "sequences per device per forward pass")
    grad_accum: int = _hp(16, "forward passes accumulated per optimizer step")
    max_length: int = _hp(16384, "longest prompt+completion kept (drafter tokens); longer ones are dropped")
    epochs: float = _hp(1.0, "passes over the training set")
    max_steps: int = _hp(-1, "optimizer steps to run; -1 derives them from --epochs")
    seed: int = _hp(42, "seed of adapter initialisation and data order")
    precision: str = _hp("auto", "auto = bf16 where the GPU supports it, else fp32", choices=PRECISIONS)
    gradient_checkpointing: bool = _hp(True, "recompute activations in backward (memory at 16k tokens)")
    enable_thinking: bool = _hp(False, "chat-template enable_thinking (Qwen3); off matches inference")
    logging_steps: int = _hp(10, "optimizer steps between loss logs")
    save_steps: int = _hp(500, "optimizer steps between checkpoints in OUT/checkpoints")

    def __post_init__(self):
        positive = ("lora_rank", "batch_size", "grad_accum", "max_length", "logging_steps", "save_steps")
        bad = [n for n in positive if getattr(self, n) < 1]
        if bad:
            raise ConfigError(f"must be >= 1: {bad}")
        if not 0.0 <= self.warmup < 1.0:
            raise ConfigError(f"warmup is a fraction in [0, 1), got {self.warmup}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        unknown = set(self.modules()) - set(SGLANG_LORA_MODULES)
        if unknown or not self.modules():
            raise ConfigError(f"target modules must be a non-empty subset of {SGLANG_LORA_MODULES} "
                              f"(what SGLang 0.5.23 serves); got {sorted(unknown) or 'none'}")

    def modules(self) -> list[str]:
        """``target_modules`` as a list."""
        return [m.strip() for m in self.target_modules.split(",") if m.strip()]


# ---------------------------------------------------------------- command-line plumbing


def add_hparam_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add one ``--flag`` per :class:`HyperParams` field, default and help from the field."""
    hints = typing.get_type_hints(HyperParams)
    for f in fields(HyperParams):
        flag, kind = "--" + f.name.replace("_", "-"), hints[f.name]
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=f.metadata["help"])
        else:
            parser.add_argument(flag, type=kind, default=f.default, help=f.metadata["help"],
                                choices=f.metadata.get("choices"))


def hparams_from_args(args: argparse.Namespace) -> HyperParams:
    """The :class:`HyperParams` a parsed command line asks for."""
    return HyperParams(**{f.name: getattr(args, f.name) for f in fields(HyperParams)})


# ---------------------------------------------------------------- configuration


def resolve_device(precision: str) -> tuple[bool, bool]:
    """``(use_cpu, bf16)`` for this machine: bf16 only on a GPU that supports it."""
    import torch

    cuda = torch.cuda.is_available()
    bf16_ok = cuda and torch.cuda.is_bf16_supported()
    if precision == "bf16" and not bf16_ok:
        raise ConfigError("precision bf16 needs a CUDA GPU with bf16 support; use auto or fp32")
    return not cuda, precision == "bf16" or (precision == "auto" and bf16_ok)


def lora_config(hp: HyperParams):
    """PEFT ``LoraConfig`` for the drafter."""
    from peft import LoraConfig

    return LoraConfig(
        r=hp.lora_rank, lora_alpha=hp.lora_alpha, lora_dropout=hp.lora_dropout,
        target_modules=hp.modules(), bias="none", task_type="CAUSAL_LM",
    )


def sft_config(hp: HyperParams, out_dir: str | Path, *, use_cpu: bool, bf16: bool):
    """TRL ``SFTConfig`` for the drafter run."""
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(Path(out_dir) / "checkpoints"),
        per_device_train_batch_size=hp.batch_size,
        per_device_eval_batch_size=hp.batch_size,
        gradient_accumulation_steps=hp.grad_accum,
        optim="adamw_torch",
        learning_rate=hp.learning_rate,
        lr_scheduler_type=hp.lr_scheduler,
        warmup_steps=hp.warmup,  # transformers 5: a float in [0, 1) is a ratio
        weight_decay=hp.weight_decay,
        max_grad_norm=hp.max_grad_norm,
        num_train_epochs=hp.epochs,
        max_steps=hp.max_steps,
        seed=hp.seed,
        data_seed=hp.seed,
        bf16=bf16,
        use_cpu=use_cpu,
        completion_only_loss=True,
        max_length=None,  # over-long examples are dropped after tokenization, never truncated
        packing=False,
        gradient_checkpointing=hp.gradient_checkpointing,
        logging_steps=hp.logging_steps,
        save_strategy="steps",
        save_steps=hp.save_steps,
        save_total_limit=2,
        eval_strategy="no",
        include_num_input_tokens_seen="non_padding",
        report_to="none",
        disable_tqdm=False,
    )
