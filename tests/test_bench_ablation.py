"""bench/ablation.py: every registered optimization is switched off alone, plus all on / all off (SIMULATED)."""

from __future__ import annotations

import pytest
from bench_scripts import load_bench

from sgl_speccompact.config import OPTIMIZATIONS, CompactConfig


@pytest.fixture(scope="module")
def bench():
    return load_bench("ablation")


def test_variants_cover_every_registered_switch(bench):
    labels = [label for label, _ in bench.variants()]
    assert labels[0] == "all on"
    for name in OPTIMIZATIONS:
        assert f"no {name}" in labels
        assert CompactConfig.model_fields[name].default is True  # the recommended setting is on
    if len(OPTIMIZATIONS) > 1:
        assert dict(bench.variants())["all off"] == dict.fromkeys(OPTIMIZATIONS, False)
