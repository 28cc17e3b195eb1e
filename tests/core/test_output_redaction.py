"""What the models write is redacted over the whole text, not line by line, wherever it leaves.

A private key a model writes spans lines; each line alone matches no pattern.  Before, the
summary was redacted whole but slot lines, rejected drafts, SJC entries and streamed ``line``
events were redacted one line at a time, and every probe below found the key's body in them.
"""

from __future__ import annotations

import pytest

from tests.support.secret_cases import PEM_BLOCK, PEM_BODY, SECRET_CASES, leaked
from sgl_speccompact.core.outputs import clean_result, cleaning_events
from sgl_speccompact.methods.speccompact import compact
from sgl_speccompact.result import CompactionResult, LineOrigin, SlotResult, SummaryLine

from tests.support.scripted import ScriptedBackend
from tests.support.programs import DRAFTS, MESSAGES, drafter_from

MULTILINE = [c for c in SECRET_CASES if c[0] in ("netrc", "pem_block", "pem_tail")]  # found only across lines


def _result(lines: list[str], drafts: list[str | None]) -> CompactionResult:
    slot = SlotResult(name="critical_context", title="Critical Context", lines=[
        SummaryLine(text=t, origin=LineOrigin.DRAFTED if d is None else LineOrigin.REPAIRED, rejected_draft=d)
        for t, d in zip(lines, drafts)])
    entries = [{"text": t, "section": "Critical Context", "kept": i % 2 == 0} for i, t in enumerate(lines)]
    return CompactionResult(method="speccompact", summary="## Critical Context\n" + "\n".join(lines), slots=[slot],
                            source_judge={"entries": entries})


def _texts(result: CompactionResult) -> list[str]:
    out = [result.summary] + [ln.text for s in result.slots for ln in s.lines]
    out += [ln.rejected_draft for s in result.slots for ln in s.lines if ln.rejected_draft]
    return out + [e["text"] for e in result.source_judge["entries"]]


@pytest.mark.parametrize("name,text,secrets", MULTILINE, ids=[c[0] for c in MULTILINE])
def test_a_multi_line_secret_leaves_no_line_of_a_result(name, text, secrets):
    lines = ["- the deploy key:"] + text.strip("\n").split("\n") + ["- then deploy"]
    cleaned = clean_result(_result(lines, [None] * len(lines)), redact_secrets=True)
    assert not leaked(_texts(cleaned), [(name, text, secrets)]), _texts(cleaned)
    assert cleaned.slots[0].lines[0].text == "- the deploy key:" and cleaned.slots[0].lines[-1].text == "- then deploy"
    assert len(cleaned.slots[0].lines) == len(lines)  # lines are redacted in place, never merged or dropped


def test_rejected_drafts_are_redacted_as_one_text():
    body = PEM_BLOCK.split("\n")
    lines = [f"- repaired line {i}" for i in range(len(body))]
    cleaned = clean_result(_result(lines, body), redact_secrets=True)
    assert not leaked(_texts(cleaned))
    assert cleaned.redactions == {"output:private_key": 1}  # one key, counted once


def test_streamed_line_events_are_redacted_with_the_lines_before_them():
    got: list[dict] = []
    emit = cleaning_events(got.append, redact_secrets=True)
    for slot in ("critical_context", "next_steps"):
        for line in ["- key:", *PEM_BLOCK.split("\n"), "- done"]:
            emit({"type": "line", "slot": slot, "text": line, "origin": "drafted", "score": 0.9})
        emit({"type": "slot_done", "slot": slot, "stop_reason": "complete"})
    assert len(got) == 2 * (len(PEM_BLOCK.split("\n")) + 3)
    assert not leaked([e.get("text", "") for e in got])
    assert [e["text"] for e in got if e.get("text", "").startswith("- ")] == ["- key:", "- done"] * 2


def test_single_line_texts_are_redacted_as_before():
    from sgl_speccompact.history.redaction import redact_lines

    out, counts = redact_lines(["- token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "- plain"])
    assert out == ["- token [REDACTED:github_token]", "- plain"] and counts == {"github_token": 1}
    assert redact_lines([]) == ([], {})


def test_a_model_written_key_is_not_returned_from_a_real_compaction():
    drafts = {**DRAFTS, "critical_context": ["- deploy key:", *PEM_BLOCK.split("\n")]}
    target = ScriptedBackend(judge=lambda slot, line: 0.05 if line.startswith("q2uX") else 0.95,
                             repair=lambda slot, accepted: "- (a key line)\n")
    drafter = ScriptedBackend(draft=drafter_from(drafts))
    events: list[dict] = []
    res = compact(MESSAGES, target=target, drafter=drafter, on_event=events.append)
    crit = next(s for s in res.slots if s.name == "critical_context")
    assert any(ln.rejected_draft for ln in crit.lines)  # one body line went to repair
    texts = [res.summary] + [ln.text for ln in crit.lines] + [ln.rejected_draft or "" for ln in crit.lines]
    assert not leaked(texts + [e.get("text", "") for e in events], [("pem", PEM_BLOCK, list(PEM_BODY))])
    assert res.redactions.get("output:private_key", 0) >= 1
