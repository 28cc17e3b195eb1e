"""Chunked compaction: a history longer than the target's context, compacted block by block.

The agent's context can be larger than the compaction model's (Hermes
issue #53008: a smaller auxiliary model loops or fails).  When the history
does not fit one target request, it is cut into blocks at message
boundaries, never between an assistant tool call and its results, and each
block is compacted incrementally on the one before: the previous block's
summary is the next block's ``previous_summary``.  The last block's summary
is the result.

Margins (all in target tokens)::

    block room = (context - prompt overhead - summary written - previous summary) * 0.95

* context: ``CompactConfig.target_context_tokens``, else what the target
  server reports (:meth:`~sgl_speccompact.backends.http.HttpEndpoint.context_length`);
  unknown means no chunking;
* prompt overhead: the longest method prompt with an empty history
  (SpecCompact's shared prefix with its judge rubric, OpenClaw's, Hermes's)
  plus :data:`MARGIN_TOKENS` for chat-template tokens, the slot request and
  the judge question;
* summary written: the method's own ``max_new_tokens`` reserve
  (:attr:`~.pipeline.Method.new_tokens`: a slot's tokens plus one request's
  for the slot methods, ``monolithic_max_tokens`` for OpenClaw-style, the
  smallest Hermes cap for Hermes, whose cap is then clamped to the room its
  prompt leaves: :func:`room_left`); previous summary: the larger of
  ``max_summary_tokens`` and the caller's previous summary;
* 5% for the difference between per-message and whole-text token counts.

The history's system prompt opens every block (the agent's instructions
are part of what each block's summary must keep), and counts against every
block's room.  Stats and progress events add up over all blocks.

A tool-call group larger than a whole block has its tool outputs replaced by
:func:`~sgl_speccompact.history.pruning.stub` lines; a single message that still does not fit is a
:class:`~.errors.HistoryTooLongError`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..backends.contract import Backend
from ..config import CompactConfig
from ..errors import HistoryTooLongError
from ..core.hermes_prompt import hermes_prompt
from ..history.messages import Turn, _render_turn, content_text
from ..core.judge_prompts import judge_rubric
from ..core.prompts import SUMMARIZER_SYSTEM, openclaw_prompt, target_shared
from ..history.pruning import stub
from ..history.tool_groups import tool_groups
from ..result import CompactionResult, CompactionStats, note_masses
from ..schema import Slot
from .request import MethodRequest

MARGIN_TOKENS = 512  # chat-template tokens, slot request, judge question (target tokens)
SAFETY = 0.95  # share of the computed room a block may fill
ESTIMATE_BYTES_PER_TOKEN = 3.0  # the first guess of a history's tokens, before any tokenizer call
SMALL_HISTORY_BYTES = 16_384  # a history this small is sent whole without asking the server's context
MIN_BLOCK_TOKENS = 256  # less room than this: the target cannot compact anything (target tokens)
TURN_SEPARATOR_TOKENS = 2  # the blank line between rendered turns (target tokens)
CHAT_TEMPLATE_TOKENS = 512  # role markers and think block around a one-shot prompt (target tokens)


def context_tokens(target: Backend, cfg: CompactConfig) -> int | None:
    """The target's context window: the config's, else the server's, else None (no chunking)."""
    if cfg.target_context_tokens:
        return cfg.target_context_tokens
    return target.context_length()


def _prompts(slots: tuple[Slot, ...], cfg: CompactConfig) -> list[str]:
    """Every method's prompt with an empty history."""
    rubric = judge_rubric(cfg.positive_label, cfg.negative_label, True)
    return [SUMMARIZER_SYSTEM + target_shared("", slots, "x", rubric), openclaw_prompt("", slots, "x"),
            hermes_prompt("", "x", today="")]


def overhead_tokens(slots: tuple[Slot, ...], cfg: CompactConfig, count: Callable[[list[str]], list[int]]) -> int:
    """Target tokens of the longest method prompt with an empty history, plus the margin."""
    return max(count(_prompts(slots, cfg))) + MARGIN_TOKENS


