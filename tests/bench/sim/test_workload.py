"""The benchmark workload decides from what is judged, never from the prompt's layout.

Every switch that only changes how prompts are laid out or how requests are
sent (shared prefix, short judge suffix, draft buffering, pipelining,
line-aware stopping, one-request judging, sub-slot branches) must make the
same decisions on the same drafted lines; timings here are SIMULATED and
never asserted.
"""

from __future__ import annotations

import pytest

from sgl_speccompact.config import OPTIMIZATIONS, CompactConfig
from sgl_speccompact.core.judge_prompts import judge_rubric
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.core.prompts import target_slot_request, verify_question
from sgl_speccompact.schema import OPENCLAW_SLOTS
from sgl_speccompact.emulator import CostModel
from sgl_speccompact.emulator.cost import DEPLOYMENTS, Scheduling
from bench.sim.simulator import build_simulation
from bench.sim.sources import synthetic_history, trajectory_section_sizes
from bench.sim.workload import SummaryWorkload, decisions, decisions_digest

from tests.support.paths import TRAJECTORIES

SLOTS = tuple(s.name for s in OPENCLAW_SLOTS)
GOAL = OPENCLAW_SLOTS[0]
COSTS = {"target": CostModel.for_model("qwen3-8b"), "drafter": CostModel.for_model("qwen3-0.6b")}
# switches that change only the layout or the request pattern: decisions must not move
LAYOUT_ONLY = ("short_judge_suffix", "line_aware_stopping", "one_request_judging", "source_judge_on_prefix",
               "send_token_ids")


def turn(user: str, assistant: str = "") -> str:
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{assistant}"


def test_a_repair_under_a_rubric_is_a_repair_not_a_judgement(lines):
    # the rubric (both label words) at the end of the user turn, as with the shared prefix after the slot
    # request: the workload must still write the slot's true line, not a label word
    wl = SummaryWorkload(lines, SLOTS, seed=3)
    rubric = judge_rubric("positive", "negative")
    request = target_slot_request(GOAL) + "\n\n<conversation>\n...\n</conversation>\n\n" + rubric
    out = wl.generate("<|im_start|>system\nS<|im_end|>\n" + turn(request), [], {"sampling_params": {"stop_strs": ["\n"]},
                                                                                  "lora_path": None})
    assert out == wl.true["goal"][0] + "\n"


@pytest.mark.parametrize("short", [True, False])
def test_verdicts_depend_on_the_line_only(lines, short):
    wl = SummaryWorkload(lines, SLOTS, seed=3)
    wrong = next(d for d in wl.drafted["goal"] if d in wl.wrong)
    right = wl.true["goal"][0]
    for line, accepted in ((wrong, False), (right, True)):
        q = verify_question(GOAL, line, "positive", "negative", short=short)
        for head in ("", "<|im_start|>user\n" + judge_rubric("positive", "negative") + "<|im_end|>\n"):
            verdict = wl.generate(head + turn(q), [], {"sampling_params": {}, "lora_path": None})
            assert verdict == ("positive" if accepted else "negative")


def test_sections_are_counted_from_their_heading(lines):
    wl = SummaryWorkload(lines, SLOTS, seed=3)
    items = wl.true["progress"]
    blocked = items.index("### Blocked")
    params = {"sampling_params": {}, "lora_path": "drafter"}
    whole = wl.generate(turn(target_slot_request(OPENCLAW_SLOTS[2]), "\n".join(items[:blocked + 1]) + "\n"), [],
                        params)
    branch = wl.generate(turn(target_slot_request(OPENCLAW_SLOTS[2]), "### Blocked\n"), [], params)
    assert whole == branch == "".join(d + "\n" for d in wl.drafted["progress"][blocked + 1:])


@pytest.fixture(scope="module")
def sizes():
    paths = sorted(p for p in TRAJECTORIES.glob("*") if p.suffix in (".json", ".traj")) if TRAJECTORIES.is_dir() else []
    got = trajectory_section_sizes(paths)
    if not got:
        pytest.skip(f"shared trajectories absent ({TRAJECTORIES})")
    return got


def test_progress_sizes_come_from_the_trajectories(lines, sizes):
    # before: 1-3 short lines per sub-section, so no budget was ever reached
    assert all(done >= 1 and now == 1 for done, now, _ in sizes)
    assert max(sum(s) + 3 for s in sizes) > 12  # some trajectories' Progress overflows the 12-line slot
    for seed in range(4):
        wl = SummaryWorkload(lines, SLOTS, seed=seed, section_sizes=sizes)
        items = wl.true["progress"]
        parts = [len(p.split("\n")) for p in "\n".join(items).split("\n\n")]  # heading + items per sub-section
        got = tuple(0 if items[items.index(f"### {t}") + 1] == "- (none)" else n - 1
                    for t, n in zip(("Done", "In Progress", "Blocked"), parts))
        assert got in sizes


def test_repair_candidates_are_drawn_per_place_and_sample(lines):
    wl = SummaryWorkload(lines, SLOTS, seed=3, p_accept=0.5)
    got = {wl.candidate("goal", 0, k) for k in range(16)}
    assert wl.true["goal"][0] in got and len(got) > 1  # some right, some wrong (p=0.5, 16 samples)
    assert all(c in wl.wrong for c in got - {wl.true["goal"][0]})
    assert wl.candidate("goal", 0, 5) == wl.candidate("goal", 0, 5)


