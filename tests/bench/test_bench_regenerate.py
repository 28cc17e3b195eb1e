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


def test_an_interrupted_regeneration_keeps_the_parts_this_code_made(regen, tmp_path, monkeypatch):
    committed = json.loads((regen.RESULTS / "session.json").read_text())
    monkeypatch.setattr(regen, "RESULTS", tmp_path)
    (tmp_path / "session.json").write_text(json.dumps(committed))
    todo, kept = regen.full_jobs(["session"], None, "code-1", fresh=False)
    assert len(todo) == len(regen.SHARDS["session"]) and kept == []
    folder = regen.workdir("session")
    for i in (0, 1):  # seeds 0-1 and 2-3 were done before the interruption
        part = folder / f"part{i}.json"
        rows = [r for r in committed["rows"] if r["seed"] in (2 * i, 2 * i + 1)]
        part.write_text(json.dumps({**committed, "rows": rows,
                                    "conditions": {**committed["conditions"], "seed": 2 * i, "seeds": 2}}))
        part.with_suffix(".stamp").write_text(json.dumps({"args": list(todo[i].args), "source": "code-1"}))
    again, kept = regen.full_jobs(["session"], None, "code-1", fresh=False)
    assert [p.name for p in kept] == ["part0.json", "part1.json"] and [j.name for j in again] == \
        [j.name for j in todo[2:]]
    assert len(regen.full_jobs(["session"], None, "code-1", fresh=True)[0]) == len(todo)  # --fresh: all again
    for i in (0, 1):  # (--fresh dropped the stamps; the parts are as they were)
        (folder / f"part{i}.stamp").write_text(json.dumps({"args": list(todo[i].args), "source": "code-1"}))
    assert regen.finish("session", None) is None  # seeds 4-7 are missing: no JSON yet
    out = regen.finish("session", 2)  # the first two shards are the whole run
    merged = json.loads(out.read_text())
    assert merged["rows"] == [r for r in committed["rows"] if r["seed"] < 4] and merged["conditions"]["seeds"] == 4
    assert not folder.exists()
    assert regen.full_jobs(["session"], None, "code-2", fresh=False)[1] == []  # other code: nothing kept


def test_the_estimate_scales_each_runs_cells_to_its_computed_rows(regen):
    report = json.loads((regen.RESULTS / "session.json").read_text())
    rows = regen.real_rows(report)
    assert 0 < rows < len(report["rows"])  # rows reused from another deployment cost nothing
    cpu, wall = regen.estimate({"session": [(6.0, 2), (4.0, 3)]}, 2, 15.0)
    assert cpu == 2.0 * rows and wall == max(cpu / 2, cpu / len(regen.SHARDS["session"])) + 15.0
    assert regen.minutes(cpu) and regen.minutes(59.6) == "1 min 0 s"


def test_twins_pair_rows_without_the_model_pair_and_compare_what_the_engine_decided(regen):
    def load(name):
        return json.loads((regen.RESULTS / regen.RUNS[name][0]).read_text())

    key = regen.CHECKS["session-evolving-judge-32b"][1]
    paired, same, differ = regen.twin_rows(load("session-evolving-judge"), load("session-evolving-judge-32b"), key)
    assert paired == same >= 80 and differ == []  # every row of the committed twins pairs, decided alike
    rows = paired
    small = load("session-evolving-judge")
    small["rows"][0]["records"][0]["lines"] += 1  # one compaction kept one more line
    paired, same, differ = regen.twin_rows(small, load("session-evolving-judge-32b"), key)
    assert (paired, same, len(differ)) == (rows, rows - 1, 1)
