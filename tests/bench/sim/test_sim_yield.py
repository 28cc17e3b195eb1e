"""The simulator's model of prepares yielding to the agent (the service's ``--prepare-yield-s``).

Timings are SIMULATED (the virtual clock); orderings and virtual instants only, no real time.
"""

from __future__ import annotations

import threading

import pytest

from sgl_speccompact.service.yielding import YIELD_POLL_S
from bench.sim.session_replay import Replay, ReplayHooks, agent_label

from tests.support.sim import make_sim

PROMPT = "<|im_start|>user\nSay something about the build.<|im_end|>\n<|im_start|>assistant\n"


def body(tokens: int, tag: str) -> dict:
    return {"text": PROMPT + tag, "sampling_params": {"max_new_tokens": tokens, "temperature": 0,
                                                       "ignore_eos": True}}


def race(sim, bound_s: float | None, agent_tokens: int = 400):
    """The agent's long turn and a background request issued at the same instant; the two records."""
    agent, background = sim.endpoint("target"), sim.endpoint("target")
    if bound_s is not None:
        background = background.yielding(bound_s)
    box = {}

    def both():
        worker = threading.Thread(target=lambda: box.setdefault("bg", background._generate(body(4, "bg"))))
        worker.start()
        agent._generate(body(agent_tokens, "agent"))
        worker.join()

    _, report = sim.run(both)
    gen = [r for r in report["requests"] if r.path == "/generate"]
    by_text = {r.seq: r for r in gen}
    agent_rec = max(gen, key=lambda r: r.completion_tokens)
    bg_rec = next(r for r in by_text.values() if r is not agent_rec)
    return agent_rec, bg_rec, [r for r in report["requests"] if r.kind == "yield"]


def test_without_yield_the_background_request_runs_beside_the_agent(emulator_tokenizer_path):
    agent, bg, held = race(make_sim(emulator_tokenizer_path), None)
    assert held == [] and bg.issued == agent.issued and bg.finished < agent.finished


def test_a_yielding_request_is_sent_once_the_agent_request_is_answered(emulator_tokenizer_path):
    agent, bg, held = race(make_sim(emulator_tokenizer_path), bound_s=1000.0)
    assert len(held) == 1 and held[0].issued == agent.issued
    assert bg.issued >= agent.finished  # held until the agent's request was answered
    assert bg.issued - agent.finished <= YIELD_POLL_S + 1e-9  # released at the next look (virtual clock)


def test_the_wait_is_bounded(emulator_tokenizer_path):
    agent, bg, held = race(make_sim(emulator_tokenizer_path), bound_s=0.1)
    assert agent.finished > agent.issued + 0.1  # the agent's turn outlasts the bound ...
    assert bg.issued == pytest.approx(held[0].issued + 0.1) and bg.finished < agent.finished  # ... it goes at it


def test_background_requests_do_not_hold_each_other(emulator_tokenizer_path):
    sim = make_sim(emulator_tokenizer_path)
    a, b = sim.endpoint("target").yielding(1000.0), sim.endpoint("target").yielding(1000.0)

    def both():
        worker = threading.Thread(target=lambda: a._generate(body(300, "a")))
        worker.start()
        b._generate(body(4, "b"))
        worker.join()

    _, report = sim.run(both)
    issued = [r.issued for r in report["requests"] if r.path == "/generate"]
    assert len(issued) == 2 and issued[0] == issued[1]
    assert not [r for r in report["requests"] if r.kind == "yield" and r.finished > r.issued]


def test_the_replay_sends_prepares_through_a_yielding_view_only_when_asked(emulator_tokenizer_path):
    sim = make_sim(emulator_tokenizer_path)
    asked = []

    def compact(method, messages, previous, **kw):
        asked.append(kw)

    for hooks in (ReplayHooks(), ReplayHooks(yield_s=2.0)):
        replay = Replay(sim, sim.endpoint("target"), compact, len, hooks)
        assert sim.labeler is agent_label
        from bench.sim import session_policy as sp

        step = sp.Step([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                        {"role": "user", "content": "z"}], 0, 2, 2, None)
        replay._prepare("target_self", step, [])
    assert asked == [{}, {"yield_s": 2.0}]