def variants() -> list[tuple[str, dict]]:
    names = [n for n in LAYOUT_ONLY if n in OPTIMIZATIONS]
    flips = [(f"flip {n}", {n: not CompactConfig.model_fields[n].default}) for n in names]
    return [("defaults", {}), ("none", dict.fromkeys(names, False))] + flips + [
        ("the decision judge", {"judge": "decisions"})]  # the same verdicts through sglang's /v1/decisions


@pytest.mark.slow
@pytest.mark.parametrize("deployment", ["two-gpu"])
def test_every_layout_switch_makes_the_same_decisions(lines, sizes, emulator_tokenizer_path, deployment):
    """One small history, every switch that must not change decisions flipped alone, and all off together.

    Progress is sized from the trajectories (seed 1 draws one that overflows the 12-line slot).

    The test tokenizer splits the ``\\n\\n`` after the empty think block into two tokens, so the
    plain two-request select (``one_request_judging`` off) runs into sglang's token-healing case.
    """
    wl = SummaryWorkload(lines, SLOTS, seed=1, section_sizes=sizes)
    assert sum(1 for x in wl.true["progress"] if x.strip()) > 12
    sim = build_simulation(emulator_tokenizer_path, {"target": wl, "drafter": wl}, COSTS, DEPLOYMENTS[deployment],
                           Scheduling())
    model = sim.servers["target"].model
    wl.bind(model)
    history = synthetic_history(lines, 900, lambda t: len(model.encode(t)), seed=1)
    target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
    got = {}
    for label, overrides in variants():
        result, _ = sim.run(lambda o=overrides: run_method("speccompact", history, target=target, drafter=drafter,
                                                           config=o))
        got[label] = result
    base = decisions(got["defaults"])
    kinds = {k for slot in base.values() for _, k in slot}
    assert {"accepted", "replaced"} <= kinds  # the history exercises both decisions
    assert any(len(v) > 3 for v in base.values())
    for label, result in got.items():
        assert decisions(result) == base, label
        assert decisions_digest(result) == decisions_digest(got["defaults"])


def evolved(lines, h: float, seed: int, k: int = 4) -> list[SummaryWorkload]:
    """A session's draws: compaction 0 fresh, each later one from the one before with a drawn held share."""
    from bench.sim.workload import draw_hold

    out = [SummaryWorkload(lines, SLOTS, seed=seed * 1000)]
    for i in range(1, k):
        out.append(SummaryWorkload(lines, SLOTS, seed=seed * 1000 + i, previous=out[-1],
                                   hold=draw_hold(h, seed, i)))
    return out


@pytest.mark.parametrize("h", [0.0, 0.3, 0.6, 0.9])
def test_an_evolving_summary_keeps_the_drawn_share_and_marks_the_rest_stale(lines, h):
    held = total = 0
    for seed in range(6):
        chain = evolved(lines, h, seed)
        for before, now in zip(chain, chain[1:]):
            old = [ln for v in before.true.values() for ln in v if ln.startswith("- ")]
            new = {ln for v in now.true.values() for ln in v}
            assert [len(v) for v in now.true.values()] == [len(v) for v in before.true.values()]  # same shape
            kept = [ln for ln in old if ln in new]
            assert kept == now.held_lines
            assert all(ln in now.wrong for ln in old if ln not in new)  # stale: the judge rejects it
            assert not any(ln in now.wrong for ln in kept)
            held, total = held + len(kept), total + len(old)
    assert abs(held / total - h) < 0.08  # the realized share is the swept h within sampling error


def test_held_lines_come_first_so_the_drafter_writes_only_what_is_new(lines):
    before, now = evolved(lines, 0.6, 2, k=2)
    for slot in SLOTS:
        for _title, part in now.parts[slot]:
            n = sum(1 for ln in part if ln in now.held_lines)
            assert all(ln in now.held_lines for ln in part[:n]) and not any(ln in now.held_lines for ln in part[n:])


def test_on_the_simulator_the_held_lines_are_carried_in_one_batched_request_per_branch(lines,
                                                                                       emulator_tokenizer_path):
    """The emulator answers the batched carried judgement (one ``/generate`` with a list of prompts) per line."""
    from sgl_speccompact.schema import OPENCLAW_SLOTS as SCHEMA
    from sgl_speccompact.core.prompts import section

    before, now = evolved(lines, 0.6, 5, k=2)
    previous = "\n\n".join(section(s, before.true[s.name]) for s in SCHEMA)
    sim = build_simulation(emulator_tokenizer_path, {"target": now, "drafter": now}, COSTS, DEPLOYMENTS["two-gpu"],
                           Scheduling())
    model = sim.servers["target"].model
    now.bind(model)
    history = synthetic_history(lines, 900, lambda t: len(model.encode(t)), seed=5)
    target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
    result, _ = sim.run(lambda: run_method("speccompact", history, target=target, drafter=drafter,
                                           previous_summary=previous))
    carried = [ln.text for s in result.slots for ln in s.lines if ln.origin.value == "carried"]
    assert set(carried) <= set(now.held_lines)  # no stale line carried
    assert len(carried) >= 0.7 * len(now.held_lines)  # most held lines carried (the rest: the slots' token caps)
    branches = len(SCHEMA)  # one branch per slot
    asked = result.stats.requests["target"]["verify_carried"].requests
    # per branch: one prefill of the part its questions share, then one batch, however many lines it carried
    assert 0 < asked <= 2 * branches
    previous_lines = sum(1 for v in before.true.values() for ln in v if ln.startswith("- "))
    assert len(carried) < result.stats.carried_proposed <= previous_lines  # stale ones judged too, then dropped
