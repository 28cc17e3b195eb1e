"""An SGLang ``RuntimeEndpoint`` that judges a line with one request.

``sgl.select(choices=<every label variant>, choices_method=LabelJudgement(...))``
is the verification step of every program.  On sglang's plain
``RuntimeEndpoint`` it costs two requests (a prefill, then one batch
scoring every choice).  :class:`SpecCompactEndpoint` serves the same select
with ONE prefill-only ``/generate`` request::

    {"text": ..., "sampling_params": {"max_new_tokens": 0, "temperature": 0},
     "return_logprob": true, "token_ids_logprob": [ids of every label variant],
     "top_logprobs_num": 5}

and reads ``meta_info.output_token_ids_logprobs[0]``: exact next-token
probabilities of every variant, no top-k truncation.  Both paths apply one
rule (:func:`~sgl_speccompact.core.judge.judge_next_token`): the best
single-token variant per label, r = p+/(p+ + p-); a label the server
returned no logprob for is filled in from the top-k by the paper's
missing-label rule, and with no top-k either the judgement is a
``LabelLogprobError`` (a server that ignores ``token_ids_logprob``).  It also judges many
prompts in one batch request, asks sglang's ``POST /v1/decisions``
(:meth:`SpecCompactEndpoint.decide`, the decision judge's route), and picks
the chat template (Qwen3 thinking disabled).

The transport under it (pooled connections, timeouts, typed errors,
``lora_path``, ``/tokenize``, prompts as ``input_ids``) is
:class:`sgl_speccompact.backends.http.HttpEndpoint`.
"""

from __future__ import annotations

import time

from sglang.lang.chat_template import get_chat_template
from sglang.lang.choices import ChoicesDecision, ChoicesSamplingMethod
from sglang.lang.global_config import global_config

from .chat_format import ChatFormat, decide
from .contract import Backend, PlainBackend, ProgramBackend
from .http import HttpEndpoint, http_error  # noqa: F401 - public here too
from ..errors import BackendError
from ..core.judge import (LabelTokens, Verdict, choice_logprobs, judge_next_token, label_choices, label_variants,
                          resolve_label_tokens)
from ..core.judging import Judged
from .plain_select import plain_select
from ..core.prompts import THINK_OFF


JUDGE_TOP_K = 5  # top-k logprobs asked with each judgement: the missing-label rule's input


class LabelJudgement(ChoicesSamplingMethod):
    """``choices_method`` for the judge select: r = p+/(p+ + p-) >= eta.

    The positive label's variants are ``choices[:n_positive]``, the
    negative label's the rest.  On a plain ``RuntimeEndpoint`` (and with
    ``one_request`` off) each choice is scored by its own next-token logprob
    after the prompt, and a label's probability is its best choice's;
    :class:`SpecCompactEndpoint` asks exact next-token logprobs of every
    single-token variant of both label words (``Positive``, `` positive``,
    ...) in one request, and its two-request select scores every variant too.
    On sglang's own ``RuntimeEndpoint`` pass every variant
    (``choices=label_choices("positive", "negative")[0]`` with
    ``n_positive=6``, :func:`~sgl_speccompact.core.judge.label_choices`) and
    it reads the same variants: the verdict is then the engine's.
    A verdict whose labels carry less than ``min_label_mass`` is unreliable
    and accepts nothing (:func:`~sgl_speccompact.core.judge.gate`).
    """

    def __init__(self, eta: float, one_request: bool = True, n_positive: int = 1, min_label_mass: float = 0.0):
        self.eta = eta  # acceptance threshold on r
        self.one_request = one_request  # False: SpecCompactEndpoint uses sglang's plain select too
        self.n_positive = n_positive  # choices[:n_positive] are the positive label's variants
        self.min_label_mass = min_label_mass  # below this p+ + p- the verdict is unreliable

    def __call__(self, *, choices, normalized_prompt_logprobs, input_token_logprobs,
                 output_token_logprobs, unconditional_token_logprobs=None) -> ChoicesDecision:
        lps = choice_logprobs(input_token_logprobs)
        labels = LabelTokens(tuple(range(self.n_positive)), tuple(range(self.n_positive, len(choices))))
        v = judge_next_token(dict(enumerate(lps)), None, labels, self.eta, self.min_label_mass)
        # the plain endpoint's select is a prefill plus one scoring request
        return decision(choices, v, {"requests": 2}, self.n_positive)


