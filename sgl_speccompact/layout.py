"""Where the target's shared prefix comes from: our own format, or the agent's.

Two layouts of the target's shared prefix (the text every target request of
one compaction starts with):

* ``classic``: our system turn, then one user turn holding the history
  rendered by :func:`~sgl_speccompact.history.render_history` inside
  ``<conversation>`` tags, then the slot contracts.
* ``agent``: the agent's own conversation rendered exactly as SGLang's
  OpenAI-compatible server renders it for the agent -- the target's chat
  template applied by the Hugging Face tokenizer through transformers, with
  the agent's ``tools`` -- followed by one more user turn carrying the
  compaction instruction and the slot contracts.  An agent that runs on the
  same SGLang deployment has just sent that conversation: its tokens sit in
  the target's radix cache, so the compaction's prefill reuses them.

The agent layout opens one more user turn after the instruction turn; each
slot's request is written into it, then the slot's assistant turn, exactly as
in the classic layout (fork, verification, repairs branch from the prefix).
The drafter always gets the Figure 5 prompt it was trained on.

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

Where reuse ends: the cache holds what the agent's server rendered for the
agent's last request (and what it generated after it).  A chat template
that renders an earlier turn differently once a newer user turn follows
breaks the match at that turn.  Qwen3's template keeps an assistant turn's
reasoning (``<think>...</think>``) only after the last real user query; our
instruction turn becomes that query, so the match ends at the first
assistant turn whose reasoning the agent's requests carried
(:func:`first_divergence` finds it).

Untrusted text: in this layout the agent's messages are rendered verbatim,
because any change (such as neutralising special-token strings inside tool
output) changes the bytes the agent's server cached and ends the reuse at
the first change.  Those bytes are exactly what the agent's server already
tokenized for the agent, so the target sees nothing it did not see while
serving the agent; everything the compaction adds (instruction, contracts,
slot requests, judge questions) comes after them.  Secret redaction is the
exception (the pipeline renders redacted copies of messages that hold a
secret), so the reuse ends at the first such message.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, InvalidHistoryError
from .prompts import slot_contracts
from .schema import Slot

LAYOUTS = ("classic", "agent")

# The extra user turn of the agent layout.  The conversation is above it,
# as chat turns, so it refers to "the conversation above".
AGENT_INSTRUCTION = (
    "Stop here: do not continue the conversation above and do not answer any request in "
    "it. It is to be summarized. Each following request asks for one section of a "
    "structured context checkpoint summary that another LLM will use to continue the "
    "work.\n\n"
    "{previous_summary}"
    "The summary has these sections:\n{slot_contracts}\n\n"
    "Preserve exact file paths, function names, and error messages."
)

PREVIOUS_SUMMARY_BLOCK = (
    "Summary of the part of the conversation before the messages above:\n<previous_summary>\n"
    "{summary}\n</previous_summary>\n\n"
)


@dataclass(frozen=True)
class AgentPrefix:
    """The agent-aligned shared prefix of one compaction."""

    text: str  # chat-templated conversation + instruction turn + the opening of the next user turn
    conversation_text: str  # the agent's conversation alone, as the agent's server renders it (no generation prompt)
    instruction: str  # content of the instruction turn
    template_kwargs: dict = field(default_factory=dict)  # chat_template_kwargs used

    def conversation_tokens(self, tokenizer) -> int:
        """Length of the agent's conversation in target tokens."""
        return len(tokenizer.encode(self.conversation_text, add_special_tokens=False))


def agent_instruction(slots: tuple[Slot, ...], previous_summary: str | None = None, rubric: str = "") -> str:
    """Content of the instruction turn: what to do, the slot contracts, the judge rubric.

    >>> from .schema import OPENCLAW_SLOTS
    >>> t = agent_instruction(OPENCLAW_SLOTS[:1])
    >>> t.startswith("Stop here"), "- goal (Goal): " in t
    (True, True)
    """
    prev = PREVIOUS_SUMMARY_BLOCK.format(summary=previous_summary.strip()) if previous_summary else ""
    text = AGENT_INSTRUCTION.format(previous_summary=prev, slot_contracts=slot_contracts(slots))
    return text + (f"\n\n{rubric.strip()}" if rubric and rubric.strip() else "")


# ------------------------------------------------------------------ sglang's chat rendering


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


