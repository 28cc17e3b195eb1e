"""Fitting the latency cost model to timings from the user's own servers (pure; no I/O).

The cost model (``reference/cost_model.md``, :mod:`sgl_speccompact.core.costmodel`)
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
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from .gpus import DEFAULT_GPU, GPUS, match_gpu
from .costmodel import Hardware, ModelCost

MIN_SHARE = 0.01  # a rate under 1% of every probe's time is noise, not a measurement
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


def predict_s(shape: ProbeShape, model: ModelCost, fit: CostFit) -> float:
    """Seconds a probe call takes under ``fit`` (the linear model the fit assumes)."""
    return float(features(shape, model) @ _theta(fit))


def fit_observations(obs: list[Observation], model: ModelCost, *, served_model: str, gpu: str,
                     note: str = "", now: float | None = None, fallback: CostFit | None = None) -> CostFit:
    """Least-squares fit of :data:`PARAMS` to probe timings, on relative error, all >= 0.

    A rate that explains under :data:`MIN_SHARE` of every probe's time (the
    fixed cost of a decode pass, the KV rate or the prefill FLOP rate: zero,
    or lost in noise) is taken from
    ``fallback`` (the shipped profile), and the fit's ``note`` names it.

    Raises
    ------
    ValueError
        Too few or degenerate observations (the parameters are not
        identifiable), or an unresolved rate and no ``fallback``.
    """
    x = np.array([features(o.shape, model) for o in obs])
    y = np.array([o.seconds for o in obs])
    if len(obs) < len(PARAMS) or np.linalg.matrix_rank(x) < len(PARAMS) or (y <= 0).any():
        raise ValueError(f"{len(obs)} probe timings do not determine {len(PARAMS)} cost parameters; "
                         "need prefill probes of several lengths and decode probes of two lengths")
    w = 1.0 / y  # relative error: a 5 ms probe counts as much as a 500 ms one
    theta = _nonneg_lstsq(x * w[:, None], y * w)
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
    if not missing:
        return fit
    if fallback is None:
        raise ValueError(f"the probe timings did not resolve {sorted(missing)}")
    filled = {key: getattr(fallback, key) for keys in missing.values() for key in keys}
    what = ", ".join(sorted(missing))
    return replace(fit, **filled, note=f"{note}; {what} not resolved by the probe, from {fallback.source}".lstrip("; "))


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


def speed_ratio(slow: CostFit, fast: CostFit) -> dict[str, float]:
    """How many times slower ``slow`` is than ``fast``: per decode pass, per KV token, in prefill.

    >>> speed_ratio(profile_fit("Qwen/Qwen3-8B", "A100"), profile_fit("Qwen/Qwen3-8B", "H200"))["kv"]
    2.354...
    """
    return {"pass": slow.pass_s / fast.pass_s, "kv": slow.kv_s / fast.kv_s,
            "prefill": fast.flop_rate / slow.flop_rate}


def _theta(fit: CostFit) -> np.ndarray:
    return np.array([fit.o_req_s, fit.a_s, fit.weight_s, fit.kv_s, fit.seq_s, fit.tok_s, 1e15 / fit.flop_rate])


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
