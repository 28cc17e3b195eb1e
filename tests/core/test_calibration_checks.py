"""A calibration fit is finite, positive and physical before anything saves or uses it.

Before: noise on a loaded machine drove ``weight_s`` to 0 with prefill at 30,879 TFLOP/s (32x an
H100's peak); the fit was saved and every later start died on a ZeroDivisionError.  Each probe
below failed on that code.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from sgl_speccompact.core import calibration
from sgl_speccompact.core.calibration import DEFAULT_PLAN, CostFit, Observation, fit_observations, profile_fit
from sgl_speccompact.core.costmodel import GPUS, QWEN3_8B
from tests.support.calibration import predict_s

# the fastest an H100 can go: weights and KV read at its full bandwidth, prefill at its peak
H100 = {"weight_s": QWEN3_8B.weight_bytes / GPUS["H100"].bw, "kv_s": QWEN3_8B.kv_bytes_per_token / GPUS["H100"].bw,
        "flop_rate": GPUS["H100"].flops}


def check_fit(*args, **kwargs):
    return calibration.check_fit(*args, **kwargs)  # looked up when called: the probes above it run on any code


def _obs(truth: CostFit, noise: float = 0.0, seed: int = 0) -> list[Observation]:
    rng = np.random.default_rng(seed)
    return [Observation(s, predict_s(s, QWEN3_8B, truth) * (1 + noise * abs(rng.standard_normal())))
            for s in DEFAULT_PLAN]


def test_a_pass_cheaper_than_its_weight_reads_is_never_fitted():
    """Timings whose decode pass is all fixed cost: the old fit set weight_s = 0 (a ZeroDivisionError later)."""
    truth = CostFit("Qwen/Qwen3-8B", "H100", o_req_s=4e-3, a_s=9e-3, weight_s=0.0, kv_s=9e-8, flop_rate=3e14,
                    source="t", seq_s=5e-5, tok_s=1e-7)
    fit = fit_observations(_obs(truth), QWEN3_8B, served_model="Qwen/Qwen3-8B", gpu="H100")
    assert fit.weight_s >= H100["weight_s"] * (1 - 1e-9) and fit.kv_s >= H100["kv_s"] * (1 - 1e-9)
    check_fit(fit, QWEN3_8B)
    fit.profiles(QWEN3_8B)  # what start-up computes from it: no division by zero


def test_prefill_past_the_gpus_peak_is_refitted_at_the_peak():
    truth = CostFit("Qwen/Qwen3-8B", "H100", o_req_s=4e-3, a_s=2e-3, weight_s=7e-3, kv_s=9e-8,
                    flop_rate=30_879e12, source="t", seq_s=5e-5, tok_s=1e-7)
    fit = fit_observations(_obs(truth), QWEN3_8B, served_model="Qwen/Qwen3-8B", gpu="H100")
    assert 0 < fit.flop_rate <= H100["flop_rate"] * (1 + 1e-9)
    check_fit(fit, QWEN3_8B)


@pytest.mark.parametrize("index", [0, 1, 2, 3, 5, 7])  # every prefill probe and two decode probes
def test_a_disturbed_probe_call_does_not_move_the_fit(index):
    """One call of the plan taking twice its time: the robust fit stays within 5% on the pass cost and the
    prefill rate (the plain least-squares fit moved them 9-13%)."""
    truth = CostFit("Qwen/Qwen3-8B", "H100", o_req_s=4e-3, a_s=2e-3, weight_s=7e-3, kv_s=9e-8, flop_rate=3e14,
                    source="t", seq_s=5e-5, tok_s=1e-7)
    obs = _obs(truth)
    obs[index] = Observation(obs[index].shape, obs[index].seconds * 2)
    fit = fit_observations(obs, QWEN3_8B, served_model="Qwen/Qwen3-8B", gpu="H100")
    assert fit.pass_s == pytest.approx(truth.pass_s, rel=0.05)
    assert fit.flop_rate == pytest.approx(truth.flop_rate, rel=0.05)


@pytest.mark.parametrize("seed", range(5))
def test_fits_of_noisy_timings_always_pass_the_check(seed):
    truth = CostFit("Qwen/Qwen3-8B", "H100", o_req_s=1e-3, a_s=1e-3, weight_s=H100["weight_s"] * 1.05,
                    kv_s=H100["kv_s"] * 1.1, flop_rate=H100["flop_rate"] * 0.9, source="t")
    fit = fit_observations(_obs(truth, noise=0.3, seed=seed), QWEN3_8B, served_model="Qwen/Qwen3-8B", gpu="H100",
                           fallback=profile_fit("Qwen/Qwen3-8B", "H100"))
    check_fit(fit, QWEN3_8B)


BAD_VALUES = [0.0, -1e-3, math.nan, math.inf, -math.inf, "5", None, True]


@pytest.mark.parametrize("field", ["o_req_s", "a_s", "weight_s", "kv_s", "flop_rate", "seq_s", "tok_s"])
@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
def test_every_bad_field_is_refused_in_one_line(field, value):
    fit = replace(profile_fit("Qwen/Qwen3-8B", "H100"), **{field: value})
    if value == 0.0 and field in ("o_req_s", "a_s", "seq_s", "tok_s"):
        check_fit(fit, QWEN3_8B)  # a fixed cost of zero is possible
        return
    with pytest.raises(ValueError, match=field) as info:
        check_fit(fit, QWEN3_8B)
    assert "\n" not in str(info.value)


def test_bounds_are_the_gpus_spec():
    assert calibration.physical_bounds(QWEN3_8B, "H100") == H100


def test_bounds_follow_the_gpu_and_tensor_parallelism():
    fast = replace(profile_fit("Qwen/Qwen3-8B", "H100"), weight_s=H100["weight_s"] * 0.6)
    with pytest.raises(ValueError, match="bandwidth"):
        check_fit(fast, QWEN3_8B)
    check_fit(fast, QWEN3_8B, tp=2)  # two GPUs read half the weights each
    check_fit(replace(fast, gpu="Tesla T4", weight_s=H100["weight_s"] * 0.9), QWEN3_8B)  # unknown: the fastest GPU bounds
    with pytest.raises(ValueError, match="peak"):
        check_fit(replace(profile_fit("Qwen/Qwen3-8B", "A100"), flop_rate=400e12), QWEN3_8B)
