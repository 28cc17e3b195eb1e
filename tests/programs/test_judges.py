"""Every judging path asks a Judge: ``verify_line`` included, with the judge the config names."""

from __future__ import annotations

import pytest

from sgl_speccompact.backends.contract import BackendDefaults
from sgl_speccompact.config import CompactConfig
from sgl_speccompact.core.judging import Judged
from sgl_speccompact.errors import ConfigError
from sgl_speccompact.programs import SPECCOMPACT, SlotContext, verify_line
from sgl_speccompact.result import StatsRecorder, Verdict
from sgl_speccompact.schema import OPENCLAW_SLOTS

from tests.support.scripted import count_tokens

GOAL = OPENCLAW_SLOTS[0]


class Deciding(BackendDefaults):
    """A target that serves only sglang's decision route: yes for every claim, with the given label mass."""

    def __init__(self, mass=0.8):
        self.mass, self.bodies = mass, []

    def decide(self, body):
        self.bodies.append(body)
        return {"answers": {q["id"]: {"probabilities": {"yes": 0.9, "no": 0.1}, "label_mass": self.mass}
                            for q in body["questions"]}, "usage": {"prompt_tokens": 11}}


def context(cfg: CompactConfig, target, judge=None) -> SlotContext:
    return SlotContext(cfg=cfg, slots=OPENCLAW_SLOTS, drafter=None, drafter_context="", count_tokens=count_tokens,
                       recorder=StatsRecorder(), target=target, proposers=SPECCOMPACT, judge=judge,
                       record="the record\n")


def test_verify_line_asks_the_judge_the_config_names():
    # before: verify_line was a plain sgl.select whatever config.judge said
    target = Deciding()
    got = verify_line(None, GOAL, "- fix a.py", context(CompactConfig(judge="decisions"), target),
                      accepted=("- earlier",))
    assert isinstance(got, Judged) and got.requests == 1 and got.prompt_tokens == 11
    (v,) = got.verdicts
    assert isinstance(v, Verdict) and v.accepted and v.label_mass == pytest.approx(0.8)
    (body,) = target.bodies
    assert "- fix a.py" in body["questions"][0]["question"] and body["input"].startswith("the record\n")
    assert "- earlier" in body["input"]  # the section so far, as the engine's own question has it


def test_verify_line_gates_what_the_judge_answers():
    got = verify_line(None, GOAL, "- a", context(CompactConfig(judge="decisions"), Deciding(mass=0.01)))
    assert not got.verdicts[0].accepted and not got.verdicts[0].reliable  # below min_label_mass: acts on nothing


def test_verify_line_asks_the_contexts_own_judge_first():
    class Fixed:
        name = "fixed"

        def __init__(self):
            self.asked = []

        def judge(self, questions):
            self.asked.append(questions)
            return Judged((Verdict(0.2, 0.6, 0.25, False),) * len(questions), requests=1)

    judge = Fixed()
    got = verify_line(None, GOAL, "- a", context(CompactConfig(), Deciding(), judge), carried=True)
    assert got.verdicts[0].score == 0.25 and type(judge.asked[0]).__name__ == "CarriedQuestions"


def test_a_target_without_a_decision_route_cannot_serve_the_decision_judge():
    with pytest.raises(ConfigError, match="decisions"):
        verify_line(None, GOAL, "- a", context(CompactConfig(judge="decisions"), BackendDefaults()))
