"""compact() over HTTP: SGLang's client path against two emulator instances,
on real trajectories from ../shared/data/trajectories."""

import copy

import pytest
import requests
from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint
from tests.support.summary_checks import assert_summary_clean

from sgl_speccompact.methods.speccompact import compact
from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.core.ledger import HEADING
from sgl_speccompact.result import LineOrigin
from sgl_speccompact.schema import OPENCLAW_SLOTS
from tests.support.methods import drafter_policy, load_trajectory, target_policy
from tests.support.methods import FILES


@pytest.fixture
def servers(make_emulated_server):
    target = make_emulated_server(target_policy(), model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(drafter_policy(), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    return target, drafter


def server_requests(srv) -> int:
    return requests.get(srv.url + "/emulator/stats", timeout=10).json()["total"]["requests"]


@pytest.mark.parametrize("name", sorted(FILES))
def test_speccompact_over_http_one_request_judge(servers, name):
    target_srv, drafter_srv = servers
    messages = load_trajectory(name)
    before = copy.deepcopy(messages)
    target = SpecCompactEndpoint(target_srv.url)
    drafter = SpecCompactEndpoint(drafter_srv.url)
    res = compact(messages, target=target, drafter=drafter)
    assert messages == before
    assert_summary_clean(res)

    heads = [line for line in res.summary.splitlines() if line.startswith("## ")]
    assert heads == [f"## {s.title}" for s in OPENCLAW_SLOTS] + [HEADING]  # the exact ledger last
    nxt = {s.name: s for s in res.slots}["next_steps"]
    assert [l.text for l in nxt.lines] == ["1. Run the program", "2. Check the output matches", "3. Report back"]
    assert nxt.lines[1].origin is LineOrigin.REPAIRED and "INVENTED" in nxt.lines[1].rejected_draft
    assert "INVENTED" not in res.summary and "never decoded" not in res.summary
    # the invented path has no source: refused by the evidence check, no judge request sent for it
    assert (nxt.lines[1].refused, nxt.lines[1].unsourced, nxt.lines[1].rejected_verdict) == (
        "evidence", ["/etc/INVENTED.conf"], None)
    assert res.stats.evidence_refused == 1

    st = res.stats
    verify, repair, prefill = (st.requests["target"][k] for k in ("verify", "repair", "prefill"))
    assert verify.requests == st.proposed_lines  # one request per judgement
    assert prefill.requests == 1 and repair.requests == 1
    # every request the client counted reached the server (and no other)
    assert server_requests(target_srv) == st.totals("target").requests
    assert server_requests(drafter_srv) == st.totals("drafter").requests
    # layout promise: after the one prefill, every target request reuses the whole shared prefix
    shared = prefill.prompt_tokens
    later = verify.requests + repair.requests
    assert prefill.cached_tokens == 0
    assert verify.cached_tokens + repair.cached_tokens >= later * (shared - 1)
    promised = later * (shared - 1) / st.totals("target").prompt_tokens
    assert st.cached_ratio("target") >= promised > 0.5
    # drafter: the conversation precedes the slot request, so slots share it too
    assert st.cached_ratio("drafter") > 0.5


def test_plain_runtime_endpoint_gives_the_same_summary_with_two_requests_per_judgement(servers):
    target_srv, drafter_srv = servers
    messages = load_trajectory("openai")
    one = compact(messages, target=SpecCompactEndpoint(target_srv.url),
                  drafter=SpecCompactEndpoint(drafter_srv.url))
    target_srv.flush_cache()
    drafter_srv.flush_cache()
    plain_target = RuntimeEndpoint(target_srv.url, chat_template_name="qwen")
    two = compact(messages, target=plain_target, drafter=SpecCompactEndpoint(drafter_srv.url))
    # plain RuntimeEndpoint: no thinking prefix and a generic template, so compare decisions
    assert [[l.origin for l in s.lines] for s in two.slots] == [[l.origin for l in s.lines] for s in one.slots]
    assert two.stats.requests["target"]["verify"].requests == 2 * two.stats.proposed_lines
    assert "INVENTED" not in two.summary
    assert_summary_clean(one), assert_summary_clean(two)


def test_lora_drafter_requests_share_one_namespace(servers):
    target_srv, drafter_srv = servers
    res = compact(load_trajectory("openai"), target=SpecCompactEndpoint(target_srv.url),
                  drafter=SpecCompactEndpoint(drafter_srv.url, lora_path="drafter"))
    per = requests.get(drafter_srv.url + "/emulator/stats", timeout=10).json()["per_lora"]
    assert set(per) == {"drafter"}
    assert res.stats.cached_ratio("drafter") > 0.5
    assert_summary_clean(res)


def test_lora_drafter_on_a_server_without_lora_is_a_typed_error(make_emulated_server):
    """sglang answers a lora_path on a server started without --enable-lora with a 400: a BackendError."""
    from sgl_speccompact.errors import BackendError

    target_srv = make_emulated_server(target_policy(), model_path="Qwen/Qwen3-8B")
    drafter_srv = make_emulated_server(drafter_policy(), model_path="Qwen/Qwen3-0.6B")  # no adapters
    with pytest.raises(BackendError, match="LoRA is not enabled"):
        compact(load_trajectory("openai"), target=SpecCompactEndpoint(target_srv.url),
                drafter=SpecCompactEndpoint(drafter_srv.url, lora_path="drafter"))


def test_history_over_the_context_window_is_a_typed_413_error(make_emulated_server):
    from sgl_speccompact.errors import HistoryTooLongError, http_status
    target_srv = make_emulated_server(target_policy(), model_path="Qwen/Qwen3-8B", context_length=512)
    drafter_srv = make_emulated_server(drafter_policy(), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    messages = load_trajectory("openai")
    with pytest.raises(HistoryTooLongError) as err:
        compact(messages, target=SpecCompactEndpoint(target_srv.url), drafter=SpecCompactEndpoint(drafter_srv.url))
    assert http_status(err.value) == 413


def test_controlled_servers_write_no_label_lines(make_emulated_server):
    """The emulator's benchmark policy on both servers, every judgement and repair path: the summary
    holds echoed lines, never a bare label word (repair prompts quote the rubric; they are not judgements)."""
    from sgl_speccompact.emulator import ControlledAcceptancePolicy

    target_srv = make_emulated_server(ControlledAcceptancePolicy(p_accept=0.5, seed=1), model_path="Qwen/Qwen3-8B")
    drafter_srv = make_emulated_server(ControlledAcceptancePolicy(p_accept=0.5, seed=2), model_path="Qwen/Qwen3-0.6B",
                                       lora_paths=["drafter"])
    for cfg in ({}, {"short_judge_suffix": False}, {"judge": "decisions"}):
        res = compact(load_trajectory("mini_swe"), target=SpecCompactEndpoint(target_srv.url),
                      drafter=SpecCompactEndpoint(drafter_srv.url, lora_path="drafter"), config=cfg)
        assert res.stats.repaired_lines > 0, cfg  # rejections happened
        lines = assert_summary_clean(res)
        assert any(ln.startswith("- ") for ln in lines)
