"""An SGLang ``RuntimeEndpoint`` that judges a line with one request.

``sgl.select(choices=[positive, negative], choices_method=LabelJudgement(...))``
is the verification step of every program.  On sglang's plain
``RuntimeEndpoint`` it costs two requests (a prefill, then one scoring
request per choice).  :class:`SpecCompactEndpoint` serves the same select
with ONE prefill-only ``/generate`` request::

    {"text": ..., "sampling_params": {"max_new_tokens": 0, "temperature": 0},
     "return_logprob": true, "token_ids_logprob": [ids of every label variant]}

and reads ``meta_info.output_token_ids_logprobs[0]``: exact next-token
probabilities of every variant, no top-k truncation.

It also adds what sglang's frontend cannot send (``lora_path`` for LoRA
drafters), applies a timeout to every request, maps transport failures to
:mod:`sgl_speccompact.errors`, counts tokens with the server's
``/tokenize``, and picks the chat template (Qwen3 thinking disabled).

Prompts go out as ``input_ids`` when the server's tokenizer allows it
(:mod:`sgl_speccompact.token_ids`): the shared history is then tokenized once
per compaction instead of once per request, and the ids are exactly those of
tokenizing the whole prompt text.
"""

from __future__ import annotations

import copy
import http.client
import math
import threading
import time
from dataclasses import asdict

import requests
import urllib3
from sglang.lang.backend.base_backend import BaseBackend
from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint
from sglang.lang.chat_template import get_chat_template
from sglang.lang.choices import ChoicesDecision, ChoicesSamplingMethod
from sglang.lang.global_config import global_config

from .chat_format import ChatFormat, decide
from .errors import (BackendError, BackendTimeoutError, BackendUnavailableError, ConfigError,
                     HistoryTooLongError, SpecCompactError)
from .judge import Judgement, LabelTokens, verdict, judge_exact, label_variants, resolve_label_tokens
from .plain_select import plain_select
from .prompts import THINK_OFF
from .router import ROUTING_KEY_HEADER, tokenize_base
from .token_ids import TokenIdCache, concatenates


POOL_SIZE = 64  # kept-alive connections per server: six slots, each with copies in flight

# sglang's tokenizer_manager rejects prompts over the context window with these words
CONTEXT_ERRORS = ("longer than the model's context length", "exceeds the model's maximum context length")


def closed_before_answer(exc: requests.ConnectionError) -> bool:
    """Whether the server closed the connection before it sent any answer.

    That is what a kept-alive connection looks like when the server's idle
    timeout (uvicorn's keep-alive, 5 s in sglang) closes it while a request
    goes out on it; the request is then sent once more, on a new connection.
    A refused connection is not this case.

    >>> closed_before_answer(requests.ConnectionError(urllib3.exceptions.ProtocolError(
    ...     "Connection aborted.", http.client.RemoteDisconnected("closed"))))
    True
    >>> closed_before_answer(requests.ConnectionError(ConnectionRefusedError(111, "refused")))
    False
    """
    inner = exc.args[0] if exc.args else None
    return (isinstance(inner, urllib3.exceptions.ProtocolError) and len(inner.args) > 1
            and isinstance(inner.args[1], (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)))


def http_error(url: str, status: int, body: str) -> SpecCompactError:
    """The typed error for a non-200 answer of an SGLang server.

    >>> type(http_error("u", 400, "The input (9 tokens) is longer than the model's context length (8 tokens).")).__name__
    'HistoryTooLongError'
    >>> type(http_error("u", 503, "")).__name__
    'BackendUnavailableError'
    """
    if status == 400 and any(words in body for words in CONTEXT_ERRORS):
        return HistoryTooLongError(f"the prompt does not fit the model served at {url}: {body[:300]}",
                                   field="messages")
    kind = BackendUnavailableError if status >= 500 else BackendError
    return kind(f"{url} returned HTTP {status}: {body[:300]}")


