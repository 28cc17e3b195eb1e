"""An optional forward-pass cost model for SIMULATED latencies.

Everything this module computes is a simulation from published H200
parameters (:mod:`sgl_speccompact.core.costmodel`, which cites each one);
nothing here is a GPU measurement, and every figure the emulator derives
from it carries ``simulated`` in its name.

One forward pass over a batch, where request i adds ``n_i`` new tokens on
top of ``c_i`` cached ones::

    T_fwd = a + max(M, C)
    M = W / (eta_w * BW) + kappa * sum_i(c_i + n_i) / (eta_kv * BW)
    C = (2 * N_ne * sum_i n_i + 4 * L * d_q * sum_i n_i * (c_i + n_i / 2)) / (MFU * F)

A request's simulated latency is ``o_req`` plus the time from its arrival to
the end of the forward pass that finishes it (queueing included).

Deployment and scheduling parameters of the one-clock simulator
(:mod:`~bench.sim.simulator`), each with its source:

* :data:`DEPLOYMENTS`: ``two-gpu`` (drafter on its own GPU, the SpecCompact
  paper's setup), ``one-gpu`` (target and drafter time-share one GPU's
  forward passes, as ``launch/qwen3-8b.toml`` deploys them) and
  ``two-gpu-tp2-colocated`` (the target with TP=2 across both GPUs, the
  drafter on them: a TP=2 pass needs both GPUs at once, so the drafter's
  passes take turns with the target's exactly as on one shared GPU, and the
  target's passes run at TP=2).
* :class:`Scheduling`: sglang 0.5.23's schedule policy (default ``fcfs``,
  ``sglang/srt/arg_groups/fields/schedule.py``), ``max_prefill_tokens``
  (16384, same file) and ``chunked_prefill_size``: 8192 on an H200, from
  ``sglang/srt/arg_groups/memory_hook.py`` ``_handle_gpu_memory_settings``
  (``90 GiB <= gpu_mem < 160 GiB`` -> 8192; the H200 has 141 GB).
* Tokenizer cost: sglang's TokenizerManager (one process per server)
  tokenizes every request's text; :data:`TOKENIZER_TOKENS_PER_S` was measured
  with ``bench/tokenizer_rate.py``: HF ``tokenizers`` ``Tokenizer.encode`` of
  the rendered SWE-agent ``marshmallow-1867`` trajectory (29,776 chars, 8,404
  Qwen3 tokens, 3.54 chars/token) with the emulator's Qwen3 tokenizer, one
  thread, on this project's development machine (2 AMD EPYC cores shared by
  other jobs, load average ~13, Python 3.11).  Single runs ranged from 58k to
  441k tokens/s under that load; the figure is the fastest of 200 runs (the
  least disturbed one), 440,000 tokens/s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.costmodel import (  # noqa: F401 - re-exported: the pure model lives in the product
    H200,
    PRESETS,
    QWEN3_0_6B,
    QWEN3_8B,
    QWEN3_32B,
    Hardware,
    LoraCost,
    ModelCost,
    forward_s,
)
from ..core.specdecode import SpecDecoding

# Client-side cost of one request (the project's SpecCompactEndpoint: build the body, JSON-encode it,
# send it over loopback, parse the answer), measured with bench/client_cost.py (see docs/benchmarks/index.md):
CLIENT_S_PER_REQUEST = 1.5e-3  # fixed part, s
CLIENT_S_PER_TOKEN = 0.108e-6  # per prompt token sent as input_ids (or its text), s
# The service's lookup of a stored prepare for a compact naming a session (params digest and
# SessionStore.longest: SHA-256 over the messages' canonical JSON), measured with bench/store_lookup.py:
STORE_LOOKUP_S_PER_BYTE = 1.8e-8  # per byte of the request's messages as JSON, s (no fixed part measurable)
TOKENIZER_TOKENS_PER_S = 440_000.0  # measured, see the module doc (bench/tokenizer_rate.py)
CHUNKED_PREFILL_SIZE_H200 = 8192  # sglang arg_groups/memory_hook.py, 90 GiB <= gpu_mem < 160 GiB
MAX_PREFILL_TOKENS = 16384  # sglang arg_groups/fields/schedule.py default


@dataclass(frozen=True)
class Deployment:
    """Where the target and the drafter run."""

    name: str  # "two-gpu", "one-gpu" or "two-gpu-tp2-colocated"
    shared_gpu: bool  # both servers' forward passes take turns (one GPU, or a TP=2 pair held by each pass)
    source: str  # where the setup comes from
    target_tp: int = 1  # tensor-parallel degree of the target server (its GPUs)
    gpus: int = 1  # GPUs the deployment holds (device-seconds count every one a pass keeps busy or idle)


DEPLOYMENTS = {
    "two-gpu": Deployment("two-gpu", False, "SpecCompact paper setup: the drafter on its own GPU", gpus=2),
    "one-gpu": Deployment("one-gpu", True, "launch/qwen3-8b.toml, launch/qwen3-32b.toml: both servers on one GPU"),
    "two-gpu-tp2-colocated": Deployment("two-gpu-tp2-colocated", True, "the target with TP=2 over both GPUs, the "
                                        "drafter co-located on them (its passes hold the pair)", target_tp=2, gpus=2),
}


def deployed(costs: dict, deployment: Deployment) -> dict:
    """``costs`` with the target server at the deployment's TP degree (never lowered).

    >>> c = deployed({"target": CostModel(), "drafter": CostModel()}, DEPLOYMENTS["two-gpu-tp2-colocated"])
    >>> c["target"].tp, c["drafter"].tp
    (2, 1)
    """
    target = costs.get("target")
    if target is None or target.tp >= deployment.target_tp:
        return costs
    return {**costs, "target": replace(target, tp=deployment.target_tp)}


@dataclass(frozen=True)
class Scheduling:
    """Per-server scheduler and tokenizer settings of the simulator (sources in the module doc)."""

    schedule_policy: str = "fcfs"  # sglang 0.5.23 default; "lpm" sorts by cached prefix
    max_prefill_tokens: int = MAX_PREFILL_TOKENS  # uncached tokens per prefill batch
    chunked_prefill_size: int | None = CHUNKED_PREFILL_SIZE_H200  # tokens per prefill chunk (None: off)
    tokenizer_tokens_per_s: float = TOKENIZER_TOKENS_PER_S  # tokenizer process rate (0: free)

    def tokenize_s(self, tokens: int) -> float:
        """Seconds the server's tokenizer process spends on ``tokens`` tokens."""
        return tokens / self.tokenizer_tokens_per_s if self.tokenizer_tokens_per_s > 0 else 0.0


