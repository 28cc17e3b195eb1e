"""Chunked compaction: a history longer than the target's context, block by block."""

import copy
import doctest

import pytest
from sglang.lang.backend.base_backend import BaseBackend

from sgl_speccompact.backends.contract import BackendDefaults

from sgl_speccompact.methods import chunking
from sgl_speccompact.methods.chunking import pack, run_blocks, split_history, tool_groups
from sgl_speccompact.config import CompactConfig
from sgl_speccompact.errors import HistoryTooLongError
from sgl_speccompact.history.messages import parse_messages
from sgl_speccompact.result import CompactionResult
from sgl_speccompact.schema import OPENCLAW_SLOTS

from tests.support.scripted import count_tokens
from tests.support.methods import tool_loop

SMALL = {"max_summary_tokens": 512, "monolithic_max_tokens": 512, "max_tokens_per_slot": 80}


def test_doctests():
    failed, attempted = doctest.testmod(chunking, optionflags=doctest.ELLIPSIS)
    assert failed == 0 and attempted > 0


def test_pack_never_exceeds_room_except_a_lone_group():
    sizes = [5, 1, 4, 7, 2, 2, 2, 12, 1]
    blocks = pack(sizes, room=7)
    assert blocks[0][0] == 0 and blocks[-1][1] == len(sizes)
    assert all(a == pb for (_, pb), (a, _) in zip(blocks, blocks[1:]))  # contiguous, in order
    for a, b in blocks:
        assert sum(sizes[a:b]) <= 7 or b - a == 1


def test_groups_keep_interleaved_results_with_their_call():
    msgs = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "a", "function": {"name": "x", "arguments": ""}}]},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "b", "function": {"name": "y", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "b", "content": "B"},
            {"role": "tool", "tool_call_id": "a", "content": "A"},  # answers the call two turns back
            {"role": "user", "content": "next"}]
    assert tool_groups(parse_messages(msgs)) == [(0, 1), (1, 5), (5, 6)]


class Sized:
    """A target that only reports its context window."""

    def __init__(self, context):
        self.context = context

    def context_length(self):
        return self.context


def test_split_history_blocks_fit_and_never_split_a_pair():
    msgs = tool_loop(30)
    cfg = CompactConfig(**SMALL)
    blocks = split_history(msgs, target=Sized(6000), cfg=cfg, slots=OPENCLAW_SLOTS, previous_summary=None,
                           count=count_tokens)
    assert len(blocks) >= 3
    assert all(b[0] == msgs[0] for b in blocks)  # the system prompt opens every block
    assert [m for b in blocks for m in b[1:]] == msgs[1:]  # every other message once, in order
    for b in blocks:
        parse_messages(b)  # raises if a tool result lost its call
    room = chunking.block_room(6000, chunking.overhead_tokens(OPENCLAW_SLOTS, cfg, count_tokens), cfg, 0)
    for b in blocks:
        assert sum(count_tokens([chunking._render_turn(t) for t in parse_messages(b)])) <= room
    # unknown context, or one that holds everything: one block, untouched
    assert split_history(msgs, target=BackendDefaults(), cfg=cfg, slots=OPENCLAW_SLOTS, previous_summary=None,
                         count=count_tokens) == [msgs]
    assert split_history(msgs, target=Sized(10**7), cfg=cfg, slots=OPENCLAW_SLOTS, previous_summary=None,
                         count=count_tokens) == [msgs]


def test_an_oversized_tool_output_is_stubbed_and_a_tiny_context_is_a_typed_error():
    msgs = tool_loop(2, lines=2000)
    cfg = CompactConfig(**SMALL)
    before = copy.deepcopy(msgs)
    blocks = split_history(msgs, target=Sized(6000), cfg=cfg, slots=OPENCLAW_SLOTS, previous_summary=None,
                           count=count_tokens)
    stubbed = [m for b in blocks for m in b if m["role"] == "tool"]
    assert all(m["content"].startswith("[pruned tool output: read_file") for m in stubbed)
    assert msgs == before
    with pytest.raises(HistoryTooLongError):
        split_history(msgs, target=Sized(1500), cfg=cfg, slots=OPENCLAW_SLOTS, previous_summary=None,
                      count=count_tokens)


def test_run_blocks_chains_summaries_and_adds_the_cost():
    seen = []

    def one(block, previous, last):
        seen.append((len(block), previous, last))
        res = CompactionResult(method="m", summary=f"S{len(seen)}")
        res.stats.proposed_lines, res.stats.total_wall_s = 2, 1.5
        res.stats.layout, res.stats.agent_tokens, res.stats.agent_cached_tokens = "agent", 100, 40
        return res

    out = run_blocks([[1], [2, 2], [3]], "S0", one)
    assert seen == [(1, "S0", False), (2, "S1", False), (1, "S2", True)]
    assert out.summary == "S3" and out.chunks == 3
    assert out.stats.proposed_lines == 6 and out.stats.total_wall_s == 4.5
    assert (out.stats.layout, out.stats.agent_tokens, out.stats.agent_cached_tokens) == ("agent", 300, 120)
    single = run_blocks([[1]], None, one)
    assert single.chunks == 1