def decision(choices: list[str], v: Verdict, meta: dict, n_positive: int = 1) -> ChoicesDecision:
    """The select result for a verdict: the positive label if accepted, else the negative one;
    ``meta["verdict"]`` holds the :class:`~sgl_speccompact.result.Verdict` itself."""
    return ChoicesDecision(choices[0] if v.accepted else choices[n_positive], {**meta, "verdict": v})


def next_token_logprobs(meta: dict, what: str) -> dict[int, float]:
    """``{token id: logprob}`` of the requested ids at the first output position ({} if absent).

    >>> next_token_logprobs({"output_token_ids_logprobs": [[[-0.1, 7, None], [-2.3, 9, None]]]}, "x")
    {7: -0.1, 9: -2.3}
    """
    positions = meta.get("output_token_ids_logprobs") or []
    return {int(tok): lp for lp, tok, *_ in (positions[0] or [])} if positions else {}


def top_logprobs(meta: dict) -> list[tuple[int, float]]:
    """``[(token id, logprob)]`` of the top-k at the first output position ([] if absent).

    >>> top_logprobs({"output_top_logprobs": [[[-0.1, 7, None]]]})
    [(7, -0.1)]
    """
    positions = meta.get("output_top_logprobs") or []
    return [(int(tok), lp) for lp, tok, *_ in (positions[0] or [])] if positions else []


def judge_meta(meta: dict, labels: LabelTokens, eta: float, what: str, min_label_mass: float = 0.0) -> Verdict:
    """The verdict of one judge answer; ``LabelLogprobError`` if it carries no label logprobs."""
    try:
        return judge_next_token(next_token_logprobs(meta, what), top_logprobs(meta), labels, eta, min_label_mass)
    except BackendError as exc:
        raise type(exc)(f"{what}: {exc} (does the server honour token_ids_logprob?)") from None


def judge_body(text, labels: LabelTokens) -> dict:
    """The prefill-only ``/generate`` body of a judgement (``text``: one prompt or a batch)."""
    return {"text": text, "sampling_params": {"max_new_tokens": 0, "temperature": 0},
            "return_logprob": True, "token_ids_logprob": labels.all_ids, "top_logprobs_num": JUDGE_TOP_K}


