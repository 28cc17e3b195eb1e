"""The emulator's ``/v1/chat/completions``: SGLang's chat rendering, same radix tree.

An agent on an SGLang deployment talks to ``/v1/chat/completions``; the
server renders the messages and tools with the model's chat template
(``OpenAIServingChat._apply_jinja_template``) and runs the prompt ids like a
``/generate`` request, on the same radix cache.  This module does the same
so a test or a benchmark can replay an agent session and then compact it on
the same server:

1. the body is validated by sglang's ``ChatCompletionRequest``;
2. the prompt is rendered by :func:`sgl_speccompact.backends.chat_render.render_chat`
   (sglang's message normalisation, then ``apply_chat_template`` with the
   tools and ``chat_template_kwargs``, generation prompt on) and encoded;
3. the ids go through the emulator's ``/generate`` admission and engine as
   ``input_ids`` (same validation, same radix tree, same ``cached_tokens``);
4. the answer is a ``chat.completion`` object with ``usage`` including
   ``prompt_tokens_details.cached_tokens``.

Not emulated: streaming, ``n > 1``, logprobs, tool-call and reasoning
parsing (the generated text comes back as ``content``; ``tools`` only shape
the prompt, as they do on the server).
"""

from __future__ import annotations

import time
import uuid
import weakref

from ..backends.chat_render import render_chat
from .frontend import BadRequest, error_response

# request field -> sampling_params key (ChatCompletionRequest.to_sampling_params, the subset emulated)
SAMPLING_FIELDS = (("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"),
                   ("stop", "stop"), ("stop_token_ids", "stop_token_ids"), ("ignore_eos", "ignore_eos"),
                   ("skip_special_tokens", "skip_special_tokens"), ("min_tokens", "min_new_tokens"))


def parse_chat(body) -> object:
    """sglang's ``ChatCompletionRequest`` for ``body``; :class:`BadRequest` if invalid or not emulated."""
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    try:
        req = ChatCompletionRequest.model_validate(body)
    except Exception as exc:  # pydantic.ValidationError
        raise BadRequest(error_response(str(exc)), str(exc)) from exc
    if req.stream or (req.n or 1) != 1 or req.logprobs:
        msg = "the emulator's chat endpoint serves non-streaming, n=1, no-logprob requests"
        raise BadRequest(error_response(msg), msg)
    return req


def generate_body(req, body: dict, tokenizer) -> dict:
    """The ``/generate`` body the chat request becomes: rendered prompt ids plus sampling params."""
    tools = body.get("tools") or None
    messages = body["messages"]
    try:
        prompt = render_chat(tokenizer, messages, tools, add_generation_prompt=True,
                             chat_template_kwargs=req.chat_template_kwargs,
                             tool_choice=req.tool_choice if tools else None)
    except Exception as exc:  # template errors are client errors on the server too
        raise BadRequest(error_response(str(exc)), str(exc)) from exc
    ids = prompt_ids(tokenizer, prompt)
    sampling = {"max_new_tokens": req.max_completion_tokens or req.max_tokens}
    for field_name, key in SAMPLING_FIELDS:
        value = getattr(req, field_name, None)
        if value is not None:
            sampling[key] = value
    body = {"input_ids": ids, "sampling_params": {k: v for k, v in sampling.items() if v is not None}}
    if req.lora_path:
        body["lora_path"] = req.lora_path
    return body


MAX_SEGMENTS = 200_000  # segments remembered per tokenizer before the memo starts afresh


class SegmentIds:
    """``encode(prompt, add_special_tokens=False)`` of one tokenizer, each distinct segment encoded once.

    An agent's requests resend its whole conversation, one turn longer each
    time.  Cut where tokenization restarts
    (:func:`~sgl_speccompact.backends.token_ids.segments`, the rule the
    client's token-id cache uses), a prompt's ids are its segments' ids in
    order, so only the new turn is encoded.  The rule is checked on this
    tokenizer first (:func:`~sgl_speccompact.backends.token_ids.concatenates`);
    a tokenizer it does not hold for encodes every prompt whole.
    """

    def __init__(self, tokenizer, max_segments: int = MAX_SEGMENTS):
        from ..backends.token_ids import concatenates

        self._tokenizer, self._max = tokenizer, max_segments
        self._memo: dict[str, tuple[int, ...]] = {}  # segment -> its ids
        self.exact = concatenates(self._whole, self._many, [])  # the cut rule holds for this tokenizer

    def _whole(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False)

    def _many(self, texts: list[str]) -> list[list[int]]:
        return self._tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []

    def __call__(self, prompt: str) -> list[int]:
        from ..backends.token_ids import segments

        if not self.exact:
            return self._whole(prompt)
        parts = segments(prompt)
        memo = self._memo
        new = [p for p in dict.fromkeys(parts) if p not in memo]
        if len(memo) + len(new) > self._max:
            memo.clear()
            new = list(dict.fromkeys(parts))
        memo.update(zip(new, map(tuple, self._many(new))))
        out: list[int] = []
        for part in parts:
            out.extend(memo[part])
        return out


_SEGMENT_IDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # tokenizer -> its SegmentIds


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    """The ids the chat route sends on for a rendered prompt (no special tokens added; :class:`SegmentIds`)."""
    encode = _SEGMENT_IDS.get(tokenizer)
    if encode is None:
        encode = _SEGMENT_IDS[tokenizer] = SegmentIds(tokenizer)
    return encode(prompt)


def chat_response(out: dict, model: str) -> dict:
    """A ``chat.completion`` object from one finished ``/generate`` output."""
    meta = out["meta_info"]
    reason = (meta.get("finish_reason") or {}).get("type")
    prompt, completion = int(meta.get("prompt_tokens") or 0), int(meta.get("completion_tokens") or 0)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": out["text"], "reasoning_content": None,
                        "tool_calls": None},
            "logprobs": None,
            "finish_reason": "length" if reason == "length" else "stop",
            "matched_stop": (meta.get("finish_reason") or {}).get("matched"),
        }],
        "usage": {
            "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": int(meta.get("cached_tokens") or 0)},
        },
    }
