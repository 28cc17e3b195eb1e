"""LoRA SFT of the drafter on target-written slots (SpecCompact eq. 1).

The loss is the cross-entropy of the target's slot content y_s given the
history and the slot instruction, over completion tokens only.  TRL does all
of it: ``SFTTrainer`` on a conversational prompt-completion dataset with
``completion_only_loss=True`` renders prompt and prompt+completion with the
drafter's chat template and masks the prompt tokens (labels -100).

Hyper-parameters are the paper's; :mod:`sgl_speccompact.train.hparams`
holds them (:class:`HyperParams`), their flags and the PEFT and TRL configs
they make.

Qwen3 drafters are trained with ``enable_thinking=False`` passed to the chat
template, so the empty ``<think>`` block is part of the (masked) prompt: that
is exactly the text the drafter sees at inference, where the programs open
the assistant turn with ``prompts.THINK_OFF``.

Examples longer than ``max_length`` are dropped, not truncated: TRL keeps the
start of a sequence, which would cut the completion (it comes last) and
teach the drafter to stop mid-slot.

Output: ``OUT/`` is a PEFT adapter (``adapter_config.json``,
``adapter_model.safetensors``, tokenizer) that SGLang serves with
``--enable-lora --lora-paths drafter=OUT``; ``--merge`` also writes full
merged weights and the tokenizer to ``OUT/merged``.

Command line::

    python -m sgl_speccompact.train.sft --model PATH --data DIR --out DIR [--merge]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ConfigError
from .hparams import HyperParams, add_hparam_arguments, hparams_from_args, lora_config, resolve_device, sft_config


@dataclass
class TrainSummary:
    """What one run did (printed, and written to ``OUT/train_summary.json``)."""

    examples: int  # training examples used
    dropped: int  # examples longer than max_length or without completion tokens
    eval_examples: int  # validation examples (0 when there is no validation split)
    tokens: int  # prompt+completion tokens in the training set (one epoch)
    completion_tokens: int  # tokens in the loss (one epoch)
    tokens_seen: int  # non-padding tokens actually trained on (all epochs / max_steps)
    steps: int  # optimizer steps
    first_loss: float | None  # first logged training loss (nats per completion token)
    final_loss: float | None  # last logged training loss (nats per completion token)
    mean_loss: float | None  # mean training loss over the run
    eval_loss: float | None  # validation loss after training
    adapter: str  # PEFT adapter directory
    merged: str | None  # merged full weights, with --merge


# ---------------------------------------------------------------- data


def read_records(path: str | Path) -> list[dict]:
    """Records of a JSONL file written by :mod:`sgl_speccompact.train.data`."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_split(data_dir: str | Path, split: str, enable_thinking: bool = False):
    """``DIR/<split>.jsonl`` as a conversational prompt-completion ``Dataset`` (None if absent/empty)."""
    from datasets import Dataset

    path = Path(data_dir) / f"{split}.jsonl"
    rows = read_records(path) if path.is_file() else []
    if not rows:
        return None
    kwargs = {"enable_thinking": enable_thinking}  # read by TRL per example
    return Dataset.from_list(
        [{"prompt": r["prompt"], "completion": r["completion"], "chat_template_kwargs": kwargs} for r in rows]
    )


def _keep_trainable(dataset, max_length: int):
    """Drop tokenized examples that are too long or have no completion token; count tokens."""
    import numpy as np

    sizes = dataset.map(
        lambda b: {"n": [len(x) for x in b["input_ids"]], "c": [len(x) - x.count(-100) for x in b["labels"]]},
        batched=True, remove_columns=dataset.column_names,
    )
    n, c = np.asarray(sizes["n"], dtype=np.int64), np.asarray(sizes["c"], dtype=np.int64)
    keep = np.flatnonzero((n <= max_length) & (c > 0))
    kept = dataset if len(keep) == len(n) else dataset.select(keep)
    return kept, {"dropped": len(n) - len(keep), "tokens": int(n[keep].sum()), "completion_tokens": int(c[keep].sum())}


# ---------------------------------------------------------------- training


