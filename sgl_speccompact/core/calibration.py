"""Fitting the latency cost model to timings from the user's own servers (pure; no I/O).

The cost model (:mod:`sgl_speccompact.core.costmodel`)
times one forward pass as ``a + max(M, C)``; a request adds ``o_req``.  A
calibration probe (:mod:`sgl_speccompact.backends.calibration_probe`) times whole
``/generate`` calls of known shapes; each call's time is linear in five
unknowns once the model's own constants (``N_ne``, ``L``, ``d_q``) are known:

==============  =====================================================
``o_req_s``     per-request overhead (HTTP, tokenizer manager, scheduling)
``a_s``         per-forward fixed cost
``weight_s``    weight-read time per forward, ``W / (eta_w * BW)``
``kv_s``        KV read time per context token, ``kappa / (eta_kv * BW)``
``seq_s``       per-sequence cost of a decode pass (sampling, scheduling)
``tok_s``       per-token cost of a request, once (parsing ids, cache insert, output)
``flop_rate``   achieved prefill FLOP/s, ``MFU * F``
==============  =====================================================

``seq_s`` and ``tok_s`` are not in the cost model: they soak up CPU work that
would otherwise be read as KV traffic (a batch of 8 short prompts and one
long prompt of the same total length tell ``seq_s`` apart; two decode lengths
on the same prompts tell ``tok_s`` apart, as it is paid once per request).

Two probe kinds make them identifiable:

* *prefill*: one fresh prompt of ``c`` tokens, one new token: ``o_req + a +
  C`` (compute-bound for ``c`` >= 1024 on the Qwen3 presets, so ``M`` drops
  out of the max);
* *decode*: ``B`` prompts already in the radix cache, ``N`` new tokens each,
  sent as one batch: ``N`` memory-bound passes (the first extends the one
  token sglang recomputes of a fully cached prompt), pass ``k`` reading
  ``B * (c + k)`` tokens of KV: ``o_req + N (a + weight + B seq) + kv * sum_k B (c + k)``.

Decode probes at two ``N`` separate ``o_req`` from ``a + weight``; prefill
probes then give ``a``.  The fit is least squares on relative error, with
every parameter kept >= 0.  ``a``, ``weight`` and ``o_req`` are small and
trade against each other under noise; their sum per decode pass
(:attr:`CostFit.pass_s`), the KV rate and the FLOP rate are what the probe
pins down, and what a slower or faster GPU changes.

The fit is robust and physical.  Probe calls disturbed by other work on the
machine are down-weighted (Huber weights on relative residuals, refitted a
few rounds), and no parameter may beat the GPU (:func:`physical_bounds`):
weight and KV reads take at least their bytes over the GPU's bandwidth, and
prefill runs at most at its peak FLOP/s (a fit past the peak is refitted at
it).  :func:`check_fit` refuses anything else -- a field that is not a
finite number, zero or negative, or out of those bounds -- before a fit is
saved or used.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from .gpus import DEFAULT_GPU, GPUS, match_gpu
from .costmodel import Hardware, ModelCost

MIN_SHARE = 0.01  # a rate under 1% of every probe's time is noise, not a measurement
HUBER_K = 0.05  # relative residual past which a probe call counts less (a disturbed call)
ROBUST_ROUNDS = 8  # reweighting rounds of the robust fit
RATE_FIELDS = ("weight_s", "kv_s", "flop_rate")  # must be > 0
COST_FIELDS = ("o_req_s", "a_s", "seq_s", "tok_s")  # must be >= 0
PARAMS = ("o_req_s", "a_s", "weight_s", "kv_s", "seq_s", "tok_s", "flop_rate")  # order of the fitted vector


@dataclass(frozen=True)
class ProbeShape:
    """One timed ``/generate`` call."""

    batch: int  # prompts sent together in one batch request
    prompt_tokens: int  # tokens per prompt
    new_tokens: int  # max_new_tokens per prompt (ignore_eos: exactly this many)
    cached: bool  # prompts sent once before, so only decode-like passes are timed


PREFILL_LENGTHS = (1024, 2048, 4096, 8192)  # compute-bound on every Qwen3 preset; <= one 8192 chunk
DEFAULT_PLAN = tuple(ProbeShape(1, c, 1, False) for c in PREFILL_LENGTHS) + tuple(
    ProbeShape(b, c, n, True) for b in (1, 8) for c in (1024, 4096) for n in (8, 40))


@dataclass(frozen=True)
class Observation:
    """A probe's measured wall time."""

    shape: ProbeShape  # what was sent
    seconds: float  # client-side wall time of the call (min over repeats)


