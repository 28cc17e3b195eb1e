"""``bench/redaction.py`` runs: a revision's redaction and extractor beside today's, every variant timed, JSON written.

Run against ``HEAD`` (present in any clone) on one small trajectory; the
figures themselves are the committed run's (docs/benchmarks/retention.md).
"""

from __future__ import annotations

import json

import pytest

from tests.support.bench_scripts import load_bench
from tests.support.paths import REPO, TRAJECTORIES

SMALL = "SWE-agent__mini-swe-agent__tests__test_data__local.traj.json"
VARIANTS = ("redact_before", "redact", "redact_grown", "redact_plain", "identifiers_before", "identifiers",
            "identifiers_plain", "ledger_before", "ledger", "ledger_no_identifiers")


@pytest.mark.skipif(not (TRAJECTORIES / SMALL).is_file(), reason=f"shared trajectory {SMALL} not found")
@pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout: no revision to compare with")
def test_a_run_against_a_revision_writes_every_variant(tmp_path, capsys):
    bench = load_bench("redaction")
    out = tmp_path / "r.json"
    assert bench.main(["--trajectories", str(TRAJECTORIES / SMALL), "--repeats", "1", "--big-chars", "30000",
                       "--baseline", "HEAD", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert printed.startswith("Method:") and "MEASURED (CPU)" in printed
    assert report["conditions"]["label"] == "MEASURED (CPU)" and report["conditions"]["baseline"] == "HEAD"
    rows = report["trajectories"] + [report["big_history"]]
    assert [r["history"] for r in rows][-1] == "0.03 MB history" and len(rows) == 2
    for row in rows:
        assert all(row[f"{v}_cpu_s"] >= 0 for v in VARIANTS)
        assert row["total_cpu_s"] == pytest.approx(row["redact_cpu_s"] + row["ledger_cpu_s"], abs=2e-4)
        assert row["identifier_texts"] > 0
    assert "the target (0.1 s) is for 2 MB" in report["summary"][-1]
