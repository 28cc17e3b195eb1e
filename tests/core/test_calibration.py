"""Cost-model calibration: the pure fit, the probe against timed emulators and the cache (the launcher's
report of the fits: tests/launch/test_calibration_startup.py)."""

from __future__ import annotations

import doctest
import importlib

import httpx
import numpy as np
import pytest

from sgl_speccompact.core.calibration import (
    CostFit, Observation, ProbeShape, fit_observations, profile_fit)
from sgl_speccompact.backends.calibration_probe import cache_path, calibrate, probe_bodies, resolve_cost_fit
from sgl_speccompact.errors import BackendError
from sgl_speccompact.emulator import ScriptedPolicy
from sgl_speccompact.emulator.cost import QWEN3_8B, CostModel
from tests.support.calibration import predict_s, speed_ratio

# Small plans: prefill lengths the preset computes in compute-bound passes, decode at two lengths
PLAN_8B = tuple(ProbeShape(1, c, 1, False) for c in (1024, 2048, 4096)) + tuple(
    ProbeShape(b, c, n, True) for b in (1, 8) for c in (512, 4096) for n in (8, 64))
PLAN_06B = tuple(ProbeShape(1, c, 1, False) for c in (2048, 4096, 8192)) + tuple(
    ProbeShape(b, c, n, True) for b in (1, 8) for c in (1024, 8192) for n in (8, 64))
QUICK_PLAN = tuple(ProbeShape(1, c, 1, False) for c in (64, 128)) + tuple(
    ProbeShape(b, c, n, True) for b in (1, 2) for c in (32, 64) for n in (2, 4))


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("SGL_SPECCOMPACT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", ["core.calibration", "core.gpus", "emulator.cost", "emulator.__main__"])
def test_docstring_examples(name):
    failed, attempted = doctest.testmod(importlib.import_module(f"sgl_speccompact.{name}"),
                                        optionflags=doctest.ELLIPSIS)
    assert failed == 0 and attempted > 0


# ------------------------------------------------------------------ the pure fit


def test_prediction_is_the_cost_models_own_pass_sum():
    """A profile's prediction of a probe equals o_req plus the cost model's forward passes, summed by hand."""
    fit, cm = profile_fit("Qwen/Qwen3-8B", "H200"), CostModel.for_model("qwen3-8b")
    b, c, n = 4, 3000, 5
    # cached: n memory-bound passes; pass k has c - 1 + k tokens cached (sglang recomputes a cached
    # prompt's last token) and adds one
    decode = sum(cm.forward_s([(c - 1 + k, 1)] * b) for k in range(n))
    assert predict_s(ProbeShape(b, c, n, True), QWEN3_8B, fit) == pytest.approx(cm.request_overhead_s + decode)
    prefill = cm.forward_s([(0, c)]) + sum(cm.forward_s([(c - 1 + k, 1)]) for k in range(1, n))
    assert predict_s(ProbeShape(1, c, n, False), QWEN3_8B, fit) == pytest.approx(cm.request_overhead_s + prefill)


def test_fit_recovers_known_parameters_exactly():
    truth = CostFit("Qwen/Qwen3-8B", "X", o_req_s=4e-3, a_s=2e-3, weight_s=7e-3, kv_s=9e-8, flop_rate=3e14,
                    source="truth", seq_s=5e-5, tok_s=1e-7)
    from sgl_speccompact.core.calibration import DEFAULT_PLAN

    obs = [Observation(s, predict_s(s, QWEN3_8B, truth)) for s in DEFAULT_PLAN]
    fit = fit_observations(obs, QWEN3_8B, served_model="Qwen/Qwen3-8B", gpu="X")
    for key in ("o_req_s", "a_s", "weight_s", "kv_s", "flop_rate", "seq_s", "tok_s"):
        assert getattr(fit, key) == pytest.approx(getattr(truth, key), rel=1e-6), key
    assert fit.source == "calibrated" and fit.rms_rel < 1e-9 and fit.observations == len(DEFAULT_PLAN)


def test_fit_keeps_every_parameter_non_negative():
    truth = CostFit("m", "X", o_req_s=0.0, a_s=3e-3, weight_s=5e-3, kv_s=5e-8, flop_rate=4e14, source="t")
    from sgl_speccompact.core.calibration import DEFAULT_PLAN

    rng = np.random.default_rng(0)
    obs = [Observation(s, predict_s(s, QWEN3_8B, truth) * (1 + 0.03 * rng.standard_normal()))
           for s in DEFAULT_PLAN]
    fit = fit_observations(obs, QWEN3_8B, served_model="m", gpu="X")
    assert min(fit.o_req_s, fit.a_s, fit.weight_s, fit.kv_s, fit.seq_s, fit.tok_s) >= 0
    assert fit.pass_s == pytest.approx(truth.pass_s, rel=0.2)


def test_a_rate_the_probe_cannot_see_comes_from_the_profile():
    """Timings with no prefill compute in them (an untimed server) leave the FLOP rate to the profile."""
    from sgl_speccompact.core.calibration import DEFAULT_PLAN

    truth = CostFit("Qwen/Qwen3-8B", "X", o_req_s=4e-3, a_s=2e-3, weight_s=7e-3, kv_s=9e-8, flop_rate=1e30,
                    source="truth")
    obs = [Observation(s, predict_s(s, QWEN3_8B, truth)) for s in DEFAULT_PLAN]
    with pytest.raises(ValueError, match="flop_rate"):
        fit_observations(obs, QWEN3_8B, served_model="Qwen/Qwen3-8B", gpu="X")
    profile = profile_fit("Qwen/Qwen3-8B", "H100")
    fit = fit_observations(obs, QWEN3_8B, served_model="Qwen/Qwen3-8B", gpu="X", fallback=profile)
    assert fit.flop_rate == profile.flop_rate and "flop_rate not resolved" in fit.note
    assert fit.kv_s == pytest.approx(truth.kv_s, rel=1e-3)  # what was resolved stays fitted


