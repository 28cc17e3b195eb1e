"""The worked examples in the pure modules' docstrings run."""

import doctest
import importlib

import pytest

PURE = ["errors", "config", "schema", "judge", "lines", "prompts", "history", "result", "endpoint"]


@pytest.mark.parametrize("name", PURE)
def test_docstring_examples(name):
    mod = importlib.import_module(f"sgl_speccompact.{name}")
    failed, attempted = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert failed == 0
    if name in ("judge", "lines", "history", "prompts"):
        assert attempted > 0
