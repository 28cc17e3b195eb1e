"""Target-delta: the previous summary's lines that still hold are judged in one batch per slot and
copied; the target writes only the rest (the slot loop with ``[carried lines, target writer]``)."""

from sgl_speccompact.methods.auto import Deployment, choose
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.result import LineOrigin

from tests.support.programs import MESSAGES
from tests.support.scripted import BatchJudgeBackend, accepted_of, slot_of

PREVIOUS = ("## Goal\n- KEEP create /workspace/hello.py\n- STALE deploy to staging\n\n"
            "## Progress\n### Done\n- KEEP wrote /workspace/hello.py\n### In Progress\n- STALE waiting on CI\n\n"
            "## Key Decisions\n- KEEP use the write tool\n\n## Next Steps\n(none)")

# each slot as the target would write it whole: the held lines first, then what the new turns add
TRUE = {
    "goal": ["- KEEP create /workspace/hello.py", "- NEW print Hello, World!"],
    "constraints_preferences": ["(none)"],
    "progress": ["### Done", "- KEEP wrote /workspace/hello.py", "- NEW ran hello.py", "### In Progress",
                 "- NEW checking the output"],
    "key_decisions": ["- KEEP use the write tool"],
    "next_steps": ["1. NEW commit hello.py"],
    "critical_context": ["- NEW /workspace/hello.py exists"],
}


def judge(slot, line):
    return 0.05 if "STALE" in line else 0.95


def writer(true=TRUE, calls=None):
    """The target continues a slot: its lines not yet in the branch, cut at a stop string as sglang cuts."""
    def complete(text, sampling):
        slot, accepted = slot_of(text), accepted_of(text)
        out = "".join(line + "\n" for line in true[slot] if line not in accepted)
        stops = [sampling.stop] if isinstance(sampling.stop, str) else list(sampling.stop or ())
        cut = min((out.find(s) for s in stops if s and s in out), default=-1)
        out = out[:cut + 1] if cut >= 0 else out  # "\n#": the line before the heading keeps its newline
        if calls is not None:
            calls.append((slot, tuple(accepted), out))
        return out
    return complete


def run(previous=PREVIOUS, method="target_delta", true=TRUE, calls=None):
    target = BatchJudgeBackend(judge=judge, complete=writer(true, calls))
    return run_method(method, MESSAGES, target=target, previous_summary=previous), target


def lines(res, slot):
    return [(line.text, line.origin) for line in {s.name: s for s in res.slots}[slot].lines]


def test_held_lines_are_copied_and_only_the_new_ones_written():
    calls = []
    res, _ = run(calls=calls)
    assert res.method == "target_delta"
    assert lines(res, "goal") == [("- KEEP create /workspace/hello.py", LineOrigin.CARRIED),
                                  ("- NEW print Hello, World!", LineOrigin.TARGET)]
    # the new Done line lands under Done: the generation before the carried heading stopped at it
    assert [t for t, _ in lines(res, "progress")] == TRUE["progress"]
    assert "STALE" not in res.summary
    # every generation continued after the held lines: the target never wrote a held line again
    goal = [acc for slot, acc, _ in calls if slot == "goal"]
    assert goal and all(acc[:1] == ("- KEEP create /workspace/hello.py",) for acc in goal)
    # ... and never a carried heading: the generation for Done stopped where In Progress starts
    assert not any("### In Progress" in out for _, _, out in calls)
    assert res.stats.carried_lines == 3 and res.stats.carried_proposed == 5


