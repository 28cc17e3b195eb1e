"""Policies, the emulated distribution, the cost model and the test tokenizer."""

from __future__ import annotations

import math

import pytest

from sgl_speccompact.emulator import (
    QWEN3_8B,
    QWEN3_32B,
    ControlledAcceptancePolicy,
    CostModel,
    EmulatedModel,
    EmulatorError,
    ScriptedPolicy,
    label_logprobs,
)
from sgl_speccompact.emulator.model import make_distribution

P = {"lora_path": None, "sampling_params": {}, "judgement": False}  # a generation request
J = {**P, "sampling_params": {"max_new_tokens": 0}, "judgement": True}  # a judgement-shaped request
JUDGE = "<|im_start|>user\n<line>\n{line}\n</line>\nReply positive or negative.<|im_end|>\n<|im_start|>assistant\n"


# --- ScriptedPolicy -----------------------------------------------------------------


def test_first_matching_rule_answers_in_order():
    p = ScriptedPolicy(default_output="default")
    p.on("goal", "first")
    p.on("goal", "second")
    assert p.generate("the goal slot", [], P) == "first"
    assert p.generate("other", [], P) == "default"


def test_after_marker_only_looks_at_the_last_segment():
    p = ScriptedPolicy()
    p.on("secret", "found", after="<|im_start|>user")
    assert p.generate("secret in history <|im_start|>user\nplain question", [], P) == ""
    assert p.generate("history <|im_start|>user\nthe secret question", [], P) == "found"


def test_regex_times_and_lora_filters():
    p = ScriptedPolicy(default_output="-")
    p.on(r"slot \d+", "once", regex=True, times=1)
    p.on("draft", "drafter says", lora_path="drafter")
    assert p.generate("slot 3", [], P) == "once"
    assert p.generate("slot 3", [], P) == "-"
    assert p.generate("draft", [], P) == "-"
    assert p.generate("draft", [], {**P, "lora_path": "drafter"}) == "drafter says"


def test_judge_rule_answers_judgement_shaped_requests_only():
    p = ScriptedPolicy(default_output="- a line")
    p.judge("bad line", p_positive=0.1, after="<line>")
    lp = p.next_token_logprobs(JUDGE.format(line="a bad line"), [], J)
    ratio = math.exp(lp["positive"]) / (math.exp(lp["positive"]) + math.exp(lp["negative"]))
    assert ratio == pytest.approx(0.1)
    assert p.next_token_logprobs(JUDGE.format(line="fine"), [], J) == {}
    # the same words in a generation request: no label logprobs, and never a label generated
    assert p.next_token_logprobs(JUDGE.format(line="a bad line"), [], P) == {}
    assert p.generate(JUDGE.format(line="a bad line"), [], P) == "- a line"


def test_plain_logprob_rules_answer_every_request():
    p = ScriptedPolicy()
    p.logprobs("x", {"positive": math.log(0.6)})
    assert p.next_token_logprobs("x", [], P) == p.next_token_logprobs("x", [], J) == {"positive": math.log(0.6)}


def test_calls_are_recorded():
    p = ScriptedPolicy()
    p.generate("x", [], P)
    p.next_token_logprobs("y", [], P)
    assert p.calls == [("generate", "x"), ("logprobs", "y")]


# --- ControlledAcceptancePolicy ------------------------------------------------------


def judge_ratio(policy, line):
    lp = policy.next_token_logprobs(JUDGE.format(line=line), [], J)
    pos, neg = math.exp(lp["positive"]), math.exp(lp["negative"])
    return pos / (pos + neg)


def test_controlled_policy_accept_rate_is_deterministic_and_close_to_p():
    policy = ControlledAcceptancePolicy(p_accept=0.7, seed=3)
    verdicts = [judge_ratio(policy, f"- line number {i}") >= 0.7 for i in range(400)]
    assert verdicts == [judge_ratio(policy, f"- line number {i}") >= 0.7 for i in range(400)]
    assert 0.62 < sum(verdicts) / len(verdicts) < 0.78


def test_controlled_policy_seed_changes_verdicts():
    a = ControlledAcceptancePolicy(p_accept=0.5, seed=1)
    b = ControlledAcceptancePolicy(p_accept=0.5, seed=2)
    lines = [f"- item {i}" for i in range(50)]
    assert [a.accepts(JUDGE.format(line=x)) for x in lines] != [b.accepts(JUDGE.format(line=x)) for x in lines]


def test_controlled_policy_generates_lines_then_stops():
    policy = ControlledAcceptancePolicy(max_lines=2, lines_per_reply=2)
    history = "\n".join(f"tool output line number {i} with enough characters" for i in range(10))
    prompt = f"<|im_start|>user\n{history}<|im_end|>\n<|im_start|>assistant\n"
    reply = policy.generate(prompt, [], P)
    assert reply.count("\n") == 2 and reply.startswith("- tool output line number")
    assert policy.generate(prompt + reply, [], P) == ""
    assert policy.next_token_logprobs(prompt, [], P) == {}


