"""The two judges: the program's label-logprob judge and sglang's ``POST /v1/decisions``.

Both follow :class:`~sgl_speccompact.core.judging.Judge`: a batch of
questions (:mod:`~.questions`) in, one gated
:class:`~sgl_speccompact.result.Verdict` per question out, in a
:class:`~sgl_speccompact.core.judging.Judged` with what the requests cost.
Every judging path asks one of them -- a drafted line and ``verify_line``
(:func:`verify_line`), a branch's carried lines, SJC's entries, the
launcher's probe (:func:`first_line`) -- and :func:`make_judge` picks the
one ``config.judge`` names.

:class:`ProgramJudge` is the paper's protocol: each question is the branch
(shared prefix, slot request, accepted lines) with the judge question after
it, and the verdict reads the label words' next-token logprobs.  A batch is
ONE prefill-only request on a target whose ``judge_batch`` judges in one
request (``SpecCompactEndpoint``), after one prefill of the part every
prompt shares when it has two or more (its tokens counted like the
batch's); a target that declines (a plain ``RuntimeEndpoint``, a scripted
test backend), or ``one_request_judging`` off, is asked one ``select`` per
prompt, concurrently.

:class:`DecisionJudge` asks sglang 0.5.23's own decision route
(``sglang/srt/entrypoints/openai/serving_decisions.py``).  The route takes
one ``input`` and many questions; for a ``yes_no`` question it renders::

    <input>

    Is the following true? <claim>
    Answer with yes or no only.

as one user turn of the model's own chat template (reasoning off; a
template that leaves a reasoning block open at the answer is refused),
scores the ``yes`` and ``no`` tokens of every question in one call, and
answers per question ``probabilities`` (the two labels' softmax) and
``label_mass`` (their full-vocabulary probability).  So p+ = P(yes) x mass
and p- = P(no) x mass, and the verdict is the engine's rule,
r = p+/(p+ + p-) >= eta.  It trades the shared radix prefix for the
server's wording, which a small model may answer with far more label mass;
the launcher's probe measures both (:mod:`~sgl_speccompact.methods.judge_probe`).

Either way every verdict passes the health gate (``min_label_mass``).
"""

from __future__ import annotations

import threading
from functools import partial

import sglang as sgl

from ..backends.contract import Backend
from ..backends.endpoint import LabelJudgement, connect
from ..config import CompactConfig
from ..core.judge import Verdict, label_choices, verdict
from ..core.judging import Judge, Judged, Questions
from ..errors import BackendError, ConfigError
from ..schema import Slot
from .context import SlotContext, SlotRun
from .questions import CarriedQuestions, LineQuestions
from .states import retire, run_concurrently
from .steps import fork_slots, open_slot, result_of

SELECTS_AT_ONCE = 64  # prompts judged concurrently, one select each, where the target declines batches
YES, NO = "yes", "no"  # the decision route's labels for a yes_no question (its PROMPT_FORMAT_VERSION 1)
PROMPT_FORMAT_VERSION = 1  # the server-owned wording the decision judge was written for: another is refused


# ---------------------------------------------------------------- the program judge


@sgl.function
def prefill_text(s, text):
    """Prefill ``text`` once (prefill-only): the part every prompt of a batch starts with."""
    s += text
    s += sgl.gen("prefill", max_tokens=0)


def prefill(target: Backend, text: str) -> Judged:
    """Run :func:`prefill_text`: no verdict, the cost of its one request."""
    state = prefill_text.run(text=text, backend=target)
    try:
        _, meta = result_of(state, "prefill")
    finally:
        retire([state])
    return Judged.read((), meta, requests=1)


@sgl.function
def judge_select(s, text, choices, method):
    """One prompt judged as a select: the text (it ends where the label is generated), then the labels."""
    s += text
    s += sgl.select("verdict", choices=choices, choices_method=method)


def select_each(target: Backend, texts: list[str], cfg: CompactConfig, eta: float) -> Judged:
    """Every prompt as its own :func:`judge_select`, at most :data:`SELECTS_AT_ONCE` at a time."""
    choices, n_positive = label_choices(cfg.positive_label, cfg.negative_label)
    method = LabelJudgement(eta, one_request=cfg.one_request_judging, n_positive=n_positive)
    out = Judged()
    for i in range(0, len(texts), SELECTS_AT_ONCE):
        jobs = [partial(_select_one, target, t, choices, method) for t in texts[i:i + SELECTS_AT_ONCE]]
        for one in run_concurrently(jobs, threading.Event()):
            out = out + one
    return out


