"""Request admission: what SGLang's HTTP server and TokenizerManager do
before a request reaches the scheduler, using sglang's own classes.

Order (``sglang/srt/entrypoints/http_server.py`` ``generate_request``):

1. FastAPI parses the body into ``GenerateReqInput`` (pydantic; unknown
   top-level keys ignored) -> HTTP 400 ``ErrorResponse`` on a type error.
2. ``api_contract.generate_contract_error`` (``GenerateRequest.from_json_value``
   = ``decode_GenerateRequest``) -> HTTP 400 ``{"error": msg}``; this is what
   rejects unknown ``sampling_params`` keys.
3. ``TokenizerManager.generate_request``: ``normalize_batch_and_arguments``,
   LoRA checks (a ``lora_path`` on a server without LoRA is a 400),
   tokenization, length checks (``_validate_one_request``),
   ``SamplingParams(**...).normalize(tokenizer)`` and ``.verify(vocab)`` ->
   ``ValueError`` -> HTTP 400 ``{"error": {"message": msg}}``.
4. Scheduler-side resolution (``scheduler.py`` ``handle_generate_request``
   and ``init_req_max_new_tokens``): a session request's prompt rebuilt from
   its session (:mod:`.session_tree`), ``logprob_start_len`` defaults and the
   ``max_new_tokens`` cap.

Importing ``sglang.srt.managers.io_struct`` takes several seconds (it pulls
in torch and transformers); it happens once per process, lazily.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from typing import Callable

from .jobs import Job, LogprobRequest
from .model import EmulatedModel
from .session_tree import Sessions

MAX_NEW_TOKENS_UNSET = 1 << 30  # init_req_max_new_tokens' "no limit"


class BadRequest(ValueError):
    """A request SGLang answers with HTTP 400; ``body`` is the exact JSON body."""

    def __init__(self, body: dict, message: str):
        super().__init__(message)
        self.body = body


@dataclass(frozen=True)
class ServedModel:
    """What the emulated server says about itself."""

    model_path: str  # reported model_path (picks RuntimeEndpoint's chat template)
    tokenizer_path: str  # directory of the Hugging Face tokenizer
    served_model_name: str  # reported served_model_name
    context_length: int  # context window in tokens (what /v1/models reports as max_model_len)
    lora_paths: tuple[str, ...] | None  # adapters loaded; None: LoRA not enabled (any lora_path is a 400)
    context_length_arg: int | None = None  # --context-length given at launch; /server_info reports it (else null)


@functools.cache
def _sglang():
    """sglang's server classes (imported on first use: slow import)."""
    from pydantic import TypeAdapter
    from sglang.srt.entrypoints.api_contract import generate_contract_error
    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    return TypeAdapter(GenerateReqInput), generate_contract_error, SamplingParams


def preload() -> None:
    """Import sglang's server classes now rather than on the first request."""
    _sglang()


def error_response(message: str, code: int = 400, err_type: str = "Bad Request") -> dict:
    """``sglang.srt.entrypoints.openai.protocol.ErrorResponse`` as a dict."""
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


def parse_generate(body, view=None) -> object:
    """Steps 1-2: pydantic parse, then the JSON contract.  Raises :class:`BadRequest`.

    ``view``: ``contract_view(body)`` when the caller made it already.
    """
    adapter, contract_error, _ = _sglang()
    try:
        obj = adapter.validate_python(body)
    except Exception as exc:  # pydantic.ValidationError, as FastAPI reports it
        raise BadRequest(error_response(str(exc)), str(exc)) from exc
    err = contract_error(contract_view(body) if view is None else view)
    if err is not None:
        raise BadRequest({"error": err}, err)
    return obj


