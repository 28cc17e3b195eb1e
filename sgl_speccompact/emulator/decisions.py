"""The emulator's ``POST /v1/decisions``: sglang 0.5.23's decision route, on the same engine.

The route (``sglang/srt/entrypoints/openai/serving_decisions.py``) answers
typed questions about one input by scoring single-token answer labels,
without generation.  The emulator serves it with the server's semantics:

1. the body is validated by sglang's own ``DecisionRequest``; a request the
   server refuses before rendering (images on a text-only model, another
   ``prompt_format_version``, reasoning turned on in ``chat_template_kwargs``
   where the template has the ``enable_thinking`` toggle) is refused with the
   same words;
2. each question is worded by sglang's own ``render_question``
   (``PROMPT_FORMAT_VERSION`` 1) and rendered with the model's chat template
   as one user turn, generation prompt on, reasoning off; a template that
   leaves a reasoning block open at the answer, or a label that is not one
   distinct token after the prompt (sglang's ``label_context`` /
   ``label_token_id``), is a 400 naming the question;
3. every question's prompt ids run as one prefill-only scoring job on the
   emulator's engine (same radix tree, same ``cached_tokens``, same cost
   model), asking the labels' exact logprobs; the policy is told the labels
   (``params["labels"]``);
4. the answer is sglang's ``DecisionResponse``: per question
   ``probabilities`` (the labels' softmax at the request's temperature) and
   ``label_mass`` (their full-vocabulary probability), and
   ``usage.prompt_tokens``.
"""

from __future__ import annotations

import functools
import math

from .frontend import BadRequest, error_response

REASONING = ("<think>", "</think>")  # the Qwen3-style markers of a reasoning block (checked where the template has them)
TOGGLE = "enable_thinking"  # the template kwarg that turns reasoning on and off (where the template reads it)


@functools.cache
def _sglang():
    """sglang's decision route pieces (imported on first use)."""
    from sglang.srt.entrypoints.openai import serving_decisions as route
    from sglang.srt.entrypoints.openai.protocol import DecisionAnswer, DecisionRequest, DecisionResponse, UsageInfo

    return route, DecisionRequest, DecisionAnswer, DecisionResponse, UsageInfo


def parse(body, tokenizer) -> object:
    """sglang's ``DecisionRequest`` for ``body``, and the refusals before rendering; :class:`BadRequest`."""
    route, request_class, *_ = _sglang()
    try:
        req = request_class.model_validate(body)
    except Exception as exc:  # pydantic.ValidationError: the server's handler makes it a 400
        raise BadRequest(error_response(str(exc)), str(exc)) from exc
    refusal = _refusal(req, route.PROMPT_FORMAT_VERSION, _toggle(tokenizer))
    if refusal is not None:
        raise BadRequest(error_response(refusal, err_type="BadRequestError"), refusal)
    return req


def _toggle(tokenizer) -> str | None:
    """The reasoning toggle: ``enable_thinking`` for a template that reads it or writes reasoning markers
    (a Qwen3-style parser's toggle, as the server's reasoning parser names it); None for a template
    with no reasoning to turn off."""
    template = getattr(tokenizer, "chat_template", None) or ""
    return TOGGLE if TOGGLE in template or REASONING[0] in template else None


def _refusal(req, version: int, toggle: str | None) -> str | None:
    if req.images:
        return "/v1/decisions images require a model served with multimodal input, and some vision models need " \
               "--enable-multimodal"
    if req.prompt_format_version is not None and req.prompt_format_version != version:
        return f"prompt_format_version {req.prompt_format_version} is not served, this server uses version {version}"
    if toggle is not None and toggle in req.chat_template_kwargs and req.chat_template_kwargs[toggle] is not False:
        return f"chat_template_kwargs sets {toggle!r} to {req.chat_template_kwargs[toggle]!r}, but decisions need " \
               "it false or unset"
    return None


