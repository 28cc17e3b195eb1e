"""Simulator helpers: a simulation of the emulated servers, and a spy on the bodies it answers."""

from __future__ import annotations

from sgl_speccompact.emulator import ControlledAcceptancePolicy
from sgl_speccompact.emulator.cost import DEPLOYMENTS
from bench.sim.simulator import build_simulation
from sgl_speccompact.emulator.cost import Scheduling
from sgl_speccompact.emulator import CostModel

COSTS = {"target": CostModel.for_model("qwen3-8b"), "drafter": CostModel.for_model("qwen3-0.6b")}


def sent_bodies(sim, sent):
    """Record every ``/generate`` body ``sim`` answers in ``sent``, as ``(server, body)``."""
    real = sim.call

    def spy(server, method, path, body, url, **kw):
        if path == "/generate":
            sent.append((server, body))
        return real(server, method, path, body, url, **kw)

    sim.call = spy


def make_sim(tok, deployment="two-gpu", scheduling=Scheduling(), seed=0, target_policy=None, **kw):
    policies = {"target": target_policy or ControlledAcceptancePolicy(seed=seed),
                "drafter": ControlledAcceptancePolicy(seed=seed + 1)}
    return build_simulation(tok, policies, COSTS, DEPLOYMENTS[deployment], scheduling, **kw)


