"""The recorded ``/v1/decisions`` exchanges: sglang's own classes accept what the server accepted and refuse
what it refused, the answers are well formed, and the recorder still builds the bodies on file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError
from sglang.srt.entrypoints.openai.protocol import DecisionRequest, DecisionResponse

from bench import decisions_fixtures as rec
from bench.evaluation.judge_set import trajectory_dir

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "decisions"
FIXTURES = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(FOLDER.glob("*.json"))}
REFUSED_BY_SCHEMA = {"malformed_no_questions", "malformed_repeated_id", "malformed_unknown_field",
                     "malformed_blank_input", "malformed_type"}
# refused by the handler after the body validated: (fixture, words of the server's message)
REFUSED_BY_SERVER = {
    "prompt_format_version_2": "prompt_format_version 2 is not served",
    "input_over_context": "does not fit the context length",
    "reasoning_block_open": "leaves a reasoning block open",
    "reasoning_toggle_on": "but decisions need it false or unset",
}


def test_every_exchange_the_recorder_sends_is_on_file():
    assert set(FIXTURES) == set(rec.plain_exchanges()) | set(rec.reasoning_exchanges())


@pytest.mark.parametrize("name", sorted(n for n, f in FIXTURES.items() if f["status"] == 200))
def test_an_answered_exchange_validates_both_ways(name):
    fx = FIXTURES[name]
    req = DecisionRequest.model_validate(fx["request"])
    res = DecisionResponse.model_validate(fx["response"])
    assert res.prompt_format_version == 1
    assert list(res.answers) == [q.id for q in req.questions]  # every question answered, in order
    for a in res.answers.values():
        assert set(a.probabilities) == {"yes", "no"} and math.isclose(sum(a.probabilities.values()), 1.0)
        assert 0 < a.label_mass <= 1
    assert res.usage.prompt_tokens > 0 and res.usage.completion_tokens == 0


@pytest.mark.parametrize("name", sorted(REFUSED_BY_SCHEMA))
def test_a_malformed_body_is_refused_by_sglangs_own_request_class(name):
    fx = FIXTURES[name]
    assert fx["status"] in (400, 422)
    with pytest.raises(ValidationError):
        DecisionRequest.model_validate(fx["request"])


@pytest.mark.parametrize("name, words", sorted(REFUSED_BY_SERVER.items()))
def test_a_valid_body_the_server_refused_says_why(name, words):
    fx = FIXTURES[name]
    DecisionRequest.model_validate(fx["request"])  # the body itself is well formed
    assert fx["status"] == 400 and words in json.dumps(fx["response"])


@pytest.mark.skipif(trajectory_dir() is None, reason="shared trajectories (shared/data/trajectories) not found")
def test_the_recorder_still_builds_the_recorded_bodies():
    built = {**rec.plain_exchanges(), **rec.reasoning_exchanges()}
    assert {n: FIXTURES[n]["request"] for n in built} == built


def test_record_writes_each_exchange_with_its_status_and_response(tmp_path):
    sent = []

    class Res:
        status_code = 400

        def json(self):
            return {"object": "error", "message": "no"}

    def post(url, json):
        sent.append((url, json))
        return Res()

    paths = rec.record("http://s/", "reasoning", post, tmp_path)
    assert [p.stem for p in paths] == list(rec.reasoning_exchanges())
    assert {u for u, _ in sent} == {"http://s/v1/decisions"}
    fx = json.loads(paths[1].read_text())
    assert (fx["server"], fx["status"], fx["request"], fx["response"]["message"]) == (
        "reasoning", 400, rec.reasoning_exchanges()["reasoning_block_open"], "no")