@dataclass(frozen=True)
class CostFit:
    """Cost-model parameters for one served model on one GPU, fitted or from a shipped profile."""

    model: str  # served model path (e.g. Qwen/Qwen3-8B)
    gpu: str  # GPU the servers run on, as reported or given ("unreported" when neither)
    o_req_s: float  # per-request overhead, s
    a_s: float  # per-forward fixed cost, s
    weight_s: float  # weight-read time per forward, s
    kv_s: float  # KV read time per context token per forward, s
    flop_rate: float  # achieved prefill FLOP/s
    source: str  # "calibrated" (probed on these servers) or "profile:<GPU>" (shipped numbers)
    note: str = ""  # why this source: e.g. the GPU was not reported and H200 was assumed
    rms_rel: float | None = None  # relative RMS residual of the fit (None for a profile)
    observations: int = 0  # probe calls behind the fit
    created: float = 0.0  # unix time of the fit
    seq_s: float = 0.0  # per-sequence cost per decode pass, s (not in the cost model)
    tok_s: float = 0.0  # per-token cost of a request, paid once, s (not in the cost model)

    @property
    def pass_s(self) -> float:
        """Fixed seconds of one decode pass: ``a + weight`` (the best-determined pair)."""
        return self.a_s + self.weight_s

    def to_dict(self) -> dict:
        """JSON-ready form (what ``/health`` shows and the cache file holds)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CostFit":
        """Inverse of :meth:`to_dict`; unknown keys are ignored."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def profiles(self, model: ModelCost, gpu: Hardware | None = None) -> tuple[ModelCost, Hardware]:
        """The model and GPU profiles with these parameters, as fractions of ``gpu``'s spec (may exceed 1).

        >>> from sgl_speccompact.core.costmodel import QWEN3_8B, forward_s
        >>> fit, step = profile_fit("Qwen/Qwen3-8B", "H100"), [(16000, 1)]
        >>> abs(forward_s(*fit.profiles(QWEN3_8B), step) - forward_s(QWEN3_8B, GPUS["H100"], step)) < 1e-12
        True
        """
        hw = gpu or GPUS.get(match_gpu(self.gpu) or DEFAULT_GPU)
        hardware = replace(hw, eta_w=model.weight_bytes / (self.weight_s * hw.bw),
                           eta_kv=model.kv_bytes_per_token / (self.kv_s * hw.bw), mfu=self.flop_rate / hw.flops,
                           name=f"{self.gpu} ({self.source})")
        return replace(model, a=self.a_s, o_req=self.o_req_s), hardware


def features(shape: ProbeShape, model: ModelCost) -> np.ndarray:
    """Coefficients of :data:`PARAMS` in the predicted seconds of one probe call.

    >>> from sgl_speccompact.core.costmodel import QWEN3_8B
    >>> features(ProbeShape(2, 100, 3, True), QWEN3_8B).tolist()  # 3 passes, KV 2*(100+101+102)
    [1.0, 3.0, 3.0, 606.0, 6.0, 206.0, 0.0]
    """
    b, c, n = shape.batch, shape.prompt_tokens, shape.new_tokens
    if shape.cached:
        passes, decode, first = n, n, 0
    else:  # one prefill pass makes the first token, then n - 1 decode passes
        passes, decode, first = n, n - 1, 1
    ctx = sum(b * (c + k) for k in range(first, first + decode))
    seqs, toks = b * decode, b * (c + n)
    flops = 0.0 if shape.cached else b * (2 * model.n_nonembed * c + 4 * model.layers * model.d_q * c * c / 2)
    # the flop column is scaled to seconds at 1e15 FLOP/s so the columns are of like size
    return np.array([1.0, passes, decode, ctx, seqs, toks, flops / 1e15])


