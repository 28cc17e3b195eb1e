"""``ran_as``: a result says when the method asked for ran as another one (Target-delta with nothing to carry)."""

import pytest

from tests.programs.test_delta import PREVIOUS, run


def test_target_delta_without_a_previous_summary_says_it_ran_as_target_self():
    res, _ = run(previous=None)
    assert res.method == "target_delta" and res.ran_as == "target_self"
    assert res.to_json_dict()["ran_as"] == "target_self"  # what the service answers


@pytest.mark.parametrize("method,previous", [("target_delta", PREVIOUS), ("target_self", None),
                                             ("target_self", PREVIOUS)])
def test_a_method_that_ran_as_itself_says_nothing(method, previous):
    res, _ = run(previous=previous, method=method)
    assert res.method == method and res.ran_as is None and res.to_json_dict()["ran_as"] is None
