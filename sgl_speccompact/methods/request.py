"""One compaction's inputs, built once at the edge and passed down whole.

The CLI and the HTTP service build one :class:`MethodRequest` (the service
with its messages parsed already, :meth:`MethodRequest.parsed`) and pass it
to :func:`~.registry.run_method`; a library caller passes either the
messages or a request (for the rarely used options: focus, schema, progress
events, the agent layout); below them the method resolver, the pipeline and
the chunker read it and never take its fields one by one.  Chunking makes a sub-request per block with
:func:`dataclasses.replace` (the block's messages and turns, the previous
block's summary).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ..config import CompactConfig
from ..history.messages import Turn, parse_messages
from ..schema import Slot
from .progress import Progress


@dataclass(frozen=True)
class AgentLayout:
    """Where the target's shared prefix comes from (:mod:`~sgl_speccompact.backends.layout`)."""

    name: str | None = None  # "agent" | "classic"; None: agent when a chat template is known, else classic
    tools: list[dict] | None = None  # the agent's OpenAI tools, as it sent them (rendered in its prefix)
    chat_template: Any = None  # the target's tokenizer, or its local path or hub name
    chat_template_kwargs: dict | None = None  # what the agent sent as chat_template_kwargs


@dataclass(frozen=True)
class MethodRequest:
    """What one compaction is asked to do; see :func:`~.registry.run_method` for each field."""

    messages: list  # OpenAI chat messages (read only, never modified)
    previous_summary: str | None = None  # summary of earlier turns (incremental compaction)
    focus: str | None = None  # topic the summary should favour (untrusted text)
    schema: tuple[Slot, ...] | None = None  # summary sections; None: the method's own (OpenClaw's six slots)
    source_judge: bool = False  # run Source-Judged Compaction on the summary
    layout: AgentLayout = AgentLayout()  # the target prefix's layout settings
    on_event: Callable[[dict], None] | None = None  # progress callback: each line and slot as it is written
    on_progress: Callable[[Progress], None] | None = None  # totals so far: blocks, slots, judged lines, tokens
    turns: tuple[Turn, ...] | None = None  # ``messages`` parsed, one turn per message; None: not parsed yet
    indices: tuple[int, ...] | None = None  # each message's index in the caller's messages (a chunked block's); None: 0, 1, ...

    def parsed(self, cfg: CompactConfig) -> "MethodRequest":
        """This request with its messages parsed and checked against ``cfg``'s limits (once)."""
        if self.turns is not None:
            return self
        turns = parse_messages(self.messages, max_messages=cfg.max_history_messages,
                               max_chars=cfg.max_history_chars)
        return replace(self, turns=turns)


def as_request(messages: "list | MethodRequest", **given) -> MethodRequest:
    """``messages`` as a :class:`MethodRequest`, with the fields in ``given`` set.

    ``messages`` is a list of OpenAI chat messages or a request built
    already.  A field given as None (or ``source_judge=False``), a keyword's
    default, leaves the request's own value.

    >>> r = as_request([{"role": "user", "content": "hi"}], previous_summary="## Goal", source_judge=False)
    >>> r.previous_summary, r.source_judge, as_request(r, focus="db").focus, as_request(r) is r
    ('## Goal', False, 'db', True)
    """
    changes = {k: v for k, v in given.items() if v is not None and v is not False}
    if isinstance(messages, MethodRequest):
        return replace(messages, **changes) if changes else messages
    return MethodRequest(messages, **changes)


@dataclass(frozen=True)
class Offer:
    """What the caller can serve: the methods ``auto`` may pick among (:func:`~.resolve.resolve_method`)."""

    config: CompactConfig  # the compaction's effective config (output reserves, context window, min_label_mass)
    has_drafter: bool = False  # a drafter backend is connected
    offered: tuple[str, ...] | None = None  # the methods the caller serves (the service's list); None: all registered

    @property
    def context_tokens(self) -> int | None:
        """The target's context window (``config.target_context_tokens``); None: unknown, not checked."""
        return self.config.target_context_tokens
