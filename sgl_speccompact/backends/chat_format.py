"""Which chat template a served model uses: decided from the model, never from its path.

The programs wrap prompts with an sglang frontend chat template, and Qwen3
models get their assistant turns opened with an empty reasoning block
(thinking off).  Guessing either from the model path goes wrong silently:
a drafter served from ``runs/drafter-lora/merged`` matches no pattern, gets
sglang's ``default`` template with thinking on, and no longer sees its
training format.

So the format comes from what the server says about the model it serves:

1. an explicit template name (``chat_template=``; the launcher's and CLI's
   ``--target-chat-template``/``--drafter-chat-template``) wins;
2. else the model's Hugging Face ``model_type``, which sglang 0.5.23's
   ``/model_info`` (and ``/get_model_info``) reports from the served
   checkpoint's ``config.json``: Qwen3 models use ChatML (sglang's ``qwen``
   template) with thinking turned off; Qwen2-architecture models use ChatML
   when their tokenizer confirms it (distilled models with that architecture
   use other formats);
3. else (a server that does not report it) the model's tokenizer: ChatML
   when ``<|im_start|>`` and ``<|im_end|>`` are single tokens, thinking off
   when ``<think>`` and ``</think>`` are too.

Anything else raises :class:`~sgl_speccompact.errors.ChatTemplateError`,
naming the flag that settles it.

>>> ids = {"<|im_start|>": [1], "<|im_end|>": [2], "<think>": [3], "</think>": [4]}
>>> one = lambda text: len(ids.get(text, [0, 0])) == 1
>>> decide({"model_path": "runs/drafter-lora/merged", "model_type": "qwen3"}, one)
ChatFormat(template='qwen', disable_thinking=True, source="model_type 'qwen3'")
>>> decide({"model_path": "my/llama", "model_type": "llama"}, one, name="llama-3-instruct").template
'llama-3-instruct'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import ChatTemplateError

CHATML_MODEL_TYPES = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")  # ChatML: sglang's "qwen" template
THINKING_MODEL_TYPES = ("qwen3", "qwen3_moe")  # reason in <think> unless told not to


@dataclass(frozen=True)
class ChatFormat:
    """How prompts for one served model are wrapped."""

    template: str  # sglang frontend chat template name (sglang.lang.chat_template)
    disable_thinking: bool  # open assistant turns with an empty <think> block
    source: str  # what decided it, for messages


def decide(model_info: dict, single_token: Callable[[str], bool], *, name: str | None = None,
           disable_thinking: bool | None = None, flag: str = "chat_template") -> ChatFormat:
    """The chat format of the model described by ``model_info``.

    Parameters
    ----------
    model_info
        The server's ``/model_info`` answer (``model_path``, ``model_type``, ...).
    single_token
        ``text -> bool``: whether the server's tokenizer encodes ``text`` as one token.
    name
        Explicit sglang template name; wins over everything the server reports.
    disable_thinking
        Explicit thinking setting; by default off exactly for Qwen3 models.
    flag
        How the caller sets ``name``, quoted in the error.

    Raises
    ------
    ChatTemplateError
        ``name`` is not an sglang template, or the format cannot be decided.
    """
    model_type = model_info.get("model_type")
    if name:
        from sglang.lang.chat_template import chat_template_registry

        if name not in chat_template_registry:
            raise ChatTemplateError(f"unknown chat template {name!r}; one of {sorted(chat_template_registry)}")
        think = disable_thinking if disable_thinking is not None else _thinks(model_type, single_token)
        return ChatFormat(name, think, f"{flag}={name!r}")
    if model_type in THINKING_MODEL_TYPES:  # every Qwen3 checkpoint shares one tokenizer and template
        think = disable_thinking if disable_thinking is not None else True
        return ChatFormat("qwen", think, f"model_type {model_type!r}")
    chatml = single_token("<|im_start|>") and single_token("<|im_end|>")
    if model_type is not None:
        if model_type in CHATML_MODEL_TYPES and chatml:
            think = disable_thinking if disable_thinking is not None else model_type in THINKING_MODEL_TYPES
            return ChatFormat("qwen", think, f"model_type {model_type!r}")
        why = f"model_type {model_type!r}" + ("" if model_type in CHATML_MODEL_TYPES else " has no known template")
    elif chatml:
        think = disable_thinking if disable_thinking is not None else _thinks(None, single_token)
        return ChatFormat("qwen", think, "tokenizer: <|im_start|>/<|im_end|> are single tokens")
    else:
        why = "the server reports no model_type and its tokenizer has no ChatML tokens"
    raise ChatTemplateError(
        f"cannot decide the chat template of {model_info.get('model_path')!r}: {why}; "
        f"set it explicitly ({flag}, e.g. 'qwen' or 'llama-3-instruct')")


def _thinks(model_type: str | None, single_token: Callable[[str], bool]) -> bool:
    """Turn thinking off: a Qwen3 model, or (type unknown) a tokenizer with think tokens."""
    if model_type is not None:
        return model_type in THINKING_MODEL_TYPES
    return single_token("<think>") and single_token("</think>")
