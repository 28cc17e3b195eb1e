"""SpecCompact's levers change the simulator's requests as intended (timings SIMULATED, never asserted).

- ``sub_slot_branches`` on Target-self: Progress runs as one branch per sub-section (more forks,
  each stopping at the next heading), and Target-self keeps what it kept in one branch.
- ``drafter_digest``: the drafter's prompts are shorter; the target's requests are the same
  bodies, so what the target reads and decides does not move.
- ``lockstep_branches``: the same request bodies and summary, sent in rounds.

Every request body is checked with sglang's own contract check.
"""

from __future__ import annotations

from sglang.srt.entrypoints.api_contract import generate_contract_error

from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.schema import OPENCLAW_SLOTS
from sgl_speccompact.emulator import CostModel
from sgl_speccompact.emulator.cost import DEPLOYMENTS, Scheduling
from bench.sim.simulator import build_simulation
from bench.sim.sources import synthetic_history
from bench.sim.workload import SummaryWorkload, decisions

from tests.support.sim import sent_bodies

SLOTS = tuple(s.name for s in OPENCLAW_SLOTS)
COSTS = {"target": CostModel.for_model("qwen3-8b"), "drafter": CostModel.for_model("qwen3-0.6b")}


def run(path, lines, method: str, config: dict, seed: int = 2):
    """One simulated compaction of a ~1.5k-token history; its result, report and /generate bodies."""
    wl = SummaryWorkload(lines, SLOTS, seed=seed, p_accept=0.6)
    sim = build_simulation(path, {"target": wl, "drafter": wl}, COSTS, DEPLOYMENTS["two-gpu"], Scheduling())
    model = sim.servers["target"].model
    wl.bind(model)
    history = synthetic_history(lines, 1500, lambda t: len(model.encode(t)), seed=seed)
    sent: list[tuple[str, dict]] = []
    sent_bodies(sim, sent)
    target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
    kw = {"drafter": drafter} if method == "speccompact" else {}
    result, report = sim.run(lambda: run_method(method, history, target=target, config=config, **kw))
    for _, body in sent:
        assert generate_contract_error(body) is None, generate_contract_error(body)
    return result, report, sent


def stops(body: dict) -> list:
    stop = (body.get("sampling_params") or {}).get("stop") or []
    return [stop] if isinstance(stop, str) else list(stop)


def test_split_slots_fork_a_branch_per_sub_section_on_target_self(lines, emulator_tokenizer_path):
    one, rep_one, sent_one = run(emulator_tokenizer_path, lines, "target_self", {"sub_slot_branches": False})
    split, rep_split, sent_split = run(emulator_tokenizer_path, lines, "target_self", {"sub_slot_branches": True})
    sections = len(next(s for s in OPENCLAW_SLOTS if s.name == "progress").sections)
    writes = lambda sent: [b for s, b in sent if s == "target" and (b.get("sampling_params") or {}).get(
        "max_new_tokens")]
    # Progress: one generation per sub-section instead of one for the slot
    assert len(writes(sent_split)) == len(writes(sent_one)) + sections - 1
    headed = [b for b in writes(sent_split) if "\n#" in stops(b)]
    assert len(headed) == sections  # each sub-section stops where the next heading starts
    assert not any("\n#" in stops(b) for b in writes(sent_split) if b not in headed)
    assert not any("\n#" in stops(b) for b in writes(sent_one))
    # the stop list does not grow from call to call (a shared list did: sglang extends it in place)
    assert all(len(stops(b)) == len(set(stops(b))) for b in headed)
    assert len({tuple(stops(b)) for b in headed}) == 1
    # the same lines kept, in the same order, within the same budget
    assert decisions(split) == decisions(one) and split.summary == one.summary
    progress = [ln.text for ln in next(s for s in split.slots if s.name == "progress").lines]
    assert [ln for ln in progress if ln.startswith("### ")] == [f"### {t}" for t in ("Done", "In Progress", "Blocked")]


def test_drafter_digest_shortens_the_drafter_prompts_only(lines, emulator_tokenizer_path):
    config = {"drafter_digest_tokens": 8}  # every synthetic tool output is longer than 16 tokens
    whole, rep_whole, sent_whole = run(emulator_tokenizer_path, lines, "speccompact", {**config, "drafter_digest": False})
    digest, rep_digest, sent_digest = run(emulator_tokenizer_path, lines, "speccompact", {**config, "drafter_digest": True})

    def prompt(server, report):  # the longest prompt a server got (the drafter's: history + slot request)
        return max(r.prompt_tokens / max(r.items, 1) for r in report["requests"]
                   if r.server == server and r.path == "/generate")

    assert prompt("drafter", rep_digest) < 0.9 * prompt("drafter", rep_whole)
    assert prompt("target", rep_digest) == prompt("target", rep_whole)
    # the target reads exactly what it read before: the same bodies, the same decisions
    target = lambda sent: sorted(repr(b) for s, b in sent if s == "target")
    assert target(sent_digest) == target(sent_whole)
    assert decisions(digest) == decisions(whole) and digest.summary == whole.summary



def per_instant(report: dict) -> float:
    """``/generate`` requests issued per distinct virtual instant (both servers)."""
    times = [r.issued for r in report["requests"] if r.path == "/generate"]
    return len(times) / len(set(times))


def test_lockstep_branches_send_in_rounds_and_keep_the_summary(lines, emulator_tokenizer_path):
    free, rep_free, sent_free = run(emulator_tokenizer_path, lines, "speccompact", {})
    step, rep_step, sent_step = run(emulator_tokenizer_path, lines, "speccompact", {"lockstep_branches": True})
    assert step.summary == free.summary  # only the order of requests moves
    assert sorted(map(repr, (b for _, b in sent_step))) == sorted(map(repr, (b for _, b in sent_free)))
    # requests leave together, a round at a time (their timings are raced in bench/, not asserted)
    assert per_instant(rep_step) > 1.25 * per_instant(rep_free)  # 1.9 vs 1.1 on this draw; prefetches go alone
    assert step.stats.wall_time_s.get("lockstep_wait", 0.0) > 0.0
    assert "lockstep_wait" not in free.stats.wall_time_s
