"""sglang-router (PyPI ``sglang-router==0.3.2``) in front of two emulator workers.

An agent session replayed through the router's ``/v1/chat/completions``,
then an agent-layout compaction through the same router: every agent turn
and every request of the compaction lands on one worker, and the
compaction's cache figures equal those of the same session and compaction
on a single server.
"""

from pathlib import Path

import pytest
import requests
from tests.support.procs import READY_S, poll_until

pytestmark = pytest.mark.e2e  # sglang-router subprocesses in front of emulators
pytest.importorskip("sglang_router", reason="sglang-router is not installed (pip install -e '.[e2e]')")

from sgl_speccompact.methods.request import AgentLayout, MethodRequest  # noqa: E402 - after the skip for sglang-router
from sgl_speccompact.backends.endpoint import SpecCompactEndpoint  # noqa: E402 - after the skip for sglang-router
from sgl_speccompact.backends.router import worker_urls  # noqa: E402 - after the skip for sglang-router
from sgl_speccompact.launch.router_process import RouterSpec, start_router  # noqa: E402 - after the skip for sglang-router
from sgl_speccompact.launch.servers import stop_servers  # noqa: E402 - after the skip for sglang-router
from sgl_speccompact.emulator import ControlledAcceptancePolicy, ScriptedPolicy, free_port  # noqa: E402 - after the skip for sglang-router

TRAJECTORY = (Path(__file__).resolve().parents[3] / "shared" / "data" / "trajectories"
              / "princeton-nlp__SWE-agent__trajectories__demonstrations__function_calling_simple.traj")


def messages():
    if not TRAJECTORY.exists():
        pytest.skip(f"shared trajectories absent: {TRAJECTORY}")
    from sgl_speccompact.history.formats import load_history

    return load_history(TRAJECTORY)


class Replay(ScriptedPolicy):
    """The agent's recorded replies, in order (what the agent's model generated), then the benchmark policy."""

    def __init__(self, replies):
        super().__init__()
        self.replies = list(replies)
        self.after = ControlledAcceptancePolicy()

    def generate(self, prompt, prompt_ids, params):
        return self.replies.pop(0) if self.replies else self.after.generate(prompt, prompt_ids, params)

    def next_token_logprobs(self, prompt, prompt_ids, params):
        return self.after.next_token_logprobs(prompt, prompt_ids, params)


# The router registers a worker in a background job that probes it; a probe that fails (a slow
# machine) is retried after --worker-startup-check-interval, 30 s by default: retry within a second.
# Its runtime health checks must not drop a worker that a loaded machine answers late.
ROUTER_ARGS = ("--worker-startup-check-interval", "1", "--health-check-timeout-secs", "60")


def metrics_args() -> tuple[str, ...]:
    """Its Prometheus exporter on a port of its own: on the default (29000) a second router on the
    machine, or one still stopping, makes it exit with "Address already in use"."""
    return ("--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()))


@pytest.fixture
def router(make_emulated_server, tmp_path):
    """``start(policy) -> (router url, [worker servers])``; stopped at teardown."""
    procs = []

    def start(policy: str):
        workers = [make_emulated_server(policy=ScriptedPolicy()) for _ in range(2)]
        spec = RouterSpec(tuple(w.url for w in workers), port=free_port(), policy=policy,
                          extra_args=ROUTER_ARGS + metrics_args())
        procs.append(start_router(spec, log_path=tmp_path / "router.log"))

        def ready() -> bool:
            assert procs[-1].poll() is None, (tmp_path / "router.log").read_text()[-2000:]
            try:
                return requests.get(spec.url + "/health", timeout=10).status_code == 200 and \
                    len(worker_urls(spec.url, requests) or []) == 2
            except requests.RequestException:
                return False

        poll_until(ready, "the router and both its workers", every_s=0.2)
        return spec.url, workers

    yield start
    stop_servers(procs, grace_s=5)


def session_then_compaction(url, msgs, set_policy, drafter_url, headers=None, routing_key=None):
    """Replay every assistant turn as one chat completion, then compact (agent layout) via ``url``."""
    from sgl_speccompact.methods.speccompact import compact

    turns = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    set_policy(Replay(msgs[i].get("content") or "" for i in turns))
    for i in turns:
        r = requests.post(url + "/v1/chat/completions", headers=headers or {},
                          json={"model": "agent", "messages": msgs[:i], "max_tokens": 4096}, timeout=READY_S)
        assert r.status_code == 200, r.text
    target = SpecCompactEndpoint(url).with_routing_key(routing_key)
    # text prompts: a router gets text anyway, and the runs compared below must arrive alike
    # (a /tokenize round trip per branch would spread the arrivals with thread timing)
    layout = AgentLayout("agent", chat_template=target.model_info["tokenizer_path"])
    return compact(MethodRequest(msgs, layout=layout), target=target, drafter=drafter_url,
                   config={"send_token_ids": False}), len(turns)


def requests_per_worker(workers):
    return [w.stats()["total"]["requests"] for w in workers]


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["cache_aware", "manual"])
def test_router_keeps_agent_and_compaction_on_one_worker(router, make_emulated_server, policy):
    msgs = messages()
    url, workers = router(policy)
    drafter = make_emulated_server(policy=ControlledAcceptancePolicy())  # its own server, as launched
    key = "session-1"
    headers = {"X-SMG-Routing-Key": key} if policy == "manual" else None

    def set_policy(p):
        for w in workers:
            w.set_policy(p)

    result, n_turns = session_then_compaction(url, msgs, set_policy, drafter.url, headers,
                                              key if policy == "manual" else None)
    counts = requests_per_worker(workers)
    holder = counts.index(max(counts))
    sent = n_turns + sum(c.requests for c in result.stats.requests["target"].values())
    assert counts[holder] == sent and sum(counts) == sent  # every agent turn and compaction request on one worker
    assert result.stats.agent_cached_tokens and result.stats.agent_cached_tokens > 0.9 * result.stats.agent_tokens

    single = make_emulated_server(policy=ScriptedPolicy())
    drafter.flush_cache()
    alone, _ = session_then_compaction(single.url, msgs, single.set_policy, drafter.url)
    assert result.stats.agent_cached_tokens == alone.stats.agent_cached_tokens
    assert result.stats.cached_ratio("target") == alone.stats.cached_ratio("target")
    assert result.stats.totals("target") == alone.stats.totals("target")


@pytest.mark.slow
def test_routing_key_pins_each_session_to_its_worker(router, make_emulated_server):
    msgs = messages()
    url, workers = router("manual")
    drafter = make_emulated_server(policy=ControlledAcceptancePolicy())
    seen = {}
    for key in ("session-a", "session-b", "session-c"):
        before = requests_per_worker(workers)

        def set_policy(p):
            for w in workers:
                w.set_policy(p)

        result, _ = session_then_compaction(url, msgs, set_policy, drafter.url, {"X-SMG-Routing-Key": key}, key)
        delta = [a - b for a, b in zip(requests_per_worker(workers), before)]
        assert sorted(delta)[0] == 0, f"{key} was split across workers: {delta}"  # all on one worker
        seen[key] = delta.index(max(delta))
        assert result.stats.agent_cached_tokens > 0
    r = requests.post(url + "/v1/chat/completions", headers={"X-SMG-Routing-Key": "session-a"},
                      json={"model": "agent", "messages": msgs[:2], "max_tokens": 8}, timeout=READY_S)
    assert r.status_code == 200
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # back on session-a's worker