class LabelJudgement(ChoicesSamplingMethod):
    """``choices_method`` for the judge select: r = p+/(p+ + p-) >= eta.

    On a plain ``RuntimeEndpoint`` it scores each choice by the probability
    of its tokens (prefix tokens shared by both choices cancel in r).
    :class:`SpecCompactEndpoint` recognizes it and uses every single-token
    variant of both labels instead.
    """

    def __init__(self, eta: float, one_request: bool = True):
        self.eta = eta  # acceptance threshold on r
        self.one_request = one_request  # False: SpecCompactEndpoint uses sglang's plain select too

    def __call__(self, *, choices, normalized_prompt_logprobs, input_token_logprobs,
                 output_token_logprobs, unconditional_token_logprobs=None) -> ChoicesDecision:
        probs = [math.exp(sum(t[0] for t in toks if t[0] is not None)) for toks in input_token_logprobs]
        j = verdict(probs[0], probs[1], self.eta)
        # the plain endpoint's select is a prefill plus one scoring request
        return decision(choices, j, {"requests": 2})


def decision(choices: list[str], j: Judgement, meta: dict) -> ChoicesDecision:
    """The select result for a judgement: choices[0] if accepted else choices[1]."""
    return ChoicesDecision(choices[0] if j.accepted else choices[1], {**meta, "judgement": asdict(j)})


def next_token_logprobs(meta: dict, what: str) -> dict[int, float]:
    """``{token id: logprob}`` of the requested ids at the first output position.

    >>> next_token_logprobs({"output_token_ids_logprobs": [[[-0.1, 7, None], [-2.3, 9, None]]]}, "x")
    {7: -0.1, 9: -2.3}
    """
    positions = meta.get("output_token_ids_logprobs") or []
    if not positions or not positions[0]:
        raise BackendError(f"server returned no output_token_ids_logprobs for the {what}")
    return {int(tok): lp for lp, tok, *_ in positions[0]}


class _TokenIds:
    """Whether a server gets ``input_ids``, and its token-id cache (shared by an endpoint's views)."""

    def __init__(self, mode: bool | None):
        self.mode = mode  # None: if the tokenizer allows; True: required; False: never
        self.cache: TokenIdCache | None = None  # built on first use
        self.lock = threading.Lock()  # guards the fields; never held across a request
        self.deciding: threading.Event | None = None  # set while one thread checks the tokenizer

    def forget(self) -> None:
        """Drop the remembered segments; the tokenizer check stands (call with no request in flight)."""
        with self.lock:
            if self.cache is not None:
                self.cache.clear()


