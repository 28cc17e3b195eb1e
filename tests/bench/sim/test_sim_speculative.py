"""Speculative decoding in the cost model and the one-clock simulator (every timing SIMULATED).

Hand-computed step times, sglang's refusals (LoRA with STANDALONE), and the real programs' judge and
repair requests on spec-decoding servers, each body validated with sglang's own contract check.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from sglang.srt.entrypoints.api_contract import generate_contract_error

from sgl_speccompact.core.costmodel import AR_LAT_S, H200, QWEN3_0_6B, QWEN3_8B, LoraCost, forward_s, lora_s
from sgl_speccompact.errors import BackendError
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.core.specdecode import SpecDecoding, SpecRefused, make
from sgl_speccompact.emulator import ControlledAcceptancePolicy, CostModel
from sgl_speccompact.emulator.cost import DEPLOYMENTS
from bench.sim.simulator import build_simulation

from tests.support.programs import MESSAGES
from tests.support.sim import sent_bodies


def test_eagle3_step_time_matches_the_hand_computed_one():
    # Qwen3-8B, 16k context, batch 1, EAGLE3 (3 steps, 4 draft tokens). By hand (H200, bw 4.8e12):
    # verify: 1.4 ms + max(16.4e9 / (0.85 bw) + 147e3 * 16388 / (0.8 bw), compute)
    bw = 4.8e12
    verify = 1.4e-3 + 16.4e9 / (0.85 * bw) + 147e3 * (16384 + 4) / (0.8 * bw)
    head = make("EAGLE3", "qwen3-8b").draft
    one = head.a + head.weight_bytes / (0.85 * bw) + head.kv_bytes_per_token * 16385 / (0.8 * bw)
    extend = head.a + head.weight_bytes / (0.85 * bw) + head.kv_bytes_per_token * 16388 / (0.8 * bw)
    want = verify + 3 * one + extend
    assert make("EAGLE3", "qwen3-8b").step_s(QWEN3_8B, H200, [16384]) == pytest.approx(want, rel=1e-9)


def test_ngram_step_is_the_verify_extend_plus_the_cpu_lookup():
    s = make("NGRAM", "qwen3-8b")
    verify = forward_s(QWEN3_8B, H200, [(16384, 12), (9000, 12)])
    assert s.step_s(QWEN3_8B, H200, [16384, 9000]) == pytest.approx(verify + 2 * s.ngram_lookup_s)


def test_tensor_parallel_halves_the_pass_and_adds_the_all_reduces():
    one, two = forward_s(QWEN3_8B, H200, [(16384, 1)]), forward_s(QWEN3_8B, H200, [(16384, 1)], tp=2)
    reduce = 2 * QWEN3_8B.layers * (AR_LAT_S + 2 * 4096 / 360e9)
    assert two == pytest.approx(QWEN3_8B.a + (one - QWEN3_8B.a) / 2 + reduce)


def test_lora_cost_grows_with_rank_and_modules():
    small, big = LoraCost(rank=8, modules=("q_proj",)), LoraCost(rank=64)
    assert 0 < lora_s(QWEN3_0_6B, H200, small, 1) < lora_s(QWEN3_0_6B, H200, big, 1)
    assert forward_s(QWEN3_0_6B, H200, [(100, 1)], lora=big) > forward_s(QWEN3_0_6B, H200, [(100, 1)])


def test_accepted_draws_have_the_configured_mean_and_bounds():
    s = make("EAGLE3", "qwen3-8b", tau=2.5)
    rng = random.Random(7)
    draws = [s.draw(rng, 1) for _ in range(20000)]
    assert min(draws) == 1 and max(draws) == s.num_steps + 1
    assert sum(draws) / len(draws) == pytest.approx(2.5, abs=0.03)
    falling = replace(s, tau_fall_per_doubling=0.2)
    assert falling.tau_at(8) == pytest.approx(1 + 1.5 * 0.4) and falling.tau_at(1) == 2.5


def test_sglang_refusals():
    with pytest.raises(SpecRefused, match="LoRA"):
        make("STANDALONE", "qwen3-8b").check_lora()
    for algo in ("EAGLE3", "DFLASH", "NGRAM"):
        make(algo, "qwen3-8b").check_lora()  # accepted by sglang's check_lora_speculative_compatibility
    with pytest.raises(SpecRefused, match="draft-model-path"):
        SpecDecoding("DFLASH", 1, 1, 16, None, 4.0)
    with pytest.raises(SpecRefused, match="no EAGLE3"):
        make("EAGLE3", "qwen3-0.6b")


def _sim(tok, target_spec=None, drafter_spec=None):
    costs = {"target": CostModel.for_model("qwen3-8b", spec=target_spec),
             "drafter": CostModel.for_model("qwen3-0.6b", spec=drafter_spec, lora=LoraCost())}
    policies = {"target": ControlledAcceptancePolicy(seed=0, p_accept=0.5), "drafter": ControlledAcceptancePolicy(seed=1)}
    return build_simulation(tok, policies, costs, DEPLOYMENTS["two-gpu"])


@pytest.mark.parametrize("algo", ["EAGLE3", "DFLASH", "NGRAM", "STANDALONE"])
def test_judge_and_repair_requests_on_a_speculative_target(emulator_tokenizer_path, algo):
    base_sim, spec_sim = _sim(emulator_tokenizer_path), _sim(emulator_tokenizer_path, make(algo, "qwen3-8b"))
    sent = []
    sent_bodies(spec_sim, sent)
    runs = []
    for sim in (base_sim, spec_sim):
        target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
        runs.append(sim.run(lambda target=target, drafter=drafter: run_method("speccompact", MESSAGES, target=target, drafter=drafter)))
    (plain, rep_plain), (spec, rep_spec) = runs
    assert spec.summary == plain.summary  # speculative decoding is lossless here: same tokens, same verdicts
    kinds = {r.kind for r in rep_spec["requests"] if r.server == "target"}
    assert {"judge", "generate"} <= kinds or "judge" in kinds
    assert all(generate_contract_error(b) is None for _, b in sent)
    assert any("token_ids_logprob" in b for s, b in sent if s == "target")
    # verify steps: fewer target decode passes for the same completion tokens
    decode = lambda rep: [p for p in rep["passes"] if p.server == "target" and p.kind == "decode"]
    assert decode(rep_plain) and len(decode(rep_spec)) < len(decode(rep_plain))


def test_a_lora_drafter_request_on_a_standalone_server_is_refused(emulator_tokenizer_path):
    # sglang refuses LoRA with STANDALONE; the drafter's adapter request must fail, not be served
    sim = _sim(emulator_tokenizer_path, drafter_spec=replace(make("STANDALONE", "qwen3-8b"), draft=QWEN3_0_6B))
    target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
    with pytest.raises(BackendError, match="LoRA is only compatible"):
        sim.run(lambda: run_method("speccompact", MESSAGES, target=target, drafter=drafter))


def test_ngram_on_the_drafter_accepts_its_lora_adapter(emulator_tokenizer_path):
    sim = _sim(emulator_tokenizer_path, drafter_spec=make("NGRAM", "qwen3-0.6b"))
    target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
    result, report = sim.run(lambda: run_method("speccompact", MESSAGES, target=target, drafter=drafter))
    assert result.summary and any(p.server == "drafter" and p.kind == "decode" for p in report["passes"])