def contract_view(body):
    """``body`` as the JSON contract judges it, with plain ``input_ids`` cut to one id per prompt.

    The contract checks each id on its own (an ``int``, not a ``bool``), in
    Python, which costs more than the rest of the request's admission.  When
    every id is exactly an ``int`` (checked at C speed: the set of their
    types) each of those checks passes, so the contract's verdict on the
    body equals its verdict on the body with one id per prompt kept (the
    same shape: a flat list stays flat, a batch keeps its prompts).  Any
    other ``input_ids`` is judged whole, with the contract's own message.

    >>> contract_view({"input_ids": [1, 2, 3], "text": None})
    {'input_ids': [1], 'text': None}
    >>> contract_view({"input_ids": [[1, 2], [], [3]]})["input_ids"], contract_view({"input_ids": [1, True]})["input_ids"]
    ([[1], [], [3]], [1, True])
    """
    ids = body.get("input_ids") if isinstance(body, dict) else None
    if type(ids) is not list or not ids:
        return body
    if type(ids[0]) is list:
        if not all(type(x) is list and _plain(x) for x in ids):
            return body
        cut = [x[:1] for x in ids]
    elif _plain(ids):
        cut = ids[:1]
    else:
        return body
    return {**body, "input_ids": cut}


def _plain(ids: list) -> bool:
    """Every element is exactly an ``int`` (an empty list too)."""
    return not ids or set(map(type, ids)) == {int}


class StopEncoder:
    """The tokenizer ``SamplingParams.normalize`` is given: the model's encode, each stop string encoded once.

    Requests repeat a handful of stop strings (``"\\n"``, a closing tag), and
    what a text encodes to never changes.
    """

    def __init__(self, model: EmulatedModel):
        self._model = model
        self._memo: dict[tuple[str, bool], tuple[int, ...]] = {}  # (stop, add_special_tokens) -> ids

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        key = (text, add_special_tokens)
        ids = self._memo.get(key)
        if ids is None:
            if len(self._memo) > 10_000:  # stop strings are few; a caller sending many gets no memo growth
                self._memo.clear()
            ids = self._memo[key] = tuple(self._model.encode(text, add_special_tokens=add_special_tokens))
        return list(ids)


