"""bench/regenerate.py: the quoted runs' commands, and the staleness check on one cheap cell.

The check reruns the first seed of two methods with each committed run's
recorded arguments and compares the rows with the committed JSON field by
field: a quoted JSON that today's code no longer reproduces fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.bench_scripts import load_bench

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def regen():
    return load_bench("regenerate")


def test_every_run_has_a_committed_json_and_its_recorded_conditions(regen):
    for name, (file, script, args) in regen.RUNS.items():
        report = json.loads((regen.RESULTS / file).read_text())
        assert (regen.BENCH / script).is_file() and report["latency_kind"] == "simulated"
        cond, shards = report["conditions"], regen.SHARDS.get(name)
        seeds = sorted({r["seed"] for r in report["rows"]})
        asked = int(args[args.index("--seeds") + 1])
        assert asked == 8, name  # the full run asks 8 seeds per cell
        if shards is None:
            assert cond["seeds"] == asked and len(seeds) == asked, name
        else:  # a sharded run may have been committed from its first shards (--shards): whole shards only
            per = int(shards[0]["--seeds"])
            assert cond["seeds"] == len(seeds) and len(seeds) % per == 0 and seeds == list(range(len(seeds))), name
        assert ",".join(cond["deployments"]) == args[args.index("--deployments") + 1], name


def test_stale_rows_names_a_changed_field(regen):
    old = {"rows": [{"method": "a", "seed": 0, "e2e_s": 1.0}, {"method": "b", "seed": 0, "e2e_s": 2.0}]}
    new = {"rows": [{"method": "a", "seed": 0, "e2e_s": 1.0}, {"method": "b", "seed": 0, "e2e_s": 2.5}]}
    assert regen.stale_rows(old, old, ("method", "seed"), ("e2e_s",)) == []
    assert regen.stale_rows(old, new, ("method", "seed"), ("e2e_s",)) == ["('b', 0): e2e_s 2.0 -> 2.5"]
    assert "not in the committed" in regen.stale_rows(old, {"rows": [{"method": "c", "seed": 0}]},
                                                     ("method", "seed"), ())[0]


@pytest.mark.slow
@pytest.mark.e2e  # reruns bench scripts whole; .ci/run's e2e step runs it, as does bench/regenerate.py --check
@pytest.mark.parametrize("name", ["single-compaction-8b", "session", "fair-8b"])
def test_committed_json_matches_todays_code(regen, name):
    assert regen.check(name) == []