# --- distribution -------------------------------------------------------------------


def test_distribution_is_normalized_over_the_vocabulary():
    d = make_distribution({5: math.log(0.5), 7: math.log(0.2)}, vocab_size=100)
    total = sum(math.exp(d.logprob(t)) for t in range(100))
    assert total == pytest.approx(1.0)
    assert [tid for _, tid in d.top(3)] == [5, 7, 0]


def test_distribution_scales_down_overfull_mass():
    d = make_distribution({1: 0.0, 2: 0.0}, vocab_size=10)
    assert sum(math.exp(d.logprob(t)) for t in range(10)) == pytest.approx(1.0)
    assert d.logprob(1) == pytest.approx(d.logprob(2))


def test_model_resolves_token_strings_and_rejects_multi_token_keys(emulator_tokenizer):
    p = ScriptedPolicy()
    p.logprobs("x", {"positive": math.log(0.6)})
    p.logprobs("y", {"not a single token at all": -1.0})
    model = EmulatedModel(p, emulator_tokenizer)
    pos = emulator_tokenizer.encode("positive", add_special_tokens=False)[0]
    assert math.exp(model.distribution("x", [], P).logprob(pos)) == pytest.approx(0.6)
    with pytest.raises(EmulatorError):
        model.distribution("y", [], P)


def test_plan_ends_with_eos_and_respects_the_budget(emulator_tokenizer):
    model = EmulatedModel(ScriptedPolicy(default_output="one two three"), emulator_tokenizer)
    eos = emulator_tokenizer.convert_tokens_to_ids("<|im_end|>")
    plan = model.plan("p", [], P, budget=100, ignore_eos=False)
    assert plan[-1] == eos and model.decode(plan[:-1]) == "one two three"
    assert len(model.plan("p", [], P, budget=2, ignore_eos=False)) == 2
    assert len(model.plan("p", [], P, budget=50, ignore_eos=True)) == 50


def test_label_logprobs_cover_every_single_token_form(emulator_tokenizer):
    for form in label_logprobs("positive", "negative", 0.5):
        assert len(emulator_tokenizer.encode(form, add_special_tokens=False)) == 1


# --- cost model (simulated; compared with the published cost model's table) -----------


def test_cost_model_reproduces_the_reference_prefill_estimates():
    cm = CostModel(model=QWEN3_8B)
    assert cm.forward_s([(0, 16384)]) == pytest.approx(0.57, rel=0.05)
    assert cm.forward_s([(0, 32768)]) == pytest.approx(1.42, rel=0.05)
    assert CostModel(model=QWEN3_32B).forward_s([(0, 16384)]) == pytest.approx(2.4, rel=0.06)


def test_cost_model_decode_step_and_presets():
    cm = CostModel.for_model("Qwen/Qwen3-8B")
    assert cm.forward_s([(16384, 1)]) == pytest.approx(6.0e-3, rel=0.1)
    assert cm.forward_s([(16384, 1)] * 12) > cm.forward_s([(16384, 1)])
    with pytest.raises(ValueError):
        CostModel.for_model("llama-70b")


# --- tokenizer ----------------------------------------------------------------------


def test_test_tokenizer_properties(emulator_tokenizer):
    tok = emulator_tokenizer
    for form in ("positive", " positive", "Positive", " Positive",
                 "negative", " negative", "Negative", " Negative"):
        assert len(tok.encode(form, add_special_tokens=False)) == 1, form
    text = "def f(x):\n    return x  # naïve café ✓\n<|im_start|>user\nhi<|im_end|>"
    assert tok.decode(tok.encode(text)) == text
    assert tok.eos_token == "<|im_end|>"
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True, enable_thinking=False)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_controlled_policy_never_writes_a_label_for_a_prompt_that_asks_for_one():
    # a repair prompt whose user turn ends with the judge rubric (both label words, the quoted
    # line): before, the policy took it for a judgement and wrote a bare label into the summary
    policy = ControlledAcceptancePolicy(p_accept=0.5)
    history = "\n".join(f"tool output line number {i} with enough characters" for i in range(10))
    for line in (f"- item {i}" for i in range(20)):
        prompt = (f"<|im_start|>user\n<conversation>\n{history}\n</conversation>\n"
                  f"Slot request: goal\n<line>\n{line}\n</line>\nReply with one word: positive or negative."
                  "<|im_end|>\n<|im_start|>assistant\n")
        reply = policy.generate(prompt, [], P)
        assert reply.startswith("- tool output line number"), reply
        assert all(ln.strip().lower() not in ("positive", "negative") for ln in reply.splitlines())
        assert policy.next_token_logprobs(prompt, [], P) == {}
        assert set(policy.next_token_logprobs(prompt, [], J)) >= {"positive", "negative"}