def test_one_slots_carried_lines_cost_one_batch_after_their_shared_prefix():
    _, target = run()
    batches = [texts for kind, texts in target.requests if kind == "verify_batch"]
    per_slot = {}
    for texts in batches:
        per_slot[slot_of(texts[0])] = per_slot.get(slot_of(texts[0]), 0) + 1
    assert per_slot == {"goal": 1, "progress": 1, "key_decisions": 1}
    assert target.kinds("verify") == []  # no carried line judged on its own, no written line judged at all
    assert sorted(len(texts) for texts in batches) == [1, 2, 2]
    # a batch of two or more shares its criterion: prefilled once before it, then each item adds its line
    warmed = target.kinds("prefill")[1:]  # after the fork's prefill of the shared prefix
    assert len(warmed) == 2 and {slot_of(t) for t in warmed} == {"goal", "progress"}
    for texts in batches:
        if len(texts) > 1:
            prefix = next(p for p in warmed if slot_of(p) == slot_of(texts[0]))
            assert all(t.startswith(prefix) and "still holds" in prefix for t in texts)
            assert all(t[len(prefix):].startswith("<line>\n") for t in texts)


def test_without_a_previous_summary_it_is_target_self():
    delta, target = run(previous=None)
    plain, _ = run(previous=None, method="target_self")
    assert delta.summary == plain.summary
    assert not any(kind.startswith("verify") for kind, _ in target.requests)  # nothing to judge


def test_a_target_that_repeats_a_held_line_has_it_once():
    again = {**TRUE, "key_decisions": ["- KEEP use the write tool", "- NEW keep it small"]}

    def repeating(text, sampling):  # writes the whole slot again, held line included
        return "".join(line + "\n" for line in again[slot_of(text)] if line not in accepted_of(text)[1:])

    target = BatchJudgeBackend(judge=judge, complete=repeating)
    res = run_method("target_delta", MESSAGES, target=target, previous_summary=PREVIOUS)
    assert lines(res, "key_decisions") == [("- KEEP use the write tool", LineOrigin.CARRIED),
                                           ("- NEW keep it small", LineOrigin.TARGET)]


def test_auto_picks_target_delta_where_most_of_the_summary_holds():
    dep = Deployment.named(target="qwen3-8b", gpus=2, speculative="eagle3")
    fresh = choose(dep, 40_000)
    assert fresh.method == "target_self"  # nothing held: the same prediction, Target-self first
    assert fresh.predicted_s["target_delta"] == fresh.predicted_s["target_self"]
    for held in (0.6, 0.9):
        got = choose(dep, 40_000, held=held)
        assert got.method == "target_delta", got.reason
        assert got.predicted_s["target_delta"] < got.predicted_s["target_self"]
    assert choose(dep, 40_000, held=0.9).predicted_s["target_delta"] < choose(dep, 40_000, held=0.6).predicted_s[
        "target_delta"]


def test_a_generation_that_skips_the_next_carried_heading_files_nothing_under_it():
    # before: the generation opening with "### Blocked" ended the Done section, but its other lines stayed
    # queued and were proposed after the carried "### In Progress": the blocked item landed there and
    # "### Blocked" was lost
    previous = "## Progress\n### Done\n- KEEP wrote /workspace/hello.py\n### In Progress\n- KEEP waiting on CI"

    def skipping(text, sampling):  # the target goes straight to Blocked wherever it writes Progress
        if slot_of(text) != "progress" or "### Blocked" in accepted_of(text):
            return ""
        return "### Blocked\n- x blocked item\n"

    target = BatchJudgeBackend(judge=judge, complete=skipping)
    res = run_method("target_delta", MESSAGES, target=target, previous_summary=previous)
    assert [t for t, _ in lines(res, "progress")] == [
        "### Done", "- KEEP wrote /workspace/hello.py", "### In Progress", "- KEEP waiting on CI",
        "### Blocked", "- x blocked item"]


def test_the_target_writes_at_the_configured_temperature():
    # before: the target writer sent temperature 0 whatever the config said
    seen = []

    def complete(text, sampling):
        seen.append(sampling.temperature)
        return writer()(text, sampling)

    target = BatchJudgeBackend(judge=judge, complete=complete)
    run_method("target_self", MESSAGES, target=target, config={"repair_temperature": 0.5})
    assert len(seen) >= 6 and set(seen) == {0.5}