def test_too_few_shapes_are_refused():
    obs = [Observation(ProbeShape(1, c, 1, False), 0.1) for c in (1024, 2048, 4096)]
    with pytest.raises(ValueError, match="do not determine"):
        fit_observations(obs, QWEN3_8B, served_model="m", gpu="X")


def test_shipped_profile_follows_the_gpu():
    h200, h100 = profile_fit("Qwen/Qwen3-8B", "H200"), profile_fit("Qwen/Qwen3-8B", "NVIDIA H100 80GB HBM3")
    assert h100.source == "profile:H100" and h100.note == ""
    assert h100.weight_s / h200.weight_s == pytest.approx(4.8 / 3.35)
    unknown = profile_fit("Qwen/Qwen3-8B", "Tesla T4")
    assert unknown.source == "profile:H200" and "no shipped profile" in unknown.note
    with pytest.raises(ValueError, match="no cost-model preset"):
        profile_fit("meta-llama/Llama-3.1-8B", "H200")


def test_bodies_are_valid_sglang_generate_requests():
    import random

    from sglang.srt.entrypoints.api_contract import generate_contract_error
    from sglang.srt.managers.io_struct import GenerateReqInput

    for shape in (ProbeShape(1, 50, 1, False), ProbeShape(3, 20, 4, True)):
        warm, timed = probe_bodies(shape, random.Random(0))
        for body in [timed] + ([warm] if warm else []):
            assert generate_contract_error(body) is None, generate_contract_error(body)
            GenerateReqInput(**body).normalize_batch_and_arguments()
        assert (warm is None) == (not shape.cached)


# ---------------------------------------------------------- against timed emulators


@pytest.mark.parametrize("model,plan,rates", [
    # the 8B's decode is weight-bound at these contexts: its KV share is too small to resolve, so the KV
    # rate is checked on the 0.6B, whose decode is KV-bound
    ("qwen3-8b", PLAN_8B, ("pass", "prefill")),
    ("qwen3-0.6b", PLAN_06B, ("pass", "kv")),
])
def test_calibration_recovers_a_twice_slower_gpu(make_emulated_server, model, plan, rates):
    """Emulators answer by the cost model; the probe and the fit see the 2x from its timings alone.

    The probe times each call on the emulator's own SIMULATED clock (its ``clock``), so neither the
    emulator's CPU work nor load on this machine enters a timing, and the fit recovers the 2 (to 1%).
    Before, the wall clock timed it: 1.34 on a loaded machine, against a 1.5 bound.  The same probe on the wall clock, with the emulator's CPU work in every answer,
    is ``bench/calibration_speed.py``: a report, since load pulls its ratios towards 1.
    """
    fits = {}
    for speed in (1.0, 0.5):
        cm = CostModel.for_model(model, speed=speed, time_scale=0.0)
        srv = make_emulated_server(policy=ScriptedPolicy(), cost_model=cm, model_path=f"Qwen/{model}")
        with httpx.Client(timeout=120) as client:
            fits[speed] = calibrate(client, srv.url, plan=plan, repeats=1, save=False, clock=srv.engine.sim_now)
        assert fits[speed].gpu == cm.hardware.name  # reported by the emulator's /server_info
        srv.close()
    ratio = speed_ratio(fits[0.5], fits[1.0])
    for rate in rates:
        assert ratio[rate] == pytest.approx(2.0, rel=0.01), (rate, ratio, fits)


def test_calibrate_saves_then_resolve_reuses_without_probing(make_emulated_server):
    cm = CostModel.for_model("qwen3-8b", gpu="H100", time_scale=0.0)  # accounting only: fast
    srv = make_emulated_server(policy=ScriptedPolicy(), cost_model=cm, model_path="Qwen/Qwen3-8B")
    with httpx.Client(timeout=60) as client:
        fit = resolve_cost_fit(client, srv.url, calibrate_now=True, plan=QUICK_PLAN, repeats=1)
        path = cache_path("Qwen/Qwen3-8B", "H100")
        assert fit.source == "calibrated" and fit.gpu == "H100" and path.is_file()
        assert srv.stats()["total"]["requests"] > 0  # the probe ran
        srv.reset_stats()
        again = resolve_cost_fit(client, srv.url)
    assert again == fit
    assert srv.stats()["total"]["requests"] == 0  # reused from the file: no probe ran


def test_without_calibration_the_reported_gpu_picks_the_profile(make_emulated_server):
    timed = make_emulated_server(policy=ScriptedPolicy(), model_path="Qwen/Qwen3-32B",
                                 cost_model=CostModel.for_model("qwen3-32b", gpu="A100", time_scale=0.0))
    untimed = make_emulated_server(policy=ScriptedPolicy(), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    with httpx.Client(timeout=60) as client:
        a100 = resolve_cost_fit(client, timed.url)
        assumed = resolve_cost_fit(client, untimed.url)
        given = resolve_cost_fit(client, untimed.url, gpu="L40S")
        with pytest.raises(BackendError, match="cannot reach"):
            resolve_cost_fit(client, "http://127.0.0.1:9")
    assert (a100.source, a100.model, a100.note) == ("profile:A100", "Qwen/Qwen3-32B", "")
    assert assumed.source == "profile:H200" and "report no GPU name; assumed H200" in assumed.note
    assert given.source == "profile:L40S" and given.gpu == "L40S"


