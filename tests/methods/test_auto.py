"""method="auto": the closed-form predictor picks per deployment, and stays out of the emulator."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sgl_speccompact.methods.auto import DEFAULT_P_ACCEPT, AutoChoice, Deployment, choose, decode_s, predict, prefill_s
from sgl_speccompact.methods.names import METHODS
from sgl_speccompact.core.costmodel import H100, H200, QWEN3_8B, forward_s


def test_the_pick_changes_with_the_deployment():
    # 32B at high acceptance: the drafter on its own GPU wins against Target-self on one GPU (the paper's setup);
    # give Target-self both GPUs (equal hardware) and EAGLE3, and it wins.
    paper = choose(Deployment.named(target="qwen3-32b", gpus=2, equal_hardware=False), 16000, 0.9)
    fair = choose(Deployment.named(target="qwen3-32b", gpus=2, speculative="eagle3"), 16000, 0.9)
    assert (paper.method, fair.method) == ("speccompact", "target_self")
    assert paper.predicted_s["speccompact"] < paper.predicted_s["target_self"]
    assert fair.predicted_s["target_self"] < fair.predicted_s["speccompact"]


def test_the_pick_changes_with_acceptance():
    dep = Deployment.named(target="qwen3-32b", gpus=1)
    low, high = choose(dep, 16000, 0.5), choose(dep, 16000, 0.95)
    assert low.method == "target_self" and high.method == "speccompact"


def test_choice_names_its_prediction_and_reason():
    got = choose(Deployment.named(), 8000)
    assert isinstance(got, AutoChoice) and set(got.predicted_s) == set(METHODS)
    assert got.method == min(got.predicted_s, key=got.predicted_s.get)
    assert got.method in got.reason and "H200" in got.reason and f"p_accept {DEFAULT_P_ACCEPT:g}" in got.reason


def test_speculative_decoding_and_tensor_parallel_speed_up_single_model_methods():
    plain = predict("hermes", Deployment.named(gpus=2, equal_hardware=False), 16000, 0.7)
    tp2 = predict("hermes", Deployment.named(gpus=2), 16000, 0.7)
    eagle = predict("hermes", Deployment.named(gpus=2, equal_hardware=False, speculative="eagle3"), 16000, 0.7)
    assert tp2 < plain and eagle < plain


def test_a_slower_gpu_predicts_slower():
    h200 = predict("target_self", Deployment.named(gpu="H200"), 16000, 0.7)
    h100 = predict("target_self", Deployment.named(gpu="H100"), 16000, 0.7)
    assert h100 > h200


def test_closed_forms_reproduce_hand_sums():
    assert prefill_s(QWEN3_8B, H200, 10000) == pytest.approx(
        forward_s(QWEN3_8B, H200, [(0, 8192)]) + forward_s(QWEN3_8B, H200, [(8192, 1808)]))
    assert decode_s(QWEN3_8B, H100, 5000, 10, 3) == pytest.approx(10 * forward_s(QWEN3_8B, H100, [(5000, 1)] * 3))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="p_accept"):
        choose(Deployment.named(), 1000, 1.5)
    with pytest.raises(ValueError, match="gpus"):
        Deployment.named(gpus=3)
    with pytest.raises(ValueError, match="GPU profile"):
        Deployment.named(gpu="TPU")
    no_drafter = Deployment.named(drafter=None)
    assert choose(no_drafter, 1000, 0.9, methods=("speccompact", "hermes")).method == "hermes"
    with pytest.raises(ValueError, match="needs a drafter"):
        choose(no_drafter, 1000, 0.9, methods=("speccompact",))


def test_standalone_is_never_given_to_the_lora_drafter():
    dep = Deployment.named(target="qwen3-8b", speculative="standalone")
    assert dep.target_spec.algorithm == "STANDALONE" and dep.drafter_spec is None
    assert Deployment.named(speculative="ngram").drafter_spec.algorithm == "NGRAM"


def test_auto_does_not_import_the_emulator():
    code = ("import sys, sgl_speccompact.methods.auto; "
            "bad = [m for m in sys.modules if m.startswith('sgl_speccompact.emulator')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", ["sgl_speccompact.core.costmodel", "sgl_speccompact.core.specdecode",
                                  "sgl_speccompact.methods.auto", "sgl_speccompact.methods.autopick",
                                  "bench.harness.latency", "bench.harness.latency_cases"])
def test_docstring_examples_of_the_cost_model_modules(name):
    import doctest
    import importlib

    failed, attempted = doctest.testmod(importlib.import_module(name))
    assert failed == 0 and attempted > 0


def test_what_still_holds_makes_speccompact_cheaper_and_ngram_copy_faster():
    from sgl_speccompact.methods.auto import Deployment, choose, held_share

    dep = Deployment.named(target="qwen3-32b", gpus=2, speculative="eagle3", equal_hardware=False)
    fresh, mostly = choose(dep, 40000, 0.7), choose(dep, 40000, 0.7, held=0.9)
    assert mostly.predicted_s["speccompact"] < fresh.predicted_s["speccompact"]
    assert mostly.predicted_s["target_self"] == fresh.predicted_s["target_self"]  # EAGLE3 copies nothing
    ngram = Deployment.named(target="qwen3-8b", gpus=2, speculative="ngram")
    assert choose(ngram, 40000, 0.7, held=0.9).predicted_s["target_self"] < \
        choose(ngram, 40000, 0.7).predicted_s["target_self"]
    assert "held share 0.90" in mostly.reason
    assert held_share("## Goal\n- a\n- c", "## Goal\n- a\n- b") == 0.5


def test_copied_and_fresh_tokens_add_their_times_so_the_copy_speed_is_the_harmonic_mix():
    from sgl_speccompact.core.specdecode import DEFAULTS, NGRAM_COPY_TAU, copy_tau

    fresh = DEFAULTS["NGRAM"]["tau"]
    for share in (0.0, 0.3, 0.6, 0.9, 1.0):
        tokens = 1000.0
        steps = share * tokens / NGRAM_COPY_TAU + (1 - share) * tokens / fresh  # each token's share of a step
        assert tokens / copy_tau(share) == pytest.approx(steps)
    assert copy_tau(0.6) == pytest.approx(2.687, abs=1e-3)  # a linear mix would say 3.12
    assert copy_tau(None) == copy_tau(0.0) == fresh  # nothing to copy: NGRAM's plain speed


def test_on_an_ngram_target_auto_prices_target_self_at_the_harmonic_copy_speed():
    from dataclasses import replace

    from sgl_speccompact.core.specdecode import copy_tau
    from sgl_speccompact.methods.auto import Deployment, choose, predict

    ngram = Deployment.named(target="qwen3-8b", gpus=2, speculative="ngram")
    at = replace(ngram, target_spec=replace(ngram.target_spec, tau=copy_tau(0.6)))
    assert predict("target_self", ngram, 30000, 0.7, held=0.6) == pytest.approx(predict("target_self", at, 30000, 0.7))
    # with a share of 0.2 held the copied tokens save Target-self less than the carried lines save
    # Target-delta (the linear mix, 2.24 tokens a step instead of 2.07, picked Target-self here)
    assert choose(ngram, 30000, 0.7, held=0.2).method == "target_delta"
    assert choose(ngram, 30000, 0.7).method == "target_self"  # no previous summary: nothing held, nothing copied
