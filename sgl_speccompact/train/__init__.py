"""Drafter fine-tuning (SpecCompact eq. 1).

Two steps, each a module with a command line:

- :mod:`sgl_speccompact.train.data`: the target model writes every slot of
  every history with the drafter prompt of Figure 5; the result is a
  prompt-completion JSONL dataset split into train and validation by
  trajectory.
- :mod:`sgl_speccompact.train.sft`: LoRA SFT of the drafter on that dataset
  with TRL's ``SFTTrainer`` (loss on completion tokens only).  The output is a
  PEFT adapter that SGLang serves with ``--enable-lora --lora-paths
  drafter=DIR``, optionally also merged full weights.
  Its hyper-parameters (the paper's), their flags and the PEFT and TRL
  configs they make live in :mod:`sgl_speccompact.train.hparams`.

Nothing is imported here, so ``import sgl_speccompact.train.data`` does not
pull in torch, and the SFT module does not pull in sglang.
"""
