"""The launcher and calibration: start-up, ``/health`` and ``auto`` compactions survive any saved
calibration file; the fits are reported in ``/health`` and ``/metrics``; the calibration flags.

Before: a saved ``weight_s = 0`` killed every start with a ZeroDivisionError, a NaN made
``/health`` a 500 and ``flop_rate = 0`` made every ``auto`` compaction a 500.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import httpx
import pytest
from fastapi.testclient import TestClient

from sgl_speccompact.backends.contract import BackendDefaults
from sgl_speccompact.backends.calibration_probe import cache_path
from sgl_speccompact.core.calibration import profile_fit
from sgl_speccompact.launch.command_line import build_parser
from sgl_speccompact.launch.plan import build_plan
from sgl_speccompact.methods.autopick import deployment_for
from sgl_speccompact.emulator import ScriptedPolicy
from sgl_speccompact.core.calibration import CostFit
from sgl_speccompact.launch.run import cost_fits
from sgl_speccompact.service.app import create_app
from sgl_speccompact.emulator.cost import CostModel
from tests.support.paths import REPO


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


def test_launcher_reports_fits_in_health_and_metrics(make_emulated_server):
    target = make_emulated_server(policy=ScriptedPolicy(), model_path="Qwen/Qwen3-8B",
                                  cost_model=CostModel.for_model("qwen3-8b", gpu="H100", time_scale=0.0))
    drafter = make_emulated_server(policy=ScriptedPolicy(), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    plan = build_plan(build_parser().parse_args(["--target-url", target.url, "--drafter-url", drafter.url]))
    with httpx.Client(timeout=60) as http:
        fits = cost_fits(plan, http)
    assert fits["target"].source == "profile:H100" and fits["drafter"].source == "profile:H200"

    app = create_app(BackendDefaults(), BackendDefaults(), runner=lambda *a, **k: None, methods=("speccompact",),
                     health_probe=lambda b: {"ok": True, "url": None, "detail": "fake"}, cost_models=fits)
    client = TestClient(app)
    health = client.get("/health").json()["cost_model"]
    assert health["target"]["source"] == "profile:H100" and health["target"]["weight_s"] == fits["target"].weight_s
    assert "assumed H200" in health["drafter"]["note"]
    text = client.get("/metrics").text
    line = next(ln for ln in text.splitlines() if ln.startswith("speccompact_cost_model_param{")
                and 'role="target"' in ln and 'param="weight_s"' in ln)
    assert float(line.split()[-1]) == pytest.approx(fits["target"].weight_s)


def test_emulator_cli_and_launcher_flags():
    from sgl_speccompact.emulator.__main__ import emulated_cost_model, parse_args

    args = parse_args(["--cost-model", "qwen3-8b", "--gpu", "H100", "--gpu-speed", "0.5"])
    cm = emulated_cost_model(args.cost_model, args.gpu, args.gpu_speed, args.time_scale)
    assert cm.hardware.name == "H100x0.5" and cm.time_scale == 1.0
    with pytest.raises(SystemExit):
        emulated_cost_model(None, "H100")
    res = subprocess.run([sys.executable, "-m", "sgl_speccompact.launch", "--emulate-speed", "0.5"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "--emulate only" in res.stderr


@pytest.mark.e2e  # the launcher's child processes, end to end
def test_serve_calibrate_and_launch_emulate_gpu_end_to_end(make_emulated_server, tmp_path):
    """The command lines: ``serve --calibrate`` probes, saves and reports; ``launch --emulate-gpu`` plays a GPU."""
    import os
    import signal

    from tests.support.procs import EXIT_S, stop, wait_healthy

    from sgl_speccompact.emulator import free_port

    env = {**os.environ, "SGL_SPECCOMPACT_CACHE_DIR": str(tmp_path / "cache")}
    target = make_emulated_server(policy=ScriptedPolicy(), model_path="Qwen/Qwen3-8B",
                                  cost_model=CostModel.for_model("qwen3-8b", time_scale=0.0))
    runs = [
        ["serve", "--target-url", target.url, "--calibrate", "--gpu", "H100"],
        ["launch", "--emulate", "--emulate-gpu", "A100", "--emulate-speed", "0.5"],
    ]
    health = []
    for argv in runs:
        sp = free_port()
        cmd = ([sys.executable, "-m", "sgl_speccompact", *argv] if argv[0] == "serve" else
               [sys.executable, "-m", "sgl_speccompact.launch", *argv[1:]])
        proc = subprocess.Popen(cmd + ["--service-port", str(sp)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            wait_healthy(f"http://127.0.0.1:{sp}", proc)
            health.append(httpx.get(f"http://127.0.0.1:{sp}/health", timeout=EXIT_S).json()["cost_model"])
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=EXIT_S)
        finally:
            stop(proc, signal.SIGKILL)
    served, emulated = health
    assert served["target"]["source"] == "calibrated" and served["target"]["gpu"] == "H100"
    saved = tmp_path / "cache" / "calibration" / "Qwen_Qwen3-8B--H100.json"
    assert CostFit.from_dict(__import__("json").loads(saved.read_text())).to_dict() == served["target"]
    assert emulated["target"]["gpu"] == "A100x0.5" and emulated["target"]["source"] == "profile:A100"
    assert emulated["drafter"]["model"] == "Qwen/Qwen3-0.6B"
