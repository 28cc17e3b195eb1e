"""What a judge is asked and what it answers: the one judging interface (pure).

Every judging path -- a drafted line, a slot branch's carried lines, the
entries of a summary (Source-Judged Compaction), the launcher's probe and
``programs.verify_line`` -- hands a :class:`Judge` one batch of
:class:`Questions` and gets back one :class:`Judged`: a
:class:`~sgl_speccompact.result.Verdict` per question, in order, with the
health gate applied (``min_label_mass``: an unreliable verdict accepts,
keeps and deletes nothing), and what its requests cost.

A batch is rendered the way each judge asks it:

* the **program judge** (:class:`~sgl_speccompact.programs.judges.ProgramJudge`)
  sends :meth:`Questions.prompts`, full chat-templated prompts that end
  where the label word is generated, as one prefill-only batch, after one
  prefill of :meth:`Questions.shared` (the part every prompt starts with);
* the **decision judge** (:class:`~sgl_speccompact.programs.judges.DecisionJudge`)
  sends :meth:`Questions.decision` to sglang's ``POST /v1/decisions``: one
  plain-text ``input`` and one yes/no claim per question, rendered by the
  server with the model's own chat template.

A target that cannot judge a batch in one request is asked one prompt at a
time, by every path alike (one policy: the program judge's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Protocol, runtime_checkable

from .judge import Verdict, gate

COUNTS = ("prompt_tokens", "cached_tokens", "completion_tokens")  # the token counts a Judged carries


@dataclass(frozen=True)
class Judged:
    """A judge's answer to one batch: one verdict per question, and what its requests cost.

    >>> a = Judged.read((), {"requests": 1, "prompt_tokens": 7})
    >>> b = Judged((Verdict(0.9, 0.1, 0.9, True),), requests=1, prompt_tokens=3, cached_tokens=2)
    >>> both = a + b
    >>> both.requests, both.prompt_tokens, both.counts["cached_tokens"], len(both.verdicts)
    (2, 10, 2, 1)
    """

    verdicts: tuple[Verdict, ...] = ()  # one per question, in order
    requests: int = 0  # requests the batch took
    prompt_tokens: int = 0  # prompt tokens, as the server reported them
    cached_tokens: int = 0  # of which served from the radix cache
    completion_tokens: int = 0  # generated tokens (0: prefill only)

    @classmethod
    def read(cls, verdicts, meta: Mapping, requests: int | None = None) -> "Judged":
        """``verdicts`` with the counts of a request's ``meta_info`` (``requests``: its own count if given)."""
        n = requests if requests is not None else int(meta.get("requests") or 0)
        return cls(tuple(verdicts), n, *(int(meta.get(k) or 0) for k in COUNTS))

    @property
    def counts(self) -> dict[str, int]:
        """The token counts, as :meth:`~sgl_speccompact.result.StatsRecorder.request` reads a request's meta."""
        return {k: getattr(self, k) for k in COUNTS}

    def __add__(self, other: "Judged") -> "Judged":
        """Two answers as one: the verdicts in order, the costs added."""
        return Judged(self.verdicts + other.verdicts, self.requests + other.requests,
                      *(getattr(self, k) + getattr(other, k) for k in COUNTS))

    def gated(self, min_label_mass: float) -> "Judged":
        """Every verdict behind the health gate (:func:`~.judge.gate`)."""
        return replace(self, verdicts=tuple(gate(v, min_label_mass) for v in self.verdicts))


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
        """One gated verdict per question, in order, and what the requests cost."""
