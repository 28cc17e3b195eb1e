"""bench/calibration_speed.py runs whole and reports; it asserts no timing (load moves its ratios)."""

from __future__ import annotations

import json

import pytest
from tests.support.bench_scripts import load_bench


@pytest.mark.e2e
def test_it_reports_each_ratio_with_its_label_and_method(tmp_path, capsys):
    out = tmp_path / "calibration-speed.json"
    assert load_bench("calibration_speed").main(["--models", "qwen3-0.6b", "--quick", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith("MEASURED (CPU): the calibration probe's fits")
    report = json.loads(out.read_text())
    assert report["label"] == "MEASURED (CPU)" and "Method and conditions" not in report["method"]
    (row,) = report["rows"]
    assert row["model"] == "qwen3-0.6b" and row["checked_rates"] == ["pass", "kv"]
    assert all(row[r] > 0 for r in ("pass", "kv", "prefill"))
