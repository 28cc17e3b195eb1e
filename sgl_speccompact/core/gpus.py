"""Shipped GPU profiles for the latency cost model, and playing a faster or slower GPU (pure).

Bandwidth and dense bf16 FLOP/s are vendor spec-sheet figures; the achieved
fractions (``eta_w``, ``eta_kv``, ``mfu``) are the H200/H100 estimates of
the published cost model for every GPU (*est.*), so a profile is a first
guess that ``--calibrate`` replaces with a fit on the user's own servers
(:mod:`sgl_speccompact.core.calibration`).
"""

from __future__ import annotations

from dataclasses import replace

from .costmodel import GPUS, Hardware

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
