"""The plain two-request select (``one_request_judging`` off) reads sglang's ``None`` first logprob entry.

sglang 0.5.23's scheduler pads the first prompt logprob with ``None``; its
frontend ``RuntimeEndpoint.select`` subtracts that entry when its token text
ends the prompt (token healing).  With a tokenizer that splits the ``\\n\\n``
after an empty think block into two tokens, that is every judge prompt.
"""

from __future__ import annotations

import pytest
from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint

from sgl_speccompact.backends.endpoint import LabelJudgement
from sgl_speccompact.core.prompts import THINK_OFF
from sgl_speccompact.testing import CostModel, ScriptedPolicy
from sgl_speccompact.testing.emulator.cost import DEPLOYMENTS
from sgl_speccompact.testing.sim.simulator import build_simulation

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
    decision, report = sim.run(lambda: ep.select(State(PROMPT), ["positive", "negative"], 0.0, method))
    assert decision.decision == "positive"
    assert decision.meta_info["judgement"]["accepted"]
    # sglang's two requests (with prompts sent as ids, their new segments go to /tokenize first)
    assert [r.path for r in report["requests"] if r.path != "/tokenize"] == ["/generate", "/generate"]


def test_plain_select_follows_the_judge(emulator_tokenizer_path):
    sim, ep = judge_sim(emulator_tokenizer_path, 0.05)
    decision, _ = sim.run(lambda: ep.select(State(PROMPT), ["positive", "negative"], 0.0,
                                            LabelJudgement(0.7, one_request=False)))
    assert decision.decision == "negative"
