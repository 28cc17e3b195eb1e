"""A cancelled compaction stops on the real server: its request in flight is aborted there.

Steps are the server's own count: ``/v1/loads``'s ``decode_moments[0]`` is the number of decode
steps its scheduler has timed (sglang 0.5.23, ``scheduler.py`` ``_accumulate_decode_moment``; it
leaves out a step that follows a prefill, so it never counts more steps than ran).  Before, the
generation ran on to its last token after the cancel: thousands of steps.
"""

from __future__ import annotations

import threading

import httpx
import pytest

from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.errors import CompactionCancelledError
from sgl_speccompact.service.cancel import CancelScope
from tests.support.live_service import wait_for

pytestmark = pytest.mark.real_sglang

LONG = 3000  # tokens the generation would run without the abort
STEPS_AFTER_ABORT = 200  # decode steps the server may still run between the cancel and the abort taking hold


def load(url: str) -> dict:
    return httpx.get(url + "/v1/loads", params={"include": "core"}, timeout=30).json()["loads"][0]


def decode_steps(snapshot: dict) -> int:
    return int((snapshot.get("decode_moments") or [0])[0])


def test_a_cancelled_generation_stops_on_the_real_server_within_a_bounded_number_of_steps(servers):
    url = servers.target.url
    scope = CancelScope()
    view = SpecCompactEndpoint(url, timeout_s=600).with_cancel(scope)
    ended: list = []

    def generate():
        try:
            ended.append(view._generate({"text": "Write the numbers from one to ten thousand:",
                                          "sampling_params": {"max_new_tokens": LONG, "ignore_eos": True,
                                                              "temperature": 0.0}}))
        except CompactionCancelledError as exc:
            ended.append(exc)

    thread = threading.Thread(target=generate, daemon=True)
    thread.start()
    start = decode_steps(load(url))
    # decoding, for a few timed steps
    wait_for(lambda: load(url)["num_running_reqs"] == 1 and decode_steps(load(url)) >= start + 3,
             "the generation to run")
    before = decode_steps(load(url))
    scope.cancel("cancelled")
    thread.join(timeout=600)
    assert not thread.is_alive() and isinstance(ended[0], CompactionCancelledError), ended
    wait_for(lambda: load(url)["num_running_reqs"] == 0 and load(url)["num_waiting_reqs"] == 0,
             "the server to run no request")
    after = decode_steps(load(url))
    assert view.in_flight.aborted, "no abort was sent"
    print(f"decode steps the real server ran after the cancel: {after - before} (of {LONG} without the abort)")
    assert after - before <= STEPS_AFTER_ABORT < LONG, (before, after)
