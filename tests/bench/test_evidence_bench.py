"""bench/evidence.py: the evidence check on the judge set, alone and before each judge (no model runs).

The committed report's figures come out again from today's check; a judge's
verdicts with the check are its verdicts on the lines the check lets
through; the tables print what the report holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import evidence
from bench.evaluation.judge_set import JudgeCase
from tests.support.paths import TRAJECTORIES

REPO = Path(__file__).resolve().parents[2]
HIST = {"a.json": [{"role": "user", "content": "Rename config.yaml to settings.yaml."},
                   {"role": "assistant", "content": "", "tool_calls": [
                       {"id": "c1", "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "mv config.yaml settings.yaml"}'}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "done"}]}


def _case(id, supported, line):
    return JudgeCase(id=id, file="a.json", upto=3, slot="progress", line=line, supported=supported,
                     evidence="x", why="w")


CASES = [_case("a-01s", True, "- [x] Ran `mv config.yaml settings.yaml`"),
         _case("a-01c", False, "- [x] Ran `mv config.yml settings.yml`"),
         _case("a-02s", True, "- Renamed config.yaml"),
         _case("a-02c", False, "- Renamed the config file and failed")]


def test_the_check_reads_each_history_cut_as_a_compaction_renders_it():
    rows = evidence.check_cases(CASES, history=lambda c: HIST[c.file])
    assert [r["missing"] for r in rows] == [[], ["mv config.yml settings.yml"], [], []]
    alone = evidence.check_alone(rows)
    assert (alone["caught"], alone["contradicted"], alone["false_rejects"]) == (1, 2, 0)
    assert alone["let_through_naming_nothing"] == ["a-02c"] and alone["let_through_every_string_sourced"] == []


def test_with_the_check_a_refused_line_costs_no_judge_request_and_scores_lowest():
    rows = evidence.check_cases(CASES, history=lambda c: HIST[c.file])
    scores = {"a-01s": (0.8, 0.5), "a-01c": (0.9, 0.5), "a-02s": (0.75, 0.05), "a-02c": (0.2, 0.5)}
    got = evidence.with_and_without(rows, scores, eta=0.7, min_mass=0.1)
    assert got["without"]["judge_requests"] == 4 and got["with"]["judge_requests"] == 3
    assert got["without"]["contradicted"]["accepted"] == 0.5 and got["with"]["contradicted"]["accepted"] == 0.0
    assert got["with"]["contradicted"]["refused_by_check"] == 0.5
    assert got["with"]["supported"]["no_verdict"] == 0.5  # a-02s: below min_label_mass, whatever its r
    assert got["without"]["auc"] == 0.5 and got["with"]["auc"] == 1.0


@pytest.fixture(scope="module")
def committed():
    return json.loads(evidence.OUT.read_text())


def test_the_committed_report_is_todays_check(committed):
    if not TRAJECTORIES.is_dir():
        pytest.skip(f"shared trajectories absent ({TRAJECTORIES})")
    from bench.evaluation.judge_set import load_judge_set

    fresh = evidence.check_alone(evidence.check_cases(load_judge_set()))
    assert fresh == committed["check_alone"]
    assert committed["label"] == "MEASURED (CPU)" and set(committed["judges"]) == set(evidence.SCORES)


def test_the_acceptance_holds_and_the_page_explains_every_false_reject(committed):
    alone = committed["check_alone"]
    assert alone["false_reject_share"] <= 0.03
    page = (REPO / "docs" / "benchmarks" / "judges.md").read_text()
    assert all(f"`{r['id']}`" in page for r in alone["refused_supported"])
    assert evidence.tables(committed).split("\n")[0] in page  # the page shows the report's tables


def test_every_judge_scored_every_line(committed):
    for name, j in committed["judges"].items():
        assert j["cases"] == committed["check_alone"]["cases"], name
        assert j["without"]["judge_requests"] - j["with"]["judge_requests"] == \
            committed["check_alone"]["caught"] + committed["check_alone"]["false_rejects"], name
