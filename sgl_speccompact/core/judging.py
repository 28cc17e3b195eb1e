"""What a judge is asked and what it answers: the one judging interface (pure).

Every judging path -- a drafted line, a slot branch's carried lines, the
entries of a summary (Source-Judged Compaction) and the launcher's probe --
hands a :class:`Judge` one batch of :class:`Questions` and gets back one
:class:`~.judge.Verdict` per question, in order, with the health gate
applied (``min_label_mass``: an unreliable verdict accepts, keeps and
deletes nothing).

A batch is rendered the way each judge asks it:

* the **program judge** (:class:`~sgl_speccompact.programs.judges.ProgramJudge`)
  sends :meth:`Questions.prompts`, full chat-templated prompts that end
  where the label word is generated, as one prefill-only batch, after one
  prefill of :meth:`Questions.shared` (the part every prompt starts with);
* the **decision judge** (:class:`~sgl_speccompact.backends.decision_judge.DecisionJudge`)
  sends :meth:`Questions.decision` to sglang's ``POST /v1/decisions``: one
  plain-text ``input`` and one yes/no claim per question, rendered by the
  server with the model's own chat template.

A target that cannot judge a batch in one request is asked one prompt at a
time, by every path alike (one policy: the program judge's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .judge import Verdict

Judged = tuple[list[Verdict], dict]  # one verdict per question, in order; the requests' summed meta


@dataclass(frozen=True)
class Decision:
    """One batch as sglang's ``/v1/decisions`` reads it."""

    input: str  # the text every question is about (plain text: the server applies the chat template)
    claims: tuple[str, ...]  # one yes/no statement per question, in order ("Is the following true? ...")


@runtime_checkable
class Questions(Protocol):
    """One batch of judge questions, renderable for either judge."""

    eta: float  # a verdict accepts when r = p+/(p+ + p-) >= eta

    def __len__(self) -> int:
        """How many questions the batch holds."""

    def prompts(self) -> list[str]:
        """The program judge's full prompts, one per question (each ends where the label is generated)."""

    def shared(self) -> str | None:
        """The text every prompt starts with, prefilled once before a batch of two or more (None: none)."""

    def decision(self) -> Decision:
        """The decision route's input and claims."""


@runtime_checkable
class Judge(Protocol):
    """Turns a batch of questions into verdicts."""

    name: str  # "program" or "decisions" (config.judge)

    def judge(self, questions: Questions) -> Judged:
        """One gated verdict per question, in order, and the requests' meta (``requests``, token counts)."""
