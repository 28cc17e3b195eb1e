"""The calibration probe and its cache: the I/O side of :mod:`sgl_speccompact.core.calibration`.

:func:`resolve_cost_fit` gives the cost-model parameters the service uses
for one SGLang server, in this order:

1. with ``calibrate=True``: time the probe plan through the server's
   ``/generate`` (a few seconds on a GPU), fit, save the fit;
2. else a fit saved earlier for the same served model and GPU;
3. else the shipped profile of the GPU the server reports (H200 when it
   reports none), and the result's ``note`` says so.

sglang 0.5.23's ``/server_info`` carries no device name
(``build_server_info`` in ``sglang/srt/utils/common.py`` and the scheduler's
internal state list none), so on real servers the GPU comes from ``--gpu``;
the emulator reports the GPU it plays as ``gpu_name``.

Fits are saved as JSON under ``$SGL_SPECCOMPACT_CACHE_DIR``, else
``$XDG_CACHE_HOME/sgl_speccompact``, else ``~/.cache/sgl_speccompact``, in
``calibration/<model>--<gpu>.json``.

A fit is checked (:func:`~sgl_speccompact.core.calibration.check_fit`)
before it is saved and again when it is read: a probe too noisy to fit is
run once more, a fit still refused gives way to the shipped profile (its
note says why), and a saved file that is unreadable or refused is ignored
with one warning line.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from ..core.calibration import (DEFAULT_PLAN, CostFit, Observation, ProbeShape, check_fit, fit_observations,
                                model_preset, profile_fit)
from ..errors import BackendError

PROBE_TOKEN_RANGE = (100, 3000)  # prompt ids: inside every served vocabulary, never special tokens
NOISY_RMS = 0.15  # a fit whose relative RMS residual is over this is probed once more


def cache_dir() -> Path:
    """Where fits are saved (see the module doc)."""
    if os.environ.get("SGL_SPECCOMPACT_CACHE_DIR"):
        return Path(os.environ["SGL_SPECCOMPACT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sgl_speccompact"


def cache_path(model: str, gpu: str) -> Path:
    """The file of one model-and-GPU fit."""
    slug = lambda s: re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_") or "_"
    return cache_dir() / "calibration" / f"{slug(model)}--{slug(gpu)}.json"


def save_fit(fit: CostFit, tp: int = 1) -> Path:
    """Write ``fit`` to its cache file (atomically) and return the path.

    Raises
    ------
    ValueError
        :func:`~sgl_speccompact.core.calibration.check_fit` refuses it, or the model has no preset.
    """
    check_fit(fit, model_preset(fit.model), tp)
    path = cache_path(fit.model, fit.gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(fit.to_dict(), indent=2))
    tmp.replace(path)
    return path


def load_fit(model: str, gpu: str, tp: int = 1) -> CostFit | None:
    """A saved fit for this model and GPU, or None: none saved, or one unreadable or refused (with a warning).

    ``tp``: GPUs the server runs the model on (the bounds of :func:`check_fit` scale with it).
    """
    path = cache_path(model, gpu)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        fit = CostFit.from_dict(data)
        check_fit(fit, model_preset(fit.model), tp)
    except (OSError, ValueError, TypeError, RecursionError) as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        log(f"[launch] warning: ignoring the saved calibration {path} ({reason}); "
            "the shipped profile is used (--calibrate fits again)")
        return None
    return fit


def server_identity(client, url: str, headers: dict | None = None) -> tuple[str, str | None]:
    """``(model_path, gpu_name or None)`` from ``/server_info`` (``/get_server_info`` on older servers)."""
    for route in ("/server_info", "/get_server_info"):
        try:
            res = client.get(url + route, headers=headers)
        except Exception as exc:  # httpx transport errors: the server is not there
            raise BackendError(f"cannot reach {url}{route}: {exc}") from exc
        if res.status_code == 200:
            info = res.json()
            return str(info.get("model_path") or ""), info.get("gpu_name") or info.get("device_name")
    raise BackendError(f"{url} answered neither /server_info nor /get_server_info")


def probe_bodies(shape: ProbeShape, rng: random.Random) -> tuple[dict | None, dict]:
    """The warm-up body (cached shapes) and the timed ``/generate`` body of one probe.

    Prompts are random token ids, so a prefill probe never hits the radix
    cache; ``ignore_eos`` makes every prompt decode exactly ``new_tokens``.
    """
    lo, hi = PROBE_TOKEN_RANGE
    prompts = [[rng.randrange(lo, hi) for _ in range(shape.prompt_tokens)] for _ in range(shape.batch)]
    ids: Any = prompts[0] if shape.batch == 1 else prompts
    params = {"max_new_tokens": shape.new_tokens, "temperature": 0.0, "ignore_eos": True}
    timed = {"input_ids": ids, "sampling_params": params}
    warm = {"input_ids": ids, "sampling_params": {**params, "max_new_tokens": 1}} if shape.cached else None
    return warm, timed


def run_probe(client, url: str, plan=DEFAULT_PLAN, *, repeats: int = 2, headers: dict | None = None,
              seed: int = 0, clock: Callable[[], float] = time.perf_counter) -> list[Observation]:
    """Time every shape of ``plan`` ``repeats`` times; keep each shape's fastest call.

    The fastest of several is the least disturbed by anything else on the
    machine; every repeat uses fresh prompts.  ``clock`` (seconds) times each
    call: the wall clock, or a server's own clock (a timed emulator's
    SIMULATED one).
    """
    rng = random.Random(seed)
    out = []
    for shape in plan:
        best = float("inf")
        for _ in range(repeats):
            warm, timed = probe_bodies(shape, rng)
            if warm is not None:
                _post(client, url, warm, headers)
            t0 = clock()
            _post(client, url, timed, headers)
            best = min(best, clock() - t0)
        out.append(Observation(shape, best))
    return out


def calibrate(client, url: str, *, gpu: str | None = None, plan=DEFAULT_PLAN, repeats: int = 2,
              headers: dict | None = None, save: bool = True, tp: int = 1,
              clock: Callable[[], float] = time.perf_counter) -> CostFit:
    """Probe one server, fit the cost model, save the fit (see :func:`resolve_cost_fit`; ``clock``: :func:`run_probe`)."""
    model, reported = server_identity(client, url, headers)
    gpu_name = gpu or reported or "unreported"
    preset = _preset(model, url)
    profile = profile_fit(model, gpu_name, preset)
    if not plan_determines(plan, preset):
        raise BackendError(f"calibration of {url} failed: the probe plan does not determine the cost parameters")

    def fit_of(obs: list[Observation], rounds: int) -> tuple[CostFit | None, str]:
        try:
            return fit_observations(obs, preset, served_model=model, gpu=gpu_name, fallback=profile, tp=tp,
                                    note=f"probed {len(obs)} shapes x {repeats * rounds} on {url}"), ""
        except ValueError as exc:
            return None, str(exc)

    obs = run_probe(client, url, plan, repeats=repeats, headers=headers, clock=clock)
    fit, problem = fit_of(obs, 1)
    if fit is None or (fit.rms_rel or 0.0) > NOISY_RMS:  # noise: once more, each shape's fastest of both rounds
        again = run_probe(client, url, plan, repeats=repeats, headers=headers, seed=1, clock=clock)
        obs = [a if a.seconds <= b.seconds else b for a, b in zip(obs, again)]
        fit, problem = fit_of(obs, 2)
    if fit is None:
        return replace(profile, note=f"calibration refused ({problem}); the shipped profile is used"
                       + (f"; {profile.note}" if profile.note else ""))
    if save:
        save_fit(fit, tp)
    return fit


def plan_determines(plan, preset) -> bool:
    """Whether a probe plan's shapes can determine every cost parameter (enough, and independent)."""
    import numpy as np

    from ..core.calibration import PARAMS, features

    x = np.array([features(shape, preset) for shape in plan])
    return len(plan) >= len(PARAMS) and np.linalg.matrix_rank(x) == len(PARAMS)


