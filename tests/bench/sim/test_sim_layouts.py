"""Deployment two-gpu-tp2-colocated, tool waits, local tokenization and the fused LoRA charge (SIMULATED clock).

No assertion depends on real time; virtual-time assertions compare the
simulator with the cost model's own formula.
"""

from __future__ import annotations

import pytest

from sgl_speccompact.core.costmodel import LORA_KERNEL_S, H200, QWEN3_0_6B, QWEN3_8B, LoraCost, forward_s, fused_layers, lora_s
from sgl_speccompact.methods.auto import Deployment, predict
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.emulator import ControlledAcceptancePolicy, CostModel
from sgl_speccompact.emulator.cost import DEPLOYMENTS, deployed
from bench.sim.servers import TOOL_PATH
from bench.sim.simulator import build_simulation

from tests.support.programs import MESSAGES

COSTS = {"target": CostModel.for_model("qwen3-8b"), "drafter": CostModel.for_model("qwen3-0.6b")}


def make_sim(tok, deployment):
    policies = {"target": ControlledAcceptancePolicy(seed=0), "drafter": ControlledAcceptancePolicy(seed=1)}
    return build_simulation(tok, policies, COSTS, DEPLOYMENTS[deployment])


def compaction(sim, local=False):
    target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
    if local:
        target.use_local_tokenizer()
        drafter.use_local_tokenizer()
    return sim.run(lambda: run_method("speccompact", MESSAGES, target=target, drafter=drafter))


def test_colocated_runs_the_target_at_tp2_and_takes_turns_with_the_drafter(emulator_tokenizer_path):
    sim = make_sim(emulator_tokenizer_path, "two-gpu-tp2-colocated")
    assert sim.servers["target"].cost.tp == 2 and sim.servers["drafter"].cost.tp == 1
    result, report = compaction(sim)
    assert result.summary and {p.gpu for p in report["passes"]} == {0}  # one lane: a TP=2 pass holds both GPUs
    passes = sorted(report["passes"], key=lambda p: p.start)
    assert all(a.end <= b.start + 1e-12 for a, b in zip(passes, passes[1:]))  # never two passes at once
    steps = [p for p in passes if p.server == "target" and p.kind == "decode"]
    assert steps and all(p.end > p.start for p in steps)
    shapes = [(1000, 1)]  # one request decoding one token after 1,000
    assert sim.servers["target"].cost.pass_s("decode", shapes) < COSTS["target"].pass_s("decode", shapes)  # TP=2
    single = [p for p in steps if len(p.requests) == 1 and p.new_tokens == 1]
    for step in single:  # a lone decode step takes exactly the TP=2 pass time
        one = [(step.context_tokens - 1, 1)]
        assert step.end - step.start == pytest.approx(sim.servers["target"].cost.pass_s("decode", one), rel=1e-9)
    assert deployed(COSTS, DEPLOYMENTS["two-gpu"])["target"].tp == 1


def test_tool_wait_moves_the_clock_and_nothing_else(emulator_tokenizer_path):
    sim = make_sim(emulator_tokenizer_path, "two-gpu")
    target = sim.endpoint("target")
    _, report = sim.run(lambda: target._request("POST", TOOL_PATH, {"seconds": 1.25}))
    assert report["e2e_s"] == pytest.approx(1.25) and report["passes"] == []
    assert [r.kind for r in report["requests"]] == ["tool"]


def test_local_tokenizer_sends_no_tokenize_and_charges_its_time(emulator_tokenizer_path):
    remote_result, remote = compaction(make_sim(emulator_tokenizer_path, "two-gpu"))
    local_result, local = compaction(make_sim(emulator_tokenizer_path, "two-gpu"), local=True)
    assert any(r.path == "/tokenize" for r in remote["requests"])
    assert not any(r.path == "/tokenize" for r in local["requests"])
    assert any(r.kind == "local_tokenize" for r in local["requests"])  # the client's encoding is on the clock
    assert local_result.summary == remote_result.summary  # the same ids: the same compaction
    again = compaction(make_sim(emulator_tokenizer_path, "two-gpu"), local=True)[1]
    assert again["e2e_s"] == local["e2e_s"]  # one batch per instant: thread timing cannot move the clock
    assert [(r.kind, r.issued, r.finished) for r in again["requests"]] == [
        (r.kind, r.issued, r.finished) for r in local["requests"]]


def test_lora_is_charged_per_fused_layer_and_merged_is_free():
    assert fused_layers(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")) == [
        "qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
    full, merged = LoraCost(), LoraCost(merged=True)
    # k and v fuse into q's layer: no kernels of their own, only their (tiny) weights
    qkv, q = LoraCost(modules=("q_proj", "k_proj", "v_proj")), LoraCost(modules=("q_proj",))
    assert lora_s(QWEN3_0_6B, H200, qkv, 1) - lora_s(QWEN3_0_6B, H200, q, 1) < 2 * QWEN3_0_6B.layers * LORA_KERNEL_S
    kernels = lora_s(QWEN3_0_6B, H200, full, 1) - lora_s(QWEN3_0_6B, H200, LoraCost(modules=("o_proj",)), 1)
    assert kernels > 0 and lora_s(QWEN3_0_6B, H200, merged, 1) == 0.0
    assert forward_s(QWEN3_0_6B, H200, [(8000, 1)], lora=merged) == forward_s(QWEN3_0_6B, H200, [(8000, 1)])
    assert QWEN3_0_6B.a == QWEN3_8B.a  # the drafter's fixed cost per pass follows the targets' fitted rule


def test_auto_prices_the_colocated_layout_at_tp2():
    base = Deployment.named(target="qwen3-32b", gpus=2)
    colocated = Deployment.named(target="qwen3-32b", gpus=2, colocated_tp2=True)
    one = Deployment.named(target="qwen3-32b", gpus=1)
    assert colocated.target_tp == 2 and colocated.drafter_shares_gpu
    # sharing with the drafter like one GPU, but every target pass at TP=2: faster than one GPU
    assert predict("speccompact", colocated, 16000, 0.7) < predict("speccompact", one, 16000, 0.7)
    assert predict("target_self", colocated, 16000, 0.7) == predict("target_self", base, 16000, 0.7)
    with pytest.raises(ValueError, match="gpus=2"):
        Deployment.named(gpus=1, colocated_tp2=True)


def test_each_compaction_of_a_session_gets_its_own_workload_draw(emulator_tokenizer_path):
    from bench.sim.session_replay import Replay, ReplayHooks

    sim = make_sim(emulator_tokenizer_path, "two-gpu")
    drawn = []
    replay = Replay(sim, sim.endpoint("target"), lambda *a: None, len, ReplayHooks(new_draw=drawn.append))
    replay._alone("hermes", [], None)
    replay._alone("hermes", [], None)
    assert drawn == [0, 1]


def test_priority_admits_the_higher_role_first(emulator_tokenizer_path):
    from sgl_speccompact.emulator.jobs import Job, LogprobRequest

    sim = make_sim(emulator_tokenizer_path, "two-gpu")
    sched = sim.servers["target"].sched
    low, high = (Job(rid=r, prompt="x", input_ids=[1, 2, 3], sampling=None, lora_path=None, namespace=None,
                     logprobs=LogprobRequest(), stream=False, on_update=None, priority=p)
                 for r, p in (("low", 0), ("high", 1)))
    sched.max_prefill_tokens = 3  # room for one of them
    sched.add([low, high])
    assert [j.rid for j in sched.next_batch().jobs] == ["high"]
