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

The template is always the operator's (the target tokenizer's own, or one
configured for the service); a request never brings template code.  Its
``chat_template_kwargs`` are an allow-list of plain values
(:data:`TEMPLATE_KWARGS`): ``apply_chat_template`` would otherwise take a
``chat_template`` string, ``tokenize``, ``messages`` and other controls from
them.  A template that raises, reads an undefined value or does not compile
is a typed 4xx error, not a 500.
"""

from __future__ import annotations

import functools
from typing import Any

from ..errors import ChatTemplateError, ConfigError, InvalidHistoryError, InvalidRequestError

# chat_template_kwargs a request may carry: name -> accepted values (a type, or a tuple of
# literal values).  Plain values that common chat templates read; nothing here is template code.
TEMPLATE_KWARGS: dict[str, type | tuple] = {
    "enable_thinking": bool,  # Qwen3 and similar templates: reasoning block on or off
    "thinking": bool,  # DeepSeek-V3.1's template: reasoning on or off
    "reasoning_effort": ("low", "medium", "high"),  # gpt-oss's template: reasoning effort
}


def check_template_kwargs(kwargs: Any, field: str = "chat_template_kwargs") -> dict:
    """``kwargs`` as a dict when every entry is allowed by :data:`TEMPLATE_KWARGS`.

    >>> check_template_kwargs({"enable_thinking": False})
    {'enable_thinking': False}
    >>> check_template_kwargs({"chat_template": "{{ 1 }}"})
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.InvalidRequestError: chat_template_kwargs.chat_template: is not allowed; \
allowed: enable_thinking (bool), thinking (bool), reasoning_effort ('low' | 'medium' | 'high')
    """
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise InvalidRequestError("must be an object", field=field)
    for key, value in kwargs.items():
        allowed = TEMPLATE_KWARGS.get(key)
        if allowed is None:
            raise InvalidRequestError(f"is not allowed; allowed: {_allowed_text()}", field=f"{field}.{key}")
        ok = type(value) is allowed if isinstance(allowed, type) else (isinstance(value, str) and value in allowed)
        if not ok:
            raise InvalidRequestError(f"must be {_one(allowed)}", field=f"{field}.{key}")
    return dict(kwargs)


def _one(allowed: type | tuple) -> str:
    return allowed.__name__ if isinstance(allowed, type) else " | ".join(repr(v) for v in allowed)


def _allowed_text() -> str:
    return ", ".join(f"{k} ({_one(v)})" for k, v in TEMPLATE_KWARGS.items())


def apply_template(tokenizer, messages: list[dict], **kwargs) -> str:
    """``tokenizer.apply_chat_template(..., tokenize=False)`` with template errors made typed.

    A template that raises (``raise_exception``) or reads an undefined
    value rejects the messages (:class:`InvalidHistoryError` on
    ``messages``); one that does not compile is a :class:`ChatTemplateError`.
    """
    import jinja2

    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"the chat template does not compile: {exc}", field="chat_template") from None
    except jinja2.TemplateError as exc:  # raise_exception(), undefined values
        raise InvalidHistoryError(f"the chat template rejected the messages: {exc}", field="messages") from None
    if not isinstance(text, str):
        raise ChatTemplateError("the chat template did not render text", field="chat_template")
    return text


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


@functools.lru_cache(maxsize=16)
def content_format_of(chat_template: str) -> str:
    """sglang's content format for a template (``"string"`` or ``"openai"``), parsed once per template."""
    return _sglang_chat()[3](chat_template)


def template_inputs(messages: list[dict], tools: list[dict] | None, chat_template: str,
                    tool_choice: Any = None) -> tuple[list[dict], list[dict] | None]:
    """Messages and tools as sglang's chat endpoint hands them to ``apply_chat_template``.

    Raises
    ------
    InvalidHistoryError
        When sglang's ``ChatCompletionRequest`` rejects the messages or tools.
    """
    request_cls, norm_args, norm_tool, _, process_content = _sglang_chat()
    # No copy of the messages: the request model reads them into new objects (its validators
    # rewrite only the top-level body, built here), and what is normalised below is its dump.
    body: dict[str, Any] = {"model": "default", "messages": list(messages)}
    if tools:
        body["tools"] = list(tools)
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    try:
        request = request_cls.model_validate(body)
        dumped = [m.model_dump() for m in request.messages]
        for m in dumped:
            norm_args(m, strict=True)
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        raise InvalidHistoryError(f"messages/tools rejected by the chat endpoint's rules: {exc}",
                                  field="messages") from exc
    content_format = content_format_of(chat_template)
    out = []
    for m in dumped:
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
    return apply_template(tokenizer, msgs, add_generation_prompt=add_generation_prompt, tools=rendered_tools,
                          return_dict=False, **check_template_kwargs(chat_template_kwargs))


def user_turn_opening(tokenizer, chat_template_kwargs: dict | None = None) -> str:
    """The text a user turn starts with in this template (``<|im_start|>user\\n`` for ChatML)."""
    marker = "\x00slot\x00"
    one = apply_template(tokenizer, [{"role": "user", "content": marker}], add_generation_prompt=False,
                         **check_template_kwargs(chat_template_kwargs))
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
