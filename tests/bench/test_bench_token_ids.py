"""bench/token_ids.py end to end on the simulator (one small synthetic history, the test tokenizer)."""

from __future__ import annotations

import json

import pytest
from tests.support.bench_scripts import load_bench


@pytest.mark.slow
def test_ids_tokenize_less_and_summaries_match(tmp_path, emulator_tokenizer_path, capsys):
    bench = load_bench("token_ids")
    out = tmp_path / "token-ids.json"
    bench.main(["--no-trajectories", "--synthetic-tokens", "3000", "--model-pairs", "qwen3-8b:qwen3-0.6b",
                "--tokenizer", emulator_tokenizer_path, "--out", str(out)])
    report = json.loads(out.read_text())
    (pair,) = report["pairs"]
    assert pair["same_summary"] and 0 < pair["tokenized_ids"] < pair["tokenized_text"] / 3
    off = next(r for r in report["rows"] if not r["send_token_ids"])
    assert off["target"]["generate_text_tokens"] == off["target"]["prompt_tokens"]
    assert report["latency_kind"] == "simulated" and "SIMULATED" in capsys.readouterr().out
