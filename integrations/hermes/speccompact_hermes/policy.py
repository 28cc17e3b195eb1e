"""When the engine compacts and what it sends: Hermes's trigger, pruning, the cut, the prepared prefix.

Pure functions following hermes-agent 0.19.0's ``ContextCompressor``:

* the trigger is ``max(int((window - max_tokens) * pct), 64000)`` with
  ``pct`` = ``compression.threshold`` (0.50), raised to 0.75 under a 512K
  window, and 85% of the window when the 64K floor would reach it;
* the kept tail is ``target_ratio`` (0.20) of the trigger, in tokens;
* old tool outputs are pruned (``prune.py``) before the cut is chosen.

An ahead-of-time compaction ("prepare") covers only messages whose pruned
form is already final -- those before the prune boundary and before the
tail -- so the later compaction at the trigger starts with exactly the same
messages and the service can reuse the prepared summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import messages as msgs
from .prune import prune, protected_from

SMALL_WINDOW, SMALL_WINDOW_PCT = 512_000, 0.75  # windows under this trigger at 75% or more (tokens, ratio)
MIN_TRIGGER = 64_000  # Hermes's MINIMUM_CONTEXT_LENGTH: the trigger's floor (tokens)
MIN_CTX_RATIO = 0.85  # where the floor would reach the window, trigger at this share of it


def hermes_trigger(context_length: int, percent: float, max_tokens: int | None = None) -> int:
    """Hermes's compaction trigger in tokens (``_compute_threshold_tokens`` with its small-window floor).

    >>> [hermes_trigger(w, 0.50) for w in (64_000, 80_000, 100_000, 1_000_000)]
    [54400, 64000, 75000, 500000]
    """
    if context_length <= 0:
        return 0
    pct = max(percent, SMALL_WINDOW_PCT) if context_length < SMALL_WINDOW else percent
    window = context_length - (max_tokens or 0)
    window = window if window > 0 else context_length
    floored = max(int(window * pct), MIN_TRIGGER)
    if floored >= window:
        return max(1, min(int(window * MIN_CTX_RATIO), window - 1))
    return floored


def effective_percent(context_length: int, percent: float) -> float:
    """The trigger share Hermes shows: raised to 0.75 under a 512K window."""
    return max(percent, SMALL_WINDOW_PCT) if 0 < context_length < SMALL_WINDOW else percent


def pruned_view(messages: list[dict], *, tail_tokens: int, protect_last_n: int) -> tuple[list[dict], int, int]:
    """``(pruned list, outputs pruned, prune boundary)``: the pruning every compaction starts with.

    Old tool outputs stubbed (``prune.py``); the boundary is the first index
    whose tool outputs stay whole, measured on the pruned list.  What
    :func:`plan` cuts, and what the session benchmark's simulator replays.

    >>> out, n, boundary = pruned_view([{"role": "user", "content": "go"}], tail_tokens=10, protect_last_n=1)
    >>> n, boundary
    (0, 0)
    """
    tail_tokens = max(1, tail_tokens)
    out, n = prune(messages, tail_tokens, protect_last_n)
    return out, n, protected_from(out, tail_tokens, protect_last_n)


@dataclass(frozen=True)
class Plan:
    """One compaction's view of a message list."""

    pruned: list  # the list with old tool outputs stubbed (new dicts where changed)
    n_pruned: int  # tool outputs stubbed or back-referenced
    boundary: int  # first index whose tool outputs pruning kept whole
    cut: msgs.Split | None  # head / middle / tail, None when the list is too short


def plan(messages: list[dict], *, head_n: int, protect_last_n: int, tail_tokens: int,
         markers: msgs.Markers) -> Plan:
    """Prune, then cut, as Hermes's built-in does.

    >>> M = msgs.Markers("[S]", "[E]", "[H]", "[D]")
    >>> ms = [{"role": "user", "content": "go"}] + [m for i in range(8) for m in (
    ...     {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function",
    ...      "function": {"name": "read_file", "arguments": '{"path": "f%d"}' % i}}]},
    ...     {"role": "tool", "tool_call_id": f"c{i}", "content": str(i) * 4000})]
    >>> p = plan(ms, head_n=0, protect_last_n=4, tail_tokens=1500, markers=M)
    >>> p.n_pruned, p.boundary, p.pruned[2]["content"]
    (6, 13, '[read_file] read f0 from line 1 (4,000 chars)')
    """
    tail_tokens = max(1, tail_tokens)
    pruned, n, boundary = pruned_view(messages, tail_tokens=tail_tokens, protect_last_n=protect_last_n)
    head = 1 if pruned and pruned[0].get("role") == "system" else 0
    if len(pruned) <= head + head_n + 4:  # Hermes: more than the head, three tail messages and one more
        return Plan(pruned, n, boundary, None)
    cut = msgs.split(pruned, protect_first_n=head_n, protect_last_n=protect_last_n, tail_budget_tokens=tail_tokens,
                     markers=markers)
    return Plan(pruned, n, boundary, cut)


def prepared_end(p: Plan) -> int:
    """End of what an ahead-of-time compaction sends: the middle up to the prune boundary, whole tool groups.

    Pruning never changes these messages again before the trigger (a newer
    identical tool output does not turn an older stub into a back-reference,
    see ``prune.py``), so the later compaction's middle starts with them.
    """
    if p.cut is None:
        return 0
    end = min(p.cut.end, p.boundary)
    inside = end < len(p.pruned) and p.pruned[end].get("role") == "tool"
    if inside or (end > 0 and p.pruned[end - 1].get("role") == "assistant" and p.pruned[end - 1].get("tool_calls")):
        end = msgs._tool_group_start(p.pruned, end)  # never end inside a tool group
    return end if end > p.cut.summarize_from else 0


def prepared_split(p: Plan) -> msgs.Split | None:
    """The cut of an ahead-of-time compaction (None: nothing to prepare)."""
    end = prepared_end(p)
    return msgs.Split(p.cut.start, end, p.cut.previous_summary, p.cut.summarize_from) if end else None


def apply_prepared(p: Plan, n: int, digest: str, fingerprint, soft_tokens: int,
                   summary_tokens: int) -> msgs.Split | None:
    """The cut at a prepared prefix, when the prompt fits under ``soft_tokens`` with the rest kept verbatim.

    ``n`` messages from ``summarize_from`` were prepared; ``fingerprint(split)``
    must still give ``digest`` (the same messages, pruned the same way).  Then
    the service has the summary stored, and the compaction at the trigger
    costs a lookup instead of a summary.
    """
    if p.cut is None or n <= 0 or p.cut.summarize_from + n > p.cut.end:
        return None
    split = msgs.Split(p.cut.start, p.cut.summarize_from + n, p.cut.previous_summary, p.cut.summarize_from)
    if fingerprint(split) != digest:
        return None
    kept = sum(msgs.rough_tokens(m) for m in p.pruned[:split.start] + p.pruned[split.end:])
    return split if kept + summary_tokens <= soft_tokens else None