def resolve_cost_fit(client, url: str, *, calibrate_now: bool = False, gpu: str | None = None,
                     headers: dict | None = None, plan=DEFAULT_PLAN, repeats: int = 2, tp: int = 1) -> CostFit:
    """The cost-model parameters for one server: fresh fit, saved fit, or shipped profile.

    Raises
    ------
    BackendError
        The server cannot be reached or the probe fails (with ``calibrate_now``).
    ValueError
        The served model has no cost-model preset.
    """
    if calibrate_now:
        return calibrate(client, url, gpu=gpu, headers=headers, plan=plan, repeats=repeats, tp=tp)
    model, reported = server_identity(client, url, headers)
    gpu_name = gpu or reported
    saved = load_fit(model, gpu_name or "unreported", tp)
    if saved is not None:
        return saved
    return profile_fit(model, gpu_name, _preset(model, url))


def _preset(model: str, url: str):
    try:
        return model_preset(model)
    except ValueError as exc:
        raise ValueError(f"{url}: {exc}") from exc


def _post(client, url: str, body: dict, headers: dict | None) -> None:
    try:
        res = client.post(url + "/generate", json=body, headers=headers)
    except Exception as exc:
        raise BackendError(f"calibration request to {url}/generate failed: {exc}") from exc
    if res.status_code != 200:
        raise BackendError(f"calibration request to {url}/generate answered {res.status_code}: {res.text[:200]}")


def report_line(role: str, fit: CostFit) -> str:
    """One line for the launcher's log."""
    rates = (f"a {fit.a_s * 1e3:.2f} ms, weights {fit.weight_s * 1e3:.2f} ms/pass, "
             f"KV {fit.kv_s * 1e9:.1f} ns/token, prefill {fit.flop_rate / 1e12:.0f} TFLOP/s")
    extra = f"; {fit.note}" if fit.note else ""
    return f"[launch] {role} cost model ({fit.source}, {fit.model} on {fit.gpu}): {rates}{extra}"


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
