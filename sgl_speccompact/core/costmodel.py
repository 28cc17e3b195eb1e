"""The closed-form forward-pass cost model (pure; shared by the simulator and ``method="auto"``).

Every figure computed here is a model from published accelerator and model
parameters (the figures each constant below cites), never a
GPU measurement.  One forward pass over a batch, where request i adds ``n_i``
new tokens on top of ``c_i`` cached ones, on ``tp`` GPUs (tensor parallel)::

    T_fwd = a + max(M, C) / tp + R
    M = W / (eta_w * BW) + kappa * sum_i(c_i + n_i) / (eta_kv * BW)
    C = (2 * N_ne * sum_i n_i + 4 * L * d_q * sum_i n_i * (c_i + n_i / 2)) / (MFU * F)
    R = 2 * L * (ar_lat + 2 * hidden * sum_i n_i / ar_bw)       (tp > 1 only)

``R`` is the two all-reduces per layer of a tensor-parallel transformer.  A
LoRA adapter adds :func:`lora_s` to every pass that carries it.

Sources of the tensor-parallel and LoRA parameters (all *est.*):

* ``ar_lat`` 8 us: one small-message all-reduce between two NVLink GPUs with
  SGLang's custom all-reduce (its ``custom_all_reduce`` one-shot kernel targets
  messages under 512 KB, where NCCL's ring needs tens of us);
* ``ar_bw`` 360 GB/s: algorithm bandwidth of a large two-GPU all-reduce on
  NVLink 4 (900 GB/s bidirectional per GPU; NCCL reaches about 40% as algbw);
* LoRA: the adapter's weights are read once per pass (``rank * (d_in + d_out)``
  bf16 values per adapted module and layer) and each adapted *fused* layer runs
  a shrink and an expand kernel at ``lora_kernel_s`` = 2.5 us each inside a
  CUDA graph.  sglang 0.5.23 fuses the adapted projections as its base layers
  are fused (``sglang/srt/lora/layers.py``: ``QKVParallelLinearWithLoRA`` runs
  q, k and v as one ``qkv_proj`` shrink and one expand,
  ``MergedColumnParallelLinearWithLoRA`` gate and up as one ``gate_up_proj``;
  ``o_proj`` and ``down_proj`` are ``RowParallelLinearWithLoRA``; the names are
  mapped in ``lora/utils.py`` ``get_normalized_target_modules``), so the seven
  usual modules are four kernel pairs per layer (:func:`fused_layers`).  A
  *merged* adapter (its weights folded into a checkpoint, served as a plain
  model) costs nothing per pass.
* The per-forward fixed cost ``a`` is 1.4 ms for every model, the drafter
  included: the one fitted value of the published cost model (the same
  launch and scheduling work per pass); its "1.5-2 ms *est.*" for the
  drafter has no measurement behind it.
"""

from __future__ import annotations

from dataclasses import dataclass

AR_LAT_S = 8e-6  # one two-GPU all-reduce, small message (est., see the module doc)
AR_BW = 360e9  # two-GPU all-reduce algorithm bandwidth, bytes/s (est.)
LORA_KERNEL_S = 2.5e-6  # one LoRA shrink or expand kernel inside a CUDA graph (est.)


@dataclass(frozen=True)
class Hardware:
    """Accelerator parameters (H200 SXM defaults)."""

    name: str = "H200"  # profile name, for reports
    bw: float = 4.8e12  # HBM bandwidth, bytes/s (spec)
    flops: float = 989e12  # dense bf16 FLOP/s (spec)
    eta_w: float = 0.85  # achieved fraction of bw reading weights (estimate)
    eta_kv: float = 0.8  # achieved fraction of bw reading KV (fit on H100)
    mfu: float = 0.55  # achieved fraction of flops in prefill (fit on H100)


H200 = Hardware()  # H200 SXM: 4.8 TB/s, 989 TFLOP/s
H100 = Hardware("H100", bw=3.35e12)  # H100 SXM: 3.35 TB/s HBM3, same dense bf16 peak
# Other shipped profiles: vendor spec-sheet bandwidth and dense bf16 FLOP/s, the H200's achieved
# fractions (est.); a calibration on the user's servers replaces them (calibration.py).
A100 = Hardware("A100", bw=2.039e12, flops=312e12)  # A100 80GB SXM
L40S = Hardware("L40S", bw=0.864e12, flops=362e12)  # L40S
B200 = Hardware("B200", bw=8.0e12, flops=2250e12)  # B200
GPUS = {h.name: h for h in (H200, H100, A100, L40S, B200)}


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
    o_req: float = 3e-3  # per-request HTTP + scheduling overhead on the server, s (estimate, native route)
    hidden: int = 0  # residual width (all-reduce message size); 0: d_q
    intermediate: int = 0  # MLP width (LoRA on gate/up/down); 0: 3 * hidden
    d_kv: int = 1024  # key (= value) projection width, kv heads * head dim

    def width(self) -> int:
        """The residual width: ``hidden``, or ``d_q`` when not given."""
        return self.hidden or self.d_q


