"""Ablation switches: every request-only optimization can be turned off alone
and the summary is decided the same way, even by a judge that reads the whole
prompt; the switches that change prompts are declared (``config.PROMPT_CHANGING``)."""

import hashlib

import pytest

from sgl_speccompact.methods.speccompact import compact
from sgl_speccompact.config import DECISION_CHANGING, OPTIMIZATIONS, PROMPT_CHANGING, CompactConfig
from sgl_speccompact.methods.registry import run_method

from tests.support.scripted import LINE_RE, ScriptedBackend
from tests.support.endpoint import InProcessEndpoint, assert_server_accepts, body_text, label_dist
from tests.support.programs import DRAFTS, MESSAGES, backends, drafter_from

RECOMMENDED = {name: CompactConfig.model_fields[name].default for name in OPTIMIZATIONS}
# switches that change only the requests: the same prompts, so the same verdicts from any judge.
# The scripted target answers one_request_judging and send_token_ids the same either way; those two
# are checked on the endpoint that serves both (test_one_request_and_plain_select_make_the_same_decisions,
# tests/test_token_ids_sim.py::test_the_model_sees_the_same_tokens_and_decides_the_same)
REQUEST_ONLY = sorted(set(OPTIMIZATIONS) - PROMPT_CHANGING - DECISION_CHANGING)


def decisions(res):
    return [(s.name, [(l.text, l.origin) for l in s.lines]) for s in res.slots]


def prompt_judge(text: str) -> float:
    """A judge that reads the whole prompt: any change to the text can flip its verdict."""
    if "BAD" in (LINE_RE.findall(text) or [""])[-1]:
        return 0.05
    return 0.95 if int(hashlib.sha256(text.encode()).hexdigest(), 16) % 3 else 0.05


def run_reading(config: dict):
    """SpecCompact + SJC with a prompt-reading judge; its decisions, summary and judge prompts."""
    target = ScriptedBackend(judge_prompt=prompt_judge, repair=lambda s, acc: f"- repaired {len(acc)}\n")
    drafter = ScriptedBackend(draft=drafter_from(DRAFTS))
    res = run_method("speccompact", MESSAGES, target=target, drafter=drafter, source_judge=True, config=config)
    return decisions(res), res.summary, sorted(target.kinds("verify") + target.kinds("source_judge"))


def test_registry_names_bool_fields_with_descriptions():
    assert OPTIMIZATIONS
    for name, text in OPTIMIZATIONS.items():
        field = CompactConfig.model_fields[name]
        assert field.annotation is bool and isinstance(field.default, bool), name
        assert text.strip() and "\n" not in text
    assert PROMPT_CHANGING <= set(OPTIMIZATIONS) and DECISION_CHANGING <= set(OPTIMIZATIONS)
    assert not PROMPT_CHANGING & DECISION_CHANGING


@pytest.mark.parametrize("name", sorted(DECISION_CHANGING))
def test_each_declared_decision_changing_switch_changes_a_decision_with_the_same_prompts(name):
    # an invented path in a draft: with the check it is refused unjudged, without it the judge accepts it
    drafts = {**DRAFTS, "next_steps": ["1. Run python /workspace/hello.py", "2. Edit /etc/invented.conf"]}

    def run(config):
        target = ScriptedBackend(judge=lambda s, line: 0.95, repair=lambda s, acc: "2. Run the tests\n")
        res = compact(MESSAGES, target=target, drafter=ScriptedBackend(draft=drafter_from(drafts)), config=config)
        return decisions(res), set(target.kinds("verify"))
    base, flipped = run({}), run({name: not RECOMMENDED[name]})
    assert base[0] != flipped[0] and base[1] < flipped[1]  # the same prompts, one judged more: another summary


@pytest.mark.parametrize("name", REQUEST_ONLY)
def test_each_switch_flipped_alone_keeps_the_decisions(name):
    # the judge reads the prompt, so this holds only if the switch leaves every prompt as it was
    # (test_an_undeclared_prompt_change_is_caught injects one and watches this check fail)
    base = run_reading({})
    flipped = run_reading({name: not RECOMMENDED[name]})
    assert flipped[2] == base[2]  # the judge saw the same prompts
    assert flipped[:2] == base[:2]


