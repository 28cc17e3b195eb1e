"""Every method's summary of every shared trajectory, on two emulators, against a recorded golden file.

A change that means to keep what the engine decides (a faster transport, a
refactor of the core, a one-pass redaction) must leave every summary byte for
byte as it was; this test holds it to that.  Each case is one compaction on
two SGLang-API emulators with seeded judgements
(:class:`~sgl_speccompact.emulator.ControlledAcceptancePolicy`): SpecCompact,
Target-self, Hermes-style, OpenClaw-style and auto on the whole history; then,
with the SpecCompact summary of the history's first half as the previous
summary, SpecCompact, Target-delta and OpenClaw-style with Source-Judged
Compaction on the whole history.  The summary's sections (what the models
wrote) and its exact ledger (what the history's strings were) are compared
apart, so a change of one shows as that one.

A change that means to alter summaries rewrites the file, and its commit says
which cases changed and why::

    SGL_SPECCOMPACT_GOLDEN=write python -m pytest tests/methods/test_golden_summaries.py
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from sgl_speccompact.core.ledger import HEADING
from sgl_speccompact.errors import HistoryFormatError
from sgl_speccompact.history.formats import load_history
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.methods.request import MethodRequest
from tests.support.paths import TRAJECTORIES

GOLDEN = Path(__file__).with_name("golden_summaries.json")
RECORDED = datetime.datetime(2026, 12, 7, tzinfo=datetime.timezone.utc)  # Hermes's prompt dates its summary
WHOLE = ("speccompact", "target_self", "hermes", "openclaw", "auto")  # one compaction of the whole history
EVOLVED = ("speccompact", "target_delta", "openclaw+sjc")  # the whole history on its first half's summary


def trajectories() -> list[tuple[str, list[dict]]]:
    out = []
    for path in sorted(TRAJECTORIES.iterdir()) if TRAJECTORIES.is_dir() else ():
        try:
            out.append((path.name, load_history(path)))
        except HistoryFormatError:
            continue  # the task list is not a trajectory
    return out


def split(summary: str) -> dict:
    """A summary as the golden file holds it: the sections, and the ledger after them."""
    at = summary.find(HEADING)
    return {"sections": summary if at < 0 else summary[:at], "ledger": "" if at < 0 else summary[at:]}


def compact(method: str, messages: list[dict], target, drafter, previous: str | None = None) -> str:
    name, sjc = method.removesuffix("+sjc"), method.endswith("+sjc")
    request = MethodRequest(messages, previous_summary=previous, source_judge=sjc)
    return run_method(name, request, target=target, drafter=drafter).summary


def summaries(target, drafter) -> dict:
    """Every case's summary, split: ``{trajectory: {case: {"sections", "ledger"}}}``."""
    got = {}
    for name, messages in trajectories():
        cases = {m: split(compact(m, messages, target, drafter)) for m in WHOLE}
        previous = compact("speccompact", messages[:len(messages) // 2], target, drafter)
        cases.update({f"{m} on half": split(compact(m, messages, target, drafter, previous)) for m in EVOLVED})
        got[name] = cases
    return got


@pytest.fixture(scope="module")
def emulated():
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, EmulatedServer
    from sgl_speccompact.emulator.qwen3 import default_tokenizer

    tok = default_tokenizer()[0]
    with EmulatedServer(tok, policy=ControlledAcceptancePolicy(seed=1), model_path="Qwen/Qwen3-8B") as t, \
            EmulatedServer(tok, policy=ControlledAcceptancePolicy(seed=2), model_path="Qwen/Qwen3-0.6B",
                           lora_paths=["drafter"]) as d:
        yield SpecCompactEndpoint(t.url, timeout_s=120), SpecCompactEndpoint(d.url, lora_path="drafter", timeout_s=120)


class _OnRecordedDay(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return RECORDED if tz is None else RECORDED.astimezone(tz)


def test_every_summary_matches_the_golden_file(emulated, monkeypatch):
    from sgl_speccompact.core import hermes_prompt

    if not TRAJECTORIES.is_dir():
        pytest.skip(f"shared trajectories not found at {TRAJECTORIES}")
    monkeypatch.setattr(hermes_prompt, "datetime", SimpleNamespace(datetime=_OnRecordedDay,
                                                                    timezone=datetime.timezone))
    got = summaries(*emulated)
    if os.environ.get("SGL_SPECCOMPACT_GOLDEN") == "write":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert sorted(got) == sorted(want)
    changed = [(name, case, part) for name in want for case in want[name] for part in ("sections", "ledger")
               if got[name].get(case, {}).get(part) != want[name][case][part]]
    assert not changed, changed