def utf8_bytes(texts: list[str]) -> list[int]:
    """Length of each text in UTF-8 bytes: never fewer than its tokens in a byte-level BPE tokenizer.

    >>> utf8_bytes(["ab", "\u00e9"])
    [2, 2]
    """
    return [len(t.encode("utf-8", "replace")) for t in texts]


def estimate(texts: list[str]) -> list[int]:
    """A guess of each text's tokens from its bytes (English and code run above 3 bytes a token).

    >>> estimate(["abcdefg"])
    [3]
    """
    return [int(-(-n // ESTIMATE_BYTES_PER_TOKEN)) for n in utf8_bytes(texts)]


def default_reserve(cfg: CompactConfig) -> int:
    """The output tokens a block reserves for a method that names none (target tokens)."""
    return max(cfg.max_summary_tokens, cfg.monolithic_max_tokens)


def block_room(context: int, overhead: int, cfg: CompactConfig, previous_tokens: int,
               reserve: int | None = None) -> int:
    """History tokens one block may hold; ``reserve``: the method's new tokens (:func:`default_reserve`).

    >>> block_room(32768, 1500, CompactConfig(), 0)
    25813
    >>> block_room(40960, 1500, CompactConfig(), 0, reserve=13106)
    23090
    """
    written = default_reserve(cfg) if reserve is None else reserve
    previous = max(cfg.max_summary_tokens, previous_tokens)
    return int((context - overhead - written - previous) * SAFETY)


def room_left(context: int | None, prompt_tokens: int, cap: int) -> int:
    """A generation cap clamped to what the context leaves after the prompt (and the chat template).

    >>> room_left(40960, 30000, 13106), room_left(None, 30000, 13106), room_left(40960, 1000, 4000)
    (10448, 13106, 4000)
    """
    if context is None:
        return cap
    return max(1, min(cap, context - prompt_tokens - CHAT_TEMPLATE_TOKENS))


def no_room(context: int, overhead: int, cfg: CompactConfig, previous: int, head: int,
            reserve: int | None = None) -> HistoryTooLongError:
    """The error for a request that leaves no block of :data:`MIN_BLOCK_TOKENS` history tokens, blaming the
    field that takes the room (the previous summary, the system message, else the method's own needs) and
    saying what would fit; never a negative room.

    >>> print(no_room(40960, 1500, CompactConfig(), previous=150_000, head=40))
    previous_summary: has 150000 tokens; the target's context of 40960 tokens leaves room for at most 37100 ...
    """
    written = default_reserve(cfg) if reserve is None else reserve
    spare = context - overhead - written  # what the previous summary and the history share
    need = -(-(MIN_BLOCK_TOKENS + head) // SAFETY)  # the smallest history block, the system message included
    fit = int(spare - need)  # the longest previous summary that leaves that block
    if previous > cfg.max_summary_tokens and fit >= cfg.max_summary_tokens:
        return HistoryTooLongError(
            f"has {previous} tokens; the target's context of {context} tokens leaves room for at most {fit} of "
            f"previous summary beside the prompt, the summary written and {MIN_BLOCK_TOKENS} tokens of history: "
            "shorten it to that, or compact without it", field="previous_summary")
    if head and spare - cfg.max_summary_tokens - -(-MIN_BLOCK_TOKENS // SAFETY) >= 0:
        most = int((spare - max(cfg.max_summary_tokens, previous)) * SAFETY) - MIN_BLOCK_TOKENS
        return HistoryTooLongError(
            f"the system message has {head} tokens; the target's context of {context} tokens leaves room for "
            f"at most {max(0, most)} beside the prompt, the summary and {MIN_BLOCK_TOKENS} tokens of history: "
            "shorten it", field="messages[0]")
    return HistoryTooLongError(
        f"the target's context of {context} tokens is too small for this method: its prompt ({overhead}), "
        f"the summary it writes ({written}) and a previous summary ({cfg.max_summary_tokens}) leave no "
        f"{MIN_BLOCK_TOKENS} tokens for history; serve the target with a longer context, or lower "
        "max_summary_tokens or max_tokens_per_slot", field="messages")


def small(messages: list, previous_summary: str | None) -> bool:
    """Whether the messages' texts and arguments and the previous summary hold at most
    :data:`SMALL_HISTORY_BYTES` bytes.

    >>> small([{"role": "user", "content": "hi"}], None), small([{"content": "x" * 20000}], None)
    (True, False)
    """
    texts = [previous_summary or ""]
    for m in messages:
        if isinstance(m, dict):
            texts.append(content_text(m.get("content")))
            texts += [str(c) for c in m.get("tool_calls") or []]
    return sum(utf8_bytes(texts)) <= SMALL_HISTORY_BYTES


def fits(texts: list[str], count: Callable[[list[str]], list[int]], context: int, slots: tuple[Slot, ...],
         cfg: CompactConfig, previous_summary: str | None, reserve: int | None = None) -> bool:
    """Whether the rendered turns ``texts`` fit one block, measured with ``count``."""
    previous = count([previous_summary])[0] if previous_summary else 0
    room = block_room(context, overhead_tokens(slots, cfg, count), cfg, previous, reserve)
    return sum(count(texts)) + TURN_SEPARATOR_TOKENS * len(texts) <= room


def pack(sizes: list[int], room: int) -> list[tuple[int, int]]:
    """Consecutive groups packed greedily into blocks of at most ``room`` (an oversized group alone).

    >>> pack([3, 3, 3, 9, 1], room=6)
    [(0, 2), (2, 3), (3, 4), (4, 5)]
    """
    blocks, start, used = [], 0, 0
    for i, n in enumerate(sizes):
        if i > start and used + n > room:
            blocks.append((start, i))
            start, used = i, 0
        used += n
    if sizes:
        blocks.append((start, len(sizes)))
    return blocks


def _stubbed(messages: list, turns: tuple[Turn, ...], a: int, b: int) -> tuple[list, tuple[Turn, ...]]:
    """Messages and turns ``a:b`` with every tool output replaced by its stub (an oversized group).

    The stubs are made from the turns and set in both, so nothing is parsed again.
    """
    calls = {c.id: c for t in turns[a:b] for c in t.tool_calls}
    out, shown = [], []
    for m, t in zip(messages[a:b], turns[a:b]):
        if t.role == "tool":
            call = calls.get(t.tool_call_id)
            short = stub(t.name or (call.name if call else ""), call.arguments if call else "", t.content)
            m, t = {**m, "content": short}, replace(t, content=short)
        out.append(m)
        shown.append(t)
    return out, tuple(shown)


def split_history(messages: list, *, target: Backend, cfg: CompactConfig, slots: tuple[Slot, ...],
                  previous_summary: str | None, count: Callable[[list[str]], list[int]],
                  exact: bool = False, reserve: int | None = None) -> list[list]:
    """The messages of each block :func:`split_request` cuts ``messages`` into."""
    request = MethodRequest(messages, previous_summary)
    return [block.messages for block in split_request(request, target=target, cfg=cfg, slots=slots, count=count,
                                                      exact=exact, reserve=reserve)]


def split_request(request: MethodRequest, *, target: Backend, cfg: CompactConfig, slots: tuple[Slot, ...],
                  count: Callable[[list[str]], list[int]], exact: bool = False,
                  reserve: int | None = None) -> list[MethodRequest]:
    """The blocks to compact one after the other, each a sub-request holding its messages and turns;
    ``[request]`` when the history fits (or the context is unknown).

    Without ``exact``, a history of at most :data:`SMALL_HISTORY_BYTES`
    (context unknown to the config), or one whose :func:`estimate` fits, is
    sent whole with no tokenizer call, keeping counting off the compaction's
    critical path; if the server then refuses it
    (:class:`~.errors.PromptTooLongError`) the caller plans again with
    ``exact``, which counts every turn.

    Raises
    ------
    HistoryTooLongError
        One message does not fit a block even with its tool outputs stubbed,
        or the target's context leaves no room for any history.
    """
    messages, previous_summary = request.messages, request.previous_summary
    if not exact and not cfg.target_context_tokens and small(messages, previous_summary):
        return [request]  # smaller than any window worth chunking for: the server is not even asked
    context = context_tokens(target, cfg)
    if context is None:
        return [request]
    request = request.parsed(cfg)
    turns = request.turns
    texts = [_render_turn(t) for t in turns]
    # bytes bound tokens from above: a history that fits by bytes needs no tokenizer call
    if fits(texts, utf8_bytes if exact else estimate, context, slots, cfg, previous_summary, reserve):
        return [request]
    previous = count([previous_summary])[0] if previous_summary else 0
    sizes = [n + TURN_SEPARATOR_TOKENS for n in count(texts)]
    head = 1 if turns and turns[0].role == "system" else 0  # opens every block
    room = block_room(context, overhead_tokens(slots, cfg, count), cfg, previous, reserve)
    if sum(sizes) <= room:
        return [request]
    room -= sum(sizes[:head])
    if room < MIN_BLOCK_TOKENS:
        raise no_room(context, overhead_tokens(slots, cfg, count), cfg, previous, sum(sizes[:head]), reserve)
    groups = [(max(a, head), b) for a, b in tool_groups(turns) if b > head]
    blocks: list[MethodRequest] = []
    group_sizes = [sum(sizes[a:b]) for a, b in groups]
    for ga, gb in pack(group_sizes, room):
        a, b = groups[ga][0], groups[gb - 1][1]
        part, shown = list(messages[a:b]), turns[a:b]
        if sum(sizes[a:b]) > room:  # one group alone: stub its tool outputs
            part, shown = _stubbed(messages, turns, a, b)
            if sum(count([_render_turn(t) for t in shown])) > room:
                raise HistoryTooLongError(f"messages[{a}:{b}] do not fit the target's context ({room} history "
                                          f"tokens per block) even with tool outputs stubbed", field="messages")
        blocks.append(replace(request, messages=list(messages[:head]) + part, turns=turns[:head] + shown,
                              indices=_indices(request, [*range(head), *range(a, b)])))
    return blocks


def _indices(request: MethodRequest, positions: list[int]) -> tuple[int, ...]:
    """The caller's message indices of ``request``'s messages at ``positions`` (the ledger names them).

    >>> _indices(MethodRequest([], indices=(5, 6, 7)), [0, 2]), _indices(MethodRequest([]), [0, 2])
    ((5, 7), (0, 2))
    """
    return tuple(request.indices[p] for p in positions) if request.indices is not None else tuple(positions)


def add_stats(into: CompactionStats, more: CompactionStats) -> None:
    """Add ``more``'s requests, line counts and time to ``into`` (the cost of all blocks)."""
    for server, kinds in more.requests.items():
        for kind, c in kinds.items():
            mine = into.requests.setdefault(server, {}).setdefault(kind, type(c)())
            for f in ("requests", "prompt_tokens", "cached_tokens", "completion_tokens"):
                setattr(mine, f, getattr(mine, f) + getattr(c, f))
    for f in ("proposed_lines", "accepted_lines", "repaired_lines", "unjudged_lines", "carried_proposed",
              "carried_lines"):
        setattr(into, f, getattr(into, f) + getattr(more, f))
    for f in ("agent_tokens", "agent_cached_tokens"):  # None: no block used the agent layout
        if getattr(more, f) is not None:
            setattr(into, f, (getattr(into, f) or 0) + getattr(more, f))
    note_masses(into, more.label_masses, more.unreliable_verdicts)
    into.layout = more.layout
    for phase, s in more.wall_time_s.items():
        into.wall_time_s[phase] = into.wall_time_s.get(phase, 0.0) + s
    into.total_wall_s += more.total_wall_s


def run_blocks(blocks: list[list], previous_summary: str | None,
               run_block: Callable[[list, str | None, bool], CompactionResult],
               on_block: Callable[[CompactionStats, CompactionResult], None] | None = None) -> CompactionResult:
    """Compact ``blocks`` in order, each on the previous block's summary; the last result, with
    ``chunks`` and the stats of every block.

    ``run_block(messages, previous_summary, last)`` compacts one block;
    ``on_block(stats so far, block result)`` is called after each.
    """
    total = CompactionStats()
    result, previous = None, previous_summary
    for i, block in enumerate(blocks):
        result = run_block(block, previous, i == len(blocks) - 1)
        add_stats(total, result.stats)
        if on_block is not None:
            on_block(total, result)
        previous = result.summary
    if len(blocks) > 1:
        result = result.model_copy(update={"stats": total, "chunks": len(blocks)})
    return result
