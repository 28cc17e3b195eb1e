"""The CLI with a recording runner: fake connections and the one-line error check."""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.runner_calls import call_fields
from sgl_speccompact.methods.progress import Progress
from sgl_speccompact.methods.request import as_request
from sgl_speccompact.backends.contract import BackendDefaults
from sgl_speccompact.result import CompactionResult, RequestCount


class Recorder:
    """Fake runner: records its call, emits events, returns a fixed result."""

    def __init__(self, fail: Exception | None = None):
        self.fail = fail
        self.kwargs: dict = {}

    def __call__(self, method, messages, **kw):
        self.kwargs = {"method": method, **call_fields(messages, **kw)}
        if self.kwargs.get("on_event"):
            self.kwargs["on_event"]({"type": "line", "slot": "goal", "text": "- fix", "origin": "drafted_accepted"})
            self.kwargs["on_event"]({"type": "slot_done", "slot": "goal", "stop_reason": "complete"})
        on_progress = as_request(messages).on_progress
        if on_progress:
            on_progress(Progress(1, 1, 1, 6, 4, 3, 4980))
        if self.fail:
            raise self.fail
        res = CompactionResult(method=method, summary="## Goal\n- fix missing_colon.py", summary_tokens=9)
        res.stats.requests = {"target": {"verify": RequestCount(requests=4, prompt_tokens=4000, cached_tokens=3600)},
                              "drafter": {"draft": RequestCount(requests=2, prompt_tokens=900, cached_tokens=450,
                                                                completion_tokens=80)}}
        res.stats.proposed_lines, res.stats.accepted_lines, res.stats.repaired_lines = 4, 3, 1
        res.stats.total_wall_s = 1.5
        return res


@dataclass(frozen=True)
class Connected(BackendDefaults):
    """What ``fake_connect`` hands the runner: a backend with no server, named by the URL and LoRA it was given."""

    url: str  # the --target-url / --drafter-url it was connected to
    lora: str | None  # the LoRA adapter it would ask for


def fake_connect(url, args, *, lora_name=None, role="target"):
    return Connected(url, lora_name)


URLS = ["--target-url", "http://t:1", "--drafter-url", "http://d:2"]


def one_clear_line(err: str, *words: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and all(w in lines[0] for w in words), err
