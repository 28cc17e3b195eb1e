"""Calibration helpers: the fit's forward model (synthetic probe timings) and the ratio of two fits."""

from __future__ import annotations

import numpy as np

from sgl_speccompact.core.calibration import CostFit, ProbeShape, features
from sgl_speccompact.core.costmodel import ModelCost


def predict_s(shape: ProbeShape, model: ModelCost, fit: CostFit) -> float:
    """Seconds a probe call takes under ``fit``: :func:`~sgl_speccompact.core.calibration.features` times
    the fit's parameters, in the order of :data:`~sgl_speccompact.core.calibration.PARAMS`."""
    theta = np.array([fit.o_req_s, fit.a_s, fit.weight_s, fit.kv_s, fit.seq_s, fit.tok_s, 1e15 / fit.flop_rate])
    return float(features(shape, model) @ theta)


def speed_ratio(slow: CostFit, fast: CostFit) -> dict[str, float]:
    """How many times slower ``slow`` is than ``fast``: per decode pass, per KV token, in prefill."""
    return {"pass": slow.pass_s / fast.pass_s, "kv": slow.kv_s / fast.kv_s,
            "prefill": fast.flop_rate / slow.flop_rate}
