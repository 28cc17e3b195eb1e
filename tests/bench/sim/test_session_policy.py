"""The session policy the session benchmark replays (pure: token counts, no simulator)."""

import json

from speccompact_hermes import policy as hermes_policy

from bench.sim import session_policy as sp


def tokens(m: dict) -> int:
    return len(json.dumps(m)) // 4


def tool_loop(n: int, size: int = 8000, request_after_head: bool = False) -> list[dict]:
    out = [{"role": "system", "content": "sys"}]
    if request_after_head:  # the request falls outside the protected head, so the tail anchors on it
        out += [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "set up"}, {"role": "assistant", "content": "done"}]
    out.append({"role": "user", "content": "read every module"})
    for i in range(n):
        out += [{"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function",
                 "function": {"name": "read_file", "arguments": json.dumps({"path": f"m{i}.py"})}}]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": f"{i} " + "x" * size}]
    return out


def pairs_ok(ms: list[dict]) -> bool:
    calls = sorted(tc["id"] for m in ms for tc in m.get("tool_calls") or [])
    return calls == sorted(m["tool_call_id"] for m in ms if m.get("role") == "tool")


def test_trigger_follows_hermes():
    assert [sp.Policy(window=w).trigger for w in (64_000, 80_000, 100_000, 1_000_000)] == \
        [54_400, 64_000, 75_000, 500_000]
    policy = sp.Policy(window=100_000)
    assert (policy.trigger, policy.tail_tokens, policy.soft) == (75_000, 15_000, 60_000)


def test_looped_session_has_fresh_ids_and_whole_pairs():
    base = tool_loop(3)
    session = sp.looped_session(base, 10 * sum(tokens(m) for m in base), tokens)
    ids = [tc["id"] for m in session for tc in m.get("tool_calls") or []]
    assert len(ids) == len(set(ids)) > 3 and pairs_ok(session)
    assert sum(m["role"] == "system" for m in session) == 1


def test_pruning_and_the_cut_keep_a_tool_loop_inside_the_window():
    """One request, forty reads: without pruning the tail (everything after the request) is ~80k tokens.

    (Checked: with ``sp.prune`` returning the context unchanged this fails.)
    """
    policy = sp.Policy(window=64_000)
    ctx = tool_loop(40, request_after_head=True)
    step = sp.plan(ctx, tokens, policy, first=True)
    mid = sp.middle(step)
    after = sp.assemble(step, "## Goal\n- read")
    assert mid and pairs_ok(mid) and pairs_ok(after)
    assert sum(tokens(m) for m in after) < policy.trigger < sum(tokens(m) for m in ctx)


def test_the_prepared_prefix_starts_the_middle_at_the_trigger():
    """What makes an ahead-of-time compaction reusable: its messages open the later middle unchanged."""
    policy = sp.Policy(window=64_000)
    ctx = tool_loop(60)
    soft = next(k for k in range(4, len(ctx)) if sum(tokens(m) for m in ctx[:k]) >= policy.soft)
    trig = next(k for k in range(soft, len(ctx)) if sum(tokens(m) for m in ctx[:k]) >= policy.trigger)
    early, late = sp.plan(ctx[:soft], tokens, policy, True), sp.plan(ctx[:trig], tokens, policy, True)
    pre = sp.prefix(early)
    assert pre and late.start == early.start
    assert sp.wire(late.ctx[late.start:late.start + len(pre)]) == sp.wire(pre)
    assert len(pre) < len(sp.middle(late))


def test_the_trigger_and_the_pruning_are_the_plugins_own_functions():
    """The session benchmark measures the plugin as shipped: no second copy of its policy here."""
    assert sp.hermes_trigger is hermes_policy.hermes_trigger
    assert sp.pruned_view is hermes_policy.pruned_view


def test_the_plan_prunes_exactly_as_the_plugin_does():
    """Old outputs become the plugin's stubs (Hermes's wording), with the plugin's prune boundary."""
    policy = sp.Policy(window=64_000)
    ctx = tool_loop(40, request_after_head=True)
    step = sp.plan(ctx, tokens, policy, first=True)
    want, n, boundary = hermes_policy.pruned_view(ctx, tail_tokens=policy.tail_tokens,
                                                  protect_last_n=policy.protect_last_n)
    assert n > 0 and step.ctx == want and step.boundary == boundary
    assert step.ctx[7]["content"] == "[read_file] read m0.py from line 1 (8,002 chars)"
    assert ctx[7]["content"].startswith("0 xxx")  # the caller's context is only read
