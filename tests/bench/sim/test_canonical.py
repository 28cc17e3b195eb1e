"""The simulator's order of requests issued at one instant: the short keys of ``order_keys`` compare,
pair by pair, exactly as the canonical JSON bodies do, for single prompts and batches alike."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.sim.canonical import canonical, order_keys

PREFIX = st.lists(st.integers(-3, 300), max_size=30)  # the history all prompts share, at most
TAIL = st.lists(st.integers(-3, 300), min_size=0, max_size=6)


def cmp(a, b) -> int:
    return (a > b) - (a < b)


@st.composite
def groups(draw):
    """Bodies of one (server, path) at one instant: flat or batched ids over a shared history,
    sometimes a field that differs before ``input_ids``, sometimes an unplain id or an empty prompt."""
    shared = draw(PREFIX)
    batched = draw(st.booleans())

    def prompt():
        ids = shared[:draw(st.integers(0, len(shared)))] + draw(TAIL)
        return ids or [7]

    bodies = []
    for _ in range(draw(st.integers(2, 5))):
        ids = [prompt() for _ in range(draw(st.integers(1, 3)))] if batched else prompt()
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": draw(st.sampled_from([1, 64]))}}
        if draw(st.integers(0, 9)) == 0:
            body["bootstrap_room"] = draw(st.integers(0, 2))  # sorts before input_ids
        if draw(st.integers(0, 14)) == 0:
            (ids[0] if batched else ids).append(True)  # not a plain int: the whole bodies are the keys
        if batched and draw(st.integers(0, 14)) == 0:
            ids.append([])  # an empty prompt: no id can be dropped
        bodies.append(body)
    if draw(st.booleans()):
        bodies.append(dict(bodies[0]))  # identical bodies are answered together: equal keys
    return bodies


@settings(max_examples=400, deadline=None)
@given(groups())
def test_keys_order_and_equal_bodies_as_their_canonical_json_does(bodies):
    keys = order_keys(bodies)
    texts = [canonical(b) for b in bodies]
    for i in range(len(bodies)):
        for j in range(len(bodies)):
            assert cmp(keys[i], keys[j]) == cmp(texts[i], texts[j]), (bodies[i], bodies[j], keys[i], keys[j])


def test_a_batch_over_one_history_is_keyed_without_the_history():
    history = list(range(5000))
    bodies = [{"input_ids": [history + [1], history + [2, 3]]}, {"input_ids": [history + [4]]}]
    keys = order_keys(bodies)
    assert max(map(len, keys)) < 60, keys
    assert cmp(*keys) == cmp(*map(canonical, bodies))
