"""The simulated judge's stated error rates, held lines at drawn places and repeats (bench/sim/mistakes.py).

Without mistakes the workload answers exactly as it always did (the race's
committed rows reproduce: tests/bench/test_bench_race.py); with them the
judge errs at the stated rates, what it gets wrong costs decoding, and the
summary keeps less of the truth and more lines that do not hold.  Timings
here are SIMULATED and never asserted.
"""

from __future__ import annotations

import pytest

from bench.sim.mistakes import Mistakes, flips, remaining, truth_kept, write_order
from bench.sim.workload import SummaryWorkload, draw_hold
from sgl_speccompact.schema import OPENCLAW_SLOTS

SLOTS = tuple(s.name for s in OPENCLAW_SLOTS)


def chain(lines, h: float, seed: int, mistakes: Mistakes | None = None, k: int = 2) -> list[SummaryWorkload]:
    mistakes = mistakes or Mistakes()
    out = [SummaryWorkload(lines, SLOTS, seed=seed * 1000, mistakes=mistakes)]
    for i in range(1, k):
        out.append(SummaryWorkload(lines, SLOTS, seed=seed * 1000 + i, previous=out[-1],
                                   hold=draw_hold(h, seed, i), mistakes=mistakes))
    return out


def test_the_judge_errs_at_the_stated_rates_and_never_without_them():
    lines = [[f"- line {i}"] for i in range(4000)]
    fa = sum(flips(Mistakes(false_accept=0.15), 7, x, bad=True) for x in lines) / len(lines)
    fr = sum(flips(Mistakes(false_reject=0.05), 7, x, bad=False) for x in lines) / len(lines)
    assert fa == pytest.approx(0.15, abs=0.02) and fr == pytest.approx(0.05, abs=0.015)
    assert not any(flips(Mistakes(false_accept=0.3), 7, x, bad=False) for x in lines)  # only what does not hold
    assert not any(flips(Mistakes(), 7, x, bad=b) for x in lines for b in (True, False))
    with pytest.raises(ValueError):
        Mistakes(false_accept=1.5)
    with pytest.raises(ValueError):
        Mistakes(held_positions="last")


def test_without_mistakes_every_verdict_is_the_perfect_judges(lines):
    for wl in chain(lines, 0.6, 3, k=3):
        judged = [ln for v in wl.true.values() for ln in v] + [ln for v in wl.drafted.values() for ln in v] \
            + sorted(wl.earlier)[:200]
        assert all(wl.holds([ln]) is (ln not in wl.wrong) for ln in judged)


def test_writers_follow_what_is_written_not_where():
    items = ["### Done", "- h1", "- f1", "- h2", "- f2"]
    # the truth's beginning: the place by count, as the workload always counted
    assert remaining(items, ["### Done", "- h1"]) == [2, 3, 4]
    # held lines carried first while they sit among new ones: the new ones are what is left
    assert remaining(items, ["### Done", "- h1", "- h2"]) == [2, 4]
    # a held line falsely rejected (not written) is written again
    assert remaining(items, ["### Done", "- h2"]) == [1, 2, 4]
    # an accepted wrong draft stands for the true line at its place: that one is lost
    drafted = ["### Done", "- h1", "- WRONG", "- h2", "- f2"]
    assert remaining(items, ["### Done", "- h1", "- WRONG"], drafted) == [3, 4]
    # passing a carried line on the way, a writer may write it again
    order = write_order(items, ["### Done", "- h1", "- h2"], carried={"- h1", "- h2"}, repeat=lambda line: True)
    assert order == [(2, False), (3, True), (4, False)]


def test_held_lines_sit_at_drawn_places_in_their_old_order(lines):
    first = chain(lines, 0.6, 4)[1]
    drawn = chain(lines, 0.6, 4, Mistakes(held_positions="drawn"))[1]
    assert first.held_lines == drawn.held_lines and {ln for v in first.true.values() for ln in v} == \
        {ln for v in drawn.true.values() for ln in v}  # the same truth, ordered otherwise
    moved = 0
    for slot in SLOTS:
        for (_, a), (_, b) in zip(first.parts[slot], drawn.parts[slot]):
            held = [ln for ln in b if ln in drawn.held_lines]
            assert held == [ln for ln in a if ln in first.held_lines]  # their order kept
            moved += b[:len(held)] != held
    assert moved > 0  # somewhere a new line now comes before a held one


def test_truth_kept_counts_retention_and_staleness():
    assert truth_kept(["- a", "- b", "### Done", "- (none)"], "## G\n- a\n- old\n- (none)") == (2, 1, 2, 1)


def _compact(lines, path, method: str, mistakes: Mistakes, seed: int = 5):
    """One compaction of ``method`` on the simulator, on a summary evolved at h = 0.6; the draw and the result."""
    from sgl_speccompact.core.prompts import section
    from sgl_speccompact.emulator import CostModel
    from sgl_speccompact.emulator.cost import DEPLOYMENTS, Scheduling
    from sgl_speccompact.methods.registry import run_method
    from bench.sim.simulator import build_simulation
    from bench.sim.sources import synthetic_history

    before, now = chain(lines, 0.6, seed, mistakes)
    previous = "\n\n".join(section(s, before.true[s.name]) for s in OPENCLAW_SLOTS)
    costs = {"target": CostModel.for_model("qwen3-8b"), "drafter": CostModel.for_model("qwen3-0.6b")}
    sim = build_simulation(path, {"target": now, "drafter": now}, costs, DEPLOYMENTS["two-gpu"], Scheduling())
    model = sim.servers["target"].model
    now.bind(model)
    history = synthetic_history(lines, 900, lambda t: len(model.encode(t)), seed=seed)
    target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
    result, report = sim.run(lambda: run_method(method, history, target=target, drafter=drafter,
                                                previous_summary=previous))
    return now, result, report


@pytest.mark.slow
def test_a_false_accept_rate_lowers_retention_and_raises_staleness(lines, emulator_tokenizer_path):
    perfect = _compact(lines, emulator_tokenizer_path, "speccompact", Mistakes())
    erring = _compact(lines, emulator_tokenizer_path, "speccompact", Mistakes(false_accept=0.3))
    (t0, k0, n0, u0), (t1, k1, n1, u1) = (wl.truth_kept(result.summary) for wl, result, _ in (perfect, erring))
    assert t0 == t1 and u0 == 0  # the same truth; the perfect judge keeps nothing that does not hold
    assert u1 > 0 and u1 / n1 > u0 / n0  # staleness: stale carried lines and wrong drafts kept
    assert k1 / t1 < k0 / t0  # retention: an accepted wrong draft stood for a true line, now lost


@pytest.mark.slow
def test_a_false_reject_costs_the_target_decoding_it_did_not_need(lines, emulator_tokenizer_path):
    def decoded(mistakes):
        _, _, report = _compact(lines, emulator_tokenizer_path, "target_delta", mistakes)
        return sum(r.completion_tokens for r in report["requests"] if r.server == "target")

    # held lines judged stale are written again by the target (and then dropped as stale: decoded for nothing)
    assert decoded(Mistakes(false_reject=0.3)) > decoded(Mistakes())
