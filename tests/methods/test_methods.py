"""``run_method``: dispatch, argument checks, flags shared by every method."""

import os

import pytest

from sgl_speccompact.core.ledger import strip_ledger
from sgl_speccompact.methods.request import MethodRequest
from sgl_speccompact.errors import ConfigError, UnknownMethodError
from sgl_speccompact.methods.registry import METHODS, run_method
from sgl_speccompact.schema import OPENCLAW_SLOTS, Slot

from tests.support.stream_replay import assert_stream_shows_the_result
from tests.support.scripted import ScriptedBackend
from tests.support.programs import MESSAGES, backends
from tests.support.methods import baseline_target, pair


def kinds(result, server="target"):
    return {k: c.requests for k, c in result.stats.requests.get(server, {}).items()}


def test_method_names():
    assert METHODS == ("speccompact", "hermes", "openclaw", "target_self", "target_delta")


def test_dispatches_every_method():
    target, drafter = pair()
    res = run_method("speccompact", MESSAGES, target=target, drafter=drafter)
    assert res.method == "speccompact" and kinds(res, "drafter")["draft"] >= 6
    assert kinds(res)["prefill"] == 1 and kinds(res)["verify"] >= 1
    expected = {"hermes": {"generate": 1}, "openclaw": {"generate": 1},
                "target_self": {"prefill": 1, "generate": len(OPENCLAW_SLOTS)}}
    for method, requests in expected.items():
        target = baseline_target()
        res = run_method(method, MESSAGES, target=target, drafter=ScriptedBackend())
        assert res.method == method and kinds(res) == requests, method
        assert "drafter" not in res.stats.requests and res.source_judge is None
    assert "Historical Task Snapshot" in baseline_target_prompt("hermes")
    assert "Historical Task Snapshot" not in baseline_target_prompt("openclaw")


def test_auto_runs_the_pick_for_the_deployment_given():
    from sgl_speccompact.methods.auto import Deployment
    from sgl_speccompact.methods.autopick import AcceptanceEstimate, deployment_for

    # default (one shared H200, prior 0.7): Target-self; the drafter on its own GPU at acceptance 0.95:
    # SpecCompact, and its observed acceptance (judge_bad rejects some lines) updates the caller's picker
    res = run_method("auto", MESSAGES, target=baseline_target(), drafter=ScriptedBackend())
    assert res.method == res.stats.auto["method"] == "target_self" and "H200" in res.stats.auto["cost_model"]
    picker = deployment_for("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", gpus=2, drafter_shares_gpu=False,
                            acceptance=AcceptanceEstimate(prior=0.95))
    target, drafter = pair()
    res = run_method("auto", MESSAGES, target=target, drafter=drafter, deployment=picker)
    assert res.method == "speccompact" and kinds(res, "drafter")["draft"] >= 1
    assert picker.acceptance.get(picker.pair) == pytest.approx(0.8 * 0.95 + 0.2 * res.stats.acceptance_rate)
    # no drafter: never SpecCompact, whatever the deployment says
    res = run_method("auto", MESSAGES, target=baseline_target(), deployment=Deployment.named(gpus=2))
    assert res.method != "speccompact" and "speccompact" not in res.stats.auto["predicted_s"]
    # an explicit method ignores the deployment and records no pick
    res = run_method("hermes", MESSAGES, target=baseline_target(), deployment=picker)
    assert res.method == "hermes" and res.stats.auto is None


def baseline_target_prompt(method):
    target = baseline_target()
    run_method(method, MESSAGES, target=target)
    return target.kinds("generate")[0]


def test_rejects_unknown_methods_and_missing_arguments():
    target, drafter = pair()
    with pytest.raises(UnknownMethodError):
        run_method("gpt_summarize", MESSAGES, target=target, drafter=drafter)
    with pytest.raises(ConfigError):
        run_method("speccompact", MESSAGES, target=target)
    schema = (Slot(name="goal", title="Goal", contract="The goal.", body_format="- goal"),)
    with pytest.raises(ConfigError):
        run_method("hermes", MethodRequest(MESSAGES, schema=schema), target=baseline_target())
    with pytest.raises(ConfigError):
        run_method("openclaw", MESSAGES, target=baseline_target(), config={"eta": 3})
    assert target.requests == [] and drafter.requests == []


def test_previous_summary_reaches_every_method():
    previous = "## Goal\n- PREVIOUS-SUMMARY-MARK"
    target, drafter = pair()
    run_method("speccompact", MESSAGES, target=target, drafter=drafter, previous_summary=previous)
    assert "PREVIOUS-SUMMARY-MARK" in target.kinds("prefill")[0]
    assert all("PREVIOUS-SUMMARY-MARK" in t for t in drafter.kinds("draft"))
    for method in ("hermes", "openclaw", "target_self"):
        target = baseline_target()
        run_method(method, MESSAGES, target=target, previous_summary=previous)
        sent = target.kinds("generate")
        assert sent and all("PREVIOUS-SUMMARY-MARK" in t for t in sent), method


