"""What a real small instruct model writes and how it judges, replayed by scripted backends.

SmolLM2-135M-Instruct on the real SGLang CPU server drafted nothing for
most slots, wrote meta-commentary, code fences and the slot format's
placeholders ("1. [First next step]"), copied one line into several slots,
wrote monolithic summaries without a single ``##`` section, and judged
with labels carrying p+ + p- of 0.001-0.006 (its top next token was
"The").  Each test replays one of those outputs and checks what the engine
must do with it, whatever the model.
"""

from __future__ import annotations

import pytest

from sgl_speccompact.config import CompactConfig
from sgl_speccompact.core.lines import is_placeholder, placeholder_texts
from sgl_speccompact.core.prompts import openclaw_template
from sgl_speccompact.methods.autopick import AutoPicker
from sgl_speccompact.methods.auto import Deployment
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.methods.request import MethodRequest, Offer
from sgl_speccompact.methods.resolve import resolve_method
from sgl_speccompact.methods.speccompact import compact
from sgl_speccompact.result import LineOrigin
from sgl_speccompact.schema import OPENCLAW_SLOTS

from tests.support.methods import baseline
from tests.support.scripted import ScriptedBackend, slot_of

MESSAGES = [
    {"role": "user", "content": "Create hello.py that prints Hello, World! and run it."},
    {"role": "assistant", "content": "",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "write", "arguments": '{"path": "hello.py"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "write", "content": "File created at hello.py"},
]
GOAL = "- Create hello.py that prints Hello, World!"
META = "Here is a summary of the conversation:"  # the model's meta-commentary, drafted as a line
PLACEHOLDERS = "1. [First next step]\n2. [Second next step]"  # copied from the Next Steps format
# a monolithic answer without one "## " section: meta-commentary, prose, a code fence
MONOLITHIC = (f"{META}\n\nThe user asked the assistant to create a file hello.py that prints Hello, World!. "
              "The assistant created the file.\n\n```python\nprint(\"Hello, World!\")\n```")
STEPS = ["1. Run python hello.py", "2. Check that it prints Hello, World!"]  # the target's repairs
THIN = (0.0045, 0.0005)  # r 0.9 on labels carrying 0.005: what the model's verdicts looked like


def drafter(drafts: dict[str, str]) -> ScriptedBackend:
    """Drafts the lines of ``drafts[slot]`` after as many as the slot has accepted ("": an empty slot)."""
    def draft(slot, accepted, text):
        lines = drafts.get(slot, "").split("\n") if drafts.get(slot) else []
        return "\n".join(lines[len(accepted):]), "stop"
    return ScriptedBackend(draft=draft)


def target(judge=lambda slot, line: 0.9, repair=lambda slot, accepted: "(none)\n", **kw) -> ScriptedBackend:
    return ScriptedBackend(judge=judge, repair=repair, **kw)


def slot(res, name):
    return {s.name: s for s in res.slots}[name]


def texts(res, name):
    return [line.text for line in slot(res, name).lines]


# ---------------------------------------------------------------- the drafter writes nothing


def test_a_slot_the_drafter_leaves_empty_is_decided_by_the_target():
    def repair(slot_name, accepted):
        return GOAL + "\n" if slot_name == "goal" else "(none)\n"
    t = target(repair=repair)
    res = compact(MESSAGES, target=t, drafter=drafter({"next_steps": "1. Run python hello.py"}))
    # the first user message states the goal: asked, the target writes it
    assert texts(res, "goal") == [GOAL] and slot(res, "goal").stop_reason == "complete"
    line = slot(res, "goal").lines[0]
    assert line.origin is LineOrigin.REPAIRED and line.rejected_draft is None and line.score is None
    # every slot the drafter left empty was put to the target, once for its first line
    asked = sorted(slot_of(text) for text in t.kinds("repair"))
    assert asked == sorted(s.name for s in OPENCLAW_SLOTS if s.name != "next_steps")
    assert texts(res, "constraints_preferences") == ["(none)"]


def test_a_slot_is_complete_and_empty_only_when_the_target_writes_nothing_too():
    t = target(repair=lambda slot_name, accepted: ("", "stop"))  # the answer ends at once: EOS
    res = compact(MESSAGES, target=t, drafter=drafter({}))
    assert len(t.kinds("repair")) == len(OPENCLAW_SLOTS)
    assert all(s.stop_reason == "complete" and not s.lines for s in res.slots if s.name != "ledger")  # the ledger copies the history
    assert not res.truncated and res.summary.count("(none)") == len(OPENCLAW_SLOTS)


# ---------------------------------------------------------------- a repair cut off


def test_a_slot_cut_short_by_a_truncated_repair_is_reported_truncated_never_none():
    t = target(judge=lambda slot_name, line: 0.3 if line == META else 0.9,
               repair=lambda slot_name, accepted: ("1. Run python hello.py and check that it pri", "length")
               if slot_name == "next_steps" else "(none)\n")
    res = compact(MESSAGES, target=t, drafter=drafter({"goal": GOAL, "next_steps": META}))
    nxt = slot(res, "next_steps")
    assert nxt.stop_reason == "repair_truncated" and not nxt.lines
    assert res.truncated
    section = res.summary.split("## Next Steps\n", 1)[1].split("\n\n", 1)[0]
    assert section == "(incomplete)"
    assert slot(res, "goal").stop_reason == "complete"


# ---------------------------------------------------------------- a monolithic answer without sections


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_openclaw_output_without_sections_is_never_a_complete_summary_slot(finish):
    t = ScriptedBackend(complete=lambda text, params: (MONOLITHIC, finish))
    res = baseline("openclaw", MESSAGES, target=t, config={"report_cut_off": True})
    assert res.truncated
    assert not any(s.name == "summary" and s.stop_reason == "complete" for s in res.slots)
    missing = [s.name for s in res.slots if s.stop_reason == "missing"]
    assert missing == [s.name for s in OPENCLAW_SLOTS]
    assert all(s.stop_reason != "complete" for s in res.slots if s.name != "ledger")


def test_openclaw_output_missing_one_section_reports_it_missing():
    text = "\n\n".join(f"## {s.title}\n- about {s.name}" for s in OPENCLAW_SLOTS if s.name != "key_decisions")
    res = baseline("openclaw", MESSAGES, target=ScriptedBackend(complete=lambda t, p: text))
    assert res.truncated and slot(res, "key_decisions").stop_reason == "missing"
    assert slot(res, "goal").stop_reason == "complete" and texts(res, "goal") == ["- about goal"]


# ---------------------------------------------------------------- placeholders and repeated lines


def test_placeholders_copied_from_the_slot_format_are_repaired_never_judged_or_accepted():
    t = target(judge=lambda slot_name, line: 0.74,  # what the placeholders scored: r 0.72-0.75
               repair=lambda slot_name, accepted: STEPS[len(accepted)] + "\n" if slot_name == "next_steps"
               else "(none)\n")
    res = compact(MESSAGES, target=t, drafter=drafter({"goal": GOAL, "next_steps": PLACEHOLDERS}))
    assert "[First next step]" not in res.summary and "[Second next step]" not in res.summary
    assert texts(res, "next_steps") == STEPS
    lines = slot(res, "next_steps").lines
    assert [line.rejected_draft for line in lines] == PLACEHOLDERS.split("\n")
    assert all(line.origin is LineOrigin.REPAIRED and line.rejected_score is None for line in lines)
    assert not any("[First next step]" in text for text in t.kinds("verify"))  # no judge call spent on it


def test_openclaw_output_that_copies_the_format_loses_its_placeholders():
    copied = openclaw_template(OPENCLAW_SLOTS).replace("- [What the user is trying to accomplish]", GOAL)
    res = baseline("openclaw", MESSAGES, target=ScriptedBackend(complete=lambda text, params: copied))
    assert texts(res, "goal") == [GOAL]
    assert slot(res, "next_steps").removed_placeholders == PLACEHOLDERS.split("\n")
    assert not is_placeholder_in(res.summary) and not res.truncated  # every section is there


def test_target_self_loses_the_placeholders_the_target_copied():
    def complete(text, params):
        return {"goal": GOAL, "next_steps": PLACEHOLDERS}.get(slot_of(text), "(none)")
    events = []
    res = run_method("target_self", MethodRequest(MESSAGES, on_event=events.append),
                     target=ScriptedBackend(complete=complete))
    assert texts(res, "goal") == [GOAL] and not texts(res, "next_steps")
    # skipped in the slot, as every method's writer skips them: never accepted, never streamed
    assert slot(res, "next_steps").removed_placeholders == []
    assert not any(e["type"] == "line" and "[First next step]" in e["text"] for e in events)
    assert not is_placeholder_in(res.summary)


def is_placeholder_in(summary: str) -> bool:
    texts_ = placeholder_texts(tuple(s.body_format for s in OPENCLAW_SLOTS))
    return any(is_placeholder(line, texts_) for line in summary.split("\n"))


def test_a_line_accepted_in_several_slots_is_kept_once_the_later_copies_removed():
    drafts = {"goal": GOAL, "key_decisions": GOAL, "critical_context": f"{GOAL}\n- hello.py"}
    res = compact(MESSAGES, target=target(), drafter=drafter(drafts))
    assert res.summary.count(GOAL) == 1 and texts(res, "goal") == [GOAL]
    assert slot(res, "key_decisions").removed_duplicates == [GOAL] and not texts(res, "key_decisions")
    assert slot(res, "critical_context").removed_duplicates == [GOAL]
    assert texts(res, "critical_context") == ["- hello.py"]


# ---------------------------------------------------------------- labels that carry no mass


def test_speccompact_accepts_no_line_on_an_unreliable_verdict_the_target_writes_it():
    t = target(judge=lambda slot_name, line: THIN, repair=lambda slot_name, accepted: GOAL + "\n"
               if slot_name == "goal" and not accepted else ("", "stop"))
    res = compact(MESSAGES, target=t, drafter=drafter({"goal": "- The user wants hello.py"}))
    goal = slot(res, "goal").lines
    assert [line.text for line in goal] == [GOAL]
    assert goal[0].origin is LineOrigin.REPAIRED and goal[0].unreliable_verdict
    assert goal[0].rejected_draft == "- The user wants hello.py" and goal[0].rejected_score == pytest.approx(0.9)
    assert not any(line.origin is LineOrigin.DRAFTED for s in res.slots for line in s.lines)
    stats = res.stats
    assert stats.accepted_lines == 0 and stats.unreliable_verdicts == stats.proposed_lines == 1
    assert stats.label_mass_min == pytest.approx(0.005) and stats.label_mass_median == pytest.approx(0.005)


def test_sjc_deletes_no_entry_on_an_unreliable_verdict_and_says_so():
    t = target(judge=lambda slot_name, line: 0.9, repair=lambda slot_name, accepted: ("", "stop"),
               source_judge=lambda entry, section: (0.001, 0.004))  # r 0.2: deleted, were it reliable
    res = run_method("speccompact", MESSAGES, target=t, drafter=drafter({"goal": GOAL}), source_judge=True)
    report = res.source_judge
    assert report["deleted"] == 0 and report["kept_unjudged"] == 1 and GOAL in res.summary
    assert report["entries"][0]["unreliable"] and report["entries"][0]["label_mass"] == pytest.approx(0.005)
    # the stats count SJC's verdict with the compaction's own
    assert res.stats.unreliable_verdicts == 1 and res.stats.label_mass_min == pytest.approx(0.005)
    assert res.stats.label_mass_median == pytest.approx((1.0 + 0.005) / 2)


def test_label_mass_stats_are_in_the_json_result_without_the_raw_list():
    res = compact(MESSAGES, target=target(), drafter=drafter({"goal": GOAL}))
    stats = res.to_json_dict()["stats"]
    assert stats["label_mass_min"] == stats["label_mass_median"] == pytest.approx(1.0)
    assert stats["unreliable_verdicts"] == 0 and "label_masses" not in stats


def test_auto_stops_picking_a_judging_method_once_the_target_cannot_judge():
    picker = AutoPicker(Deployment.named(target="qwen3-32b", gpus=2, equal_hardware=False), "test",
                        "Qwen/Qwen3-32B|Qwen/Qwen3-0.6B")
    picker.acceptance.observe(picker.pair, 0.95)
    request = MethodRequest(MESSAGES * 200)
    offer = Offer(CompactConfig(), has_drafter=True, offered=("speccompact", "target_self"))
    assert resolve_method("auto", request, offer, picker)[0] == "speccompact"
    picker.observe("speccompact", 0.95, 0.005)  # what a compaction on this target saw
    method, choice = resolve_method("auto", request, offer, picker)
    assert method == "target_self" and choice["label_mass"] == pytest.approx(0.005)
    assert "cannot judge" in choice["reason"]
    picker.observe("speccompact", 0.95, 0.9)  # the template fixed: it judges again
    assert resolve_method("auto", request, offer, picker)[0] == "speccompact"


# ---------------------------------------------------------------- scores


def test_a_repaired_line_reports_its_own_score_not_the_rejected_drafts():
    t = target(judge=lambda slot_name, line: 0.25 if line == META else 0.9,
               repair=lambda slot_name, accepted: GOAL + "\n" if slot_name == "goal" else "(none)\n")
    res = compact(MESSAGES, target=t, drafter=drafter({"goal": META}))
    line = slot(res, "goal").lines[0]
    assert line.text == GOAL and line.origin is LineOrigin.REPAIRED
    assert line.score is None and line.rejected_score == pytest.approx(0.25)
