"""The service log: one line per compaction, progress lines of long ones (a fake clock, never wall time)."""

from __future__ import annotations

import logging

from sgl_speccompact.methods.autopick import estimate_tokens
from sgl_speccompact.methods.progress import Progress
from sgl_speccompact.methods.request import as_request
from sgl_speccompact.service.compaction_log import ProgressLog
from tests.support.service import MESSAGES, FakeRunner, make_client

LOGGER = "sgl_speccompact.service.app"


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class SlowRunner(FakeRunner):
    """Reports progress three times; the fake clock moves 3 s before each report."""

    def __init__(self, clock: FakeClock):
        super().__init__()
        self.clock = clock

    def __call__(self, method, messages, **kw):
        report = as_request(messages).on_progress
        for slots in (2, 4, 6):
            self.clock.now += 3.0
            report(Progress(1, 1, slots, 6, 2 * slots, slots, 1000 * slots, block_done=slots == 6))
        return super().__call__(method, messages, **kw)


def service_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_one_line_per_compaction(caplog):
    client, _ = make_client()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        res = client.post("/v1/compact", json={"messages": MESSAGES, "method": "speccompact"})
    assert res.status_code == 200
    # the fake result: 2 lines judged, 1 accepted, no request counted; the history as auto estimates it
    tokens = estimate_tokens(MESSAGES)
    assert tokens > 0 and service_lines(caplog) == [f"speccompact: ~{tokens} history tokens, 0.00 s, 0 requests, "
                                                    "acceptance 50% (1 of 2 judged lines), complete"]


def test_a_long_compaction_logs_its_progress_every_few_seconds(caplog):
    clock = FakeClock()
    client, _ = make_client(SlowRunner(clock), clock=clock)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert client.post("/v1/compact", json={"messages": MESSAGES, "method": "target_self"}).status_code == 200
    lines = service_lines(caplog)
    # at 3 s nothing yet; at 6 s the first line; at 9 s only 3 s after it: none; then the compaction's own line
    assert lines[0] == "target_self: block 1 of 1: 4 of 6 slots, 4 of 8 judged lines accepted, 4,000 tokens (6 s so far)"
    assert len(lines) == 2 and lines[1].startswith(f"target_self: ~{estimate_tokens(MESSAGES)} history tokens")


def test_progress_log_waits_then_writes_at_most_every_period(caplog):
    clock = FakeClock()
    log = logging.getLogger(LOGGER)
    progress = ProgressLog("speccompact", log, clock, every_s=5.0)
    seen = []
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for t in (1, 4.9, 5.0, 7, 9.9, 10.0, 30):
            clock.now = 100.0 + t
            progress(Progress(1, 2, 1, 6, 0, 0, int(t)))
            seen.append(len(service_lines(caplog)))
    assert seen == [0, 0, 1, 1, 1, 2, 3]
