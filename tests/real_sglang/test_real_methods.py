"""Every method on real sglang servers, from Python, with and without SJC.

The target and drafter are tiny scripted Qwen3 models served by
``sglang.launch_server`` on the CPU engine (``conftest.py``), so each summary
line is known in advance: the assertions read the summary text.
"""

import pytest

from tests.real_sglang import scripts
from tests.real_sglang.reading import Unchanged, assert_no_label_lines, assert_scripted, body_lines, history
from sgl_speccompact.methods.request import MethodRequest
from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.result import LineOrigin

pytestmark = pytest.mark.real_sglang

REJECTED = "Delete" + scripts.REJECT + " archives"
REPAIRED = scripts.REPAIRS["next_steps"]


def endpoints(servers, **kw):
    return SpecCompactEndpoint(servers.target.url), SpecCompactEndpoint(servers.drafter.url, **kw)


def test_speccompact_writes_the_drafts_judges_them_and_repairs_the_rejected_one(servers):
    target, drafter = endpoints(servers)
    with Unchanged(history()) as messages:
        res = run_method("speccompact", MethodRequest(messages, schema=scripts.SCHEMA), target=target, drafter=drafter,
                         config=scripts.JUDGE)
    lines = assert_scripted(res.summary)
    assert REJECTED not in res.summary and scripts.REJECT.strip() not in res.summary
    by_slot = {s.name: s for s in res.slots}
    for name, drafts in scripts.DRAFTS.items():
        texts = [ln.text for ln in by_slot[name].lines]
        if name == "next_steps":
            assert texts == [drafts[0] + ".", REPAIRED]
            repaired = by_slot[name].lines[1]
            assert repaired.origin is LineOrigin.REPAIRED and repaired.rejected_draft == REJECTED
        else:
            assert texts == [drafts[0] + ".", drafts[1]]
            assert all(ln.origin is LineOrigin.DRAFTED and ln.score > 0.9 for ln in by_slot[name].lines)
    assert len(lines) == 12
    judged = res.stats.requests["target"]["verify"].requests
    assert judged == res.stats.proposed_lines == 12  # one prefill-only request per judgement


def test_source_judge_deletes_the_repair_that_has_no_source(servers):
    target, drafter = endpoints(servers)
    res = run_method("speccompact", MethodRequest(history(), schema=scripts.SCHEMA), target=target, drafter=drafter,
                     source_judge=True, config=scripts.JUDGE)
    assert_scripted(res.summary)
    assert REPAIRED not in res.summary and scripts.NO_SOURCE.strip() not in res.summary
    report = res.source_judge
    deleted = [e["text"] for e in report["entries"] if not e["kept"]]
    assert deleted == [REPAIRED]
    assert len(body_lines(res.summary)) == 11


@pytest.mark.parametrize("sjc", [False, True])
def test_target_self_writes_every_slot_with_the_target(servers, sjc):
    target, _ = endpoints(servers)
    res = run_method("target_self", MethodRequest(history(), schema=scripts.SCHEMA), target=target, source_judge=sjc,
                     config=scripts.JUDGE)
    allowed = {scripts.REPAIRS[s] for s in scripts.MARKERS}
    lines = assert_scripted(res.summary, allowed)
    want = [scripts.REPAIRS[s] for s in scripts.MARKERS]
    if sjc:
        want = [ln for ln in want if scripts.NO_SOURCE.strip() not in ln]
    assert lines == want
    assert res.stats.requests.get("drafter", {}) == {}  # the drafter is never called


@pytest.mark.parametrize("method", ["hermes", "openclaw"])
@pytest.mark.parametrize("sjc", [False, True])
def test_monolithic_baselines_write_the_targets_one_summary(servers, method, sjc):
    target, _ = endpoints(servers)
    schema = None if method == "hermes" else scripts.SCHEMA
    res = run_method(method, MethodRequest(history(), schema=schema), target=target, source_judge=sjc,
                     config=scripts.JUDGE)
    assert_no_label_lines(res.summary)
    # the target writes its no-marker line once; the method frames it with its own headings
    assert scripts.MONOLITHIC in res.summary
    assert not set(body_lines(res.summary)) & (scripts.written() - {scripts.MONOLITHIC})
    if sjc:
        assert res.source_judge is not None and all(e["kept"] for e in res.source_judge["entries"])


