"""The program judge, and the questions a slot branch asks: a drafted line, its carried lines.

:class:`ProgramJudge` is the paper's protocol: each question is the branch
(shared prefix, slot request, accepted lines) with the judge question after
it, and the verdict reads the label words' next-token logprobs.  A batch is
ONE prefill-only request on a target whose ``judge_batch`` judges in one
request (``SpecCompactEndpoint``), after one prefill of the part every
prompt shares when it has two or more (its tokens counted like the
batch's); a target that declines (a plain
``RuntimeEndpoint``, a scripted test backend), or ``one_request_judging``
off, is asked one ``select`` per prompt, concurrently: one policy for every
judging path (drafted lines, carried lines, SJC entries, the probe).

:func:`make_judge` picks the config's judge: this one, or the decision
judge over sglang's ``POST /v1/decisions``
(:class:`~sgl_speccompact.backends.decision_judge.DecisionJudge`).  Either way
every verdict is gated (``min_label_mass``).

:class:`LineQuestions` and :class:`CarriedQuestions` render a branch's
questions for either judge: as full prompts built on copies of the branch
(which send nothing), or as the decision route's input (the compaction's
plain record) and claims.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import sglang as sgl

from ..backends.contract import Backend
from ..backends.decision_judge import DecisionJudge
from ..backends.endpoint import LabelJudgement
from ..config import CompactConfig
from ..core.judge import Verdict, gate, label_choices
from ..core.judge_prompts import decision_carried_claim, decision_line_claim, decision_section
from ..core.judging import Decision, Judge, Judged
from ..schema import Slot
from .context import SlotContext, SlotRun
from .states import retire, run_concurrently, scratch
from .steps import ask_verdict, fork_slots, open_slot, result_of

SELECTS_AT_ONCE = 64  # prompts judged concurrently, one select each, where the target declines batches
LINE_OPEN = "<line>\n"  # where a carried question's own text starts (core/prompts.py CARRIED_QUESTION)


@sgl.function
def prefill_text(s, text):
    """Prefill ``text`` once (prefill-only): the part every prompt of a batch starts with."""
    s += text
    s += sgl.gen("prefill", max_tokens=0)


def prefill(target: Backend, text: str) -> dict:
    """Run :func:`prefill_text`; its meta (the server's token counts, ``requests`` 1)."""
    state = prefill_text.run(text=text, backend=target)
    try:
        _, meta = result_of(state, "prefill")
    finally:
        retire([state])
    return {**meta, "requests": 1}


@sgl.function
def judge_select(s, text, choices, method):
    """One prompt judged as a select: the text (it ends where the label is generated), then the labels."""
    s += text
    s += sgl.select("verdict", choices=choices, choices_method=method)


def select_each(target: Backend, texts: list[str], cfg: CompactConfig, eta: float) -> Judged:
    """Every prompt as its own :func:`judge_select`, at most :data:`SELECTS_AT_ONCE` at a time."""
    choices, n_positive = label_choices(cfg.positive_label, cfg.negative_label)
    method = LabelJudgement(eta, one_request=cfg.one_request_judging, n_positive=n_positive)
    verdicts: list[Verdict] = []
    meta = {"requests": 0, "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0}
    for i in range(0, len(texts), SELECTS_AT_ONCE):
        jobs = [partial(_select_one, target, t, choices, method) for t in texts[i:i + SELECTS_AT_ONCE]]
        for v, one in run_concurrently(jobs, threading.Event()):
            verdicts.append(v)
            for k in meta:
                meta[k] += int(one.get(k) or (1 if k == "requests" else 0))
    return verdicts, meta


def _select_one(target: Backend, text: str, choices: list[str], method: LabelJudgement) -> tuple[Verdict, dict]:
    state = judge_select.run(text=text, choices=choices, method=method, backend=target)
    try:
        _, meta = result_of(state, "verdict")
    finally:
        retire([state])
    return Verdict(**{**meta["verdict"], "substituted": tuple(meta["verdict"]["substituted"])}), meta


class ProgramJudge:
    """A :class:`~sgl_speccompact.core.judging.Judge` reading the label words' logprobs after the program's prompt.

    Parameters
    ----------
    target : Backend
        The target (its ``judge_batch``, ``cache_prefix`` and ``select``).
    cfg : CompactConfig
        Label words, ``min_label_mass``, ``one_request_judging``.
    """

    name = "program"

    def __init__(self, target: Backend, cfg: CompactConfig):
        self.target = target  # sends the requests
        self.cfg = cfg  # labels, gate, one_request_judging

    def judge(self, questions) -> Judged:
        """One batch: the shared part prefilled once (two or more prompts), then one request, or one select each."""
        texts = questions.prompts()
        if not texts:
            return [], {"requests": 0}
        cfg = self.cfg
        shared = questions.shared() if len(texts) > 1 else None
        # items of one batch arriving together each miss a prefix none of them has cached yet
        warm = prefill(self.target, shared) if shared else {}
        judged = (self.target.judge_batch(texts, cfg.positive_label, cfg.negative_label, questions.eta)
                  if cfg.one_request_judging else None)
        verdicts, meta = judged if judged is not None else select_each(self.target, texts, cfg, questions.eta)
        meta = {k: int(meta.get(k) or 0) + int(warm.get(k) or 0)
                for k in ("requests", "prompt_tokens", "cached_tokens", "completion_tokens")}
        return [gate(v, cfg.min_label_mass) for v in verdicts], meta


def make_judge(target: Backend, cfg: CompactConfig) -> Judge:
    """The judge ``cfg.judge`` names, on ``target``."""
    return DecisionJudge(target, cfg) if cfg.judge == "decisions" else ProgramJudge(target, cfg)


@dataclass
class BranchQuestions:
    """Questions about lines of one slot branch; the prompts are built once, on copies of the branch."""

    s: Any  # the branch's program state (None: only the decision route's rendering is asked for)
    slot: Slot  # the slot the branch writes
    lines: tuple[str, ...]  # the lines asked about, in order
    ctx: SlotContext  # config, labels, the decision route's record
    _prompts: list[str] | None = field(default=None, repr=False)  # built on first use

    carried = False  # the question: a proposed next line (False) or a carried line that may still hold

    @property
    def eta(self) -> float:
        return self.ctx.cfg.eta

    def __len__(self) -> int:
        return len(self.lines)

    def prompts(self) -> list[str]:
        if self._prompts is None:
            self._prompts = []
            for line in self.lines:
                with scratch(self.s) as v:
                    ask_verdict(v, self.slot, line, self.ctx, self.carried)
                    self._prompts.append(v.text())
        return self._prompts

    def shared(self) -> str | None:
        return None


@dataclass
class LineQuestions(BranchQuestions):
    """A proposed next line of the branch (drafted), judged against the conversation and the lines so far."""

    accepted: tuple[str, ...] = ()  # the branch's lines so far (the decision route's input ends with them)

    def decision(self) -> Decision:
        title = self.slot.title
        return Decision(self.ctx.record + decision_section(title, self.accepted),
                        tuple(decision_line_claim(title, line, self.ctx.has_previous) for line in self.lines))


@dataclass
class CarriedQuestions(BranchQuestions):
    """Lines of the previous summary: do they still hold after the new turns?  Criterion first."""

    carried = True

    def shared(self) -> str | None:
        first = self.prompts()[0]
        return first[:first.rindex(LINE_OPEN + self.lines[0])]  # the branch and the criterion

    def decision(self) -> Decision:
        return Decision(self.ctx.record, tuple(decision_carried_claim(self.slot.title, line) for line in self.lines))


@sgl.function
def first_line(s, shared, ctx, line, slot=None):
    """The engine's question about ``line`` as the first line of ``slot`` (the first slot by default),
    asked of ``ctx.judge``.

    The launcher's probe and the judge benchmark: the shared prefix and the
    slot's opening are the slot program's own (:func:`~.steps.fork_slots`,
    :func:`~.steps.open_slot`), so the judge is asked exactly what a
    compaction asks it.  A fork of one sends no prefill; the decision judge
    sends no program text at all.  Returns ``(verdict, meta)``.
    """
    slot = slot or ctx.slots[0]
    if ctx.judge.name != "program":
        (v,), meta = ctx.judge.judge(LineQuestions(None, slot, (line,), ctx))
        return v, meta
    run = SlotRun(ctx, shared)
    (branch,) = fork_slots(s, run, n=1)
    try:
        open_slot(branch, slot, run)
        (v,), meta = ctx.judge.judge(LineQuestions(branch, slot, (line,), ctx))
    finally:
        retire([branch])
    return v, meta
