"""An optional forward-pass cost model for SIMULATED latencies.

Everything this module computes is a simulation from published H200
parameters (see ``reference/cost_model.md`` in the shared design folder);
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
(:mod:`.simulator`), each with its source:

* :data:`DEPLOYMENTS`: ``two-gpu`` (drafter on its own GPU, the SpecCompact
  paper's setup) and ``one-gpu`` (target and drafter time-share one GPU's
  forward passes, as ``launch/qwen3-8b.toml`` deploys them).
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


@dataclass(frozen=True)
class Hardware:
    """Accelerator parameters (H200 SXM defaults)."""

    bw: float = 4.8e12  # HBM bandwidth, bytes/s (spec)
    flops: float = 989e12  # dense bf16 FLOP/s (spec)
    eta_w: float = 0.85  # achieved fraction of bw reading weights (estimate)
    eta_kv: float = 0.8  # achieved fraction of bw reading KV (fit on H100)
    mfu: float = 0.55  # achieved fraction of flops in prefill (fit on H100)
    name: str = "H200"  # profile name, for reports and /server_info


@dataclass(frozen=True)
class ModelCost:
    """Per-model parameters of the cost formula."""

    name: str  # model id, for reports
    weight_bytes: float  # W: bytes of weights read per forward
    n_nonembed: float  # N_ne: non-embedding parameters
    layers: int  # L: transformer layers
    d_q: int  # d_q: query width (heads * head dim)
    kv_bytes_per_token: float  # kappa: KV-cache bytes per token
    a: float = 1.4e-3  # per-forward fixed cost, s (fit)
    o_req: float = 3e-3  # per-request HTTP + scheduling overhead, s (estimate, native route)


QWEN3_8B = ModelCost("Qwen/Qwen3-8B", 16.4e9, 6.95e9, 36, 4096, 147e3)
QWEN3_32B = ModelCost("Qwen/Qwen3-32B", 65.5e9, 31.2e9, 64, 8192, 262e3)
QWEN3_0_6B = ModelCost("Qwen/Qwen3-0.6B", 1.2e9, 0.44e9, 28, 2048, 115e3, a=1.75e-3)
PRESETS = {m.name.split("/")[-1].lower(): m for m in (QWEN3_8B, QWEN3_32B, QWEN3_0_6B)}

TOKENIZER_TOKENS_PER_S = 440_000.0  # measured, see the module doc (bench/tokenizer_rate.py)
CHUNKED_PREFILL_SIZE_H200 = 8192  # sglang arg_groups/memory_hook.py, 90 GiB <= gpu_mem < 160 GiB
MAX_PREFILL_TOKENS = 16384  # sglang arg_groups/fields/schedule.py default


@dataclass(frozen=True)
class Deployment:
    """Where the target and the drafter run."""

    name: str  # "two-gpu" or "one-gpu"
    shared_gpu: bool  # both servers' forward passes take turns on one GPU
    source: str  # where the setup comes from


DEPLOYMENTS = {
    "two-gpu": Deployment("two-gpu", False, "SpecCompact paper setup: the drafter on its own GPU"),
    "one-gpu": Deployment("one-gpu", True, "launch/qwen3-8b.toml, launch/qwen3-32b.toml: both servers on one GPU"),
}


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

    @classmethod
    def for_model(cls, name: str, *, gpu: str | None = None, speed: float = 1.0, **kw) -> "CostModel":
        """A cost model from a preset name (``qwen3-8b``, ``qwen3-32b``, ``qwen3-0.6b``).

        ``gpu`` names a shipped GPU profile (:mod:`sgl_speccompact.gpus`;
        H200 when None).  ``speed`` plays that GPU ``speed`` times as fast:
        bandwidth, FLOP/s and the per-forward fixed cost ``a`` all scale, so
        every forward pass takes ``1 / speed`` times as long (``o_req``, the
        per-request CPU overhead, does not).

        >>> slow = CostModel.for_model("qwen3-8b", speed=0.5)
        >>> round(slow.forward_s([(4096, 1)]) / CostModel.for_model("qwen3-8b").forward_s([(4096, 1)]), 9)
        2.0
        """
        key = name.split("/")[-1].lower()
        if key not in PRESETS:
            raise ValueError(f"unknown cost preset {name!r}; known: {sorted(PRESETS)}")
        model = PRESETS[key]
        if gpu is not None or speed != 1.0:
            from ...gpus import DEFAULT_GPU, gpu_profile, scaled

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
        m, hw = self.model, self.hardware
        ctx = sum(c + n for c, n in batch)
        new = sum(n for _, n in batch)
        attn = sum(n * (c + n / 2) for c, n in batch)
        mem = m.weight_bytes / (hw.eta_w * hw.bw) + m.kv_bytes_per_token * ctx / (hw.eta_kv * hw.bw)
        comp = (2 * m.n_nonembed * new + 4 * m.layers * m.d_q * attn) / (hw.mfu * hw.flops)
        return m.a + max(mem, comp)

    @property
    def request_overhead_s(self) -> float:
        """Simulated per-request overhead ``o_req``."""
        return self.model.o_req
