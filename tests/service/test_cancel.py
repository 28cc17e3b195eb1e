"""Cancellation end to end: a client that gives up, a dropped stream and the whole-compaction
deadline stop the compaction, and no request is sent after the cancel.
"""

from __future__ import annotations

import json

import httpx
import pytest
from tests.support.live_service import cancel_seen, check_cancelled, live, wait_for
from tests.support.procs import READY_S
from tests.support.service import MESSAGES


@pytest.mark.slow
def test_nonstream_client_gives_up_cancels_the_compaction(gated):
    import http.client
    from urllib.parse import urlsplit

    svc = live(gated)
    try:
        where = urlsplit(svc.url)
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=READY_S)
        conn.request("POST", "/v1/compact", body=json.dumps({"messages": MESSAGES}),
                     headers={"Content-Type": "application/json"})
        wait_for(lambda: gated.entered >= 1, "a draft request", limit_s=READY_S)
        conn.close()  # every draft waits at the gate: the client gives up before any answer
        wait_for(lambda: cancel_seen(svc), "the disconnect to be seen")
        check_cancelled(svc, gated, "cancelled")
    finally:
        svc.close()


@pytest.mark.slow
def test_stream_dropped_cancels_the_compaction(gated):
    svc = live(gated)
    try:
        with httpx.stream("POST", svc.url + "/v1/compact", json={"messages": MESSAGES, "stream": True},
                          timeout=30) as res:
            assert res.status_code == 200
            wait_for(lambda: gated.entered >= 1, "a draft request")
        # the client closed the stream before any result
        wait_for(lambda: cancel_seen(svc), "the disconnect to be seen")
        check_cancelled(svc, gated, "cancelled")
    finally:
        svc.close()


# doubled until a draft request was in flight when the deadline passed: on a loaded machine the
# compaction can take longer than the first deadline to reach its first draft
DEADLINES_S = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


@pytest.mark.slow
def test_whole_compaction_deadline(gated):
    for deadline_s in DEADLINES_S:
        svc = live(gated, compaction_timeout_s=deadline_s)
        try:
            res = httpx.post(svc.url + "/v1/compact", json={"messages": MESSAGES}, timeout=READY_S)
            assert res.status_code == 504, res.text
            assert res.json()["error"]["type"] == "compaction_timeout"
            # the draft in flight is cut at the deadline too: the thread ends with the gate still shut
            wait_for(lambda svc=svc: svc.app.state.compactions.running() == 0, "the compaction thread to end")
            assert svc.metric("speccompact_in_flight") == 0.0
            assert svc.metric('speccompact_compactions_total{method="speccompact",outcome="timeout"}') == 1.0
            if gated.entered == 0:
                continue  # the deadline passed before any draft: nothing was in flight to cut
            before = gated.calls()
            gated.gate.set()
            wait_for(gated.drained, "the drafts in flight to be answered")  # a stray request would follow these
            assert gated.calls() == before
            return
        finally:
            svc.close()
    pytest.fail(f"no draft request reached the gate within {DEADLINES_S[-1]:g} s")


# ------------------------------------------------------------------ requests in flight are aborted upstream

def stepped_service(make_emulated_server, **limits):
    """The service on a target emulator and a drafter emulator whose passes run only when the test says."""
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.emulator import ScriptedPolicy
    from sgl_speccompact.service.app import ServiceSettings, create_app
    from tests.support.gated_steps import Steps
    from tests.support.live_service import LiveService

    target_policy = ScriptedPolicy()
    target_policy.judge(".", p_positive=0.9, regex=True)
    target_policy.on("", "- a repaired line\n")
    drafter_policy = ScriptedPolicy()
    drafter_policy.on("", "- a drafted line about the parser module " * 40)  # longer than a draft may be
    target = make_emulated_server(policy=target_policy, model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(policy=drafter_policy, model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    steps = Steps(drafter)
    app = create_app(SpecCompactEndpoint(target.url, timeout_s=60),
                     SpecCompactEndpoint(drafter.url, lora_path="drafter", timeout_s=60),
                     settings=ServiceSettings(**limits, method="speccompact"))
    return LiveService(app), drafter, steps


def drafts_arrived(drafter) -> bool:
    engine = drafter.engine
    with engine._cv:
        return bool(engine.sched.waiting or engine._passing or engine.sched.running)


@pytest.mark.slow
def test_a_dropped_stream_aborts_its_running_drafts_within_one_step(make_emulated_server, caplog):
    # before: the drafts ran on to their last token after the client left, and the log had a traceback
    import gc
    import logging

    from tests.support.gated_steps import aborted_outliving_a_step, all_told_to_stop, loads

    caplog.set_level(logging.WARNING)
    svc, drafter, steps = stepped_service(make_emulated_server)
    try:
        with httpx.stream("POST", svc.url + "/v1/compact", json={"messages": MESSAGES, "stream": True},
                          timeout=READY_S) as res:
            assert res.status_code == 200
            wait_for(lambda: drafts_arrived(drafter), "the drafts to reach the drafter")
            steps.run(3)  # their prefill and two decode steps: they run
            assert loads(drafter)[0] >= 1
        # the client left: every draft still running is aborted on the drafter's server
        wait_for(lambda: all_told_to_stop(drafter), "the running drafts to be aborted")
        assert aborted_outliving_a_step(drafter, steps, wait_for) == []  # the step under way ends them
        wait_for(lambda: svc.app.state.compactions.running() == 0, "the compaction thread to end")
    finally:
        steps.open()
        svc.close()
    gc.collect()  # an exception nobody retrieved is reported when its task is collected
    ours = [r for r in caplog.records if r.name.startswith(("sgl_speccompact", "asyncio"))]
    assert [r.getMessage() for r in ours if "cancelled" in r.getMessage()] != []
    assert len(ours) == 1, [r.getMessage() for r in ours]
    assert not any(r.exc_info for r in caplog.records), [r.getMessage() for r in caplog.records if r.exc_info]


@pytest.mark.slow
def test_the_deadline_aborts_the_requests_in_flight(make_emulated_server):
    from tests.support.gated_steps import aborted_outliving_a_step, each_aborted, held

    for deadline_s in DEADLINES_S:  # doubled until a draft was in flight when the deadline passed
        svc, drafter, steps = stepped_service(make_emulated_server, compaction_timeout_s=deadline_s)
        try:
            res = httpx.post(svc.url + "/v1/compact", json={"messages": MESSAGES}, timeout=READY_S)
            assert res.status_code == 504, res.text  # no drafter pass ran: the deadline passed first
            drafts = held(drafter)
            if not drafts:
                continue  # the deadline passed before any draft went out (or its aborts came first)
            # each one ends in the waiting queue, or is told to end at its next step if a pass took it
            wait_for(lambda drafts=drafts: each_aborted(drafts), "the drafts in flight to be aborted")
            assert aborted_outliving_a_step(drafter, steps, wait_for) == []
            return
        finally:
            steps.open()
            svc.close()
    pytest.fail(f"no draft request reached the drafter within {DEADLINES_S[-1]:g} s")
