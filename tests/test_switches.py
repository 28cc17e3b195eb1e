"""Ablation switches: every optimization can be turned off alone, and the
summary is decided the same way (only the requests change)."""

import math

import pytest

from sgl_speccompact.compactor import compact
from sgl_speccompact.config import OPTIMIZATIONS, CompactConfig

from scripted import LINE_RE, ScriptedBackend
from test_endpoint import InProcessEndpoint, assert_server_accepts, body_text
from test_programs import DRAFTS, MESSAGES, backends, drafter_from

RECOMMENDED = {name: CompactConfig.model_fields[name].default for name in OPTIMIZATIONS}
# switches that change only the requests; sub_slot_branches and repair_candidates change what
# is asked and who writes a replacement (tests/test_slot_stream.py)
REQUEST_ONLY = sorted(set(OPTIMIZATIONS) - {"sub_slot_branches", "repair_candidates"})
ONE_BRANCH = {"sub_slot_branches": False}


def decisions(res):
    return [(s.name, [(l.text, l.origin) for l in s.lines]) for s in res.slots]


def test_registry_names_bool_fields_with_descriptions():
    assert OPTIMIZATIONS
    for name, text in OPTIMIZATIONS.items():
        field = CompactConfig.model_fields[name]
        assert field.annotation is bool and isinstance(field.default, bool), name
        assert text.strip() and "\n" not in text


@pytest.mark.parametrize("name", REQUEST_ONLY)
def test_each_switch_flipped_alone_keeps_the_decisions(name):
    target, drafter = backends()
    base = compact(MESSAGES, target=target, drafter=drafter)
    target, drafter = backends()
    flipped = compact(MESSAGES, target=target, drafter=drafter, config={name: not RECOMMENDED[name]})
    assert decisions(flipped) == decisions(base)
    assert flipped.summary == base.summary


def test_shared_prefix_off_puts_each_slot_request_before_the_history():
    target, drafter = backends()
    compact(MESSAGES, target=target, drafter=drafter, config={"shared_prefix": False})
    assert target.kinds("prefill") == []  # nothing is shared, so nothing is prefilled for all
    texts = target.kinds("verify") + target.kinds("repair")
    assert texts
    for t in texts:
        assert t.index("Slot request") < t.index("<conversation>")
    firsts = {t[:t.index("<conversation>")] for t in texts}
    assert len(firsts) > 1  # different slots start differently


def test_draft_buffer_off_drafts_one_line_per_call():
    target, drafter = backends()
    res = compact(MESSAGES, target=target, drafter=drafter, config={"draft_buffer": False, **ONE_BRANCH})
    progress = [t for t in drafter.kinds("draft") if "Generate only the progress" in t]
    # one call per line; the last line arrives with the end of the answer
    assert len(progress) == len(DRAFTS["progress"])
    # the blank line (a stop at the newline with no text) did not end the slot
    lines = [l.text for l in {s.name: s for s in res.slots}["progress"].lines]
    assert lines == DRAFTS["progress"]


def test_draft_buffer_on_buffers_several_lines_per_call():
    target, drafter = backends()
    compact(MESSAGES, target=target, drafter=drafter, config={"draft_buffer": True, **ONE_BRANCH})
    progress = [t for t in drafter.kinds("draft") if "Generate only the progress" in t]
    assert len(progress) == 1


@pytest.mark.parametrize("one_request", [True, False])
def test_one_request_judging_switch_on_speccompact_endpoint(one_request):
    target = InProcessEndpoint(judge=lambda line: 0.05 if "BAD" in line else 0.9)
    drafter = ScriptedBackend(draft=drafter_from(DRAFTS))
    res = compact(MESSAGES, target=target, drafter=drafter, config={"one_request_judging": one_request})
    one = [b for b in target.bodies if "token_ids_logprob" in b]
    plain = [b for b in target.bodies if isinstance(body_text(b), list)]
    judged = res.stats.proposed_lines
    assert judged > 0
    assert (len(one), len(plain)) == ((judged, 0) if one_request else (0, judged))
    assert res.stats.requests["target"]["verify"].requests == judged * (1 if one_request else 2)
    assert "2. BAD" not in res.summary and "- repaired" in res.summary
    for b in target.bodies:
        assert_server_accepts(b)


def test_line_aware_stopping_off_decodes_on_and_keeps_the_first_line():
    target, drafter = backends()
    res = compact(MESSAGES, target=target, drafter=drafter, config={"line_aware_stopping": False})
    nxt = {s.name: s for s in res.slots}["next_steps"]
    assert [l.text for l in nxt.lines] == ["1. Run python /workspace/hello.py", "2. Run pytest"]
    assert "extra line never decoded" not in res.summary
    # the repair ran on a copy; the branch holds only the kept line
    verify_after = [t for t in target.kinds("verify") if "2. Run pytest" in t]
    assert all("extra line" not in t for t in verify_after)
