"""Incremental compaction: with a previous summary every slot request asks to keep its facts."""

import pytest

from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.core.prompts import KEEP_PREVIOUS, drafter_messages
from sgl_speccompact.schema import OPENCLAW_SLOTS

from tests.support.scripted import ScriptedBackend
from tests.support.methods import complete
from tests.support.programs import MESSAGES, backends

PREVIOUS = "## Goal\n- EARLIER-FACT"


@pytest.mark.parametrize("previous", [PREVIOUS, None])
def test_speccompact_target_and_drafter_slot_requests(previous):
    target, drafter = backends()
    run_method("speccompact", MESSAGES, target=target, drafter=drafter, previous_summary=previous)
    drafts = drafter.kinds("draft")
    target_side = target.kinds("verify") + target.kinds("repair")
    assert drafts and target_side
    for text in drafts + target_side:
        assert (KEEP_PREVIOUS in text) is bool(previous)
    assert KEEP_PREVIOUS not in target.kinds("prefill")[0]  # per slot request, not in the shared prefix


def test_target_self_slot_requests_and_the_drafter_training_prompt():
    target = ScriptedBackend(complete=complete)
    run_method("target_self", MESSAGES, target=target, previous_summary=PREVIOUS)
    requests = target.kinds("generate")
    assert len(requests) == len(OPENCLAW_SLOTS) and all(KEEP_PREVIOUS in t for t in requests)
    # the drafter is trained on the same request it gets at compaction time
    user = drafter_messages("[user]\nhi", OPENCLAW_SLOTS, OPENCLAW_SLOTS[0], PREVIOUS)[1]["content"]
    assert user.endswith(KEEP_PREVIOUS) and "EARLIER-FACT" in user
    assert KEEP_PREVIOUS not in drafter_messages("[user]\nhi", OPENCLAW_SLOTS, OPENCLAW_SLOTS[0])[1]["content"]