def encode(req, tokenizer, context_length: int) -> list[tuple[list[int], list[int], object]]:
    """``(prompt ids, label ids, view)`` per question, in order; a :class:`BadRequest` naming the question."""
    route = _sglang()[0]
    text = route.render_text(req.input)
    toggle = _toggle(tokenizer)
    kwargs = {**({toggle: False} if toggle else {}), **req.chat_template_kwargs}
    markers = REASONING[0] in (getattr(tokenizer, "chat_template", None) or "")
    added = {i: t for t, i in tokenizer.get_added_vocab().items()}
    out = []
    for q in req.questions:
        view = route._decision_view(q)
        labels = route.default_labels(view)
        try:
            out.append((*_encode_question(route, tokenizer, route.render_question(text=text, view=view, labels=labels),
                                          labels, kwargs, added, context_length, markers), view))
        except ValueError as exc:
            msg = f"question {q.id!r}: {exc}"
            raise BadRequest(error_response(msg, err_type="BadRequest"), msg) from exc
    return out


def _encode_question(route, tokenizer, content: str, labels: list[str], kwargs: dict, added: dict,
                     context_length: int, markers: bool) -> tuple[list[int], list[int]]:
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                           add_generation_prompt=True, **kwargs)
    closing = content.rsplit("\n", 1)[-1]  # the message's fixed last line: what follows it is the answer's opening
    cut = prompt.rfind(closing)
    opening = prompt if cut < 0 else prompt[cut + len(closing):]
    if markers and opening.rfind(REASONING[0]) > opening.rfind(REASONING[1]):
        raise ValueError("the chat template leaves a reasoning block open at the answer position, so this model "
                         "is not supported with these chat_template_kwargs")
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    if len(ids) >= context_length:
        raise ValueError(f"the prompt has {len(ids)} tokens, which does not fit the context length of "
                         f"{context_length} tokens")
    text, text_ids, _ = route.label_context(tokenizer, prompt, ids, added)
    label_ids = []
    for label in labels:
        token = route.label_token_id(tokenizer, text, text_ids, label)
        if token is None or token in label_ids:
            raise ValueError(f"the answer label {label!r} is not one distinct token after the chat prompt for this "
                             "tokenizer, so this model is not supported")
        label_ids.append(token)
    return ids, label_ids


def scoring_body(encoded: list) -> dict:
    """The prefill-only ``/generate`` batch that scores every question's labels (what ``score_prompts`` sends)."""
    return {"input_ids": [ids for ids, _, _ in encoded], "sampling_params": {"max_new_tokens": 0},
            "return_logprob": True, "token_ids_logprob": [labels for _, labels, _ in encoded]}


def response(req, encoded: list, results: list[dict]) -> dict:
    """sglang's ``DecisionResponse`` from the scoring results, one per question."""
    route, _, answer_class, response_class, usage_class = _sglang()
    answers, prompt_tokens = {}, 0
    for q, (ids, labels, view), out in zip(req.questions, encoded, results):
        meta = out["meta_info"]
        found = {int(tok): lp for lp, tok, *_ in (meta["output_token_ids_logprobs"][0] or [])}
        logprobs = [found[t] for t in labels]
        scaled = [lp / req.temperature for lp in logprobs]
        top = max(scaled)
        exp = [math.exp(x - top) for x in scaled]
        probs = [e / math.fsum(exp) for e in exp]
        value = {}
        if view.kind == "choice":
            value["choice"] = view.names[probs.index(max(probs))]
        elif view.kind == "score":
            value["score"] = math.fsum(i * p for i, p in enumerate(probs))
        answer = answer_class(type=q.type, probabilities=dict(zip(view.names, probs)),
                              label_mass=route.label_mass(logprobs), **value)
        if req.return_prompt_token_ids:
            answer.prompt_token_ids, answer.label_token_ids = ids, labels
        answers[q.id] = answer
        prompt_tokens += len(ids)
    usage = usage_class(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens)
    return response_class(model=req.model, prompt_format_version=route.PROMPT_FORMAT_VERSION, answers=answers,
                          usage=usage).model_dump(exclude_none=True)
