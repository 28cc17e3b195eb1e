"""One method resolver: ``auto`` picks only among the methods that accept the request."""

import doctest
from dataclasses import replace
import itertools

import pytest

from sgl_speccompact.backends.contract import BackendDefaults
from sgl_speccompact.config import CompactConfig
from sgl_speccompact.methods import resolve
from sgl_speccompact.methods.auto import Deployment
from sgl_speccompact.methods.autopick import deployment_for
from sgl_speccompact.methods.pipeline import REGISTRY, refusal
from sgl_speccompact.methods.registry import METHODS, run_method
from sgl_speccompact.methods.request import MethodRequest, Offer
from sgl_speccompact.methods.resolve import accepting, resolve_method, served_picker
from sgl_speccompact.schema import OPENCLAW_SLOTS

from tests.support.scripted import ScriptedBackend


def test_doctests():
    failed, attempted = doctest.testmod(resolve)
    assert failed == 0 and attempted > 0


def history(tokens: int) -> list[dict]:
    return [{"role": "user", "content": "x " * (2 * tokens)}]  # 4 characters a token, as auto estimates


DEPLOYMENTS = [Deployment.named(target=t, gpus=g, speculative=s, equal_hardware=e)
               for t, g, s, e in itertools.product(("qwen3-8b", "qwen3-32b"), (1, 2), (None, "eagle3"), (True, False))]


@pytest.mark.parametrize("custom_schema, has_drafter", list(itertools.product((False, True), (False, True))))
def test_auto_never_picks_a_method_that_refuses_the_request(custom_schema, has_drafter):
    picked = set()
    for dep, tokens, p in itertools.product(DEPLOYMENTS, (1_000, 16_000, 64_000), (0.5, 0.9)):
        picker = resolve.as_picker(dep, has_drafter)
        picker.acceptance.observe(picker.pair, p)
        request = MethodRequest(history(tokens), schema=OPENCLAW_SLOTS if custom_schema else None)
        name, choice = resolve_method("auto", request, Offer(CompactConfig(), has_drafter=has_drafter, offered=METHODS), picker)
        assert refusal(REGISTRY[name], has_drafter=has_drafter, schema_given=custom_schema) is None
        assert choice["method"] == name
        picked.add(name)
    if custom_schema:
        assert "hermes" not in picked
    if not has_drafter:
        assert "speccompact" not in picked


def test_run_method_auto_with_a_custom_schema_runs_what_it_picked():
    # hermes predicted fastest here (a long history, no drafter, one-shot methods only faster) must not be run
    dep = replace(Deployment.named(target="qwen3-8b", drafter=None, gpus=1), hermes_tokens=10)
    target = ScriptedBackend(complete=lambda text, params: "## Goal\n- a\n")
    res = run_method("auto", MethodRequest([{"role": "user", "content": "hi"}], schema=OPENCLAW_SLOTS[:1]),
                     target=target, deployment=dep)
    assert res.stats.auto["method"] != "hermes" and res.method == res.stats.auto["method"]
    unconstrained = resolve_method("auto", MethodRequest([{"role": "user", "content": "hi"}]), Offer(CompactConfig(), offered=METHODS), dep)
    assert unconstrained[0] == "hermes"  # without the schema it would have picked hermes


def test_a_context_too_small_for_a_methods_output_leaves_it_out():
    offer = Offer(CompactConfig(target_context_tokens=6_000), has_drafter=True, offered=METHODS)
    assert "hermes" not in accepting(MethodRequest([]), offer) and "speccompact" in accepting(MethodRequest([]), offer)


def test_nothing_accepts_is_a_typed_error():
    from sgl_speccompact.errors import ConfigError

    with pytest.raises(ConfigError, match="auto has no method"):
        resolve_method("auto", MethodRequest([], schema=OPENCLAW_SLOTS), Offer(CompactConfig(), offered=("hermes", "speccompact")))
    assert resolve_method("hermes", MethodRequest([], schema=OPENCLAW_SLOTS), Offer(CompactConfig())) == ("hermes", None)  # explicit


class Served:
    def __init__(self, model):
        self.model_info = {"model_path": model}


def test_auto_predicts_for_the_model_the_server_reports():
    picker = served_picker(Served("Qwen/Qwen3-32B"), Served("Qwen/Qwen3-0.6B"), gpus=2, drafter_shares_gpu=False)
    assert picker.pair == "Qwen/Qwen3-32B|Qwen/Qwen3-0.6B" and "32b" in picker.deployment.target.name.lower()
    assert served_picker(BackendDefaults(), None).pair == "Qwen/Qwen3-8B|none"  # a server that does not say: the default
    want = deployment_for("Qwen/Qwen3-32B", "Qwen/Qwen3-0.6B", gpus=2, drafter_shares_gpu=False)
    assert picker.predict(16_000, METHODS) == {**want.predict(16_000, METHODS)}


def test_the_cli_predicts_for_the_served_model_unless_told():
    import argparse

    from sgl_speccompact.cli import auto_picker

    args = argparse.Namespace(gpus=1, gpu=None, target_model=None, drafter_model=None)
    assert auto_picker(args, Served("Qwen/Qwen3-32B"), None).pair == "Qwen/Qwen3-32B|none"
    args.target_model = "Qwen/Qwen3-8B"
    assert auto_picker(args, Served("Qwen/Qwen3-32B"), None).pair == "Qwen/Qwen3-8B|none"


def test_run_method_auto_without_a_deployment_predicts_for_the_served_model():
    target = ScriptedBackend(complete=lambda text, params: "## Goal\n- a\n")
    target.model_info = {"model_path": "Qwen/Qwen3-32B"}
    res = run_method("auto", MethodRequest([{"role": "user", "content": "hi"}], schema=OPENCLAW_SLOTS[:1]), target=target)
    assert res.stats.auto["pair"] == "Qwen/Qwen3-32B|none"  # not the Qwen3-8B default
    assert res.stats.auto["deployment"]["target"] == "Qwen/Qwen3-32B"