@pytest.fixture
def small_target(make_emulated_server):
    from sgl_speccompact.emulator import ControlledAcceptancePolicy

    target = make_emulated_server(policy=ControlledAcceptancePolicy(seed=1), model_path="Qwen/Qwen3-8B",
                                  context_length=6000)
    drafter = make_emulated_server(policy=ControlledAcceptancePolicy(seed=2), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    return target, drafter


def test_a_3x_window_middle_compacts_in_chunks(small_target):
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.methods.registry import run_method

    target_srv, drafter_srv = small_target
    target = SpecCompactEndpoint(target_srv.url, timeout_s=60)
    drafter = SpecCompactEndpoint(drafter_srv.url, lora_path="drafter", timeout_s=60)
    assert target.context_length() == 6000
    msgs = tool_loop(24)
    history_tokens = sum(target.count_tokens([m["content"] for m in msgs]))
    assert history_tokens >= 3 * 6000  # the middle is three windows long
    before = copy.deepcopy(msgs)
    res = run_method("speccompact", msgs, target=target, drafter=drafter, config=SMALL)
    assert res.chunks >= 3 and res.summary.strip()
    assert msgs == before
    # without chunking (a context the config claims is huge) the same history is refused upstream
    with pytest.raises(HistoryTooLongError):
        run_method("speccompact", msgs, target=target, drafter=drafter,
                   config={**SMALL, "target_context_tokens": 10**7})


def test_a_history_that_fits_by_bytes_asks_no_tokenizer():
    def refuse(texts):
        raise AssertionError("the tokenizer was asked")

    msgs = tool_loop(2, lines=5)
    assert split_history(msgs, target=Sized(32768), cfg=CompactConfig(), slots=OPENCLAW_SLOTS,
                         previous_summary="## Goal\n- a", count=refuse) == [msgs]
    with pytest.raises(AssertionError, match="tokenizer was asked"):  # near the window it must count
        split_history(tool_loop(40), target=Sized(32768), cfg=CompactConfig(), slots=OPENCLAW_SLOTS,
                      previous_summary=None, count=refuse)


@pytest.fixture
def strict_method():
    """A method whose "server" refuses a history of more than 3000 target tokens, as sglang does."""
    from sgl_speccompact.methods.assembly import OneShot
    from sgl_speccompact.errors import PromptTooLongError
    from sgl_speccompact.methods.pipeline import REGISTRY, register

    seen = []

    @register("strict", fixed_sections="one Summary section")
    def strict(job):
        n = job.count([job.history])[0]
        seen.append((len(job.turns), n, job.previous_summary))
        if n > 3000:
            raise PromptTooLongError("the prompt does not fit", field="messages")
        return OneShot(f"## Summary\n- {len(job.turns)} turns\n")

    yield seen
    REGISTRY.pop("strict")


class SizedScripted(BackendDefaults, BaseBackend):
    """A target that counts like the scripted backends and reports a 6,000-token window."""

    def count_tokens(self, texts):
        return count_tokens(texts)

    def context_length(self):
        return 6000


def test_a_history_the_estimate_underrates_is_cut_after_the_server_refuses_it(strict_method):
    from sgl_speccompact.methods.registry import run_method

    words = " ".join(["a"] * 700)  # 1,400 bytes (an estimated 467 tokens), 700 counted tokens
    msgs = [{"role": "user", "content": "go"}] + [
        {"role": "assistant" if i % 2 else "user", "content": words} for i in range(6)]
    res = run_method("strict", msgs, target=SizedScripted(), config=SMALL)
    assert strict_method[0][1] > 3000  # the first try sent everything, as the estimate said it fits
    assert res.chunks >= 2 and all(n <= 3000 for _, n, _ in strict_method[1:])
    assert strict_method[-1][2] is not None  # the last block built on the one before


@pytest.mark.parametrize("name", ["qwen3-8b.toml", "qwen3-32b.toml", "qwen3-32b-2xh100.toml"])
def test_shipped_launch_configs_set_the_context_length(name):
    from pathlib import Path

    from sgl_speccompact.launch.command_line import build_parser
    from sgl_speccompact.launch.plan import build_plan
    from sgl_speccompact.launch.servers import server_command

    path = Path(__file__).resolve().parents[2] / "launch" / name
    plan = build_plan(build_parser("x").parse_args(["--config", str(path)]))
    for spec in plan.servers:  # the drafter sees every block too: the same window
        cmd = server_command(spec)
        assert cmd[cmd.index("--context-length") + 1] == "40960"


def words(n: int) -> str:
    return " ".join(["w"] * n)  # n tokens for count_tokens


def test_a_previous_summary_too_long_for_the_context_is_named_with_what_fits():
    # before: 413 on "messages" with "leaves -131691 for the history"
    msgs = tool_loop(3)
    cfg = CompactConfig(**SMALL)

    def split(previous_tokens: int):
        return split_history(msgs, target=Sized(6000), cfg=cfg, slots=OPENCLAW_SLOTS,
                             previous_summary=words(previous_tokens), count=count_tokens, exact=True)

    with pytest.raises(HistoryTooLongError) as got:
        split(200_000)
    err = got.value
    assert err.field == "previous_summary"
    assert not any(w.startswith("-") and w[1:].isdigit() for w in err.message.split())  # no negative room
    fit = int(err.message.split("at most ")[1].split()[0])
    assert "has 200000 tokens" in err.message and "shorten it" in err.message
    assert split(fit)  # what it says fits, fits
    with pytest.raises(HistoryTooLongError, match="previous_summary"):
        split(fit + 1)


def test_a_context_too_small_for_any_history_says_so_without_a_negative_number():
    msgs = tool_loop(3)
    with pytest.raises(HistoryTooLongError) as got:
        split_history(msgs, target=Sized(1200), cfg=CompactConfig(**SMALL), slots=OPENCLAW_SLOTS,
                      previous_summary=None, count=count_tokens, exact=True)
    assert got.value.field == "messages" and "too small for this method" in got.value.message
    assert not any(w.startswith("-") and w[1:].isdigit() for w in got.value.message.split())
