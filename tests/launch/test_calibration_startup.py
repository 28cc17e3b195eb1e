"""Start-up, ``/health`` and ``auto`` compactions survive any saved calibration file.

Before: a saved ``weight_s = 0`` killed every start with a ZeroDivisionError, a NaN made
``/health`` a 500 and ``flop_rate = 0`` made every ``auto`` compaction a 500.
"""

from __future__ import annotations

import json
import math

import pytest
from fastapi.testclient import TestClient

from sgl_speccompact.backends.calibration_probe import cache_path
from sgl_speccompact.core.calibration import profile_fit
from sgl_speccompact.launch.cli import build_parser
from sgl_speccompact.launch.plan import build_plan
from sgl_speccompact.methods.autopick import deployment_for
from sgl_speccompact.testing import ScriptedPolicy
from sgl_speccompact.testing.emulator.cost import CostModel


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("SGL_SPECCOMPACT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("fields", [{"weight_s": 0.0}, {"flop_rate": 0.0}, {"kv_s": math.nan},
                                    {"a_s": -1.0}, {"flop_rate": math.inf}], ids=lambda f: json.dumps(f))
def test_start_health_and_auto_survive_a_bad_saved_fit(make_emulated_server, fields, capsys):
    from sgl_speccompact.launch.run import _build_app

    target = make_emulated_server(policy=ScriptedPolicy(default_output="- done\n"), model_path="Qwen/Qwen3-8B",
                                  cost_model=CostModel.for_model("qwen3-8b", gpu="H100", time_scale=0.0))
    path = cache_path("Qwen/Qwen3-8B", "H100")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**profile_fit("Qwen/Qwen3-8B", "H100").to_dict(), "source": "calibrated", **fields}))
    plan = build_plan(build_parser().parse_args(["--target-url", target.url, "--no-drafter"]))
    import httpx

    with httpx.Client(timeout=60) as http:
        app = _build_app(plan, http)  # before: ZeroDivisionError here
        client = TestClient(app)
        health = client.get("/health")
        assert health.status_code in (200, 503) and health.json()["cost_model"]["target"]["source"] == "profile:H100"
        res = client.post("/v1/compact", json={"messages": [{"role": "user", "content": "fix the bug in a.py"}],
                                               "method": "auto"})
        assert res.status_code != 500, res.text
    assert "ignoring the saved calibration" in capsys.readouterr().err


@pytest.mark.parametrize("fields", [{"weight_s": 0.0}, {"flop_rate": 0.0}, {"kv_s": math.nan}, {"a_s": -1.0}])
def test_auto_picker_refuses_a_bad_fit_handed_to_it(fields):
    from dataclasses import replace

    bad = replace(profile_fit("Qwen/Qwen3-8B", "H100"), **fields)
    picker = deployment_for("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", gpu="H100", fits={"target": bad})
    assert "cost fit refused" in picker.source and picker.deployment is not None
    predicted = picker.predict(20_000, ("speccompact", "target_self"))
    assert all(math.isfinite(v) and v > 0 for v in predicted["predicted_s"].values()), predicted
