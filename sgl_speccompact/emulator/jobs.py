"""What the emulator's scheduler works on: one :class:`Job` per sampled sequence.

A ``/generate`` body becomes one job per text and per sample (``n``); the
frontend builds them (:mod:`.frontend`), the scheduler runs them
(:mod:`.scheduler`), :mod:`.response` turns a finished one into SGLang's
output dict.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .radix import Namespace, Node


@dataclass
class LogprobRequest:
    """What logprobs a request asked for, resolved as the scheduler does."""

    enabled: bool = False  # return_logprob
    start: int = -1  # resolved logprob_start_len (-1: no prompt logprobs)
    top_n: int = 0  # top_logprobs_num
    token_ids: list[int] | None = None  # token_ids_logprob
    with_text: bool = False  # return_text_in_logprobs


@dataclass
class LogprobRecord:
    """Logprobs gathered while a request runs, as ``(logprob, token_id)`` pairs."""

    input_token: list[tuple[float | None, int]] = field(default_factory=list)  # prompt tokens
    input_top: list[list[tuple[float, int]] | None] = field(default_factory=list)  # per prompt position
    input_ids: list[list[tuple[float, int]] | None] = field(default_factory=list)  # requested ids, per prompt position
    output_token: list[tuple[float, int]] = field(default_factory=list)  # emitted tokens
    output_top: list[list[tuple[float, int]]] = field(default_factory=list)  # per output position
    output_ids: list[list[tuple[float, int]]] = field(default_factory=list)  # requested ids, per output position


@dataclass
class Job:
    """One request inside the engine (a batch request becomes several jobs)."""

    rid: str  # request id as returned in meta_info["id"]
    prompt: str  # prompt text the policy sees
    input_ids: list[int]  # prompt token ids
    sampling: Any  # sglang SamplingParams, normalized and verified
    lora_path: str | None  # adapter name (None: base model)
    namespace: Namespace  # radix namespace: (extra_key + lora, cache_salt)
    logprobs: LogprobRequest  # requested logprobs
    stream: bool  # send a chunk per decoded token
    on_update: Callable[[dict, bool], None]  # receives (output dict, finished); scheduler side
    sample: int = 0  # index among the request's n samples (policies may vary by it)
    parallel: int = 1  # n of the request this job is a sample of
    arrival: float = field(default_factory=time.perf_counter)  # real arrival time, perf_counter
    sim_arrival: float = 0.0  # simulated arrival time, s
    prefilled: int = 0  # prompt tokens with computed KV (cached + prefilled chunks)
    planned: list[int] = field(default_factory=list)  # tokens the policy will emit
    output_ids: list[int] = field(default_factory=list)  # tokens emitted so far
    finished_reason: dict | None = None  # SGLang finish_reason JSON once finished
    finished_len: int | None = None  # output tokens through the stop
    cached_tokens: int = 0  # prompt tokens served from the radix cache
    node: Node | None = None  # locked radix node
    lp: LogprobRecord = field(default_factory=LogprobRecord)  # gathered logprobs
    simulated_latency_s: float | None = None  # SIMULATED latency, when a cost model runs
    priority: int = 0  # sglang's request priority (higher first; only ordered when a caller sets one)
    to_finish: dict | None = None  # an abort's finish reason, taken at the request's next step (``Req.to_finish``)
    labels: tuple[int, ...] = ()  # a /v1/decisions question's answer label ids, in candidate order (else none)

    @property
    def prefill_only(self) -> bool:
        """``max_new_tokens == 0`` (``Req.is_prefill_only``)."""
        return self.sampling.max_new_tokens == 0

    @property
    def judgement(self) -> bool:
        """Whether the request has a judgement's shape: prefill-only, asking for logprobs.

        That is the one-request judge (``max_new_tokens == 0`` with
        ``token_ids_logprob``) and the scoring request of sglang's plain
        ``select`` (``max_new_tokens == 0`` with prompt logprobs).  Policies
        are told this instead of guessing from the prompt's words.
        """
        return self.prefill_only and self.logprobs.enabled

    @property
    def through_stop(self) -> list[int]:
        """Emitted tokens up to and including the stop (``output_ids_through_stop``)."""
        return self.output_ids if self.finished_len is None else self.output_ids[: self.finished_len]

    def params(self) -> dict:
        """What the policy is told about the request."""
        sp = self.sampling
        keys = ("max_new_tokens", "temperature", "top_p", "top_k", "stop_strs", "stop_token_ids")
        return {"sampling_params": {k: getattr(sp, k) for k in keys}, "lora_path": self.lora_path,
                "sample": self.sample, "n": self.parallel, "judgement": self.judgement, "labels": self.labels}


@dataclass
class Stats:
    """Counters per LoRA namespace (``"base"`` for the base model)."""

    requests: int = 0  # finished requests
    prompt_tokens: int = 0  # prompt tokens of finished requests
    cached_tokens: int = 0  # of which served from the radix cache
    completion_tokens: int = 0  # output tokens through the stop
    simulated_latency_s: float = 0.0  # sum of SIMULATED request latencies


RUNNING_ABORT = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}  # FINISH_ABORT()
WAITING_ABORT = {"type": "abort", "message": "Abort in waiting queue"}  # the tokenizer manager's, for a queued one


def abort_reason(exc: Exception) -> dict:
    """``FINISH_ABORT.to_json`` for an emulator-side failure (HTTP 500)."""
    return {"type": "abort", "message": f"{type(exc).__name__}: {exc}",
            "status_code": 500, "err_type": "InternalServerError"}