def fit_observations(obs: list[Observation], model: ModelCost, *, served_model: str, gpu: str,
                     note: str = "", now: float | None = None, fallback: CostFit | None = None,
                     tp: int = 1) -> CostFit:
    """Robust least-squares fit of :data:`PARAMS` to probe timings, on relative error, within the GPU's bounds.

    A rate that explains under :data:`MIN_SHARE` of every probe's time (the
    fixed cost of a decode pass, the KV rate or the prefill FLOP rate: zero,
    or lost in noise) is taken from
    ``fallback`` (the shipped profile), and the fit's ``note`` names it.
    ``tp`` GPUs serve the model (tensor parallel): the bounds scale with it.

    Raises
    ------
    ValueError
        Too few or degenerate observations (the parameters are not
        identifiable), an unresolved rate and no ``fallback``, or a result
        that :func:`check_fit` refuses.
    """
    x = np.array([features(o.shape, model) for o in obs])
    y = np.array([o.seconds for o in obs], dtype=float)
    if len(obs) < len(PARAMS) or np.linalg.matrix_rank(x) < len(PARAMS) or not (np.isfinite(y) & (y > 0)).all():
        raise ValueError(f"{len(obs)} probe timings do not determine {len(PARAMS)} cost parameters; "
                         "need prefill probes of several lengths and decode probes of two lengths")
    bounds = physical_bounds(model, gpu, tp)
    lower = np.zeros(len(PARAMS))
    lower[2], lower[3] = bounds["weight_s"], bounds["kv_s"]  # no read faster than the GPU's bandwidth
    theta = _robust_fit(x, y, lower)
    flop_share = ((x[:, 6] * theta[6]) / y).max()
    if flop_share >= MIN_SHARE and theta[6] < 1e15 / bounds["flop_rate"]:  # prefill past peak: refit at it
        lower[6] = 1e15 / bounds["flop_rate"]
        theta = _robust_fit(x, y, lower)
    resid = (x @ theta - y) / y
    fit = CostFit(model=served_model, gpu=gpu, o_req_s=float(theta[0]), a_s=float(theta[1]),
                  weight_s=float(theta[2]), kv_s=float(theta[3]), seq_s=float(theta[4]), tok_s=float(theta[5]),
                  flop_rate=1e15 / float(theta[6]) if theta[6] > 0 else 0.0,
                  source="calibrated", note=note, rms_rel=float(np.sqrt(np.mean(resid ** 2))),
                  observations=len(obs), created=time.time() if now is None else now)
    share = (x * theta) / y[:, None]  # each parameter's share of each probe's time
    shares = {"pass_s": (share[:, 1] + share[:, 2]).max(), "kv_s": share[:, 3].max(), "flop_rate": share[:, 6].max()}
    fields_of = {"pass_s": ("a_s", "weight_s"), "kv_s": ("kv_s",), "flop_rate": ("flop_rate",)}
    missing = {k: fields_of[k] for k, v in shares.items() if v < MIN_SHARE}
    if missing:
        if fallback is None:
            raise ValueError(f"the probe timings did not resolve {sorted(missing)}")
        filled = {key: getattr(fallback, key) for keys in missing.values() for key in keys}
        what = ", ".join(sorted(missing))
        fit = replace(fit, **filled, note=f"{note}; {what} not resolved by the probe, from {fallback.source}"
                      .lstrip("; "))
    check_fit(fit, model, tp)
    return fit


def bounding_gpu(gpu: str | None) -> Hardware:
    """The GPU whose limits bound a fit: its shipped profile, else the fastest of every profile.

    >>> bounding_gpu("NVIDIA H100 80GB HBM3").name, bounding_gpu("Tesla T4").name
    ('H100', 'fastest shipped GPU')
    """
    key = match_gpu(gpu)
    if key is not None:
        return GPUS[key]
    return Hardware("fastest shipped GPU", bw=max(h.bw for h in GPUS.values()),
                    flops=max(h.flops for h in GPUS.values()))


def physical_bounds(model: ModelCost, gpu: str | None, tp: int = 1) -> dict[str, float]:
    """The fastest ``tp`` GPUs of kind ``gpu`` can go: reads at full bandwidth, prefill at peak.

    ``weight_s`` and ``kv_s`` are lower bounds (seconds), ``flop_rate`` an upper one (FLOP/s).

    >>> from sgl_speccompact.core.costmodel import QWEN3_8B
    >>> b = physical_bounds(QWEN3_8B, "H100")
    >>> round(b["weight_s"] * 1e3, 2), b["flop_rate"] / 1e12
    (4.9, 989.0)
    """
    hw = bounding_gpu(gpu)
    return {"weight_s": model.weight_bytes / (tp * hw.bw), "kv_s": model.kv_bytes_per_token / (tp * hw.bw),
            "flop_rate": tp * hw.flops}


