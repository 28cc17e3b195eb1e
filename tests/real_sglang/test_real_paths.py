"""The CLI and the HTTP service (plain, streamed, prepared sessions) on real sglang servers.

Neither takes a custom schema, so these run the six OpenClaw slots.  Their
body formats hold no marker word: the drafter writes its default line,
which holds a reject marker, in every slot, and the target repairs each slot
with its own default line.  So a correct run has exactly six lines, all
repairs, and never the rejected draft.
"""

import json
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from tests.support.stream_replay import assert_stream_shows_the_result
from tests.real_sglang import scripts
from tests.support.procs import poll_until
from tests.real_sglang.reading import OPENAI, TRAJ, Unchanged, assert_scripted, history
from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.service.app import create_app

pytestmark = pytest.mark.real_sglang

REPAIRED = [scripts.MONOLITHIC]  # the target's one line, repaired into every slot: assembly keeps the first copy


def check_repaired(summary: str) -> None:
    assert assert_scripted(summary) == REPAIRED
    assert scripts.REJECT_DEFAULT.strip() not in summary


@pytest.fixture
def client(servers):
    """The service in process; entered, so its event loop runs between requests (prepares finish)."""
    app = create_app(SpecCompactEndpoint(servers.target.url), SpecCompactEndpoint(servers.drafter.url),
                     default_config=scripts.JUDGE)
    with TestClient(app) as c:
        yield c


def sse_events(text: str) -> list[tuple[str, str]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = [ln for ln in block.splitlines() if not ln.startswith(":")]
        if lines:
            fields = dict(ln.split(": ", 1) for ln in lines)
            out.append((fields.get("event", "message"), fields["data"]))
    return out


def test_cli_compacts_a_trajectory_file(servers):
    history()  # skips without the shared trajectories
    proc = subprocess.run(
        [sys.executable, "-m", "sgl_speccompact", "compact", str(TRAJ / OPENAI), "--method", "speccompact",
         "--target-url", servers.target.url, "--drafter-url", servers.drafter.url, "--json"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    check_repaired(out["summary"])
    lines = [ln for s in out["slots"] if s["name"] != "ledger" for ln in s["lines"]]  # the ledger: no model's
    assert {ln["origin"] for ln in lines} == {"repaired"}
    assert {ln["rejected_draft"] for ln in lines} == {scripts.DRAFTER_DEFAULT}


def test_service_compacts_and_reports_the_real_cache(client):
    with Unchanged(history()) as messages:
        res = client.post("/v1/compact", json={"messages": messages, "method": "speccompact"})
    assert res.status_code == 200, res.text
    out = res.json()
    check_repaired(out["summary"])
    target = out["stats"]["requests"]["target"]
    assert target["prefill"]["cached_tokens"] == 0 and target["verify"]["cached_tokens"] > 0


def test_service_stream_sends_the_lines_then_the_same_result(client):
    body = {"messages": history(), "method": "speccompact", "stream": True}
    with client.stream("POST", "/v1/compact", json=body) as res:
        assert res.status_code == 200
        events = sse_events(res.read().decode())
    kinds = [k for k, _ in events]
    assert kinds[-2:] == ["result", "message"] and events[-1][1] == "[DONE]"
    sent = [json.loads(d) for _, d in events[:-2]]
    streamed = [e["text"] for e in sent if e["type"] == "line" and e["slot"] != "ledger"]
    assert streamed and set(streamed) == {scripts.MONOLITHIC}  # the scripted line only: no label word
    result = json.loads(events[-2][1])
    check_repaired(result["summary"])
    assert_stream_shows_the_result(sent, result["slots"])  # a client shows exactly the result's lines


def test_a_prepared_session_is_reused_by_the_compaction_that_follows(client):
    messages = history()
    head = messages[:-2]
    prep = client.post("/v1/compact", json={"messages": head, "session": "s1", "mode": "prepare",
                                            "method": "speccompact"})
    assert prep.status_code == 202, prep.text
    sessions = client.app.state.sessions
    poll_until(lambda: not sessions.running, "the prepare to be stored", deadline_s=600)
    res = client.post("/v1/compact", json={"messages": messages, "session": "s1", "method": "speccompact"})
    assert res.status_code == 200, res.text
    out = res.json()
    assert out["session"]["reused_messages"] > 0
    assert_scripted(out["summary"])
