"""SpecCompact's levers change the simulator's requests as intended (timings SIMULATED, never asserted).

- ``sub_slot_branches`` on Target-self: Progress runs as one branch per sub-section (more forks,
  each stopping at the next heading), and Target-self keeps what it kept in one branch.

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

