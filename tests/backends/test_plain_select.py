"""The plain two-request select (``one_request_judging`` off) reads sglang's ``None`` first logprob entry.

sglang 0.5.23's scheduler pads the first prompt logprob with ``None``; its
frontend ``RuntimeEndpoint.select`` subtracts that entry when its token text
ends the prompt (token healing).  With a tokenizer that splits the ``\\n\\n``
after an empty think block into two tokens, that is every judge prompt.
"""

from __future__ import annotations

import math

import pytest
from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint

from sgl_speccompact.backends.endpoint import LabelJudgement
from sgl_speccompact.core.judge import label_choices
from sgl_speccompact.core.prompts import THINK_OFF
from sgl_speccompact.emulator import CostModel, ScriptedPolicy
from sgl_speccompact.emulator.cost import DEPLOYMENTS
from bench.sim.simulator import build_simulation

PROMPT = ("<|im_start|>user\nIs the line supported? Answer positive or negative.<|im_end|>\n"
          "<|im_start|>assistant\n" + THINK_OFF)


class State:
    """What ``select`` reads of a program state: its text."""

    def __init__(self, text: str):
        self.text_ = text


def judge_sim(tokenizer_path: str, p_positive: float):
    policy = ScriptedPolicy()
    policy.judge("Is the line supported", p_positive=p_positive, after="<|im_start|>user")
    sim = build_simulation(tokenizer_path, {"target": policy}, {"target": CostModel.for_model("qwen3-8b")},
                           DEPLOYMENTS["two-gpu"])
    return sim, sim.endpoint("target")


def test_the_prompt_ends_with_two_equal_tokens(emulator_tokenizer):
    ids = emulator_tokenizer.encode(PROMPT, add_special_tokens=False)
    assert emulator_tokenizer.decode(ids[-2:]) == "\n\n"  # so sglang's token healing applies


def test_sglang_select_fails_where_ours_answers(emulator_tokenizer_path):
    sim, ep = judge_sim(emulator_tokenizer_path, 0.9)
    method = LabelJudgement(0.7, one_request=False)
    with pytest.raises(TypeError, match="NoneType"):
        sim.run(lambda: RuntimeEndpoint.select(ep, State(PROMPT), ["positive", "negative"], 0.0, method))
    choices, n = label_choices("positive", "negative")
    method = LabelJudgement(0.7, one_request=False, n_positive=n)
    decision, report = sim.run(lambda: ep.select(State(PROMPT), choices, 0.0, method))
    assert decision.decision == "positive"
    assert decision.meta_info["verdict"].accepted
    # sglang's two requests (with prompts sent as ids, their new segments go to /tokenize first)
    assert [r.path for r in report["requests"] if r.path != "/tokenize"] == ["/generate", "/generate"]
    # the two bare labels: this endpoint scores every variant in the same two requests
    decision, report = sim.run(lambda: ep.select(State(PROMPT), ["positive", "negative"], 0.0,
                                                 LabelJudgement(0.7, one_request=False)))
    assert decision.decision == "positive"
    assert [r.path for r in report["requests"] if r.path != "/tokenize"] == ["/generate"] * 2


def test_plain_select_follows_the_judge(emulator_tokenizer_path):
    sim, ep = judge_sim(emulator_tokenizer_path, 0.05)
    decision, _ = sim.run(lambda: ep.select(State(PROMPT), ["positive", "negative"], 0.0,
                                            LabelJudgement(0.7, one_request=False)))
    assert decision.decision == "negative"


class Distribution:
    """A stand-in server behind sglang's own ``RuntimeEndpoint.select``: one next-token distribution."""

    def __init__(self, probs: dict[str, float]):
        self.probs = probs  # next token after the prompt -> probability
        self.bodies = []  # every /generate body

    def __call__(self, s, data):
        self.bodies.append(data)
        if not data.get("return_logprob"):
            return {"meta_info": {"prompt_tokens": 9}}
        ids = {t: i for i, t in enumerate(["prompt", "tail", *self.probs, "other"])}
        out = []
        for text in data["text"]:
            choice = text[len(s.text_):]
            lp = math.log(self.probs.get(choice, 1e-6))
            entries = [[None, ids["prompt"], "prompt"], [-0.1, ids["tail"], "tail"], [lp, ids.get(choice, 99), choice]]
            out.append({"meta_info": {"input_token_logprobs": entries, "output_token_logprobs": []}})
        return out


def plain_endpoint(probs):
    """sglang's ``RuntimeEndpoint`` without a server: only its HTTP call is replaced."""
    ep = object.__new__(RuntimeEndpoint)
    ep._generate_http_request = Distribution(probs)
    return ep


def test_label_judgement_reads_the_variants_the_pipeline_passes():
    """On sglang's own ``RuntimeEndpoint`` the verdict is over the choices the select names: every
    variant gives the engine's verdict, the two bare words the verdict over those two (never read
    from the caller's stack)."""
    from sgl_speccompact.core.judge import judge_next_token, LabelTokens

    probs = {"Positive": 0.60, "positive": 0.20, "negative": 0.15, "Negative": 0.01}
    choices, n = label_choices("positive", "negative")
    ep = plain_endpoint(probs)
    full = RuntimeEndpoint.select(ep, State("Q? "), choices, 0.0, LabelJudgement(0.7, n_positive=n))
    assert full.decision == "positive" and full.meta_info["verdict"].score == pytest.approx(0.8)
    assert len(ep._generate_http_request.bodies) == 2  # sglang's prefill and one batch
    engine = judge_next_token({c: math.log(probs[c]) for c in choices if c in probs}, None,
                              LabelTokens(tuple(choices[:n]), tuple(choices[n:])), 0.7)
    assert engine.score == pytest.approx(full.meta_info["verdict"].score)
    ep = plain_endpoint(probs)
    bare = RuntimeEndpoint.select(ep, State("Q? "), ["positive", "negative"], 0.0, LabelJudgement(0.7))
    assert bare.meta_info["verdict"].score == pytest.approx(0.2 / 0.35)  # the two words alone
    assert len(ep._generate_http_request.bodies) == 2  # no request of its own