def test_source_judge_flag_on_every_method():
    drop = lambda entry, section: 0.1 if "/workspace/hello.py" in entry else 0.9
    for method in METHODS:
        if method == "speccompact":
            target, drafter = pair(source_judge=drop)
        else:
            target, drafter = baseline_target(source_judge=drop), None
        res = run_method(method, MESSAGES, target=target, drafter=drafter, source_judge=True)
        report = res.source_judge
        assert report is not None and kinds(res)["judge"] == report["requests"] >= 1, method
        assert report["deleted"] == sum(not e["kept"] for e in report["entries"])
        assert "/workspace/hello.py" not in strip_ledger(res.summary), method  # deleted from the sections
        assert "`/workspace/hello.py`" in res.summary, method  # the exact ledger is never judged
        assert "## Goal" in res.summary


def test_schema_reaches_slot_methods():
    schema = (Slot(name="goal", title="Goal", contract="The goal.", body_format="- goal"),)
    target = baseline_target()
    res = run_method("target_self", MethodRequest(MESSAGES, schema=schema), target=target)
    assert [s.name for s in res.slots] == ["goal", "ledger"] and len(target.kinds("generate")) == 1
    target, drafter = backends()
    res = run_method("speccompact", MethodRequest(MESSAGES, schema=schema), target=target, drafter=drafter)
    assert [s.name for s in res.slots] == ["goal", "ledger"]  # the schema's slots, then the exact ledger


def test_progress_events_for_every_method():
    for method in METHODS:
        events = []
        target, drafter = pair() if method == "speccompact" else (baseline_target(), None)
        res = run_method(method, MethodRequest(MESSAGES, on_event=events.append), target=target, drafter=drafter)
        assert all(e["type"] in ("line", "slot_written", "retract", "slot_done") for e in events)
        written = sorted(e["slot"] for e in events if e["type"] == "slot_written")
        assert written == sorted(s.name for s in res.slots if s.name != "ledger"), method
        # the settled stream shows the result's content lines (blank lines are formatting), in every method
        assert_stream_shows_the_result(events, res.slots)
        if method in ("speccompact", "openclaw"):  # their Progress keeps a blank line between sub-sections
            assert any(not l.text.strip() for s in res.slots for l in s.lines), method


def test_targets_given_as_urls(make_emulated_server):
    from sgl_speccompact.emulator import ControlledAcceptancePolicy

    target = make_emulated_server(policy=ControlledAcceptancePolicy(seed=1), model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(policy=ControlledAcceptancePolicy(seed=2), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    for method in METHODS:
        res = run_method(method, MESSAGES * 3, target=target.url, drafter=drafter.url)
        assert res.method == method and res.summary.strip() and "judge" not in kinds(res), method
        res = run_method(method, MESSAGES * 3, target=target.url, drafter=drafter.url, source_judge=True)
        assert res.source_judge["entries"], method
        # SpecCompactEndpoint: the shared sources prefilled once, then one batched judge request
        assert kinds(res)["judge"] == 1 + (len(res.source_judge["entries"]) > 1), method
        assert all(e["text"] in res.summary for e in res.source_judge["entries"] if e["kept"]), method
        left = [line.text for s in res.slots for line in s.lines if line.text.strip()]
        assert all(text in res.summary for text in left), method  # slots lost the deleted lines too
    assert drafter.stats()["total"]["requests"] > 0


@pytest.mark.sglang  # an optional extra, run only when asked for: -m sglang (README, "Run the tests")
def test_every_method_with_source_judge_on_real_servers():
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    if not (os.environ.get("SGLANG_TARGET_URL") and os.environ.get("SGLANG_DRAFTER_URL")):
        pytest.fail("-m sglang needs real SGLang servers: set SGLANG_TARGET_URL and SGLANG_DRAFTER_URL",
                    pytrace=False)
    target = SpecCompactEndpoint(os.environ["SGLANG_TARGET_URL"])
    drafter = SpecCompactEndpoint(os.environ["SGLANG_DRAFTER_URL"],
                                  lora_path=os.environ.get("SGLANG_DRAFTER_LORA") or None)
    for method in METHODS:
        res = run_method(method, MESSAGES, target=target, drafter=drafter, source_judge=True)
        assert res.summary_tokens <= 2048 and "## " in res.summary, method
        assert kinds(res)["judge"] == 1 + (len(res.source_judge["entries"]) > 1), method
