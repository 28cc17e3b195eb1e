"""The quality-latency plot reads latency reports tolerantly and writes a PNG."""

from __future__ import annotations

import pytest

from bench.evaluation.frontier import latency_by_method, plot_frontier, points


def test_summary_median_wins_over_rows_and_sjc_reports_give_sjc_labels():
    rep = {"headline_field": "measured_e2e_s", "conditions": {"source_judge": True, "model_pair": "a:b"},
           "summary": {"hermes": {"median_measured_e2e_s": 9.0}},
           "rows": [{"method": "hermes", "measured_e2e_s": 1.0}, {"method": "speccompact", "measured_e2e_s": 2.0},
                    {"method": "target_self", "error": "boom"}]}
    out = latency_by_method(rep)
    assert out["seconds"] == {"hermes+sjc": 9.0, "speccompact+sjc": 2.0}
    assert out["model"] == "a:b" and out["kind"] == "measured"


def test_a_report_without_headline_field_uses_any_end_to_end_field():
    out = latency_by_method({"rows": [{"method": "m", "wall_e2e_s": 3.0}, {"method": "m", "wall_e2e_s": 5.0}]})
    assert out["field"] == "wall_e2e_s" and out["seconds"] == {"m": 4.0} and out["model"] == "unknown model"
    with pytest.raises(ValueError, match="no latency field"):
        latency_by_method({"rows": [{"method": "m", "seconds": 1.0}]})


def test_points_need_both_numbers_and_the_png_is_written(tmp_path):
    lat = {"seconds": {"a": 1.0, "a+sjc": 1.2, "b": 3.0}}
    quality = {"a": {"recall_macro": 0.4}, "a+sjc": {"recall_macro": None}, "b": {"recall_macro": 0.1}}
    pts = points(lat, quality, "recall_macro")
    assert pts == [("a", 1.0, 0.4), ("b", 3.0, 0.1)]
    png = plot_frontier(pts, tmp_path / "p.png", title="t", xlabel="x", ylabel="y", note="PLUMBING ONLY")
    assert png.read_bytes()[:4] == b"\x89PNG"
