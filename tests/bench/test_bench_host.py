"""bench/host.py on a small scale: the current code only, in-process emulators, one short history."""

from __future__ import annotations

import json

import pytest
from tests.support.bench_scripts import load_bench
from tests.support.paths import TRAJECTORIES

pytestmark = pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason=f"shared trajectories absent ({TRAJECTORIES})")


def test_rows_medians_fit_and_tables(make_emulated_server, emulator_tokenizer_path, tmp_path):
    from sgl_speccompact.emulator import ControlledAcceptancePolicy

    bench = load_bench("host")
    hist = bench.histories([5000], True, emulator_tokenizer_path, tmp_path, total_chars=80_000)
    assert [h["name"] for h in hist] == ["5K", "80KB"] and hist[0]["tokens"] < hist[1]["tokens"]
    hist = hist[:1]  # the whole of it is checked as cut, not compacted
    servers = {"target": make_emulated_server(ControlledAcceptancePolicy(seed=1), model_path="Qwen/Qwen3-8B").url,
               "drafter": make_emulated_server(ControlledAcceptancePolicy(seed=2), model_path="Qwen/Qwen3-0.6B",
                                               lora_paths=[bench.LORA]).url}
    cases = tmp_path / "cases.json"
    small = {"max_lines_per_slot": 2, "max_tokens_per_slot": 48}  # a short compaction: the bench's path, not its size
    cases.write_text(json.dumps({"servers": servers, "histories": hist, "methods": ["target_self", "speccompact"],
                                 "config": small}))
    bench.child(str(cases), str(tmp_path / "rows.json"))
    rows = [{**r, "revision": "new"} for r in json.loads((tmp_path / "rows.json").read_text())]
    assert len(rows) == 2
    for r in rows:
        assert r["cpu_s"] > 0 and r["requests"] > 0 and r["bytes_up"]["target"] > 0
        assert 0 < r["host_cpu_s"] <= r["cpu_s"]  # the emulators run in this process here: counted in cpu_s only
        assert (r["bytes_up"]["drafter"] > 0) == (r["method"] == "speccompact")
    summary = bench.medians(rows, {h["name"]: h["tokens"] for h in hist}, {h["name"]: h["bytes"] for h in hist})
    one = next(r for r in summary if r["history"] == "5K" and r["method"] == "target_self")
    assert one["cpu_s_per_100k"] == pytest.approx(one["cpu_s"] * 100_000 / hist[0]["tokens"], rel=1e-3)
    assert set(bench.fit(summary)) == {"target_self", "speccompact"}
    assert "| 5K |" in bench.table(summary, ["new"]) and "| 5K |" in bench.apart_table(summary, ["new"])


def test_fit_is_least_squares_of_cpu_on_tokens():
    bench = load_bench("host")
    rows = [{"method": "m", "tokens": t, "cpu_s": 0.1 + 0.2 * t / 100_000} for t in (10_000, 50_000, 200_000)]
    assert bench.fit(rows) == {"m": {"fixed_s": 0.1, "per_100k_s": 0.2}}
