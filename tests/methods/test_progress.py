"""Progress with totals: blocks i of n, slots done per block, judged lines and tokens, ending on the result's stats."""

import pytest

from sgl_speccompact.methods.progress import Progress, Tracker, describe, tokens
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.methods.request import MethodRequest
from sgl_speccompact.result import CompactionResult, CompactionStats, RequestCount, StatsRecorder
from tests.methods.test_chunking_window import backends, history
from tests.support.scripted import ScriptedBackend, slot_of


def stats_numbers(stats) -> tuple[int, int, int]:
    """(judged, accepted, tokens) as the result's stats give them."""
    used = sum(stats.totals(s).prompt_tokens + stats.totals(s).completion_tokens for s in stats.requests)
    return stats.proposed_lines, stats.accepted_lines, used


def test_a_chunked_compaction_reports_every_block_and_ends_on_the_result_stats():
    target, drafter, _ = backends()
    reports: list[Progress] = []
    res = run_method("speccompact", MethodRequest(history(120_000), on_progress=reports.append),
                     target=target, drafter=drafter)
    assert res.chunks >= 3
    last = reports[-1]
    assert (last.block, last.blocks, last.slots_done, last.slots, last.block_done) == (res.chunks, res.chunks, 6, 6, True)
    assert (last.judged_lines, last.accepted_lines, last.tokens) == stats_numbers(res.stats)
    assert last.tokens > 0 and last.judged_lines > 0
    # every block in order, each ending with all six slots done; totals only grow
    ends = [p for p in reports if p.block_done]
    assert [p.block for p in ends] == list(range(1, res.chunks + 1))
    assert all(p.blocks == res.chunks and p.slots_done == 6 for p in ends)
    for a, b in zip(reports, reports[1:]):
        assert b.tokens >= a.tokens and b.judged_lines >= a.judged_lines and b.block >= a.block
    # inside a block the slots are counted one by one
    first = [p.slots_done for p in reports if p.block == 1 and not p.block_done]
    assert first[-1] == 6 and set(range(1, 7)) <= set(first)


@pytest.mark.parametrize("method", ["target_self", "hermes"])
def test_methods_without_a_judge_end_on_their_stats_too(method):
    if method == "hermes":
        target = ScriptedBackend(complete=lambda text, params: "## Active Task\nread the modules\n\n## Goal\n- a\n")
    else:
        target = ScriptedBackend(complete=lambda text, params: f"- {slot_of(text)} line\n")
    reports: list[Progress] = []
    res = run_method(method, MethodRequest(history(2_000), on_progress=reports.append), target=target)
    last = reports[-1]
    assert last.block_done and (last.block, last.blocks) == (1, 1)
    assert last.slots_done == last.slots == len(res.slots) - 1  # every section but the exact ledger
    assert (last.judged_lines, last.accepted_lines, last.tokens) == stats_numbers(res.stats)


def test_speccompact_on_the_emulator_ends_on_the_result_stats(make_emulated_server):
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from tests.support.methods import drafter_policy, load_trajectory, target_policy, FILES

    target = make_emulated_server(target_policy(), model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(drafter_policy(), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    reports: list[Progress] = []
    messages = load_trajectory(sorted(FILES)[0])
    res = run_method("speccompact", MethodRequest(messages, on_progress=reports.append),
                     target=SpecCompactEndpoint(target.url), drafter=SpecCompactEndpoint(drafter.url))
    assert (reports[-1].judged_lines, reports[-1].accepted_lines, reports[-1].tokens) == stats_numbers(res.stats)
    assert reports[-1].tokens == res.stats.totals("target").prompt_tokens + res.stats.totals("target").completion_tokens \
        + res.stats.totals("drafter").prompt_tokens + res.stats.totals("drafter").completion_tokens > 0


def test_tracker_adds_the_running_block_to_the_finished_ones():
    got: list[Progress] = []
    tracker = Tracker(got.append, blocks=2, slots=6)
    seen: list[dict] = []
    first = StatsRecorder()
    on_event = tracker.watch(seen.append, first)
    first.request("target", "verify", {"prompt_tokens": 100, "completion_tokens": 1})
    first.judged(True)
    on_event({"type": "slot_written", "slot": "goal"})
    assert seen == [{"type": "slot_written", "slot": "goal"}]  # the caller's events still arrive
    assert got[-1] == Progress(1, 2, 1, 6, 1, 1, 101)
    tracker.block_done(first.stats, CompactionResult(method="m", summary="s"))
    assert got[-1] == Progress(1, 2, 6, 6, 1, 1, 101, block_done=True)
    second = StatsRecorder()
    on_event = tracker.watch(None, second)
    second.judged(False)
    on_event({"type": "line", "slot": "goal", "text": "- a"})
    assert got[-1] == Progress(2, 2, 0, 6, 2, 1, 101)


def test_describe_and_tokens():
    stats = CompactionStats(requests={"target": {"verify": RequestCount(prompt_tokens=10, completion_tokens=2)},
                                      "drafter": {"draft": RequestCount(prompt_tokens=5, completion_tokens=3)}})
    assert tokens(stats) == 20
    assert describe(Progress(2, 3, 1, 6, 0, 0, 1234)) == "block 2 of 3: 1 of 6 slots, 1,234 tokens"
