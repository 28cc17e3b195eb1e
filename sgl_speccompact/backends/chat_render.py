"""Chat messages to prompt text, exactly as SGLang's ``/v1/chat/completions`` renders them.

The agent layout (:mod:`sgl_speccompact.backends.layout`) needs the bytes the
agent's server built for the agent, so this module reproduces that
rendering with sglang's own code and the target's Hugging Face tokenizer.

Rendering follows ``OpenAIServingChat._apply_jinja_template`` of sglang
0.5.23 for a Jinja template, with sglang's own helpers: messages and tools
are validated by ``ChatCompletionRequest`` and dumped, assistant tool-call
arguments are parsed from JSON strings into objects
(``normalize_assistant_tool_call_arguments``), missing content becomes
``""``, content parts are handled for the template's content format, tool
content lists are flattened (``normalize_tool_content``), tools are passed
as ``tool.model_dump()`` unless ``tool_choice`` is ``"none"``, and
``chat_template_kwargs`` go to ``apply_chat_template``.  The text is then
sent as text; for tokenizers that encode the text back to the same ids
(Qwen's: no BOS is added, ``_probe_prompt_text_round_trip`` holds) the
server builds the same ids as its chat endpoint.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from ..errors import ConfigError, InvalidHistoryError


@functools.cache
def _sglang_chat():
    """sglang's chat request model and message helpers (slow import: torch)."""
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang.srt.entrypoints.openai.serving_chat import (normalize_assistant_tool_call_arguments,
                                                           normalize_tool_content)
    from sglang.srt.parser.jinja_template_utils import (detect_jinja_template_content_format,
                                                        process_content_for_template_format)

    return (ChatCompletionRequest, normalize_assistant_tool_call_arguments, normalize_tool_content,
            detect_jinja_template_content_format, process_content_for_template_format)


def template_inputs(messages: list[dict], tools: list[dict] | None, chat_template: str,
                    tool_choice: Any = None) -> tuple[list[dict], list[dict] | None]:
    """Messages and tools as sglang's chat endpoint hands them to ``apply_chat_template``.

    Raises
    ------
    InvalidHistoryError
        When sglang's ``ChatCompletionRequest`` rejects the messages or tools.
    """
    request_cls, norm_args, norm_tool, detect_format, process_content = _sglang_chat()
    body: dict[str, Any] = {"model": "default", "messages": list(messages)}
    if tools:
        body["tools"] = list(tools)
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    try:
        request = request_cls.model_validate(copy.deepcopy(body))
        dumped = [m.model_dump() for m in request.messages]
        for m in dumped:
            norm_args(m, strict=True)
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        raise InvalidHistoryError(f"messages/tools rejected by the chat endpoint's rules: {exc}",
                                  field="messages") from exc
    content_format = detect_format(chat_template)
    out = []
    for m in copy.deepcopy(dumped):
        if m.get("content") is None:
            m["content"] = ""
        pm = process_content(m, content_format, [], [], [], [])
        pm["content"] = norm_tool(pm["role"], pm.get("content"))
        out.append(pm)
    rendered_tools = None
    if request.tools and request.tool_choice != "none":
        if isinstance(request.tool_choice, str):
            rendered_tools = [t.model_dump() for t in request.tools]
        else:  # a named function: only it is rendered
            name = request.tool_choice.function.name
            rendered_tools = [t.model_dump() for t in request.tools if t.function.name == name] or None
    return out, rendered_tools


def last_assistant_as_user(messages: list[dict]) -> list[dict]:
    """The chat endpoint's rule for a request ending with an assistant turn: it becomes a user turn.

    >>> last_assistant_as_user([{"role": "assistant", "content": "x"}])
    [{'role': 'user', 'content': 'x'}]
    """
    if messages and messages[-1].get("role") == "assistant" and isinstance(messages[-1].get("content"), str):
        return messages[:-1] + [{"role": "user", "content": messages[-1]["content"]}]
    return messages


def render_chat(tokenizer, messages: list[dict], tools: list[dict] | None = None, *,
                add_generation_prompt: bool = True, chat_template_kwargs: dict | None = None,
                tool_choice: Any = None) -> str:
    """The prompt text SGLang's ``/v1/chat/completions`` builds for ``messages``.

    ``add_generation_prompt=True`` is a chat completion request (a final
    assistant message becomes a user message, as the server does);
    ``False`` renders the messages as given.
    """
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise ConfigError("the target tokenizer has no chat template; the agent layout needs one")
    msgs, rendered_tools = template_inputs(messages, tools, template, tool_choice)
    if add_generation_prompt:
        msgs = last_assistant_as_user(msgs)
    return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=add_generation_prompt,
                                         tools=rendered_tools, return_dict=False, **(chat_template_kwargs or {}))


def user_turn_opening(tokenizer, chat_template_kwargs: dict | None = None) -> str:
    """The text a user turn starts with in this template (``<|im_start|>user\\n`` for ChatML)."""
    marker = "\x00slot\x00"
    one = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False,
                                        add_generation_prompt=False, **(chat_template_kwargs or {}))
    return one.split(marker)[0]


def load_chat_tokenizer(source):
    """The target's tokenizer from a path or hub name (local files first), or ``source`` itself.

    Raises
    ------
    ConfigError
        When it cannot be loaded or has no chat template.
    """
    if source is None or not isinstance(source, str):
        return source
    return _load(source)


@functools.lru_cache(maxsize=8)
def _load(source: str):
    from transformers import AutoTokenizer

    try:
        try:
            tok = AutoTokenizer.from_pretrained(source, local_files_only=True)
        except OSError:
            tok = AutoTokenizer.from_pretrained(source)
    except Exception as exc:  # OSError, ValueError, network errors
        raise ConfigError(f"cannot load the target tokenizer {source!r}: {exc}") from exc
    if not getattr(tok, "chat_template", None):
        raise ConfigError(f"tokenizer {source!r} has no chat template")
    return tok
