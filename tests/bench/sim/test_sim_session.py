"""The agent session in front of a compaction on the one-clock simulator (SIMULATED clock).

The session (every assistant turn as one chat completion) runs in a run of its own; the
compaction runs on the kept radix cache.  Token counts are compared with the HTTP
emulator's radix tree for the same replay; no assertion depends on real or virtual time
values.
"""

from __future__ import annotations

import os

import pytest

from sgl_speccompact.methods.request import AgentLayout, MethodRequest
from sgl_speccompact.backends.layout import first_divergence
from sgl_speccompact.core.prompts import target_slot_request
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.schema import OPENCLAW_SLOTS
from sgl_speccompact.emulator import ControlledAcceptancePolicy, CostModel, load_tokenizer
from sgl_speccompact.emulator.cost import DEPLOYMENTS
from bench.sim.session import http_post, replay_session, session_bodies
from bench.sim.simulator import build_simulation
from bench.sim.timeline import check, critical_path

from tests.support.programs import MESSAGES
MESSAGES = MESSAGES + [
    {"role": "assistant", "content": "Running it.", "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "python hello.py"}'}}]},
    {"role": "tool", "tool_call_id": "c2", "name": "bash", "content": "Hello, World!"},
    {"role": "assistant", "content": "It prints Hello, World! as asked."},
    {"role": "user", "content": "Now add a --name flag."},
]
COSTS = {"target": CostModel.for_model("qwen3-8b"), "drafter": CostModel.for_model("qwen3-0.6b")}


def make_sim(tok, deployment="two-gpu"):
    policies = {"target": ControlledAcceptancePolicy(seed=0), "drafter": ControlledAcceptancePolicy(seed=1)}
    return build_simulation(tok, policies, COSTS, DEPLOYMENTS[deployment])


def session_then(sim, method, layout, tok, keep_cache=True, **extra):
    """The session in a run of its own, then the compaction; ``(session, result, report)``."""
    target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
    session, _ = sim.run(lambda: replay_session(lambda path, body: target._request("POST", path, body), MESSAGES))
    request = MethodRequest(MESSAGES, layout=AgentLayout(layout, chat_template=tok if layout == "agent" else None))
    result, report = sim.run(lambda: run_method(method, request, target=target, drafter=drafter, **extra),
                             keep_cache=keep_cache)
    return session, result, report


def first_target(report):
    return next(r for r in report["requests"] if r.server == "target" and r.path == "/generate")


def target_counts(result) -> dict:
    return {kind: (c.requests, c.prompt_tokens, c.cached_tokens)
            for kind, c in sorted(result.stats.requests["target"].items())}


@pytest.mark.parametrize("layout", ["agent", "classic"])
def test_cached_tokens_equal_the_emulators_radix_tree_for_the_same_replay(emulator_tokenizer_path,
                                                                          make_emulated_server, layout):
    assert len(session_bodies(MESSAGES)) == 3
    # prompts as text on both sides: with ids each branch's /tokenize round trip spreads the HTTP
    # emulator's arrivals in real time, and what one branch finds cached then depends on thread timing
    text = {"config": {"send_token_ids": False}}
    session, result, report = session_then(make_sim(emulator_tokenizer_path), "target_self", layout,
                                           emulator_tokenizer_path, **text)
    srv = make_emulated_server(policy=ControlledAcceptancePolicy(seed=0), model_path=COSTS["target"].model.name)
    http_session = replay_session(http_post(srv.url, timeout=60), MESSAGES)
    agent = AgentLayout(layout, chat_template=emulator_tokenizer_path if layout == "agent" else None)
    http_result = run_method("target_self", MethodRequest(MESSAGES, layout=agent), target=srv.url, **text)
    assert session == http_session and session["cached_tokens"] > 0  # later turns reuse earlier ones
    sim_counts, http_counts = target_counts(result), target_counts(http_result)
    assert sim_counts.keys() == http_counts.keys() and sim_counts["prefill"] == http_counts["prefill"]
    # the slot branches' requests race on the HTTP emulator: a branch that arrives after another has
    # been inserted also finds the head the slot requests share (a few tokens); one that arrives in
    # the same batch does not.  The simulator's one clock orders them one way; any order is a bound.
    # characters bound tokens; 16 more for the user-turn header that opens every branch's request
    shared = len(os.path.commonprefix([target_slot_request(s) for s in OPENCLAW_SLOTS])) + 16
    for kind, (n, prompt, cached) in sim_counts.items():
        http_n, http_prompt, http_cached = http_counts[kind]
        assert (n, prompt) == (http_n, http_prompt), kind
        assert abs(cached - http_cached) <= (n - 1) * shared, (kind, cached, http_cached)
    assert result.stats.agent_cached_tokens == http_result.stats.agent_cached_tokens
    sim_log = [r for r in report["requests"] if r.server == "target" and r.path == "/generate"]
    assert sum(r.cached_tokens for r in sim_log) == sum(c[2] for c in sim_counts.values())
    assert first_target(report).cached_tokens == http_result.stats.requests["target"]["prefill"].cached_tokens


@pytest.mark.parametrize("method", ["speccompact", "target_self"])
def test_agent_layout_first_request_hits_the_session_cache_classic_does_not(emulator_tokenizer_path, method):
    tok = emulator_tokenizer_path
    reusable = first_divergence(load_tokenizer(tok), MESSAGES)["matched_tokens"]  # the agent's last request
    _, agent, agent_report = session_then(make_sim(tok), method, "agent", tok)
    _, classic, classic_report = session_then(make_sim(tok), method, "classic", tok)
    first_agent, first_classic = first_target(agent_report), first_target(classic_report)
    assert first_agent.kind == first_classic.kind == "prefill"
    assert first_agent.cached_tokens >= reusable > 0
    assert agent.stats.agent_cached_tokens == min(first_agent.cached_tokens, agent.stats.agent_tokens)
    assert first_classic.cached_tokens < 0.05 * first_classic.prompt_tokens  # our own system turn: no reuse
    # the hit comes from the session's cache: without keeping it, the same compaction finds nothing
    _, _, cold = session_then(make_sim(tok), method, "agent", tok, keep_cache=False)
    assert first_target(cold).cached_tokens == 0


@pytest.mark.parametrize("deployment", ["two-gpu", "one-gpu"])
def test_timeline_invariants_hold_with_the_session_in_front(emulator_tokenizer_path, deployment):
    session, result, report = session_then(make_sim(emulator_tokenizer_path, deployment), "speccompact", "agent",
                                           emulator_tokenizer_path)
    assert session["turns"] == len(session_bodies(MESSAGES)) and result.summary
    requests, passes, end = report["requests"], report["passes"], report["e2e_s"]
    assert all(r.path != "/v1/chat/completions" for r in requests)  # the session is not in the compaction's log
    assert min(r.issued for r in requests) == 0.0 and min(p.start for p in passes) >= 0.0
    chain = critical_path(requests, end)
    assert chain[0].issued == 0.0 and chain[-1].finished == end
    assert all(a.finished == b.issued for a, b in zip(chain, chain[1:]))
    for busy in [*report["busy_s"].values(), *report["gpu_busy_s"].values()]:
        assert 0 < busy <= end
    sim = make_sim(emulator_tokenizer_path, deployment)
    check(requests, passes, end, list(sim.servers), sim.gpus)  # raises InvariantViolation on a broken log
