"""The decision judge: verdicts from sglang 0.5.23's own ``POST /v1/decisions`` route.

The route (``sglang/srt/entrypoints/openai/serving_decisions.py``) takes one
``input`` and many questions; for a ``yes_no`` question it renders::

    <input>

    Is the following true? <claim>
    Answer with yes or no only.

as one user turn of the model's own chat template (reasoning off; a template
that leaves a reasoning block open at the answer is refused), scores the
``yes`` and ``no`` tokens of every question in one call, and answers per
question ``probabilities`` (the two labels' softmax) and ``label_mass``
(their full-vocabulary probability).  So p+ = P(yes) x mass and
p- = P(no) x mass, and the verdict is the engine's rule, r = p+/(p+ + p-)
>= eta, behind the same health gate (:func:`~sgl_speccompact.core.judge.verdict`).

The label-logprob program judge (:mod:`~sgl_speccompact.programs.judges`)
stays the default: it is the paper's protocol and shares the slot's radix
prefix with the drafting.  This one trades that for the server's wording,
which a small model may answer with far more label mass; the launcher's
probe measures both (:mod:`~sgl_speccompact.methods.judge_probe`).
"""

from __future__ import annotations

from ..config import CompactConfig
from ..core.judge import Verdict, verdict
from ..core.judging import Judged, Questions
from ..errors import BackendError, ConfigError
from .contract import Backend

YES, NO = "yes", "no"  # the route's labels for a yes_no question (its PROMPT_FORMAT_VERSION 1)
PROMPT_FORMAT_VERSION = 1  # the server-owned wording this judge was written for: another is refused


def decision_body(questions: Questions) -> dict:
    """The ``/v1/decisions`` body of one batch: its input, one ``yes_no`` question per claim.

    ``prompt_format_version`` pins the wording: a server that renders
    another refuses the request instead of judging other questions.
    """
    d = questions.decision()
    return {"input": d.input, "prompt_format_version": PROMPT_FORMAT_VERSION,
            "questions": [{"id": f"q{i}", "type": "yes_no", "question": claim} for i, claim in enumerate(d.claims)]}


def read_answer(answer: dict, eta: float, min_label_mass: float) -> Verdict:
    """The verdict of one ``DecisionAnswer``: p+ and p- are the labels' share of their label mass.

    >>> v = read_answer({"probabilities": {"yes": 0.75, "no": 0.25}, "label_mass": 0.04}, 0.7, 0.1)
    >>> round(v.p_pos, 3), round(v.score, 2), v.accepted, v.reliable
    (0.03, 0.75, False, False)
    """
    try:
        probs, mass = answer["probabilities"], float(answer["label_mass"])
        return verdict(float(probs[YES]) * mass, float(probs[NO]) * mass, eta, min_label_mass=min_label_mass)
    except (KeyError, TypeError, ValueError) as exc:
        raise BackendError(f"/v1/decisions answered without yes/no probabilities and label_mass: {answer!r:.200}") \
            from exc


class DecisionJudge:
    """A :class:`~sgl_speccompact.core.judging.Judge` over the target's ``POST /v1/decisions``.

    Parameters
    ----------
    target : Backend
        The target; its ``decide`` sends the request (``SpecCompactEndpoint``,
        or a plain ``RuntimeEndpoint`` held in a ``PlainBackend``).
    cfg : CompactConfig
        ``min_label_mass`` (the health gate); ``eta`` comes with each batch.
    """

    name = "decisions"

    def __init__(self, target: Backend, cfg: CompactConfig):
        self.target = target  # sends the requests
        self.cfg = cfg  # min_label_mass

    def judge(self, questions: Questions) -> Judged:
        """One request for the whole batch; its ``usage.prompt_tokens`` as the meta's prompt tokens.

        Raises
        ------
        ConfigError
            The target has no decision route (a scripted in-process backend).
        BackendError
            The server refused the request (a built-in chat template, an open
            reasoning block, a label that is no single token) or answered
            without a question's answer.
        """
        if not len(questions):
            return [], {"requests": 0}
        body = decision_body(questions)
        out = self.target.decide(body)
        if out is None:
            raise ConfigError("judge 'decisions' needs a target that serves sglang's POST /v1/decisions "
                              "(SpecCompactEndpoint or RuntimeEndpoint)")
        answers = out.get("answers") or {}
        missing = [q["id"] for q in body["questions"] if q["id"] not in answers]
        if missing:
            raise BackendError(f"/v1/decisions left questions {missing[:5]} unanswered")
        verdicts = [read_answer(answers[q["id"]], questions.eta, self.cfg.min_label_mass) for q in body["questions"]]
        usage = out.get("usage") or {}
        return verdicts, {"requests": 1, "prompt_tokens": int(usage.get("prompt_tokens") or 0)}