class Frontend:
    """Turns a parsed ``GenerateReqInput`` into engine jobs (step 3-4)."""

    def __init__(self, model: EmulatedModel, served: ServedModel):
        self.model = model
        self.served = served
        self._stops = StopEncoder(model)  # what SamplingParams.normalize encodes with
        self.sessions = Sessions(getattr(model.tokenizer, "bos_token_id", None), served.context_length)

    def jobs(self, obj, on_update: Callable[[int], Callable[[dict, bool], None]]) -> tuple[list[Job], bool]:
        """Normalize ``obj`` and build one job per sample.

        Parameters
        ----------
        obj
            A parsed ``GenerateReqInput``.
        on_update
            ``on_update(index)`` gives the callback for the index-th job.

        Returns
        -------
        tuple[list[Job], bool]
            The jobs and whether the request was a single (non-batch) one.

        Raises
        ------
        ValueError
            Whatever SGLang rejects at this stage (HTTP 400).
        """
        obj.normalize_batch_and_arguments()
        self._validate_lora(obj.lora_path)  # before tokenizing, as generate_request does
        n = getattr(obj, "parallel_sample_num", 1)
        subs = [obj] if obj.is_single else [obj[i] for i in range(obj.batch_size)]
        jobs: list[Job] = []
        for sub in subs:
            for k in range(n):
                rid = sub.rid if n == 1 else uuid.uuid4().hex
                job = self._job(sub, rid, on_update(len(jobs)))
                job.sample, job.parallel = k, n
                jobs.append(job)
        return jobs, obj.is_single

    def _job(self, sub, rid: str, on_update) -> Job:
        ids, prompt = self._tokenize(sub)
        self._validate_lengths(ids, sub.sampling_params)
        self._validate_token_ids_logprob(sub.token_ids_logprob)
        restored = self.sessions.restore(sub.session_params, rid, ids) if sub.session_params else None
        if restored is not None:  # the scheduler rebuilds a session request's prompt (session_tree.py)
            ids, prompt = restored.input_ids, self.model.decode(restored.input_ids)
        sampling = self._sampling(sub.sampling_params, len(ids))
        lp = self._logprobs(sub, len(ids), sampling.max_new_tokens == 0)
        extra = sub.extra_key
        if sub.lora_path is not None:
            extra = (extra or "") + sub.lora_path  # Req.__init__: lora id joins the extra key
        job = Job(
            rid=rid, prompt=prompt, input_ids=ids, sampling=sampling, lora_path=sub.lora_path,
            namespace=(extra, sub.cache_salt or None), logprobs=lp, stream=bool(sub.stream),
            on_update=on_update,
        )
        if restored is not None:
            self.sessions.bind(restored, job)
        return job

    def _tokenize(self, sub) -> tuple[list[int], str]:
        # _tokenize_one_request: given input_ids win over text.
        if sub.input_ids is not None:
            ids = list(sub.input_ids)
            return ids, self.model.prompt_text(ids)
        return self.model.encode(sub.text, add_special_tokens=True), sub.text

    def _validate_lengths(self, ids: list[int], sampling_params: dict) -> None:
        ctx, n = self.served.context_length, len(ids)
        if n >= ctx:
            raise ValueError(
                f"The input ({n} tokens) is longer than the model's context length ({ctx} tokens)."
            )
        mnt = (sampling_params or {}).get("max_new_tokens")
        if mnt is not None and mnt + n > ctx:
            raise ValueError(
                f"Requested token count exceeds the model's maximum context length of {ctx} "
                f"tokens. You requested a total of {mnt + n} tokens: {n} tokens from the input "
                f"messages and {mnt} tokens for the completion. Please reduce the number of "
                f"tokens in the input messages or the completion to fit within the limit."
            )

    def _validate_token_ids_logprob(self, token_ids) -> None:
        if not token_ids:
            return
        if not isinstance(token_ids, list) or not all(isinstance(t, int) for t in token_ids):
            raise ValueError("token_ids_logprob must be a flat list of integers.")
        vocab = self.model.vocab_size
        for t in token_ids:
            if t < 0 or t >= vocab:
                raise ValueError(
                    f"token_ids_logprob contains out-of-vocabulary token id {t}; "
                    f"valid range is [0, {vocab})."
                )

    def _validate_lora(self, lora_path) -> None:
        """``TokenizerManager._validate_and_resolve_lora``: the messages of sglang 0.5.23."""
        known = self.served.lora_paths
        if not lora_path:
            return
        names = [lora_path] if isinstance(lora_path, str) else list(lora_path)
        if known is None:
            first = next((a for a in names if a), None)
            raise ValueError(
                f"LoRA adapter '{first}' was requested, but LoRA is not enabled. "
                "Please launch the server with --enable-lora flag and preload adapters "
                "using --lora-paths or /load_lora_adapter endpoint."
            )
        for name in dict.fromkeys(names):
            if name is not None and name not in known:
                raise ValueError(
                    f"Got LoRA adapter that has never been loaded: {name}\n"
                    f"All loaded adapters: {dict.fromkeys(known).keys()}."
                )

    def _sampling(self, sampling_params: dict, n_input: int):
        _, _, sampling_cls = _sglang()
        sp = sampling_cls(**(sampling_params or {}))
        sp.normalize(self._stops)  # it only calls encode(stop, add_special_tokens=False)
        sp.verify(self.model.vocab_size)
        mnt = sp.max_new_tokens if sp.max_new_tokens is not None else MAX_NEW_TOKENS_UNSET
        sp.max_new_tokens = max(0, min(mnt, self.served.context_length - n_input - 1))
        return sp

    @staticmethod
    def _logprobs(sub, n_input: int, prefill_only: bool) -> LogprobRequest:
        """``Scheduler.handle_generate_request``'s logprob_start_len resolution."""
        enabled = bool(sub.return_logprob)
        start = sub.logprob_start_len if enabled else -1
        if enabled and start == -1 and (sub.token_ids_logprob is None or prefill_only):
            start = n_input  # no prompt logprobs
        if start > n_input:
            raise ValueError(
                f"req.logprob_start_len={start} is higher than the number of input tokens "
                f"len(req.origin_input_ids)={n_input}. Please use a smaller logprob_start_len."
            )
        return LogprobRequest(
            enabled=enabled, start=start, top_n=sub.top_logprobs_num or 0,
            token_ids=list(sub.token_ids_logprob) if sub.token_ids_logprob else None,
            with_text=bool(sub.return_text_in_logprobs),
        )