def check_fit(fit: CostFit, model: ModelCost, tp: int = 1, *, bounds: bool = True) -> None:
    """Refuse a fit that cannot describe ``tp`` GPUs of its kind, in one line.

    Every rate must be a finite positive number and every fixed cost a
    finite number >= 0; with ``bounds``, no pass may read its weights or KV
    faster than the GPU's bandwidth allows, and prefill may not beat the
    GPU's peak FLOP/s.

    >>> from sgl_speccompact.core.costmodel import QWEN3_8B
    >>> check_fit(profile_fit("Qwen/Qwen3-8B", "H100"), QWEN3_8B)
    >>> check_fit(replace(profile_fit("Qwen/Qwen3-8B", "H100"), weight_s=0.0), QWEN3_8B)
    Traceback (most recent call last):
    ...
    ValueError: weight_s is 0.0: must be positive
    """
    for name in RATE_FIELDS + COST_FIELDS:
        value = getattr(fit, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} is {value!r}: not a finite number")
        if value <= 0 if name in RATE_FIELDS else value < 0:
            raise ValueError(f"{name} is {value!r}: must be {'positive' if name in RATE_FIELDS else '>= 0'}")
    if not bounds:
        return
    b, hw = physical_bounds(model, fit.gpu, tp), bounding_gpu(fit.gpu).name
    slack = 1e-9  # float rounding of a fit that sits on a bound
    if fit.weight_s < b["weight_s"] * (1 - slack):
        raise ValueError(f"weight_s {fit.weight_s * 1e3:.3g} ms per pass is faster than reading the weights at "
                         f"{hw}'s bandwidth ({b['weight_s'] * 1e3:.3g} ms)")
    if fit.kv_s < b["kv_s"] * (1 - slack):
        raise ValueError(f"kv_s {fit.kv_s * 1e9:.3g} ns per token is faster than reading the KV cache at "
                         f"{hw}'s bandwidth ({b['kv_s'] * 1e9:.3g} ns)")
    if fit.flop_rate > b["flop_rate"] * (1 + slack):
        raise ValueError(f"prefill at {fit.flop_rate / 1e12:.0f} TFLOP/s is over {hw}'s peak "
                         f"({b['flop_rate'] / 1e12:.0f} TFLOP/s)")


def profile_fit(served_model: str, gpu: str | None, preset: ModelCost | None = None) -> CostFit:
    """The shipped profile's parameters for a model on the named GPU (H200 when unknown).

    >>> profile_fit("Qwen/Qwen3-8B", "NVIDIA H100 80GB HBM3").source
    'profile:H100'
    >>> profile_fit("Qwen/Qwen3-8B", None).note
    'the servers report no GPU name; assumed H200 (give --gpu, or --calibrate)'
    """
    m = preset or model_preset(served_model)
    key = match_gpu(gpu)
    note = ""
    if key is None:
        note = (f"GPU {gpu!r} has no shipped profile; assumed {DEFAULT_GPU} (--calibrate fits this one)" if gpu
                else f"the servers report no GPU name; assumed {DEFAULT_GPU} (give --gpu, or --calibrate)")
    hw = GPUS[key or DEFAULT_GPU]
    return CostFit(model=served_model, gpu=gpu or "unreported", o_req_s=m.o_req, a_s=m.a,
                   weight_s=m.weight_bytes / (hw.eta_w * hw.bw), kv_s=m.kv_bytes_per_token / (hw.eta_kv * hw.bw),
                   flop_rate=hw.mfu * hw.flops, source=f"profile:{key or DEFAULT_GPU}", note=note)


def model_preset(served_model: str) -> ModelCost:
    """The cost preset of a served model path (``Qwen/Qwen3-8B`` -> :data:`QWEN3_8B`).

    Raises
    ------
    ValueError
        No preset for this model.
    """
    from .costmodel import PRESETS

    key = served_model.rstrip("/").split("/")[-1].lower()
    if key not in PRESETS:
        raise ValueError(f"no cost-model preset for model {served_model!r}; known: {sorted(PRESETS)}")
    return PRESETS[key]


def _robust_fit(x: np.ndarray, y: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """``theta >= lower`` minimising Huber-weighted relative error (a disturbed call counts less)."""
    base = 1.0 / y  # relative error: a 5 ms probe counts as much as a 500 ms one
    w = base
    shifted = y - x @ lower  # theta = lower + delta, delta >= 0
    theta = lower
    for _ in range(ROBUST_ROUNDS):
        theta = lower + _nonneg_lstsq(x * w[:, None], shifted * w)
        resid = np.abs(x @ theta - y) / y
        w = base * np.sqrt(np.minimum(1.0, HUBER_K / np.maximum(resid, 1e-12)))
    return theta


def _nonneg_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: drop the most negative and refit, until none is."""
    active = list(range(x.shape[1]))
    theta = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (sol >= 0).all():
            theta[active] = sol
            return theta
        active.pop(int(np.argmin(sol)))
    return theta
