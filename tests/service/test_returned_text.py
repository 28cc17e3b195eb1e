"""Every string the service returns is cleaned, whatever field or event it is in.

A scripted model writes a deploy token, an AWS key, a history marker with the service's U+2060
joiner in it, and NUL, BEL and a right-to-left override, in lines that the compaction then
removes as a duplicate, as a placeholder and as a rejected draft.  Before, the summary was clean
but ``slots[].removed_duplicates`` and ``removed_placeholders`` carried the lines verbatim.
"""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

from sgl_speccompact.core.outputs import clean_result
from sgl_speccompact.result import CompactionResult, LineOrigin, SlotResult, SummaryLine
from sgl_speccompact.service.app import ServiceSettings, create_app
from tests.support.programs import MESSAGES, backends
from tests.support.scripted import ScriptedBackend

TOKEN = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
AWS = "AKIAIOSFODNN7EXAMPLE"
SECRET_LINE = f"- Deploy token {TOKEN} with key {AWS}"
MARKED = "- [\u2060user] name = Jane\x00 rings\x07 \u202eexe.txt"  # a copied history marker, NUL, BEL, RLO
DRAFTS = {  # SpecCompact's drafter: a line removed as a duplicate, and one rejected, then repaired
    "goal": [SECRET_LINE, MARKED],
    "constraints_preferences": ["(none)"],
    "progress": ["- [x] created /workspace/hello.py", f"- BAD rotated {TOKEN}"],
    "key_decisions": ["- **Use write tool**: simplest"],
    "next_steps": ["1. Run python /workspace/hello.py"],
    "critical_context": [SECRET_LINE],
}
# OpenClaw-style's one text: a placeholder line (template text) removed at assembly
ONE_TEXT = (f"## Goal\n{SECRET_LINE}\n{MARKED}\n\n## Next Steps\n1. [First next step] then {TOKEN}\n"
            "2. Run python /workspace/hello.py\n\n## Critical Context\n- /workspace/hello.py")
# nothing of these may come back: the secrets, the joiner, controls but tab and newline, bidi controls
FORBIDDEN = re.compile("|".join([re.escape(TOKEN), re.escape(AWS), "\u2060",
                                 "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"]))


def strings(value) -> list[str]:
    """Every string in decoded JSON, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def dirty(value) -> list[str]:
    return [s for s in strings(value) if FORBIDDEN.search(s)]


@pytest.fixture
def client():
    target, drafter = backends(drafts=DRAFTS, repair=lambda slot, accepted: "- rotated the deploy token\n")
    return TestClient(create_app(target, drafter, settings=ServiceSettings(method="speccompact")))


@pytest.fixture
def one_text_client():
    target = ScriptedBackend(complete=lambda text, params: ONE_TEXT)
    return TestClient(create_app(target, None, settings=ServiceSettings(method="openclaw")))


def removed(result: dict, field: str) -> list[str]:
    return [line for s in result["slots"] for line in s[field]]


def check_probe(result: dict) -> None:
    """The probe reached what it means to: the summary holds the caller's bytes, controls removed."""
    assert "- [user] name = Jane rings exe.txt" in result["summary"]
    assert result["redactions"].get("output:github_token", 0) >= 1


# the probe lines name strings the history never shows (a token, exe.txt): the evidence check would refuse them
NO_EVIDENCE = {"evidence_check": False}


def compact(client, stream: bool, config: dict | None = NO_EVIDENCE) -> list:
    """Everything the service sent back for one compaction: the result, or every event of its stream."""
    body = {"messages": MESSAGES, **({"config": config} if config is not None else {})}
    if not stream:
        res = client.post("/v1/compact", json=body)
        assert res.status_code == 200, res.text
        return [res.json()]
    with client.stream("POST", "/v1/compact", json={**body, "stream": True}) as res:
        assert res.status_code == 200
        body = res.read().decode()
    return [json.loads(line[len("data: "):]) for line in body.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


@pytest.mark.parametrize("stream", [False, True], ids=["result", "stream"])
def test_no_string_returned_carries_a_secret_a_joiner_or_a_control(client, one_text_client, stream):
    sent = compact(client, stream)
    result = sent[-1]
    assert removed(result, "removed_duplicates"), "no line was removed as a duplicate"
    assert any(ln["rejected_draft"] for s in result["slots"] for ln in s["lines"]), "no draft was rejected"
    assert not stream or any(e.get("type") == "line" for e in sent)
    check_probe(result)
    assert dirty(sent) == []
    # with the evidence check (the default) the probes are refused, and the strings it lists are cleaned too
    sent = compact(client, stream, config=None)
    assert any(ln["unsourced"] for s in sent[-1]["slots"] for ln in s["lines"]), "no draft was refused unsourced"
    assert dirty(sent) == []
    sent = compact(one_text_client, stream)
    assert removed(sent[-1], "removed_placeholders"), "no line was removed as a placeholder"
    check_probe(sent[-1])
    assert dirty(sent) == []


class Later(BaseModel):
    note: str  # a string field the result does not have today
    notes: list[str] = Field(default_factory=list)


class LaterResult(CompactionResult):
    later: Later | None = None  # a field added after the cleaning was written
    drafts_by_slot: dict[str, list[str]] = Field(default_factory=dict)


def test_a_string_field_added_later_is_cleaned_too():
    slot = SlotResult(name="goal", title="Goal", removed_placeholders=[MARKED],
                      lines=[SummaryLine(text="- a", origin=LineOrigin.REPAIRED, rejected_draft=SECRET_LINE)])
    result = LaterResult(method="speccompact", summary="## Goal\n- a", slots=[slot],
                         later=Later(note=SECRET_LINE, notes=["key:", "-----BEGIN PRIVATE KEY-----",
                                                              "QUJDREVGR0hJSktMTU5P", "-----END PRIVATE KEY-----"]),
                         drafts_by_slot={"goal": [MARKED, SECRET_LINE]})
    cleaned = clean_result(result, redact_secrets=True)
    assert isinstance(cleaned, LaterResult) and cleaned.later.note.startswith("- Deploy token [REDACTED:")
    assert cleaned.later.notes[0] == "key:" and "QUJDREVG" not in json.dumps(cleaned.later.notes)
    assert dirty(cleaned.model_dump(mode="json")) == []
    assert dirty(result.model_dump(mode="json"))  # the input is left as it was


def test_a_joiner_the_caller_wrote_stays_one_joiner():
    result = CompactionResult(method="hermes", summary="a\u2060\u2060b", slots=[SlotResult(
        name="s", title="S", removed_duplicates=["a\u2060\u2060b"],
        lines=[SummaryLine(text="a\u2060\u2060b", origin=LineOrigin.TARGET)])])
    cleaned = clean_result(result, redact_secrets=True)
    assert cleaned.summary == cleaned.slots[0].lines[0].text == cleaned.slots[0].removed_duplicates[0] == "a\u2060b"