def build_trainer(model_path: str, data_dir: str | Path, out_dir: str | Path, hp: HyperParams):
    """An ``SFTTrainer`` ready to train, and the token counts of its training set.

    Parameters
    ----------
    model_path : str
        The drafter base model (a local directory or a hub id).
    data_dir : str or Path
        Directory with ``train.jsonl`` (and optionally ``validation.jsonl``).
    out_dir : str or Path
        Where the adapter goes; checkpoints go to ``out_dir/checkpoints``.
    hp : HyperParams
        Hyper-parameters.

    Returns
    -------
    trainer : trl.SFTTrainer
    counts : dict
        ``dropped``, ``tokens`` and ``completion_tokens`` of the training set.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    use_cpu, bf16 = resolve_device(hp.precision)
    train_set = load_split(data_dir, "train", hp.enable_thinking)
    if train_set is None:
        raise ConfigError(f"no training examples in {Path(data_dir) / 'train.jsonl'}")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16 if bf16 else torch.float32)
    trainer = SFTTrainer(
        model=model,
        args=sft_config(hp, out_dir, use_cpu=use_cpu, bf16=bf16),
        train_dataset=train_set,
        eval_dataset=load_split(data_dir, "validation", hp.enable_thinking),
        processing_class=tokenizer,
        peft_config=lora_config(hp),
    )
    trainer.train_dataset, counts = _keep_trainable(trainer.train_dataset, hp.max_length)
    if len(trainer.train_dataset) == 0:
        raise ConfigError(f"no training example fits max_length={hp.max_length} tokens with a completion left")
    if trainer.eval_dataset is not None:
        trainer.eval_dataset, _ = _keep_trainable(trainer.eval_dataset, hp.max_length)
    return trainer, counts


def merge_adapter(model_path: str, adapter_dir: str | Path, out_dir: str | Path) -> Path:
    """Write base + adapter as full weights (and the tokenizer) to ``out_dir``.

    The base is reloaded in its stored dtype, so the merged model has the
    base model's precision and no PEFT wrappers.
    """
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(model_path, dtype="auto")
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    out = Path(out_dir)
    merged.save_pretrained(out)
    AutoTokenizer.from_pretrained(adapter_dir).save_pretrained(out)
    return out


def _logged_losses(log_history: list[dict]) -> tuple[float | None, float | None]:
    """First and last logged training loss."""
    losses = [float(e["loss"]) for e in log_history if "loss" in e]
    return (losses[0], losses[-1]) if losses else (None, None)


def train(model_path: str, data_dir: str | Path, out_dir: str | Path, hp: HyperParams | None = None,
          *, merge: bool = False) -> TrainSummary:
    """Fine-tune the drafter and save the adapter (and merged weights) under ``out_dir``.

    Returns
    -------
    TrainSummary
        Examples, tokens, steps and losses of the run.
    """
    hp = hp or HyperParams()
    trainer, counts = build_trainer(model_path, data_dir, out_dir, hp)
    result = trainer.train()
    trainer.save_model(str(out_dir))
    eval_loss = trainer.evaluate()["eval_loss"] if trainer.eval_dataset else None
    merged = merge_adapter(model_path, out_dir, Path(out_dir) / "merged") if merge else None
    first_loss, final_loss = _logged_losses(trainer.state.log_history)
    summary = TrainSummary(
        examples=len(trainer.train_dataset), dropped=counts["dropped"],
        eval_examples=len(trainer.eval_dataset) if trainer.eval_dataset else 0,
        tokens=counts["tokens"], completion_tokens=counts["completion_tokens"],
        tokens_seen=int(trainer.state.num_input_tokens_seen), steps=trainer.state.global_step,
        first_loss=first_loss, final_loss=final_loss, mean_loss=result.training_loss,
        eval_loss=eval_loss, adapter=str(out_dir), merged=str(merged) if merged else None,
    )
    Path(out_dir, "train_summary.json").write_text(
        json.dumps({"summary": asdict(summary), "hyperparams": asdict(hp), "model": model_path}, indent=2) + "\n"
    )
    return summary


# ---------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sgl_speccompact.train.sft",
        description="LoRA SFT of the SpecCompact drafter on target-generated slot data.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", required=True, help="drafter base model (local directory or hub id)")
    p.add_argument("--data", required=True, help="directory with train.jsonl [and validation.jsonl]")
    p.add_argument("--out", required=True, help="adapter output directory")
    p.add_argument("--merge", action="store_true", help="also write merged full weights to OUT/merged")
    add_hparam_arguments(p.add_argument_group("hyper-parameters (defaults: the SpecCompact paper)"))
    return p


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def main(argv: list[str] | None = None) -> TrainSummary:
    """Command-line entry point."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        hp = hparams_from_args(args)
    except ConfigError as exc:
        parser.error(str(exc))
    s = train(args.model, args.data, args.out, hp, merge=args.merge)
    print(
        f"[sft] {s.examples} examples ({s.dropped} dropped), {s.tokens} tokens "
        f"({s.completion_tokens} in the loss), {s.tokens_seen} tokens seen, {s.steps} steps\n"
        f"[sft] loss {_fmt(s.first_loss)} -> final {_fmt(s.final_loss)} (mean {_fmt(s.mean_loss)}), "
        f"validation loss {_fmt(s.eval_loss)} on {s.eval_examples} examples\n"
        f"[sft] adapter: {s.adapter}  (serve: --enable-lora --lora-paths drafter={s.adapter})"
        + (f"\n[sft] merged weights: {s.merged}" if s.merged else "")
    )
    return s


if __name__ == "__main__":
    main()
