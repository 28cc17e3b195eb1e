"""``POST /abort_request`` as sglang 0.5.23 serves it (``http_server.py`` ``abort_request``,
``TokenizerManager.abort_request``, ``Scheduler.abort_request``).

The emulator's scheduler steps are gated here: each forward pass waits for the test to let it
run, so "the request finished within N steps" is counted in passes, never in seconds.
"""

from __future__ import annotations

import threading

import pytest
import requests

from sgl_speccompact.emulator import ScriptedPolicy
from tests.support.gated_steps import Steps, loads

LONG = 4000  # tokens the generation would run without an abort


@pytest.fixture
def server(make_emulated_server):
    policy = ScriptedPolicy()
    policy.on("", "x " * LONG)
    srv = make_emulated_server(policy=policy)
    steps = Steps(srv)
    yield srv, steps
    steps.open()


def generate(srv, rid: str, answers: list) -> threading.Thread:
    body = {"text": "write a lot", "rid": rid, "sampling_params": {"max_new_tokens": LONG, "ignore_eos": True}}
    thread = threading.Thread(target=lambda: answers.append(requests.post(srv.url + "/generate", json=body,
                                                                          timeout=120)))
    thread.start()
    return thread


def abort(srv, **body) -> requests.Response:
    return requests.post(srv.url + "/abort_request", json=body, timeout=10)


def wait_queued(srv, n: int = 1, waiting: int = 0) -> None:
    """Until ``n`` requests reached the scheduler, ``waiting`` of them in its queue."""
    engine = srv.engine

    def arrived():
        queued = len(engine.sched.waiting)
        return queued >= waiting and queued + len(engine._passing) + len(engine.sched.running) >= n
    with engine._cv:
        assert engine._cv.wait_for(arrived, timeout=60), "the requests never reached the scheduler"


def test_a_running_request_stops_at_its_next_step_with_an_abort_reason(server):
    srv, steps = server
    answers: list = []
    thread = generate(srv, "job-1.", answers)
    wait_queued(srv)
    steps.run(3)  # the prefill, then two decode steps: it runs
    assert loads(srv) == (1, 0)
    res = abort(srv, rid="job-1.")
    assert res.status_code == 200 and res.content == b""
    steps.run(1)  # one more step: the request takes its abort and finishes
    thread.join(timeout=60)
    assert loads(srv) == (0, 0)
    out = answers[0].json()
    assert answers[0].status_code == 200
    assert out["meta_info"]["finish_reason"] == {"type": "abort", "message": "Aborted", "status_code": None,
                                                 "err_type": None}
    assert out["meta_info"]["completion_tokens"] == 4 < LONG  # three steps, then one more


def test_a_waiting_request_is_aborted_at_once(server):
    srv, steps = server
    answers: list = []
    first = generate(srv, "first", answers)
    wait_queued(srv)  # its prefill pass waits at the gate
    thread = generate(srv, "queued", answers)
    wait_queued(srv, 2, waiting=1)  # the scheduler is in a pass: this one waits in the queue
    assert abort(srv, rid="queued").status_code == 200
    thread.join(timeout=60)
    assert answers[0].json()["meta_info"]["finish_reason"] == {"type": "abort", "message": "Abort in waiting queue"}
    assert loads(srv) == (1, 0)  # the first one still runs
    abort(srv, rid="first")  # in the pass under way: it finishes when that pass ends
    steps.run(1)
    first.join(timeout=60)
    assert answers[1].json()["meta_info"]["finish_reason"]["type"] == "abort" and loads(srv) == (0, 0)


def test_an_unknown_or_empty_rid_aborts_nothing_and_a_known_one_its_prefix(server):
    srv, steps = server
    answers: list = []
    threads = [generate(srv, "job-1", answers), generate(srv, "job-10", answers)]
    wait_queued(srv, 2)
    steps.run(2)
    # the tokenizer manager drops an empty rid and one it does not run; the scheduler aborts by prefix
    for body in ({"rid": ""}, {"rid": "job-"}, {"rid": "nope"}, {}):
        assert abort(srv, **body).status_code == 200
    steps.run(2)
    assert loads(srv) == (2, 0)
    assert abort(srv, rid="job-1").status_code == 200  # known: "job-1" and "job-10" both start with it
    steps.run(1)
    for t in threads:
        t.join(timeout=60)
    assert [a.json()["meta_info"]["finish_reason"]["type"] for a in answers] == ["abort", "abort"]


def test_abort_all_and_a_bad_body(server):
    srv, steps = server
    answers: list = []
    threads = [generate(srv, f"r{i}", answers) for i in range(2)]
    wait_queued(srv, 2)
    steps.run(2)
    assert abort(srv, abort_all=True).status_code == 200
    steps.run(1)
    for t in threads:
        t.join(timeout=60)
    assert loads(srv) == (0, 0)
    bad = abort(srv, rid=["not", "a", "string"])
    assert bad.status_code == 400 and bad.json()["object"] == "error"
