"""Each judge against the real server: SmolLM2-135M-Instruct on sglang 0.5.23's CPU engine.

The program judge (with the configured labels and with yes/no) and the
decision route (``POST /v1/decisions``) judge the first judge-set lines
exactly as a compaction asks them (``bench/judge_bench.py``), once per test
session; the tests read what every judge must give with any model: one
verdict per line, its label mass a probability, one request per line, the
server's counts behind them, and the launcher's probe picking the judge
whose labels carry the mass.  What the judges score on this model is
reported on the CPU page, not asserted.
"""

from __future__ import annotations

import httpx
import pytest

from bench import judge_bench
from bench.evaluation.judge_set import history_of, load_judge_set, trajectory_dir
from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.config import CompactConfig
from sgl_speccompact.launch.templates import CHATML_TEMPLATE
from sgl_speccompact.methods.judge_probe import pick_judge, probe_judges
from tests.real_model.conftest import TIER
from tests.support.procs import unavailable

pytestmark = pytest.mark.real_model

CASES = 6  # the judge set's first lines (one history cut, supported and contradicted lines)


@pytest.fixture(scope="session")
def judged(smol_server) -> dict:
    if trajectory_dir() is None:
        unavailable(TIER, "the shared trajectories (shared/data/trajectories) are not beside the clone")
    client = httpx.Client(timeout=judge_bench.TIMEOUT_S)
    return judge_bench.run(smol_server, load_judge_set()[:CASES], client.get, client.post, history_of)


def test_every_judge_ran_on_the_real_server(judged):
    assert set(judged["judges"]) == set(judge_bench.JUDGES)
    assert judged["conditions"]["label"] == "MEASURED (CPU)"


@pytest.mark.parametrize("name", list(judge_bench.JUDGES))
def test_each_judge_gives_one_verdict_per_line_in_one_request(judged, name):
    j = judged["judges"][name]
    assert [r["id"] for r in j["rows"]] == [c.id for c in load_judge_set()[:CASES]]
    assert j["cost"]["requests"] == CASES  # one request per line, as the engine judges a drafted line
    for r in j["rows"]:
        assert 0.0 <= r["label_mass"] <= 1.0 + 1e-9 and 0.0 <= r["r"] <= 1.0
        assert r["reliable"] == (r["label_mass"] >= CompactConfig().min_label_mass)
        assert not r["accepted"] or r["reliable"]  # the gate: an unreliable verdict accepts nothing
    # the server counted what was sent: every prompt token it reports was a prompt token of these requests
    assert j["cost"]["server_prompt_tokens"] >= j["cost"]["prompt_tokens"] > 0
    assert 0 <= j["cost"]["server_cached_tokens"] <= j["cost"]["server_prompt_tokens"]


def test_the_decision_route_accepts_the_engines_requests_and_scores_yes_and_no(judged):
    rows = judged["judges"]["decisions"]["rows"]
    assert all(abs(r["p_pos"] + r["p_neg"] - r["label_mass"]) < 1e-6 for r in rows)


def test_the_probe_picks_the_judge_whose_labels_carry_the_mass(smol_server):
    target = SpecCompactEndpoint(smol_server, chat_template=CHATML_TEMPLATE, timeout_s=judge_bench.TIMEOUT_S)
    probe = probe_judges(target, CompactConfig())
    assert not probe.errors and set(probe.masses) == {"program", "decisions"}
    assert (probe.pick, probe.reason) == pick_judge(probe.masses, CompactConfig())
    floor = CompactConfig().min_label_mass
    if probe.masses["program"] < floor <= probe.masses["decisions"]:
        assert probe.pick == "decisions"