class SpecCompactEndpoint(HttpEndpoint):
    """``RuntimeEndpoint`` with one-request judging, LoRA, timeouts and typed errors.

    Parameters
    ----------
    base_url : str
        SGLang server, e.g. ``http://127.0.0.1:30000``.
    api_key : str, optional
        Bearer token of the SGLang server.
    chat_template : str, optional
        sglang frontend template name.  Default: decided from the served
        model (:func:`~sgl_speccompact.backends.chat_format.decide`: its
        ``model_type``, else its tokenizer); ``ChatTemplateError`` when it
        cannot be.
    lora_path : str, optional
        Adapter name sent with every request (a LoRA drafter).  One name for
        all requests keeps them in one radix-cache namespace.
    timeout_s : float
        Per-request timeout in seconds.
    disable_thinking : bool, optional
        Open assistant turns with an empty ``<think>`` block.  Default: on
        for Qwen3 models (as the server reports them).
    template_flag : str
        How the caller sets ``chat_template`` (a command-line flag, say),
        named in the error when the template cannot be decided.
    token_ids : bool, optional
        Send prompts as ``input_ids``.  ``None`` (default): when the server's
        tokenizer passes :func:`~sgl_speccompact.backends.token_ids.concatenates`
        (checked on first use); ``True``: the same, but a tokenizer that
        fails raises ``ConfigError``; ``False``: always text.  Behind
        sglang-router (no ``/tokenize`` of its own) the default sends text,
        which the router's cache-aware policy routes on.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, chat_template: str | None = None,
                 lora_path: str | None = None, timeout_s: float = 120.0,
                 disable_thinking: bool | None = None, token_ids: bool | None = None,
                 template_flag: str = "chat_template"):
        super().__init__(base_url, api_key=api_key, lora_path=lora_path, timeout_s=timeout_s, token_ids=token_ids)
        self.chat_format: ChatFormat = decide(self.model_info, self.single_token, name=chat_template,
                                              disable_thinking=disable_thinking, flag=template_flag)
        self.chat_template = get_chat_template(self.chat_format.template)
        self.assistant_prefix = THINK_OFF if self.chat_format.disable_thinking else ""
        self._labels: dict[tuple[str, str], LabelTokens] = {}

    # ------------------------------------------------------------------ sglang backend API

    def get_server_info(self):
        return self._request("GET", "/server_info")

    def flush_cache(self):
        self._request("POST", "/flush_cache")

    def cache_prefix(self, prefix_str: str):
        self._generate({"text": prefix_str, "sampling_params": {"max_new_tokens": 0}})

    def _generate_http_request(self, s, data):
        # sglang's plain select posts through here: use this endpoint's session, timeout and errors
        return self._generate(data)

    def commit_lazy_operations(self, s):
        t0 = time.perf_counter()
        out = self._generate({"text": s.text_, "sampling_params": {"max_new_tokens": 0}})
        # fork() discards the result; keep it so the caller can count this prefill
        s.meta_info["prefill"] = {**out["meta_info"], "wall_s": time.perf_counter() - t0}

    def generate(self, s, sampling_params):
        self._handle_dtype_to_regex(sampling_params)
        body = {
            "text": s.text_,
            "sampling_params": {
                "skip_special_tokens": global_config.skip_special_tokens_in_output,
                "spaces_between_special_tokens": global_config.spaces_between_special_tokens_in_out,
                **{k: v for k, v in sampling_params.to_srt_kwargs().items() if v is not None},
            },
        }
        for item in ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs"):
            value = getattr(sampling_params, item, None)
            if value is not None:
                body[item] = value
        out = self._generate(body)
        return out["text"], out["meta_info"]

    def generate_stream(self, s, sampling_params):
        raise NotImplementedError("SpecCompactEndpoint does not stream; use generate")

    def select(self, s, choices, temperature, choices_method=None):
        if not isinstance(choices_method, LabelJudgement):
            return plain_select(self, s, choices, temperature, choices_method)  # sglang's two requests
        if not choices_method.one_request:
            return self.select_every_variant(s, choices, temperature, choices_method)
        n = choices_method.n_positive
        labels = self.label_tokens(choices[0], choices[n])
        meta = self._generate(judge_body(s.text_, labels))["meta_info"]
        v = judge_meta(meta, labels, choices_method.eta, "judge request", choices_method.min_label_mass)
        # the server's own counts: a judgement that decoded anything shows it in the stats
        keep = {k: int(meta.get(k) or 0) for k in ("prompt_tokens", "cached_tokens", "completion_tokens")}
        return decision(choices, v, {**keep, "requests": 1}, n)

    def select_every_variant(self, s, choices, temperature, method: LabelJudgement) -> ChoicesDecision:
        """sglang's two-request select over every variant of both label words, whichever the program
        named: the verdict reads the variants the one-request judge reads."""
        n = method.n_positive
        every, n_every = label_choices(choices[0], choices[n])
        wide = LabelJudgement(method.eta, one_request=False, n_positive=n_every, min_label_mass=method.min_label_mass)
        d = plain_select(self, s, every, temperature, wide)
        return decision(choices, d.meta_info["verdict"], {k: x for k, x in d.meta_info.items() if k != "verdict"}, n)

    def judge_batch(self, texts: list[str], positive: str, negative: str, eta: float) -> Judged:
        """Judge many complete prompts with ONE prefill-only ``/generate`` request.

        Each text must end where the label word would be generated.  The
        server schedules the items together, and items sharing a prefix
        share it in the radix cache.  One text goes as one prompt, not a
        batch of one: the body of the one-request select.

        Parameters
        ----------
        texts : list of str
            Full prompts (chat template applied).
        positive, negative : str
            Label words.
        eta : float
            A judgement is accepted when r = p+/(p+ + p-) >= eta.

        Returns
        -------
        Judged
            One verdict per text, in order (not gated: the caller applies
            ``min_label_mass``); the token counts summed over the items
            (``completion_tokens`` as the server reports them, 0: prefill
            only), ``requests`` 1 (0 for no texts).
        """
        if not texts:
            return Judged()
        labels = self.label_tokens(positive, negative)
        out = self._generate(judge_body(texts[0] if len(texts) == 1 else list(texts), labels))
        if len(texts) == 1 and isinstance(out, dict):
            out = [out]
        if not isinstance(out, list) or len(out) != len(texts):
            raise BackendError(f"batch judge: expected {len(texts)} results, got {type(out).__name__}")
        got = Judged(requests=1)
        for i, item in enumerate(out):
            info = item.get("meta_info") or {}
            got = got + Judged.read((judge_meta(info, labels, eta, f"batch judge item {i}"),), info, requests=0)
        return got

    def decide(self, body: dict) -> dict:
        """``POST /v1/decisions`` (sglang 0.5.23's decision route): its answer, as the server sends it.

        The server renders ``body["input"]`` and each question with the
        model's chat template (reasoning off), scores every question's label
        tokens in one call and answers ``probabilities`` and ``label_mass``
        per question; a template that leaves a reasoning block open, or a
        server with a built-in (not Jinja) template, is refused with HTTP
        400 (:class:`~sgl_speccompact.errors.BackendError`).
        """
        # the server scores one request per question: the yield gate counts them so
        return self._post_gated("/v1/decisions", body, {"text": [q.get("id") for q in body.get("questions", [])]})

    # ------------------------------------------------------------------ label words

    def label_tokens(self, positive: str, negative: str) -> LabelTokens:
        """Single-token variants of both labels (cached); LabelTokenError if none."""
        key = (positive, negative)
        if key not in self._labels:
            forms = label_variants(positive) + label_variants(negative)
            ids = dict(zip(forms, self.tokenize(forms)))
            self._labels[key] = resolve_label_tokens(positive, negative, ids.__getitem__)
        return self._labels[key]


def connect(backend: "Backend | ProgramBackend | str | None", *, lora_path: str | None = None,
            timeout_s: float = 120.0, api_key: str | None = None) -> Backend:
    """A backend held to the contract (:mod:`~sgl_speccompact.backends.contract`).

    A base URL becomes a ``SpecCompactEndpoint``; a backend that offers the
    whole :class:`~sgl_speccompact.backends.contract.Backend` is itself; a
    plain sglang backend (``RuntimeEndpoint``) is held in a
    :class:`~sgl_speccompact.backends.contract.PlainBackend`.
    """
    if isinstance(backend, str):
        return SpecCompactEndpoint(backend, lora_path=lora_path, timeout_s=timeout_s, api_key=api_key)
    if backend is None:
        raise BackendError("no backend given")
    if isinstance(backend, Backend):
        return backend
    if isinstance(backend, ProgramBackend):
        return PlainBackend(backend)
    raise BackendError(f"not an sglang backend: {type(backend).__name__}")
