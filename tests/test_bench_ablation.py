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
        on = CompactConfig.model_fields[name].default  # the recommended setting
        assert (f"no {name}" if on else f"with {name}") in labels
        assert dict(bench.variants())[f"no {name}" if on else f"with {name}"] == {name: not on}
    if len(OPTIMIZATIONS) > 1:
        assert dict(bench.variants())["all off"] == dict.fromkeys(OPTIMIZATIONS, False)
