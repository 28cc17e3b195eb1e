"""The package's one token estimate and one tool-group cutter."""

import doctest

import pytest

from sgl_speccompact.history import estimate, tool_groups


@pytest.mark.parametrize("module", [estimate, tool_groups])
def test_doctests(module):
    failed, attempted = doctest.testmod(module)
    assert failed == 0 and attempted > 0