@dataclass(frozen=True)
class CostModel:
    """Simulated forward-pass times for one model on one accelerator.

    Parameters
    ----------
    model
        The model's parameters (:data:`QWEN3_8B`, ...).
    hardware
        Accelerator parameters.
    time_scale
        Real seconds the emulator sleeps per simulated second (0 = never
        sleep, only account).  Small values keep tests fast while preserving
        the order in which concurrent requests are batched.
    batch_window_s
        Real seconds the scheduler waits after the first arrival before
        forming a prefill batch, so concurrent requests can join it.
    """

    model: ModelCost = QWEN3_8B  # model parameters
    hardware: Hardware = Hardware()  # accelerator parameters
    time_scale: float = 0.01  # real seconds slept per simulated second
    batch_window_s: float = 0.002  # real wait to gather a prefill batch
    tp: int = 1  # tensor-parallel degree (GPUs the model is split over)
    lora: LoraCost | None = None  # adapter charged on every pass that carries a LoRA request
    spec: SpecDecoding | None = None  # the server's speculative decoding (None: off)
    client_s_per_request: float = 0.0  # client-side cost per request, fixed part, s (simulator: measured)
    client_s_per_token: float = 0.0  # client-side cost per prompt token, s

    @classmethod
    def for_model(cls, name: str, *, gpu: str | None = None, speed: float = 1.0, **kw) -> "CostModel":
        """A cost model from a preset name (``qwen3-8b``, ``qwen3-32b``, ``qwen3-0.6b``).

        ``gpu`` names a shipped GPU profile (:data:`sgl_speccompact.core.costmodel.GPUS`;
        H200 when None).  ``speed`` plays that GPU ``speed`` times as fast:
        bandwidth, FLOP/s and the per-forward fixed cost ``a`` all scale, so
        every forward pass takes ``1 / speed`` times as long (``o_req``, the
        per-request CPU overhead, does not).

        >>> slow = CostModel.for_model("qwen3-8b", speed=0.5)
        >>> round(slow.forward_s([(4096, 1)]) / CostModel.for_model("qwen3-8b").forward_s([(4096, 1)]), 9)
        2.0
        """
        from ..core.costmodel import preset

        model = preset(name)
        if gpu is not None or speed != 1.0:
            from ..core.gpus import DEFAULT_GPU, gpu_profile, scaled

            kw["hardware"] = scaled(gpu_profile(gpu or DEFAULT_GPU), speed)
            model = replace(model, a=model.a / speed)
        return cls(model=model, **kw)

    def with_scale(self, time_scale: float) -> "CostModel":
        """The same model with another ``time_scale``."""
        return replace(self, time_scale=time_scale)

    def forward_s(self, batch: list[tuple[int, int]]) -> float:
        """Simulated seconds of one forward pass.

        Parameters
        ----------
        batch
            ``(cached_tokens, new_tokens)`` per request in the pass.
        """
        return forward_s(self.model, self.hardware, batch, self.tp)

    def pass_s(self, kind: str, batch: list[tuple[int, int]], lora: bool = False) -> float:
        """Simulated seconds of one scheduler pass, with speculative decoding and LoRA.

        A ``decode`` pass on a speculative server is one verify step (its
        shapes carry ``num_draft_tokens`` new tokens per request); a prefill
        also runs the draft network over the new tokens.
        """
        adapter = self.lora if lora else None
        if self.spec is not None and kind == "decode":
            return self.spec.step_s(self.model, self.hardware, [c for c, _ in batch], self.tp, adapter)
        t = forward_s(self.model, self.hardware, batch, self.tp, adapter)
        if self.spec is not None:
            t += self.spec.prefill_extra_s(self.hardware, batch, self.tp)
        return t

    def client_s(self, tokens: int) -> float:
        """Client-side seconds of one request carrying ``tokens`` prompt tokens."""
        return self.client_s_per_request + self.client_s_per_token * tokens

    @property
    def request_overhead_s(self) -> float:
        """Simulated per-request overhead ``o_req``."""
        return self.model.o_req
