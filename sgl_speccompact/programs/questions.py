"""What each judging path asks: the batches of questions a :class:`~sgl_speccompact.core.judging.Judge` answers.

Three kinds of batch, each renderable for either judge
(:class:`~sgl_speccompact.core.judging.Questions`):

* :class:`LineQuestions` -- a proposed next line of a slot branch (a
  drafted line, the launcher's probe, ``verify_line``);
* :class:`CarriedQuestions` -- lines of the previous summary: do they still
  hold after the new turns?  (criterion first, so a batch shares it);
* :class:`EntryQuestions` -- entries of a finished summary: does each have
  a source?  (Source-Judged Compaction).

Rendering sends nothing.  The program judge's prompts are built by sglang's
own interpreter on copies of the branch (:func:`~.states.scratch`: a 1-way
fork sends no request) or by a prompt-only program run, so they are
byte-for-byte what a judge request carries; the decision route's input and
claims are plain text (:mod:`~sgl_speccompact.core.judge_prompts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sglang as sgl

from ..backends.contract import Backend
from ..config import CompactConfig
from ..core.entries import Entry
from ..core.judge_prompts import (decision_carried_claim, decision_line_claim, decision_section,
                                  decision_source_claim, source_judge_question)
from ..core.judging import Decision
from ..core.prompts import carried_question, verify_question
from ..schema import Slot
from .context import SlotContext
from .states import retire, scratch

LINE_OPEN = "<line>\n"  # where a carried question's own text starts (core/prompts.py CARRIED_QUESTION)


# ---------------------------------------------------------------- a slot branch's lines


def ask_verdict(v, slot: Slot, line: str, ctx: SlotContext, carried: bool = False) -> None:
    """Close the slot's turn on ``v`` (a copy of the branch) and ask the judge question about ``line``
    (``carried``: whether the previous summary's line still holds, its criterion first)."""
    cfg = ctx.cfg
    v += sgl.assistant_end()
    if carried:
        v += sgl.user(carried_question(slot, line, cfg.positive_label, cfg.negative_label))
    else:
        v += sgl.user(verify_question(slot, line, cfg.positive_label, cfg.negative_label, ctx.has_previous,
                                      short=cfg.short_judge_suffix))
    v += sgl.assistant_begin()
    v += ctx.target_prefix


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
    """A proposed next line of the branch, judged against the conversation and the lines so far."""

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


# ---------------------------------------------------------------- a summary's entries (SJC)


@dataclass(frozen=True)
class Sources:
    """What every SJC judge prompt of one summary starts with."""

    system: str | None  # the system turn; None: ``context`` is chat-templated and opens its own turns
    context: str  # text before each entry's question, identical for every entry; ends inside a user turn
    in_conversation: bool  # True: the compaction's shared prefix, whole conversation included
    short: bool = False  # the criterion is in ``context``: each question is only the entry


def judge_turn(s, system: str | None, context: str, question: str, assistant_prefix: str) -> None:
    """System turn, then sources + question as one user turn, then the opened answer.

    ``system`` None: ``context`` is already chat-templated text that ends
    inside a user turn (the agent layout's shared prefix).
    """
    if system is not None:
        s += sgl.system(system)
        s += sgl.user_begin()
    s += context  # shared by every entry: keep it first
    s += question
    s += sgl.user_end()
    s += sgl.assistant_begin()
    s += assistant_prefix


@sgl.function
def source_judge_prompt(s, system, context, question, assistant_prefix):
    """The SJC judge prompt up to the label token; text only, sends no request."""
    judge_turn(s, system, context, question, assistant_prefix)


@dataclass
class EntryQuestions:
    """A summary's entries as one batch of judge questions: does each have a source?"""

    entries: list[Entry]  # the entries asked about, in summary order
    src: Sources  # what every program prompt starts with
    target: Backend  # builds the program prompts with its chat template (sends nothing)
    cfg: CompactConfig  # labels, threshold
    has_previous: bool  # a previous summary is a source too
    record: str  # the decision route's input: the environment record and previous summary, plain text
    _prompts: list[str] | None = field(default=None, repr=False)  # built on first use

    @property
    def eta(self) -> float:
        return self.cfg.source_judge_threshold

    def __len__(self) -> int:
        return len(self.entries)

    def questions(self) -> list[str]:
        """Each entry's question, as the program prompts end with it."""
        pos, neg = self.cfg.positive_label, self.cfg.negative_label
        return [source_judge_question(e.text, e.section, pos, neg, self.has_previous, self.src.in_conversation,
                                      self.src.short) for e in self.entries]

    def prompts(self) -> list[str]:
        if self._prompts is None:
            common = dict(system=self.src.system, context=self.src.context,
                          assistant_prefix=self.target.assistant_prefix)
            self._prompts = [_text(source_judge_prompt.run(question=q, backend=self.target, **common))
                             for q in self.questions()]
        return self._prompts

    def shared(self) -> str | None:
        first = self.prompts()[0]
        return first[:first.rindex(self.questions()[0])]  # system turn and sources

    def decision(self) -> Decision:
        return Decision(self.record, tuple(decision_source_claim(e.section, e.text, self.has_previous)
                                           for e in self.entries))


def _text(state) -> str:
    """A prompt-building run's text (it sends nothing), its state retired."""
    try:
        return state.text()
    finally:
        retire([state])
