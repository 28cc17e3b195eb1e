"""Judgements on the real server: prefill-only requests, the verdict from the real label logprobs.

The judge script sets the label logits, so the acceptance score a line must
get is known in closed form: with one slot marker in the prompt, the final
RMSNorm scales the logit gap by sqrt(2/3) (bias, one-hot and one feature
dimension against bias and one-hot), so r = sigmoid(gap * sqrt(2/3)).
"""

import math

import pytest
from sglang import assistant_begin, function, select, user
from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint

from tests.real_sglang import scripts
from tests.real_sglang.reading import assert_scripted, history
from sgl_speccompact.methods.request import MethodRequest
from sgl_speccompact.backends.endpoint import LabelJudgement, SpecCompactEndpoint
from sgl_speccompact.core.judge import label_choices
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.result import LineOrigin
from tests.support.tiny_qwen3 import Script

pytestmark = pytest.mark.real_sglang

SCALE = math.sqrt(2 / 3)  # what the final norm leaves of a logit gap with one marker present


def judge_with_score(r: float) -> Script:
    """The default target with a label-logit gap that gives unmarked lines the score ``r``."""
    gap = math.log(r / (1 - r)) / SCALE
    return Script(lines=scripts.TARGET.lines, default=scripts.TARGET.default,
                  reject_markers=scripts.TARGET.reject_markers, positive=("positive", gap), negative=("negative", 0.0))


def compact(servers, config=None):
    return run_method("speccompact", MethodRequest(history(), schema=scripts.SCHEMA),
                      target=SpecCompactEndpoint(servers.target.url), drafter=SpecCompactEndpoint(servers.drafter.url),
                      config={**scripts.JUDGE, **(config or {})})


@pytest.mark.parametrize("r, accepted", [(0.76, True), (0.64, False)])
def test_the_verdict_is_r_from_the_real_logprobs_against_eta(servers, r, accepted):
    servers.target.use(judge_with_score(r), f"target-r{int(r * 100)}")
    res = compact(servers)
    lines = [ln for s in res.slots if s.name != "ledger" for ln in s.lines]  # the ledger: no model's lines
    scored = [ln for ln in lines if ln.origin is LineOrigin.DRAFTED or ln.rejected_draft]
    assert lines and all(ln.origin is (LineOrigin.DRAFTED if accepted else LineOrigin.REPAIRED) for ln in lines
                         if scripts.REJECT.strip() not in (ln.rejected_draft or ""))
    if accepted:  # the recorded score is the one the real logprobs give, within bf16 rounding
        assert all(abs(ln.score - r) < 0.02 for ln in scored if ln.origin is LineOrigin.DRAFTED), \
            [ln.score for ln in scored]
    assert_scripted(res.summary)


def test_eta_decides_with_the_same_real_scores(servers):
    servers.target.use(judge_with_score(0.64), "target-r64")
    res = compact(servers, config={"eta": 0.6})
    drafted = [ln for s in res.slots for ln in s.lines if ln.origin is LineOrigin.DRAFTED]
    assert len(drafted) == 11  # every draft but the marked one now passes
    assert all(abs(ln.score - 0.64) < 0.02 for ln in drafted)


def test_judgements_are_prefill_only_and_reuse_the_branch(servers):
    res = compact(servers)
    verify = res.stats.requests["target"]["verify"]
    assert verify.requests == 12 and verify.completion_tokens == 0  # max_new_tokens 0: nothing decoded
    assert verify.cached_tokens > 0.8 * verify.prompt_tokens


def test_plain_runtime_endpoint_select_gives_the_same_decisions(servers):
    """sglang's own two-request select against the one-request judgement.

    The plain endpoint opens assistant turns without the empty think block,
    so the judge reads another prompt; the verdicts (and so the summary) must
    not change.  Its assistant prefix ends with a token that some label
    variants merge with, which the select's logprobs must survive.
    """
    one = compact(servers)
    servers.reset()
    plain = run_method("speccompact", MethodRequest(history(), schema=scripts.SCHEMA),
                       target=RuntimeEndpoint(servers.target.url, chat_template_name="qwen"),
                       drafter=SpecCompactEndpoint(servers.drafter.url), config=scripts.JUDGE)
    assert [[ln.origin for ln in s.lines] for s in plain.slots] == [[ln.origin for ln in s.lines] for s in one.slots]
    assert plain.summary == one.summary
    assert plain.stats.requests["target"]["verify"].requests == 2 * plain.stats.proposed_lines
    assert_scripted(plain.summary)


def test_plain_select_reads_labels_after_an_assistant_colon(servers):
    """sglang's default template ends turns with ``ASSISTANT:``; ``:n`` is one Qwen3 token."""
    state = _judge_program.run(prompt="Deploy canary cluster.", backend=RuntimeEndpoint(servers.target.url))
    decision = state.get_meta_info("verdict")
    assert state["verdict"] == "positive"
    assert decision["verdict"].score > 0.9


@function
def _judge_program(s, prompt):
    s += user("Judge this line for the" + scripts.MARKERS["goal"] + " section: " + prompt)
    s += assistant_begin()
    choices, n_positive = label_choices(*scripts.LABELS)
    s += select("verdict", choices=choices, choices_method=LabelJudgement(0.7, n_positive=n_positive))
