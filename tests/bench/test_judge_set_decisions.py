"""The judge set's decision-route script: one request per history cut, rows, summary, AUC."""

from __future__ import annotations

import pytest

from bench import judge_set_decisions as jsd
from bench.evaluation.judge_set import JudgeCase, auc

HIST = {"a.json": [{"role": "user", "content": "rename x"}], "b.json": [{"role": "user", "content": "delete y"}]}


def _case(id, file="a.json", supported=True, line="- Renamed x."):
    return JudgeCase(id=id, file=file, upto=1, slot="progress", line=line, supported=supported,
                     evidence="x", why="w")


CASES = [_case("a-01s"), _case("b-01s", "b.json", line="- Deleted y."), _case("a-01c", supported=False,
                                                                            line="- Renamed z.")]


def test_one_request_per_history_cut_with_its_cases_as_yes_no_questions():
    bodies = jsd.requests_for(CASES, history=lambda c: HIST[c.file])
    assert [b["input"] for b in bodies] == ["[user]\nrename x", "[user]\ndelete y"]
    assert [[q["id"] for q in b["questions"]] for b in bodies] == [["a-01s", "a-01c"], ["b-01s"]]
    assert bodies[0]["questions"][1] == {"id": "a-01c", "type": "yes_no",
                                         "question": jsd.QUESTION.format(line="- Renamed z.")}


def answer(p_yes, mass):
    return {"type": "yes_no", "probabilities": {"yes": p_yes, "no": 1 - p_yes}, "label_mass": mass}


def test_rows_and_summary():
    rows = jsd.rows_for(CASES, {"a-01s": answer(0.8, 0.05), "b-01s": answer(0.6, 0.02), "a-01c": answer(0.7, 0.01)})
    assert [r["id"] for r in rows] == ["a-01s", "b-01s", "a-01c"]
    assert rows[0]["p_yes_vocab"] == pytest.approx(0.04) and rows[2]["p_no"] == pytest.approx(0.3)
    s = jsd.summary(rows)
    assert s["label_mass"] == {"min": 0.01, "median": 0.02, "max": 0.05}
    assert s["auc_p_yes"] == 0.5  # 0.8 > 0.7 but 0.6 < 0.7
    assert s["auc_p_yes_vocab"] == 1.0  # 0.04 and 0.012 both above 0.007
    assert s["share_p_yes_at_least_eta_supported"] == 0.5 and s["share_p_yes_at_least_eta_contradicted"] == 1.0


class FakeRoute:
    """A /v1/decisions stand-in: p(yes) 0.2 for the false line ("Renamed z"), else 0.9."""

    def __init__(self):
        self.bodies = []
        self.cached = 0.0

    def post(self, url, json):
        assert url == "http://s/v1/decisions"
        self.bodies.append(json)
        self.cached += 5 * len(json["questions"])  # the cache serves 5 tokens a question
        answers = {q["id"]: answer(0.2 if "Renamed z" in q["question"] else 0.9, 0.03) for q in json["questions"]}
        return Res({"answers": answers, "usage": {"prompt_tokens": 10 * len(answers)}, "prompt_format_version": 1})

    def get(self, url):
        if url.endswith("/metrics"):
            return Res(None, f'# HELP x\nsglang:cached_tokens_total{{a="b"}} {self.cached}\n')
        return Res({"version": "0.5.23", "dtype": "float32", "device": "cpu", "model_path": "/m"})


class Res:
    def __init__(self, body, text=""):
        self.body, self.text = body, text

    def raise_for_status(self):
        pass

    def json(self):
        return self.body


def test_run_sends_each_cut_once_and_reports():
    route = FakeRoute()
    report = jsd.run("http://s", CASES, route.post, route.get, history=lambda c: HIST[c.file])
    assert len(route.bodies) == 2
    assert report["conditions"]["label"] == "MEASURED (CPU)" and report["conditions"]["sglang_version"] == "0.5.23"
    assert [r["prompt_tokens"] for r in report["requests"]] == [20, 10]
    assert [r["server_cached_tokens"] for r in report["requests"]] == [10, 5]
    assert report["summary"]["auc_p_yes"] == 1.0


def test_auc_counts_ties_half_and_refuses_an_empty_side():
    assert auc([1.0], [0.0]) == 1.0 and auc([0.0], [1.0]) == 0.0 and auc([0.5], [0.5]) == 0.5
    with pytest.raises(ValueError, match="one score of each label"):
        auc([], [0.1])
