"""bench/retention.py end to end on the SGLang-API emulator (one small real trajectory)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.bench_scripts import load_bench

REPO = Path(__file__).resolve().parents[2]
TRAJ = next((p for p in (REPO.parent / "shared" / "data" / "trajectories",
                         REPO.parents[1] / "shared" / "data" / "trajectories") if p.is_dir()),
            REPO.parent / "shared" / "data" / "trajectories")
SMALL = TRAJ / "SWE-agent__mini-swe-agent__tests__test_data__local.traj.json"

pytestmark = [pytest.mark.skipif(not SMALL.is_file(), reason=f"shared trajectories absent ({SMALL})"),
              pytest.mark.slow]


@pytest.fixture(scope="module")
def bench():
    return load_bench("retention")


@pytest.fixture(scope="module")
def latency_json(tmp_path_factory):
    path = tmp_path_factory.mktemp("lat") / "latency-20260101T000000Z.json"
    path.write_text(json.dumps({
        "benchmark": "latency", "latency_kind": "simulated", "headline_field": "simulated_e2e_s",
        "latency_label": "SIMULATED test figures", "servers": {"target": {"model_path": "Qwen/Qwen3-8B"}},
        "conditions": {"source_judge": False},
        "rows": [{"method": "hermes", "simulated_e2e_s": 7.0}, {"method": "speccompact", "simulated_e2e_s": 2.5}]}))
    return path


@pytest.fixture(scope="module")
def run(bench, emulator_tokenizer_path, latency_json, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    rc = bench.main(["--trajectories", str(SMALL), "--tokenizer", emulator_tokenizer_path, "--methods",
                     "speccompact,hermes", "--latency-json", str(latency_json),
                     "--plot-dir", str(out), "--out", str(out / "retention.json")])
    return rc, json.loads((out / "retention.json").read_text()), out


def test_report_is_labelled_plumbing_only_with_every_measure(run, capsys):
    rc, report, _ = run
    assert rc == 0
    assert report["plumbing_only"] is True and "PLUMBING ONLY" in report["note"]
    assert report["conditions"]["backend"] == "emulator" and report["conditions"]["probe_seed"] == 0
    assert [r["label"] for r in report["rows"]] == ["speccompact", "speccompact+sjc", "hermes", "hermes+sjc"]
    assert len(report["facts"]) == 6
    for row in report["rows"]:
        assert "error" not in row, row
        assert row["recall"]["summary"]["source_identifiers"] > 0
        assert set(row["recall"]["slots"])  # per-slot recall
        assert len(row["probes"]["facts"]) == 6 and all("reply" in f for f in row["probes"]["facts"])
        assert row["adequacy"]["raw"] and row["adequacy"]["score"] is not None
        assert row["continuation"] and row["continuation"][0]["real"]["tool"]
        assert ("sjc_report" in row) == row["sjc"]
    agg = report["summary"]
    assert set(agg) == {"speccompact", "speccompact+sjc", "hermes", "hermes+sjc"}
    assert agg["speccompact+sjc"]["sjc_deleted"] is not None and agg["speccompact"]["sjc_deleted"] is None


def test_plot_written_for_the_latency_report(run):
    _, report, out = run
    (plot,) = report["plots"]
    assert Path(plot["png"]).is_file() and Path(plot["png"]).parent == out
    assert plot["model"] == "Qwen/Qwen3-8B" and {p["label"] for p in plot["points"]} == {"hermes", "speccompact"}
    assert Path(plot["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_latency_report_gives_a_clear_message(bench, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench.runs, "RESULTS_DIR", tmp_path)
    args = bench.build_parser().parse_args([])
    plots = bench.make_plots({"hermes": {"recall_macro": 0.5}}, args, "20260101T000000Z", emulator=True)
    assert "no latency report" in plots[0]["skipped"] and "python -m bench.latency" in capsys.readouterr().out


def test_unknown_measure_is_refused(bench):
    with pytest.raises(SystemExit, match="unknown measure"):
        bench.main(["--trajectories", str(SMALL), "--measures", "recall,vibes", "--out", "/dev/null"])


def test_held_out_split_matches_the_drafter_data_split(bench):
    from sgl_speccompact.train.data import validation_keys
    from sgl_speccompact.train.history_files import load_trajectories

    files = sorted(str(p) for p in TRAJ.iterdir() if p.suffix in (".json", ".traj") and "tasks" not in p.name)
    kept, _, split = bench.select_trajectories(bench.build_parser().parse_args(
        ["--trajectories", *files, "--held-out", "0.3"]))
    histories, _ = load_trajectories(files)
    held = validation_keys([h.split_key for h in histories], 0.3, 42)
    assert {t.path for t in kept} == {h.source for h in histories if h.split_key in held}
    assert 0 < len(kept) < len(files) and split["held_out"] == [t.path for t in kept]


def test_replot_redraws_from_the_report_without_compacting(bench, run, latency_json, tmp_path):
    _, report, out = run
    copy = tmp_path / "retention.json"
    copy.write_text((out / "retention.json").read_text())
    assert bench.main(["--replot", str(copy), "--latency-json", str(latency_json), "--plot-dir", str(tmp_path)]) == 0
    again = json.loads(copy.read_text())
    (plot,) = again["plots"]
    assert Path(plot["png"]).parent == tmp_path and Path(plot["png"]).is_file()
    assert again["rows"] == report["rows"] and plot["points"] == report["plots"][0]["points"]
