"""bench/figures.py: the documentation's figures, rendered from the committed JSONs, byte-stable and checked.

The committed PNGs under docs/benchmarks/figures must be what today's
JSONs and renderer draw (the check ``bench.regenerate --check`` runs); a
figure drawn from other numbers is caught; the label-mass figure is drawn
from a judge benchmark's JSON when one exists, to the documented schema.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.support.bench_scripts import load_bench


@pytest.fixture(scope="module")
def fig():
    return load_bench("figures")


def test_the_committed_figures_are_current(fig):
    assert fig.check() == []
    names = {p.stem for p in fig.FIGURES_DIR.glob("*.png")}
    assert {"session-race", "session-stall", "session-judge"} <= names


def test_a_render_is_byte_stable_and_says_what_it_plots(fig, tmp_path):
    a = fig.render("session-race", tmp_path / "a")
    b = fig.render("session-race", tmp_path / "b")
    assert a.read_bytes() == b.read_bytes()
    said = json.loads(fig.plotted(a))
    assert said["figure"] == "session-race" and said["data"]["qwen3-8b"]["rows"]
    from PIL import Image

    with Image.open(a) as im:
        assert set(im.text) == {"Description"}  # no software or date stamp: only what it plots


def _copy_results(fig, tmp_path, monkeypatch) -> Path:
    results = tmp_path / "results"
    shutil.copytree(fig.RESULTS, results, ignore=shutil.ignore_patterns("*.png", "latency-*", "ablation-*"))
    monkeypatch.setattr(fig, "RESULTS", results)
    return results


def test_the_check_fails_on_a_figure_drawn_from_other_numbers_or_missing(fig, tmp_path, monkeypatch):
    results = _copy_results(fig, tmp_path, monkeypatch)
    for judged in results.glob("judge-bench-*.json"):  # their figures are not drawn here
        judged.unlink()
    drawn = tmp_path / "figures"
    for name in ("session-race", "session-stall"):
        fig.render(name, drawn)
    monkeypatch.setattr(fig, "FIGURES", {k: v for k, v in fig.FIGURES.items() if k in ("session-race", "session-stall")})
    assert fig.check(drawn) == []
    report = json.loads((results / "session-evolving.json").read_text())
    for k in ("median", "min", "max"):  # the JSON moved, the figure did not
        report["summary"][0][f"device_s_per_compaction_{k}"] *= 1.5
    (results / "session-evolving.json").write_text(json.dumps(report))
    stale = fig.check(drawn)
    assert len(stale) == 1 and "session-race" in stale[0] and "other data" in stale[0]
    (drawn / "session-stall.png").unlink()
    assert any("session-stall" in line and "missing" in line for line in fig.check(drawn))


LABEL_MASS = {"benchmark": "judge", "label": "MEASURED (CPU)", "model": "SmolLM2-135M-Instruct",
              "judges": {"select": {"label_mass": [0.002, 0.0041, 0.0012, 0.006], "auc": 0.58},
                         "decisions": {"label_mass": [0.31, 0.52, 0.44], "auc": None}}}


def test_the_label_mass_figure_is_drawn_only_when_a_judge_json_exists(fig, tmp_path, monkeypatch):
    results = _copy_results(fig, tmp_path, monkeypatch)
    for stale in results.glob("judge-bench-*.json"):
        stale.unlink()
    assert not any(n.startswith("judge-label-mass") for n in fig.figures())
    (results / "judge-bench-fixture.json").write_text(json.dumps(LABEL_MASS))
    assert "judge-label-mass-fixture" in fig.figures()
    png = fig.render("judge-label-mass-fixture", tmp_path / "out")
    said = json.loads(fig.plotted(png))["data"]
    assert said["label"] == "MEASURED (CPU)" and said["judges"]["select"]["auc"] == 0.58
    assert said["judges"]["select"]["label_mass"] == sorted(LABEL_MASS["judges"]["select"]["label_mass"])
    assert said["judges"]["decisions"]["auc"] is None


@pytest.mark.parametrize("broken", [
    {"label": "GPU"},  # a figure says SIMULATED or MEASURED (CPU), nothing else
    {"judges": {}},
    {"judges": {"select": {"label_mass": [0.1, -1.0], "auc": 0.5}}},
    {"judges": {"select": {"label_mass": [0.1], "auc": "high"}}},
])
def test_a_judge_json_off_the_schema_is_refused_with_the_reason(fig, tmp_path, broken):
    path = tmp_path / "judge-bad.json"
    path.write_text(json.dumps({**LABEL_MASS, **broken}))
    with pytest.raises(ValueError, match="judge-bad.json"):
        fig.label_mass_data(path)
