"""The worked examples in the modules' docstrings run."""

import doctest
import importlib

import pytest

MODULES = ["__init__", "errors", "config", "schema", "core.judge", "core.lines", "core.sections", "core.prompts", "core.judge_prompts", "history.messages", "result",
           "backends.endpoint", "backends.http", "backends.plain_select", "methods.baselines", "methods.assembly", "methods.pipeline", "core.entries", "methods.source_judge", "history.formats", "history.convert", "launch.cli", "launch.servers", "launch.router", "testing.emulator.policy", "testing.sim.workload",
           "core.hermes_prompt", "backends.layout", "backends.chat_render", "flags", "service.body", "launch.plan", "cli", "service.runtime",
           "service.app", "service.cancel", "service.stream", "launch.auto",
           "train.data", "train.incremental", "train.sections",
           "evaluation.identifiers", "evaluation.recall", "evaluation.probes", "evaluation.adequacy",
           "evaluation.continuation", "evaluation.sjc", "evaluation.frontier", "evaluation.runner",
           "testing.emulator.evaluator", "core.costmodel", "testing.harness.session"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module("sgl_speccompact" if name == "__init__" else f"sgl_speccompact.{name}")
    failed, attempted = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert failed == 0
    if name in ("core.judge", "core.lines", "history.messages", "core.prompts"):
        assert attempted > 0
