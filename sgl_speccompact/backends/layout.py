"""Where the target's shared prefix comes from: our own format, or the agent's.

Two layouts of the target's shared prefix (the text every target request of
one compaction starts with):

* ``classic``: our system turn, then one user turn holding the history
  rendered by :func:`~sgl_speccompact.history.messages.render_history` inside
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

The agent's conversation is rendered by
:func:`sgl_speccompact.backends.chat_render.render_chat`, exactly as sglang 0.5.23's
chat endpoint renders it (that module says how).

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

import functools
from dataclasses import dataclass, field
from typing import Any

from .contract import Backend
from .chat_render import check_template_kwargs, load_chat_tokenizer, render_chat, user_turn_opening
from ..errors import ConfigError, InvalidHistoryError
from ..core.prompts import slot_contracts
from ..schema import Slot

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

    >>> from ..schema import OPENCLAW_SLOTS
    >>> t = agent_instruction(OPENCLAW_SLOTS[:1])
    >>> t.startswith("Stop here"), "- goal (Goal): " in t
    (True, True)
    """
    prev = PREVIOUS_SUMMARY_BLOCK.format(summary=previous_summary.strip()) if previous_summary else ""
    text = AGENT_INSTRUCTION.format(previous_summary=prev, slot_contracts=slot_contracts(slots))
    return text + (f"\n\n{rubric.strip()}" if rubric and rubric.strip() else "")


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


def plan_layout(layout: str | None, messages: list[dict], *, target: Backend | None = None, tools: list[dict] | None = None,
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
    InvalidRequestError
        A ``chat_template_kwargs`` entry outside
        :data:`~sgl_speccompact.backends.chat_render.TEMPLATE_KWARGS`.
    """
    kwargs = check_template_kwargs(chat_template_kwargs)  # before any template runs
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        raise InvalidHistoryError("tools must be a list of OpenAI tool objects", field="tools")
    if layout not in (None, *LAYOUTS):
        raise ConfigError(f"unknown layout {layout!r}; one of {list(LAYOUTS)}")
    source = chat_template
    if source is None and layout == "agent":
        source = target.model_info.get("tokenizer_path") if target is not None else None
    tokenizer = load_chat_tokenizer(source) if source is not None else None
    name = resolve_layout(layout, tokenizer)
    if name == "classic":
        return LayoutPlan("classic")
    return LayoutPlan("agent", tuple(messages), tuple(tools or ()), tokenizer, kwargs)