def _select_one(target: Backend, text: str, choices: list[str], method: LabelJudgement) -> Judged:
    state = judge_select.run(text=text, choices=choices, method=method, backend=target)
    try:
        _, meta = result_of(state, "verdict")
    finally:
        retire([state])
    return Judged.read((meta["verdict"],), meta, requests=int(meta.get("requests") or 1))


class ProgramJudge:
    """A :class:`~sgl_speccompact.core.judging.Judge` reading the label words' logprobs after the program's prompt.

    Parameters
    ----------
    target : Backend
        The target (its ``judge_batch`` and ``select``).
    cfg : CompactConfig
        Label words, ``min_label_mass``, ``one_request_judging``.
    """

    name = "program"

    def __init__(self, target: Backend, cfg: CompactConfig):
        self.target = target  # sends the requests
        self.cfg = cfg  # labels, gate, one_request_judging

    def judge(self, questions: Questions) -> Judged:
        """One batch: the shared part prefilled once (two or more prompts), then one request, or one select each."""
        texts = questions.prompts()
        if not texts:
            return Judged()
        cfg = self.cfg
        shared = questions.shared() if len(texts) > 1 else None
        # items of one batch arriving together each miss a prefix none of them has cached yet
        warm = prefill(self.target, shared) if shared else Judged()
        got = (self.target.judge_batch(texts, cfg.positive_label, cfg.negative_label, questions.eta)
               if cfg.one_request_judging else None)
        got = got if got is not None else select_each(self.target, texts, cfg, questions.eta)
        return (warm + got).gated(cfg.min_label_mass)


# ---------------------------------------------------------------- the decision judge


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
        """One request for the whole batch; its ``usage.prompt_tokens`` as the prompt tokens.

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
            return Judged()
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
        return Judged(tuple(verdicts), requests=1, prompt_tokens=int((out.get("usage") or {}).get("prompt_tokens") or 0))


def make_judge(target: Backend, cfg: CompactConfig) -> Judge:
    """The judge ``cfg.judge`` names, on ``target``."""
    return DecisionJudge(target, cfg) if cfg.judge == "decisions" else ProgramJudge(target, cfg)


# ---------------------------------------------------------------- one line, for the engine and your pipeline


def verify_line(s, slot: Slot, line: str, ctx: SlotContext, carried: bool = False,
                accepted: tuple[str, ...] = ()) -> Judged:
    """Judge ``line`` as the next line of branch ``s`` with ``ctx.judge``; the branch is not changed.

    The engine's own question: a drafted line is judged through here.
    ``carried``: a previous summary's line, asked whether it still holds.
    ``accepted``: the branch's lines so far, which the decision route's
    input ends with (the program judge reads them from ``s``).  With
    ``ctx.judge`` None, the config's judge (:func:`make_judge`) on
    ``ctx.target``, or on the backend ``s`` runs on.  The question is asked
    on a copy of the branch (a 1-way fork sends nothing), so on
    ``SpecCompactEndpoint`` this costs one target request.

    Returns
    -------
    Judged
        ``verdicts[0]``: the gated verdict; ``requests`` and the token counts.
    """
    judge = ctx.judge
    if judge is None:
        judge = make_judge(ctx.target if ctx.target is not None else connect(s.stream_executor.backend), ctx.cfg)
    if carried:
        return judge.judge(CarriedQuestions(s, slot, (line,), ctx))
    return judge.judge(LineQuestions(s, slot, (line,), ctx, accepted=tuple(accepted)))


@sgl.function
def first_line(s, shared, ctx, line, slot=None):
    """The engine's question about ``line`` as the first line of ``slot`` (the first slot by default),
    asked of ``ctx.judge``.

    The launcher's probe and the judge benchmark: the shared prefix and the
    slot's opening are the slot program's own (:func:`~.steps.fork_slots`,
    :func:`~.steps.open_slot`), so the judge is asked exactly what a
    compaction asks it.  A fork of one sends no prefill; the decision judge
    sends no program text at all.  Returns a :class:`~sgl_speccompact.core.judging.Judged`.
    """
    slot = slot or ctx.slots[0]
    if ctx.judge.name != "program":
        return verify_line(None, slot, line, ctx)
    run = SlotRun(ctx, shared)
    (branch,) = fork_slots(s, run, n=1)
    try:
        open_slot(branch, slot, run)
        return verify_line(branch, slot, line, ctx)
    finally:
        retire([branch])