@pytest.mark.parametrize("name", sorted(PROMPT_CHANGING))
def test_each_declared_prompt_changing_switch_changes_a_prompt(name):
    # the declaration is not a blanket exemption: each one really changes what the judge reads
    assert run_reading({name: not RECOMMENDED[name]})[2] != run_reading({})[2]


def test_an_undeclared_prompt_change_is_caught(monkeypatch):
    """Injected bug: repairs without line-aware stopping add a word to the judge question (a request-only switch)."""
    from sgl_speccompact.programs import questions

    real = questions.verify_question
    base = run_reading({})
    # patched for the flipped run only: as if turning line-aware stopping off reworded the question
    monkeypatch.setattr(questions, "verify_question", lambda *a, **kw: real(*a, **kw) + " Be strict.")
    flipped = run_reading({"line_aware_stopping": False})
    assert flipped[2] != base[2] and flipped[:2] != base[:2]  # what the flip test above would catch


def test_the_drafter_drafts_one_line_per_call():
    target, drafter = backends()
    res = compact(MESSAGES, target=target, drafter=drafter)
    progress = [t for t in drafter.kinds("draft") if "Generate only the progress" in t]
    # one call per line; the last line arrives with the end of the answer
    assert len(progress) == len(DRAFTS["progress"])
    # the blank line (a stop at the newline with no text) did not end the slot
    lines = [l.text for l in {s.name: s for s in res.slots}["progress"].lines]
    assert lines == DRAFTS["progress"]


@pytest.mark.parametrize("one_request", [True, False])
def test_one_request_judging_switch_on_speccompact_endpoint(one_request):
    target = InProcessEndpoint(judge=lambda line: 0.05 if "BAD" in line else 0.9)
    drafter = ScriptedBackend(draft=drafter_from(DRAFTS))
    res = compact(MESSAGES, target=target, drafter=drafter, config={"one_request_judging": one_request})
    one = [b for b in target.bodies if "token_ids_logprob" in b]
    plain = [b for b in target.bodies if isinstance(body_text(b), list)]
    judged = res.stats.proposed_lines
    assert judged > 0
    assert (len(one), len(plain)) == ((judged, 0) if one_request else (0, judged))
    assert res.stats.requests["target"]["verify"].requests == judged * (1 if one_request else 2)
    assert "2. BAD" not in res.summary and "- repaired" in res.summary
    for b in target.bodies:
        assert_server_accepts(b)


def split_dist(line):
    """Label variants where the exact words say r = 0.800 and the best variants r = 0.571."""
    if "BAD" in line:
        return label_dist(0.05)
    return {101: 0.4, 201: 0.1, 202: 0.3} if "hello.py" in line else label_dist(0.9)


def test_one_request_and_plain_select_make_the_same_decisions():
    runs = {}
    for one_request in (True, False):
        target = InProcessEndpoint(dist=split_dist, token_ids=False)
        res = compact(MESSAGES, target=target, drafter=ScriptedBackend(draft=drafter_from(DRAFTS)),
                      config={"one_request_judging": one_request})
        runs[one_request] = res
    assert decisions(runs[True]) == decisions(runs[False]) and runs[True].summary == runs[False].summary
    scores = [[l.score for s in r.slots for l in s.lines] for r in runs.values()]
    assert scores[0] == pytest.approx(scores[1])
    # the hello.py lines were judged at 0.571 on both paths, so rejected (the exact words would accept them)
    rejected = [l.rejected_draft for s in runs[False].slots for l in s.lines if l.rejected_draft]
    assert any("hello.py" in r for r in rejected)


def test_line_aware_stopping_off_decodes_on_and_keeps_the_first_line():
    target, drafter = backends()
    res = compact(MESSAGES, target=target, drafter=drafter, config={"line_aware_stopping": False})
    nxt = {s.name: s for s in res.slots}["next_steps"]
    assert [l.text for l in nxt.lines] == ["1. Run python /workspace/hello.py", "2. Run pytest"]
    assert "extra line never decoded" not in res.summary
    # the repair ran on a copy; the branch holds only the kept line
    verify_after = [t for t in target.kinds("verify") if "2. Run pytest" in t]
    assert all("extra line" not in t for t in verify_after)
