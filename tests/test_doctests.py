"""The worked examples in the modules' docstrings run."""

import doctest
import importlib

import pytest

MODULES = ["__init__", "errors", "config", "schema", "judge", "lines", "sections", "prompts", "judge_prompts", "history", "result",
           "endpoint", "endpoint_http", "plain_select", "baselines", "assembly", "pipeline", "entries", "source_judge", "formats", "formats_convert", "launch", "servers", "testing.policy", "testing.workload",
           "hermes_prompt", "layout", "chat_render",
           "train.data", "train.incremental", "train.sections",
           "evaluation.identifiers", "evaluation.recall", "evaluation.probes", "evaluation.adequacy",
           "evaluation.continuation", "evaluation.sjc", "evaluation.frontier", "evaluation.runner",
           "testing.evaluator"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module("sgl_speccompact" if name == "__init__" else f"sgl_speccompact.{name}")
    failed, attempted = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert failed == 0
    if name in ("judge", "lines", "history", "prompts"):
        assert attempted > 0
