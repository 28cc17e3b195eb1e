"""Carried lines judged together: one prefill-only target request per slot branch, and the evidence rule.

A slot branch proposes the previous summary's lines before it drafts
anything (:meth:`~sgl_speccompact.programs.slot_stream.SlotStream.carry`).  Whether a carried line
still holds depends on the new turns, not on the lines accepted before it, so
every carried line of the branch is judged at once, when the branch proposes
its first one: each prompt is the branch plus the carried question about one
line (built on copies, which send nothing), and the target's ``judge_batch``
sends them as ONE prefill-only ``/generate`` batch sharing the branch's cached
prefix.  A target whose ``judge_batch`` declines is asked one line at a time, the
same questions.

**The evidence rule** (replacing a fixed share): the judged share ``j`` (lines
judged to still hold over lines judged) is the evidence of how much of the
slot is unchanged, so carried lines may take ``j`` of the slot's lines and
tokens (at most ``max_carried_share``), and always leave one line and one
mean carried line's tokens for what the new turns add (:func:`carried_cap`).
A slot whose lines all still hold keeps all but one of its budget's lines; one
where half hold keeps at most half of the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schema import Slot
from .context import SlotContext
from .states import scratch
from .steps import ask_verdict, verify_line

LINE_OPEN = "<line>\n"  # where a carried question's own text starts (core/prompts.py CARRIED_QUESTION_SHORT)


@dataclass(frozen=True)
class CarriedCap:
    """How much of a slot branch's budget its carried lines may take."""

    lines: int  # carried lines kept, at most
    tokens: int  # their tokens, at most
    share: float  # the judged share j the cap follows (lines still holding / lines judged)


def carried_cap(held: int, judged: int, max_lines: int, max_tokens: int, mean_tokens: float,
                max_share: float = 1.0) -> CarriedCap:
    """The evidence rule: carried lines take the judged share of the budget, leaving one new line's room.

    >>> carried_cap(9, 10, 12, 320, 20)
    CarriedCap(lines=10, tokens=288, share=0.9)
    >>> carried_cap(13, 13, 12, 320, 20).lines, carried_cap(3, 6, 12, 320, 20).lines
    (11, 6)
    >>> carried_cap(5, 5, 12, 320, 20, max_share=0.5).lines, carried_cap(0, 0, 12, 320, 20).lines
    (6, 0)
    """
    share = held / judged if judged else 0.0
    use = min(share, max_share)
    lines = min(int(max_lines * use), max(max_lines - 1, 0))
    tokens = min(int(max_tokens * use), max(max_tokens - int(round(mean_tokens)), 0))
    return CarriedCap(lines, tokens, share)


def judge_carried_lines(s, slot: Slot, lines: list[str], ctx: SlotContext,
                        short: bool = False) -> tuple[list[dict], dict]:
    """Judge ``lines`` (carried from the previous summary) for whether they still hold.

    Returns ``([{"accepted": bool, "score": float}, ...], meta)``, one verdict
    per line, in order; ``meta["requests"]`` is 1 with a target whose
    ``judge_batch`` judges in one request (0 for no lines), else one per line.
    ``short`` asks the criterion before the line
    (:data:`~sgl_speccompact.core.prompts.CARRIED_QUESTION_SHORT`), so the
    batch's prompts share it and each adds only its line.  The shared part is
    then prefilled first, in one prefill-only request (``meta["requests"]``
    2): items of one batch that arrive together each miss a prefix none of
    them has cached yet (sglang's ``fcfs`` policy, which priority scheduling
    needs), so without it every item would prefill the branch and criterion.
    """
    if not lines:
        return [], {"requests": 0}
    cfg = ctx.cfg
    texts = []
    for line in lines:
        with scratch(s) as v:
            ask_verdict(v, slot, line, ctx, carried=True, short=short)
            texts.append(v.text())
    warm = short and len(texts) > 1
    if warm:  # everything before the first line, once: the batch's items then add only their lines
        first = texts[0]
        ctx.target.cache_prefix(first[:first.rindex(LINE_OPEN + lines[0])])
    judged = ctx.target.judge_batch(texts, cfg.positive_label, cfg.negative_label, cfg.eta)
    if judged is None:  # the target declines one-request judging: one select per line
        verdicts, meta = [], {"requests": int(warm), "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0}
        for line in lines:
            one = verify_line(s, slot, line, ctx, carried=True, short=short)
            verdicts.append(dict(one.get("judgement") or {}))
            for k in meta:
                meta[k] += int(one.get(k) or (1 if k == "requests" else 0))
        return verdicts, meta
    judgements, meta = judged
    if warm:
        meta = {**meta, "requests": int(meta.get("requests", 1)) + 1}
    return [{"accepted": j.accepted, "score": j.score} for j in judgements], meta