class SpecCompactEndpoint(RuntimeEndpoint):
    """``RuntimeEndpoint`` with one-request judging, LoRA, timeouts and typed errors.

    Parameters
    ----------
    base_url : str
        SGLang server, e.g. ``http://127.0.0.1:30000``.
    api_key : str, optional
        Bearer token of the SGLang server.
    chat_template : str, optional
        sglang frontend template name.  Default: decided from the served
        model (:func:`~sgl_speccompact.chat_format.decide`: its
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
    token_ids : bool, optional
        Send prompts as ``input_ids``.  ``None`` (default): when the server's
        tokenizer passes :func:`~sgl_speccompact.token_ids.concatenates`
        (checked on first use); ``True``: the same, but a tokenizer that
        fails raises ``ConfigError``; ``False``: always text.  Behind
        sglang-router (no ``/tokenize`` of its own) the default sends text,
        which the router's cache-aware policy routes on.
    """

    cancel_scope = None  # a CancelScope checked before every request (set on views, see with_cancel)

    def __init__(self, base_url: str, *, api_key: str | None = None, chat_template: str | None = None,
                 lora_path: str | None = None, timeout_s: float = 120.0,
                 disable_thinking: bool | None = None, token_ids: bool | None = None):
        BaseBackend.__init__(self)  # RuntimeEndpoint.__init__ would call the server without a timeout
        self.support_concate_and_append = False
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.verify = None
        self.lora_path = lora_path
        self.routing_key: str | None = None  # sent as X-SMG-Routing-Key (see with_routing_key)
        self.timeout_s = timeout_s
        # one pooled session for all threads: sglang runs every fork and every
        # verification copy on a fresh thread, and each should reuse a kept-alive connection
        self._http = requests.Session()
        pool = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=POOL_SIZE)
        self._http.mount("http://", pool)
        self._http.mount("https://", pool)
        self._tokenize_base: str | None = None  # where /tokenize goes (a worker when base_url is a router)
        self.model_info = self._request("GET", "/get_model_info")
        self._one_token: dict[str, bool] = {}
        self.chat_format: ChatFormat = decide(self.model_info, self.single_token, name=chat_template,
                                              disable_thinking=disable_thinking)
        self.chat_template = get_chat_template(self.chat_format.template)
        self.assistant_prefix = THINK_OFF if self.chat_format.disable_thinking else ""
        self._labels: dict[tuple[str, str], LabelTokens] = {}
        self.send_token_ids = True  # the compaction's preference (CompactConfig.send_token_ids)
        self._token_ids = _TokenIds(token_ids)  # shared by every view of this endpoint

    def with_cancel(self, scope) -> "SpecCompactEndpoint":
        """A view of this endpoint for one compaction, bound to ``scope``.

        It shares the connection pool and label cache; before each request
        it raises the scope's error once the scope is cancelled or past its
        deadline, and caps the request's timeout by the time left.
        """
        view = copy.copy(self)
        view.cancel_scope = scope
        return view

    # ------------------------------------------------------------------ transport

    def _request(self, method: str, path: str, body: dict | None = None, base: str | None = None):
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        if self.routing_key:  # sglang-router's manual policy pins one key to one worker
            headers[ROUTING_KEY_HEADER] = self.routing_key
        url = (base or self.base_url) + path
        timeout = self.timeout_s
        if self.cancel_scope is not None:
            self.cancel_scope.check()
            timeout = self.cancel_scope.timeout(timeout)
        try:
            try:
                res = self._http.request(method, url, json=body, headers=headers, timeout=timeout)
            except requests.ConnectionError as exc:
                if not closed_before_answer(exc):
                    raise
                # the server closed a kept-alive connection (its idle timeout) as this request went out
                res = self._http.request(method, url, json=body, headers=headers, timeout=timeout)
        except requests.Timeout as exc:
            if self.cancel_scope is not None and self.cancel_scope.cancelled:
                raise self.cancel_scope.error() from exc
            raise BackendTimeoutError(f"{url} did not answer within {timeout:g} s") from exc
        except requests.RequestException as exc:
            raise BackendUnavailableError(f"{url} unreachable: {exc.__class__.__name__}") from exc
        if res.status_code != 200:
            raise http_error(url, res.status_code, res.text)
        try:
            return res.json()
        except ValueError as exc:
            raise BackendError(f"{url} returned invalid JSON") from exc

    def _generate(self, body: dict):
        body = self.as_token_ids(body)
        if self.lora_path is not None:
            prompt = body.get("text", body.get("input_ids"))
            n = len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else None
            body["lora_path"] = [self.lora_path] * n if n else self.lora_path
        return self._request("POST", "/generate", body)

    def as_token_ids(self, body: dict) -> dict:
        """``body`` with its ``text`` (one or a batch) replaced by ``input_ids``, when enabled.

        The ids are exactly the server's tokenization of each full text; only
        segments not seen before are sent to ``/tokenize``.
        """
        text = body.get("text")
        if text is None or not self.send_token_ids or not text:
            return body
        cache = self._token_id_cache()
        if cache is None:
            return body
        # through this view's own connection: the cache may have been built by another compaction's view
        batch = [cache.ids(t, self.tokenize) for t in (text if isinstance(text, list) else [text])]
        if not all(batch):
            return body  # sglang refuses empty input_ids; an empty prompt goes as text
        out = {k: v for k, v in body.items() if k != "text"}
        out["input_ids"] = batch if isinstance(text, list) else batch[0]
        return out

    def with_token_ids(self, on: bool) -> "SpecCompactEndpoint":
        """A view that sends prompts as ``input_ids`` (``on``, when the tokenizer allows) or as text.

        Views share the token-id cache, so concurrent compactions with
        different settings do not change each other's requests.
        """
        if on == self.send_token_ids:
            return self
        view = copy.copy(self)
        view.send_token_ids = on
        return view

    def forget_token_ids(self) -> None:
        """Forget every remembered segment, so the next prompts are tokenized afresh (all views)."""
        self._token_ids.forget()

    @property
    def token_id_cache(self) -> TokenIdCache | None:
        """The token-id cache, once built (None before the first prompt, or when text is sent)."""
        return self._token_ids.cache

    def _token_id_cache(self) -> TokenIdCache | None:
        """The token-id cache, or None when this server's tokenizer cannot be cut (checked once).

        The check calls ``/tokenize``; no lock is held across it: other
        threads wait on an event until the first one has decided.
        """
        state = self._token_ids
        while True:
            with state.lock:
                if state.mode is False or state.cache is not None:
                    return state.cache
                gate, mine = state.deciding, state.deciding is None
                if mine:
                    gate = state.deciding = threading.Event()
            if not mine:
                gate.wait()
                continue
            try:
                built = self._build_token_id_cache(state.mode)
                with state.lock:
                    state.cache = built
                    if built is None:
                        state.mode = False
            finally:
                with state.lock:
                    state.deciding = None
                gate.set()

    def _build_token_id_cache(self, mode: bool | None) -> TokenIdCache | None:
        prefix = self.tokenize([""], add_special_tokens=True)[0]
        if self._tokenize_base is not None and not mode:
            return None  # behind sglang-router: its cache-aware policy routes on the prompt text
        if concatenates(lambda text: self.tokenize([text], add_special_tokens=True)[0], self.tokenize, prefix):
            return TokenIdCache(self.tokenize, prefix)
        if mode:
            raise ConfigError(f"{self.base_url}: this tokenizer does not split at line starts; "
                              "send text (token_ids=False)")
        return None

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
        if not isinstance(choices_method, LabelJudgement) or not choices_method.one_request:
            return plain_select(self, s, choices, temperature, choices_method)  # sglang's two requests
        labels = self.label_tokens(choices[0], choices[1])
        out = self._generate({
            "text": s.text_,
            "sampling_params": {"max_new_tokens": 0, "temperature": 0},
            "return_logprob": True,
            "token_ids_logprob": labels.all_ids,
        })
        meta = out["meta_info"]
        j = judge_exact(next_token_logprobs(meta, "judge request"), labels, choices_method.eta)
        keep = {k: meta.get(k) for k in ("prompt_tokens", "cached_tokens", "completion_tokens")}
        return decision(choices, j, {**keep, "completion_tokens": 0, "requests": 1})

    def judge_batch(self, texts: list[str], positive: str, negative: str,
                    eta: float) -> tuple[list[Judgement], dict]:
        """Judge many complete prompts with ONE prefill-only ``/generate`` batch.

        Each text must end where the label word would be generated.  The
        server schedules the items together, and items sharing a prefix
        share it in the radix cache.

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
        judgements : list of Judgement
            One per text, in order.
        meta : dict
            ``prompt_tokens`` and ``cached_tokens`` summed over the items,
            ``completion_tokens`` 0, ``requests`` 1 (0 for no texts).
        """
        meta = {"prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "requests": 0}
        if not texts:
            return [], meta
        labels = self.label_tokens(positive, negative)
        out = self._generate({
            "text": list(texts),
            "sampling_params": {"max_new_tokens": 0, "temperature": 0},
            "return_logprob": True,
            "token_ids_logprob": labels.all_ids,
        })
        if not isinstance(out, list) or len(out) != len(texts):
            raise BackendError(f"batch judge: expected {len(texts)} results, got {type(out).__name__}")
        meta["requests"] = 1
        judgements = []
        for i, item in enumerate(out):
            info = item.get("meta_info") or {}
            judgements.append(judge_exact(next_token_logprobs(info, f"batch judge item {i}"), labels, eta))
            for k in ("prompt_tokens", "cached_tokens"):
                meta[k] += int(info.get(k) or 0)
        return judgements, meta

    def with_routing_key(self, key: str | None) -> "SpecCompactEndpoint":
        """This endpoint, sending ``X-SMG-Routing-Key: key`` with every request.

        Behind sglang-router's ``manual`` policy, requests with one key land
        on one worker: give a compaction the key its agent's session uses.
        The copy shares the connection pool and label cache.
        """
        if not key:
            return self
        other = copy.copy(self)
        other.routing_key = key
        return other

    def sample_n(self, text: str, sampling_params: dict) -> tuple[list[tuple[str, dict | None]], dict]:
        """``sampling_params["n"]`` samples of one prompt with ONE ``/generate`` request.

        sglang's parallel sampling: ``SamplingParams.n``, which
        ``GenerateReqInput._handle_parallel_sampling`` (sglang 0.5.23
        ``srt/managers/io_struct.py``) turns into ``parallel_sample_num``
        copies of the prompt sharing one prefill; the answer is a list of n
        results.

        Returns
        -------
        samples : list of (str, dict)
            Each sample's text and ``meta_info.finish_reason``.
        meta : dict
            Token counts summed over the samples, ``requests`` 1.
        """
        n = int(sampling_params.get("n", 1))
        out = self._generate({"text": text, "sampling_params": dict(sampling_params)})
        items = out if isinstance(out, list) else [out]
        if len(items) != n:
            raise BackendError(f"parallel sampling: expected {n} results, got {len(items)}")
        meta = {"prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "requests": 1}
        for item in items:
            info = item.get("meta_info") or {}
            for k in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                meta[k] += int(info.get(k) or 0)
        return [(item.get("text", ""), (item.get("meta_info") or {}).get("finish_reason")) for item in items], meta

    # ------------------------------------------------------------------ tokenizer

    def tokenize(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        """Token ids of each text in the server's tokenizer (by default no special tokens added)."""
        if not texts:
            return []
        body = {"prompt": list(texts), "add_special_tokens": add_special_tokens}
        if self._tokenize_base is None:
            try:
                out = self._request("POST", "/tokenize", body)
            except BackendError as exc:  # sglang-router has no /tokenize: one of its workers tokenizes
                if "returned HTTP 404" not in str(exc):
                    raise
                self._tokenize_base = tokenize_base(self.base_url, self._http, self.api_key, self.timeout_s)
                if self._tokenize_base == self.base_url:
                    raise
        if self._tokenize_base is not None:
            out = self._request("POST", "/tokenize", body, base=self._tokenize_base)
        tokens = out["tokens"]
        return tokens if texts and isinstance(tokens[0], list) else [tokens]

    def single_token(self, text: str) -> bool:
        """Whether the server's tokenizer encodes ``text`` as one token (the chat markers asked together)."""
        if text not in self._one_token:
            asked = list(dict.fromkeys([text, "<|im_start|>", "<|im_end|>", "<think>", "</think>"]))
            for t, ids in zip(asked, self.tokenize(asked)):
                self._one_token[t] = len(ids) == 1
        return self._one_token[text]

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Length of each text in target tokens."""
        return [len(t) for t in self.tokenize(texts)]

    def label_tokens(self, positive: str, negative: str) -> LabelTokens:
        """Single-token variants of both labels (cached); LabelTokenError if none."""
        key = (positive, negative)
        if key not in self._labels:
            forms = label_variants(positive) + label_variants(negative)
            ids = dict(zip(forms, self.tokenize(forms)))
            self._labels[key] = resolve_label_tokens(positive, negative, ids.__getitem__)
        return self._labels[key]


def connect(backend, *, lora_path: str | None = None, timeout_s: float = 120.0, api_key: str | None = None):
    """A backend from a base URL (``SpecCompactEndpoint``) or the backend itself."""
    if isinstance(backend, str):
        return SpecCompactEndpoint(backend, lora_path=lora_path, timeout_s=timeout_s, api_key=api_key)
    if backend is None:
        raise BackendError("no backend given")
    return backend


def approx_token_count(texts: list[str]) -> list[int]:
    """Rough length in tokens (4 characters each) for backends without a tokenizer.

    >>> approx_token_count(["abcdefgh", ""])
    [2, 0]
    """
    return [(len(t) + 3) // 4 for t in texts]


def token_counter(backend):
    """``texts -> token lengths`` in ``backend``'s tokenizer.

    ``count_tokens`` of the backend if it has one; the server's ``/tokenize``
    for a plain ``RuntimeEndpoint``; otherwise :func:`approx_token_count`.
    """
    if hasattr(backend, "count_tokens"):
        return backend.count_tokens
    if isinstance(backend, RuntimeEndpoint):
        url = backend.base_url.rstrip("/") + "/tokenize"
        headers = {"Authorization": f"Bearer {backend.api_key}"} if backend.api_key else {}

        def count(texts: list[str]) -> list[int]:
            if not texts:
                return []
            try:
                res = requests.post(url, json={"prompt": list(texts), "add_special_tokens": False},
                                    headers=headers, timeout=60)
                res.raise_for_status()
            except requests.RequestException as exc:
                raise BackendUnavailableError(f"{url}: {exc}") from exc
            return [int(c) for c in res.json()["count"]]

        return count
    return approx_token_count