@pytest.mark.parametrize("sjc", [False, True])
def test_auto_picks_a_method_that_runs_and_says_which(servers, sjc):
    target, drafter = endpoints(servers)
    res = run_method("auto", MethodRequest(history(), schema=scripts.SCHEMA), target=target, drafter=drafter,
                     source_judge=sjc, config=scripts.JUDGE)
    assert res.method in {"speccompact", "target_self"}  # the methods that take a custom schema
    assert res.stats.auto["method"] == res.method
    assert_scripted(res.summary)
    if sjc:  # the scripted repair of next_steps has no source in the history: SJC deletes it
        assert res.source_judge is not None
        assert scripts.NO_SOURCE.strip() not in res.summary


def test_a_judge_that_rejects_everything_leaves_only_target_lines(servers):
    servers.target.use(scripts.TARGET_REJECTS_ALL, "target-rejects-all")
    target, drafter = endpoints(servers)
    res = run_method("speccompact", MethodRequest(history(), schema=scripts.SCHEMA), target=target, drafter=drafter,
                     config=scripts.JUDGE)
    lines = assert_scripted(res.summary)
    assert not set(lines) & scripts.drafted()
    assert all(ln.origin is LineOrigin.REPAIRED for s in res.slots if s.name != "ledger" for ln in s.lines)
    assert lines == [scripts.REPAIRS[s] for s in scripts.MARKERS]


def test_token_id_prompts_give_the_same_summary(servers):
    target, drafter = endpoints(servers)
    messages = history()
    text = run_method("speccompact", MethodRequest(messages, schema=scripts.SCHEMA), target=target, drafter=drafter,
                      config={"send_token_ids": False, **scripts.JUDGE})
    servers.reset()
    ids = run_method("speccompact", MethodRequest(messages, schema=scripts.SCHEMA),
                     target=SpecCompactEndpoint(servers.target.url), drafter=SpecCompactEndpoint(servers.drafter.url),
                     config={"send_token_ids": True, **scripts.JUDGE})
    assert ids.summary == text.summary
    assert_scripted(ids.summary)


def test_radix_reuse_is_what_the_real_server_reports(servers):
    target, drafter = endpoints(servers)
    res = run_method("speccompact", MethodRequest(history(), schema=scripts.SCHEMA), target=target, drafter=drafter,
                     config=scripts.JUDGE)
    st = res.stats.requests["target"]
    prefill, verify = st["prefill"], st["verify"]
    assert prefill.cached_tokens == 0  # a flushed cache: the fork's prefill is cold
    # every judgement reuses the whole shared prefix the prefill left in the radix tree
    assert verify.cached_tokens >= verify.requests * (prefill.prompt_tokens - 1)
    assert res.stats.cached_ratio("target") > 0.8
    assert res.stats.cached_ratio("drafter") > 0.5


def test_target_delta_copies_the_previous_lines_that_still_hold(servers):
    # each slot's previous lines: two drafter lines, judged to still hold (a REJECT word anywhere in the
    # previous summary would sit in every prompt's shared prefix, and the marker judge would reject all)
    held = {s: [f"- {scripts.DRAFTS['goal'][0]} {i}", f"- {scripts.DRAFTS['goal'][1]} {i}"]
            for i, s in enumerate(scripts.MARKERS)}
    previous = "\n\n".join(f"## {scripts.TITLES[s]}\n" + "\n".join(held[s]) for s in scripts.MARKERS)
    target, _ = endpoints(servers)
    with Unchanged(history()) as messages:
        res = run_method("target_delta", MethodRequest(messages, schema=scripts.SCHEMA, previous_summary=previous),
                         target=target, config=scripts.JUDGE)
    assert res.method == "target_delta"
    by_slot = {s.name: s for s in res.slots}
    for name in scripts.MARKERS:
        carried = [ln.text for ln in by_slot[name].lines if ln.origin is LineOrigin.CARRIED]
        assert carried == held[name], name
        written = [ln.text for ln in by_slot[name].lines if ln.origin is LineOrigin.TARGET and ln.text.strip()]
        assert set(written) <= {scripts.REPAIRS[name], f"- {scripts.REPAIRS[name]}"}, written
    # two carried lines per slot: the question they share prefilled once, then one batch of both
    assert res.stats.requests["target"]["verify_carried"].requests == 2 * len(scripts.MARKERS)
    assert res.stats.carried_proposed == res.stats.carried_lines == 2 * len(scripts.MARKERS)
    assert res.stats.requests.get("drafter", {}) == {}
