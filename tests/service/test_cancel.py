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
