"""bench/judge_bench.py on the SGLang-API emulator: every judge, the engine's own prompts, one request a line."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from bench import judge_bench
from bench.evaluation.judge_set import JudgeCase
from sgl_speccompact.emulator import ScriptedPolicy

HIST = {"a.json": [{"role": "user", "content": "Rename config.yaml to settings.yaml."},
                   {"role": "assistant", "content": "Renamed config.yaml to settings.yaml."}]}


def _case(id, supported, line):
    return JudgeCase(id=id, file="a.json", upto=2, slot="progress", line=line, supported=supported,
                     evidence="x", why="w")


CASES = [_case("a-01s", True, "- [x] Renamed config.yaml to settings.yaml"),
         _case("a-01c", False, "- [x] Deleted config.yaml")]


def program_judge(prompt: str) -> dict:
    """A judge that answers in the label words the prompt asks for: 0.9 for a true line, 0.1 for a false one,
    on 1% of the probability (the program judge's question on a small model)."""
    pos, neg = ("yes", "no") if "Reply with one word: yes or no" in prompt else ("positive", "negative")
    p = 0.1 if "Deleted" in prompt.rsplit("<line>", 1)[-1] else 0.9
    return {pos: math.log(0.01 * p), neg: math.log(0.01 * (1 - p))}


@pytest.fixture
def report(make_emulated_server):
    policy = ScriptedPolicy()  # the route's claims: 0.9 or 0.1 on yes, on half the probability
    policy.decide(r"Is the following true\?(.|\n)*Deleted", p_yes=0.1, mass=0.5, regex=True)
    policy.decide("Is the following true?", p_yes=0.9, mass=0.5)
    policy.logprobs("<line>", program_judge, judgement_only=True)
    srv = make_emulated_server(policy=policy, model_path="Qwen/Qwen3-8B")
    client = httpx.Client(timeout=60)
    return judge_bench.run(srv.url, CASES, client.get, client.post, history=lambda c: HIST[c.file])


def test_every_judge_judges_every_line_in_one_request_each(report):
    assert report["conditions"]["label"] == "MEASURED (CPU)" and list(report["judges"]) == list(judge_bench.JUDGES)
    for name, j in report["judges"].items():
        assert j["cost"]["requests"] == len(CASES), name
        assert [r["id"] for r in j["rows"]] == ["a-01s", "a-01c"]
        s = j["summary"]
        assert s["auc_r"] == 1.0 and s["r_by_label"]["supported"] == [pytest.approx(0.9, abs=0.01)], name
        assert len(s["label_masses"]) == 2 and s["p_pos_by_label"]["contradicted"][0] < s["p_pos_by_label"][
            "supported"][0]


def test_each_judge_reads_its_own_labels(report):
    masses = {name: j["summary"]["label_mass"]["median"] for name, j in report["judges"].items()}
    assert masses["decisions"] == pytest.approx(0.5, rel=1e-3)
    assert masses["program"] == pytest.approx(0.01, rel=0.01) == masses["program_yes_no"]
    assert report["judges"]["decisions"]["summary"]["reliable_share"] == 1.0
    assert report["judges"]["program"]["summary"]["reliable_share"] == 0.0


def test_the_table_prints_what_the_report_holds(report):
    table = judge_bench.table(report)
    assert table.count("\n") == 1 + len(judge_bench.JUDGES) and "`decisions` | 50.00% / 50.00% / 50.00%" in table


def test_the_report_is_what_the_label_mass_figure_draws(report, tmp_path):
    from bench import figures

    path = tmp_path / "judge-bench-emulated.json"
    path.write_text(json.dumps(report))
    drawn = figures.label_mass_data(path)
    assert drawn["label"] == "MEASURED (CPU)" and set(drawn["judges"]) == set(judge_bench.JUDGES)
    assert drawn["judges"]["decisions"]["label_mass"] == sorted(report["judges"]["decisions"]["summary"]["label_masses"])
    assert drawn["judges"]["program"]["auc"] == report["judges"]["program"]["summary"]["auc_r"]
