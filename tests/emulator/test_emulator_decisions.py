"""The emulator's ``POST /v1/decisions`` against sglang 0.5.23's route (``serving_decisions.py``)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import requests

from sgl_speccompact.emulator import ScriptedPolicy

INPUT = "The agent ran pytest: 12 passed."


def post(srv, body):
    return requests.post(srv.url + "/v1/decisions", json=body, timeout=60)


def yes_no(*claims, **extra):
    return {"input": INPUT, "questions": [{"id": f"q{i}", "type": "yes_no", "question": c}
                                          for i, c in enumerate(claims)], **extra}


@pytest.fixture
def server(make_emulated_server):
    policy = ScriptedPolicy()
    policy.decide("The tests passed", p_yes=0.9, mass=0.5)
    policy.decide("The tests failed", p_yes=0.2, mass=0.04)
    return make_emulated_server(policy=policy, model_path="Qwen/Qwen3-8B"), policy


def test_answers_probabilities_and_label_mass_per_question(server):
    srv, policy = server
    res = post(srv, yes_no("The tests passed.", "The tests failed."))
    assert res.status_code == 200, res.text
    out = res.json()
    assert out["object"] == "decisions" and out["prompt_format_version"] == 1
    a, b = out["answers"]["q0"], out["answers"]["q1"]
    assert a["type"] == "yes_no" and a["probabilities"]["yes"] == pytest.approx(0.9, abs=1e-6)
    assert a["label_mass"] == pytest.approx(0.5, rel=1e-6) and b["label_mass"] == pytest.approx(0.04, rel=1e-6)
    assert b["probabilities"]["no"] == pytest.approx(0.8, abs=1e-6)
    assert out["usage"]["prompt_tokens"] == out["usage"]["total_tokens"] > 0
    # the route's own wording, in one user turn of the chat template, reasoning off
    (prompt, _) = [p for kind, p in policy.calls if kind == "logprobs"]
    assert prompt.startswith("<|im_start|>user\n" + INPUT + "\n\nIs the following true? The tests passed.\n")
    assert prompt.endswith("Answer with yes or no only.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_temperature_scales_the_probabilities_not_the_mass(server):
    srv, _ = server
    a = post(srv, yes_no("The tests passed.", temperature=2.0)).json()["answers"]["q0"]
    odds = math.sqrt(0.9 / 0.1)  # the logit gap halved
    assert a["probabilities"]["yes"] == pytest.approx(odds / (1 + odds), abs=1e-6)
    assert a["label_mass"] == pytest.approx(0.5, rel=1e-6)


def test_later_requests_find_the_input_in_the_radix_cache(server):
    srv, _ = server
    post(srv, yes_no("The tests passed.", "The tests failed."))
    first = srv.stats()["total"]
    assert first["requests"] == 2  # one scoring job per question, in one batch (cold: neither finds the other)
    post(srv, yes_no("The tests failed."))
    second = srv.stats()["total"]
    # the chat template's opening and the input come first in every question: cached from the first request
    assert second["cached_tokens"] - first["cached_tokens"] >= len(INPUT.split())


def test_choice_and_score_questions_take_their_own_labels(server):
    srv, _ = server
    body = {"input": INPUT, "questions": [
        {"id": "c", "type": "choice", "question": "Which?", "options": [{"name": "pass"}, {"name": "fail"}]},
        {"id": "s", "type": "score", "question": "How sure?", "levels": ["low", "high"]}]}
    out = post(srv, body).json()["answers"]
    assert set(out["c"]["probabilities"]) == {"pass", "fail"} and out["c"]["choice"] in ("pass", "fail")
    assert set(out["s"]["probabilities"]) == {"0", "1"} and 0.0 <= out["s"]["score"] <= 1.0


@pytest.mark.parametrize("body, words", [
    ({"input": INPUT, "questions": []}, "questions"),  # sglang's DecisionRequest: at least one
    (yes_no("a", extra_field=1), "extra_field"),  # extra="forbid"
    ({"input": " ", "questions": [{"id": "q", "type": "yes_no", "question": "a"}]}, "must not be blank"),
    ({"input": INPUT, "questions": [{"id": "q", "type": "yes_no", "question": "a"},
                                     {"id": "q", "type": "yes_no", "question": "b"}]}, "repeats another question"),
    (yes_no("a", prompt_format_version=2), "prompt_format_version 2 is not served"),
    (yes_no("a", chat_template_kwargs={"enable_thinking": True}), "decisions need it false or unset"),
])
def test_requests_the_server_refuses_are_400s_with_its_words(server, body, words):
    srv, _ = server
    res = post(srv, body)
    assert res.status_code == 400 and words in res.text, res.text


def test_a_template_that_leaves_a_reasoning_block_open_is_refused(make_emulated_server, emulator_tokenizer_path,
                                                                   tmp_path):
    folder = Path(shutil.copytree(emulator_tokenizer_path, tmp_path / "thinking"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = config["chat_template"].replace(
        "{%- if enable_thinking is defined and enable_thinking is false %}", "{{- '<think>\\n' }}{%- if false %}")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    from sgl_speccompact.emulator import EmulatedServer

    with EmulatedServer(str(folder), policy=ScriptedPolicy()) as srv:
        res = post(srv, yes_no("The tests passed."))
    assert res.status_code == 400 and "question 'q0': the chat template leaves a reasoning block open" in res.text


def test_the_response_validates_with_sglangs_own_class(server):
    from sglang.srt.entrypoints.openai.protocol import DecisionResponse

    srv, _ = server
    DecisionResponse.model_validate(post(srv, yes_no("The tests passed.")).json())


# ---------------------------------------------------------------- held to the real server's recorded answers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "decisions"  # real sglang 0.5.23 exchanges (README.md)


@pytest.fixture(scope="module")
def smollm2_tokenizer(tmp_path_factory) -> dict[str, str]:
    """SmolLM2's tokenizer as the recorded servers had it: its own template ("plain"), and think.jinja ("reasoning").

    Read from the packaged GGUF (the README's test set-up installs it), as a conversion writes it into
    the checkpoint the recorded servers served, without converting the weights."""
    from sgl_speccompact.launch.packaged import write_tokenizer

    plain = write_tokenizer("smollm2-135m-instruct", tmp_path_factory.mktemp("smollm2-plain"))
    thinking = Path(shutil.copytree(plain, tmp_path_factory.mktemp("smollm2") / "reasoning"))
    (thinking / "chat_template.jinja").write_text((FIXTURES / "think.jinja").read_text())
    return {"plain": str(plain), "reasoning": str(thinking)}


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.json")))
def test_the_emulator_answers_the_recorded_real_exchanges_alike(smollm2_tokenizer, name):
    from sgl_speccompact.emulator import EmulatedServer

    recorded = json.loads((FIXTURES / f"{name}.json").read_text())
    with EmulatedServer(smollm2_tokenizer[recorded["server"]], policy=ScriptedPolicy(), context_length=8192) as srv:
        res = post(srv, recorded["request"])
    assert res.status_code == recorded["status"], res.text
    real, got = recorded["response"], res.json()
    if res.status_code != 200:
        if "validation error" not in real["message"]:  # the route's own words (pydantic's are formatted by FastAPI)
            assert got["message"] == real["message"]
        return
    assert got["usage"] == real["usage"] and set(got["answers"]) == set(real["answers"])
    for qid, answer in real["answers"].items():
        mine = got["answers"][qid]
        assert mine["type"] == answer["type"] and set(mine["probabilities"]) == set(answer["probabilities"])
        for key in ("prompt_token_ids", "label_token_ids"):  # the exact prompt and labels the server scored
            assert mine.get(key) == answer.get(key), (qid, key)
