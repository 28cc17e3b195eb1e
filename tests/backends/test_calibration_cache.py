"""A saved calibration that is unreadable or refused is ignored with one warning, never a traceback.

Before: a file with ``weight_s = 0`` made every later start die on a ZeroDivisionError, NaN made
``/health`` a 500, ``flop_rate = 0`` made every ``auto`` compaction a 500.  The probes failed then.
"""

from __future__ import annotations

import json
import math

import httpx
import pytest

from sgl_speccompact.backends import calibration_probe as probe
from sgl_speccompact.backends.calibration_probe import cache_path, calibrate, load_fit, resolve_cost_fit, save_fit
from sgl_speccompact.core.calibration import ProbeShape, profile_fit
from sgl_speccompact.emulator import ScriptedPolicy
from sgl_speccompact.emulator.cost import CostModel

QUICK_PLAN = tuple(ProbeShape(1, c, 1, False) for c in (64, 128)) + tuple(
    ProbeShape(b, c, n, True) for b in (1, 2) for c in (32, 64) for n in (2, 4))


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("SGL_SPECCOMPACT_CACHE_DIR", str(tmp_path / "cache"))


def _write(fields: dict | str, model="Qwen/Qwen3-8B", gpu="H100") -> None:
    path = cache_path(model, gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(fields, str):
        path.write_text(fields)
        return
    data = {**profile_fit(model, gpu).to_dict(), "source": "calibrated", **fields}
    path.write_text(json.dumps(data))  # NaN and Infinity are written as JSON's extensions, as json.dump does


BAD_FILES = {
    "weight_zero": {"weight_s": 0.0}, "flop_zero": {"flop_rate": 0.0}, "kv_negative": {"kv_s": -1e-8},
    "nan": {"flop_rate": math.nan}, "inf": {"weight_s": math.inf}, "o_req_nan": {"o_req_s": math.nan},
    "a_negative": {"a_s": -1.0}, "string": {"kv_s": "fast"}, "past_peak": {"flop_rate": 30_879e12},
    "faster_than_bandwidth": {"weight_s": 1e-6}, "missing_field": None, "not_json": "{weight_s: 0",
    "a_list": "[1, 2, 3]", "binary": "\udcff",
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_bad_saved_fit_is_ignored_with_one_warning(name, capsys):
    fields = BAD_FILES[name]
    if fields is None:
        _write(json.dumps({"model": "Qwen/Qwen3-8B", "gpu": "H100", "weight_s": 1.0}))
    elif name == "binary":
        cache_path("Qwen/Qwen3-8B", "H100").parent.mkdir(parents=True, exist_ok=True)
        cache_path("Qwen/Qwen3-8B", "H100").write_bytes(b"\xff\xfe\x00")
    else:
        _write(fields)
    assert load_fit("Qwen/Qwen3-8B", "H100") is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ignoring the saved calibration" in err[0] and "Traceback" not in err[0], err


def test_resolve_falls_back_to_the_profile_on_a_bad_file(make_emulated_server, capsys):
    srv = make_emulated_server(policy=ScriptedPolicy(), model_path="Qwen/Qwen3-8B",
                               cost_model=CostModel.for_model("qwen3-8b", gpu="H100", time_scale=0.0))
    _write({"weight_s": 0.0})
    with httpx.Client(timeout=60) as client:
        fit = resolve_cost_fit(client, srv.url)
    assert fit.source == "profile:H100" and fit.weight_s > 0
    assert "ignoring the saved calibration" in capsys.readouterr().err


def test_a_good_saved_fit_is_still_used():
    good = {**profile_fit("Qwen/Qwen3-8B", "H100").to_dict(), "source": "calibrated", "a_s": 2e-3}
    _write(good)
    assert load_fit("Qwen/Qwen3-8B", "H100").a_s == 2e-3


def test_a_refused_fit_is_never_saved():
    from dataclasses import replace

    with pytest.raises(ValueError, match="weight_s"):
        save_fit(replace(profile_fit("Qwen/Qwen3-8B", "H100"), weight_s=0.0))
    assert not cache_path("Qwen/Qwen3-8B", "H100").exists()


def test_noise_is_probed_again_and_a_refused_fit_gives_the_profile(make_emulated_server, monkeypatch):
    """A probe whose timings fit nothing: probed a second time, then refused for the shipped profile, unsaved."""
    srv = make_emulated_server(policy=ScriptedPolicy(), model_path="Qwen/Qwen3-8B",
                               cost_model=CostModel.for_model("qwen3-8b", gpu="H100", time_scale=0.0))
    rounds = []
    real = probe.run_probe

    def nan_probe(*args, **kwargs):
        rounds.append(kwargs.get("seed", 0))
        return [type(o)(o.shape, math.nan) for o in real(*args, **kwargs)]

    monkeypatch.setattr(probe, "run_probe", nan_probe)
    with httpx.Client(timeout=60) as client:
        fit = calibrate(client, srv.url, plan=QUICK_PLAN, repeats=1, gpu="H100")
    assert rounds == [0, 1]
    assert fit.source == "profile:H100" and "calibration refused" in fit.note and "\n" not in fit.note
    assert not cache_path("Qwen/Qwen3-8B", "H100").exists()