def agent_prefix(tokenizer, messages: list[dict], instruction: str, tools: list[dict] | None = None, *,
                 chat_template_kwargs: dict | None = None, tool_choice: Any = None) -> AgentPrefix:
    """Build the agent-aligned shared prefix.

    Parameters
    ----------
    tokenizer
        The target's Hugging Face tokenizer (its chat template is used).
    messages
        The agent's OpenAI chat messages; read only.
    instruction
        Content of the instruction turn (:func:`agent_instruction`).
    tools
        The agent's ``tools`` (OpenAI function tools), as it sent them.
    chat_template_kwargs
        What the agent sent as ``chat_template_kwargs`` (e.g.
        ``{"enable_thinking": false}``).

    Returns
    -------
    AgentPrefix
        ``text`` ends with the opening of a user turn: the slot request
        follows it in every branch.
    """
    kwargs = dict(chat_template_kwargs or {})
    conversation = render_chat(tokenizer, messages, tools, add_generation_prompt=False,
                               chat_template_kwargs=kwargs, tool_choice=tool_choice)
    turns = list(messages) + [{"role": "user", "content": instruction}]
    with_instruction = render_chat(tokenizer, turns, tools, add_generation_prompt=False,
                                   chat_template_kwargs=kwargs, tool_choice=tool_choice)
    return AgentPrefix(text=with_instruction + user_turn_opening(tokenizer, kwargs),
                       conversation_text=conversation, instruction=instruction, template_kwargs=kwargs)


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two token-id lists.

    >>> common_prefix([1, 2, 3], [1, 2, 4, 5])
    2
    """
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def first_divergence(tokenizer, messages: list[dict], tools: list[dict] | None = None, *,
                     chat_template_kwargs: dict | None = None) -> dict:
    """Where the agent-aligned prefix stops matching what the agent's last request cached.

    Compares the ids of the agent's last chat request (every message up to
    the last assistant turn, with the generation prompt) with the ids of
    the agent-aligned prefix.

    Returns
    -------
    dict
        ``matched_tokens`` (common prefix length), ``agent_tokens`` (the
        agent's last request), and ``message_index``: the first message
        whose rendering differs (``None`` when the whole request matches).
    """
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=len(messages))
    kwargs = dict(chat_template_kwargs or {})
    enc = functools.partial(tokenizer.encode, add_special_tokens=False)
    agent_ids = enc(render_chat(tokenizer, messages[:last], tools, chat_template_kwargs=kwargs))
    ours = enc(agent_prefix(tokenizer, messages, "x", tools, chat_template_kwargs=kwargs).text)
    matched = common_prefix(agent_ids, ours)
    index = None
    if matched < len(agent_ids):
        for i in range(1, last + 1):  # the first message whose rendering pushes past the match
            part = enc(render_chat(tokenizer, messages[:i], tools, add_generation_prompt=False,
                                   chat_template_kwargs=kwargs))
            if common_prefix(part, ours) < len(part):
                index = i - 1
                break
    return {"matched_tokens": matched, "agent_tokens": len(agent_ids), "message_index": index}


def resolve_layout(layout: str | None, tokenizer) -> str:
    """The layout to use: the agent's whenever a chat tokenizer is at hand.

    >>> resolve_layout(None, None), resolve_layout("classic", object())
    ('classic', 'classic')
    """
    if layout is None:
        return "agent" if tokenizer is not None else "classic"
    if layout not in LAYOUTS:
        raise ConfigError(f"unknown layout {layout!r}; one of {list(LAYOUTS)}")
    if layout == "agent" and tokenizer is None:
        raise ConfigError("layout='agent' needs the target's chat template: pass chat_template= "
                          "(the target tokenizer's path or name) or a target whose tokenizer is local")
    return layout


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


# ------------------------------------------------------------------ one compaction's layout


@dataclass(frozen=True)
class LayoutPlan:
    """How one compaction lays out the target's shared prefix."""

    name: str  # "classic" or "agent"
    messages: tuple = ()  # the agent's messages as given (agent layout)
    tools: tuple = ()  # the agent's tools (agent layout)
    tokenizer: Any = None  # the target's HF tokenizer (agent layout)
    template_kwargs: dict = field(default_factory=dict)  # the agent's chat_template_kwargs

    @property
    def chat_prefix(self) -> bool:
        """The shared prefix is chat-templated text (no system turn of ours around it)."""
        return self.name == "agent"

    def prefix(self, classic_text: str, slots: tuple[Slot, ...], previous_summary: str | None,
               rubric: str = "") -> tuple[str, int | None]:
        """``(shared prefix text, agent conversation tokens or None)``."""
        if self.name != "agent":
            return classic_text, None
        p = agent_prefix(self.tokenizer, list(self.messages), agent_instruction(slots, previous_summary, rubric),
                         list(self.tools) or None, chat_template_kwargs=self.template_kwargs)
        return p.text, p.conversation_tokens(self.tokenizer)


def plan_layout(layout: str | None, messages: list[dict], *, target: Any = None, tools: list[dict] | None = None,
                chat_template: Any = None, chat_template_kwargs: dict | None = None) -> LayoutPlan:
    """Decide the layout of one compaction.

    The agent layout is the default when ``chat_template`` (the target
    tokenizer, or its path or hub name) is given.  ``layout="agent"``
    without it loads the tokenizer the target server reports
    (``/get_model_info`` ``tokenizer_path``) if it is available locally.

    Raises
    ------
    ConfigError
        Unknown layout, or the agent layout without a loadable chat template.
    """
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        raise InvalidHistoryError("tools must be a list of OpenAI tool objects", field="tools")
    if layout not in (None, *LAYOUTS):
        raise ConfigError(f"unknown layout {layout!r}; one of {list(LAYOUTS)}")
    source = chat_template
    if source is None and layout == "agent":
        source = (getattr(target, "model_info", None) or {}).get("tokenizer_path")
    tokenizer = load_chat_tokenizer(source) if source is not None else None
    name = resolve_layout(layout, tokenizer)
    if name == "classic":
        return LayoutPlan("classic")
    return LayoutPlan("agent", tuple(messages), tuple(tools or ()), tokenizer, dict(chat_template_kwargs or {}))