QWEN3_8B = ModelCost("Qwen/Qwen3-8B", 16.4e9, 6.95e9, 36, 4096, 147e3, hidden=4096, intermediate=12288)
QWEN3_32B = ModelCost("Qwen/Qwen3-32B", 65.5e9, 31.2e9, 64, 8192, 262e3, hidden=5120, intermediate=25600)
QWEN3_0_6B = ModelCost("Qwen/Qwen3-0.6B", 1.2e9, 0.44e9, 28, 2048, 115e3, hidden=1024, intermediate=3072)
PRESETS = {m.name.split("/")[-1].lower(): m for m in (QWEN3_8B, QWEN3_32B, QWEN3_0_6B)}


def preset(name: str) -> ModelCost:
    """The model profile for a preset name or model path.

    >>> preset("Qwen/Qwen3-8B").layers
    36
    """
    key = name.split("/")[-1].lower()
    if key not in PRESETS:
        raise ValueError(f"unknown cost preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[key]


@dataclass(frozen=True)
class LoraCost:
    """A LoRA adapter served with every pass of a server (its rank and adapted modules)."""

    rank: int = 16  # r (sgl_speccompact/train/hparams.py default)
    modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    merged: bool = False  # folded into the weights and served as a plain model: no cost per pass


FUSED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
         "up_proj": "gate_up_proj"}  # sglang 0.5.23 lora/layers.py: one shrink + one expand per fused layer


def fused_layers(modules: tuple[str, ...]) -> list[str]:
    """The fused LoRA layers sglang runs for these adapted modules (one kernel pair each).

    >>> fused_layers(LoraCost().modules)
    ['qkv_proj', 'o_proj', 'gate_up_proj', 'down_proj']
    >>> fused_layers(("q_proj", "v_proj"))
    ['qkv_proj']
    """
    return list(dict.fromkeys(FUSED.get(m, m) for m in modules))


def _module_dims(m: ModelCost, module: str) -> tuple[int, int]:
    h, inter = m.width(), m.intermediate or 3 * m.width()
    return {"q_proj": (h, m.d_q), "k_proj": (h, m.d_kv), "v_proj": (h, m.d_kv), "o_proj": (m.d_q, h),
            "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}[module]


def lora_s(m: ModelCost, hw: Hardware, lora: LoraCost, new_tokens: int) -> float:
    """Extra seconds a LoRA adapter adds to one pass over ``new_tokens`` tokens.

    >>> round(lora_s(QWEN3_0_6B, H200, LoraCost(), 1) * 1e3, 3)  # 28 layers x 4 fused layers x 2 kernels
    0.565
    >>> lora_s(QWEN3_0_6B, H200, LoraCost(merged=True), 1)
    0.0
    """
    if lora.merged:
        return 0.0
    per_layer = sum(sum(_module_dims(m, mod)) for mod in lora.modules) * lora.rank
    weights = 2.0 * per_layer * m.layers / (hw.eta_w * hw.bw)
    flops = 2.0 * per_layer * m.layers * new_tokens / (hw.mfu * hw.flops)
    return max(weights, flops) + 2 * len(fused_layers(lora.modules)) * m.layers * LORA_KERNEL_S


def forward_s(m: ModelCost, hw: Hardware, batch: list[tuple[int, int]], tp: int = 1,
              lora: LoraCost | None = None) -> float:
    """Modelled seconds of one forward pass (the module doc's formula).

    Parameters
    ----------
    m, hw
        Model and accelerator.
    batch
        ``(cached_tokens, new_tokens)`` per request in the pass.
    tp
        Tensor-parallel degree (GPUs the model is split over).
    lora
        The adapter carried by the pass, if any.

    Examples
    --------
    One decode step of Qwen3-8B at 16k context, batch 1 (about 6.0 ms in the published cost model):

    >>> round(forward_s(QWEN3_8B, H200, [(16384, 1)]) * 1e3, 2)
    6.05
    """
    ctx = sum(c + n for c, n in batch)
    new = sum(n for _, n in batch)
    attn = sum(n * (c + n / 2) for c, n in batch)
    mem = m.weight_bytes / (hw.eta_w * hw.bw) + m.kv_bytes_per_token * ctx / (hw.eta_kv * hw.bw)
    comp = (2 * m.n_nonembed * new + 4 * m.layers * m.d_q * attn) / (hw.mfu * hw.flops)
    t = m.a + max(mem, comp) / tp
    if tp > 1:
        t += 2 * m.layers * (AR_LAT_S + 2.0 * m.width() * new / AR_BW)
    if lora is not None:
        t += lora_s(m, hw, lora, new) / tp
    return t
