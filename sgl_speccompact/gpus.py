"""Shipped GPU profiles for the latency cost model, and playing a faster or slower GPU (pure).

Bandwidth and dense bf16 FLOP/s are vendor spec-sheet figures; the achieved
fractions (``eta_w``, ``eta_kv``, ``mfu``) are the H200/H100 estimates of
``reference/cost_model.md`` for every GPU (*est.*), so a profile is a first
guess that ``--calibrate`` replaces with a fit on the user's own servers
(:mod:`sgl_speccompact.calibration`).
"""

from __future__ import annotations

from dataclasses import replace

from .testing.emulator.cost import Hardware

_H200 = Hardware()
GPUS = {
    "H200": replace(_H200, name="H200"),  # H200 SXM: 4.8 TB/s, 989 TFLOP/s
    "H100": replace(_H200, bw=3.35e12, flops=989e12, name="H100"),  # H100 SXM: 3.35 TB/s, 989 TFLOP/s
    "A100": replace(_H200, bw=2.039e12, flops=312e12, name="A100"),  # A100 80GB SXM: 2.039 TB/s, 312 TFLOP/s
    "L40S": replace(_H200, bw=0.864e12, flops=362e12, name="L40S"),  # L40S: 864 GB/s, 362 TFLOP/s
    "B200": replace(_H200, bw=8.0e12, flops=2250e12, name="B200"),  # B200: 8 TB/s, 2.25 PFLOP/s
}
DEFAULT_GPU = "H200"  # assumed when the servers do not say


def match_gpu(reported: str | None) -> str | None:
    """The shipped profile a reported device name belongs to (``None``: no profile).

    >>> match_gpu("NVIDIA H200"), match_gpu("NVIDIA A100-SXM4-80GB"), match_gpu("Tesla T4")
    ('H200', 'A100', None)
    """
    text = (reported or "").upper()
    return next((key for key in GPUS if key in text), None)


def gpu_profile(name: str) -> Hardware:
    """A shipped GPU profile by name (a reported device name works too).

    >>> gpu_profile("nvidia h100 80gb hbm3").name
    'H100'
    """
    key = match_gpu(name)
    if key is None:
        raise ValueError(f"unknown GPU {name!r}; known: {sorted(GPUS)}")
    return GPUS[key]


def scaled(hw: Hardware, speed: float) -> Hardware:
    """The same GPU ``speed`` times as fast (0.5: twice as slow): bandwidth and FLOP/s scale.

    >>> slow = scaled(GPUS["H200"], 0.5)
    >>> slow.bw, slow.name
    (2400000000000.0, 'H200x0.5')
    """
    if speed <= 0:
        raise ValueError(f"speed must be positive, got {speed}")
    if speed == 1:
        return hw
    return replace(hw, bw=hw.bw * speed, flops=hw.flops * speed, name=f"{hw.name}x{speed:g}")
