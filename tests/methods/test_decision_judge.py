"""The decision judge (``config.judge="decisions"``): every judging path over sglang's ``POST /v1/decisions``,
end to end against the SGLang-API emulator."""

from __future__ import annotations

import pytest
from sglang.srt.entrypoints.openai.protocol import DecisionRequest

from sgl_speccompact.programs.judges import decision_body
from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.core.judging import Decision
from sgl_speccompact.emulator import ScriptedPolicy
from sgl_speccompact.errors import ConfigError
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.methods.source_judge import source_judge
from sgl_speccompact.result import LineOrigin

from tests.support.methods import drafter_policy, load_trajectory, target_policy
from tests.support.programs import DRAFTS, MESSAGES, drafter_from
from tests.support.scripted import ScriptedBackend

DECIDE = {"judge": "decisions", "evidence_check": False}  # the route decides the invented lines too


def deciding_target(p_invented=0.05, mass=0.9) -> ScriptedPolicy:
    """The trajectory compactions' target, answering the decision route too (its rules first: a
    decision's claim quotes its line in tags, as the program judge's question does)."""
    policy = ScriptedPolicy()
    policy.decide("INVENTED", p_yes=p_invented, mass=mass, after="Is the following true?")  # the claim alone
    policy.decide("STALE", p_yes=0.05, mass=mass, after="Is the following true?")
    policy.decide("Is the following true?", p_yes=0.95, mass=mass)
    base = target_policy()
    policy.gen_rules += base.gen_rules
    policy.logprob_rules += base.logprob_rules
    return policy


@pytest.fixture
def servers(make_emulated_server):
    def make(policy):
        target = make_emulated_server(policy, model_path="Qwen/Qwen3-8B")
        drafter = make_emulated_server(drafter_policy(), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
        return target, SpecCompactEndpoint(target.url), SpecCompactEndpoint(drafter.url)
    return make


def route_calls(policy: ScriptedPolicy) -> list[str]:
    return [p for kind, p in policy.calls if kind == "logprobs" and "Is the following true?" in p]


def test_speccompact_judges_every_drafted_line_with_one_decision_request(servers):
    policy = deciding_target()
    srv, target, drafter = servers(policy)
    res = run_method("speccompact", load_trajectory("openai"), target=target, drafter=drafter, config=DECIDE)
    nxt = {s.name: s for s in res.slots}["next_steps"]
    assert [l.text for l in nxt.lines] == ["1. Run the program", "2. Check the output matches", "3. Report back"]
    assert nxt.lines[1].origin is LineOrigin.REPAIRED and "INVENTED" in nxt.lines[1].rejected_draft
    st = res.stats
    assert st.requests["target"]["verify"].requests == st.proposed_lines == len(route_calls(policy))
    assert st.label_mass_min == pytest.approx(0.9, rel=1e-3) and st.unreliable_verdicts == 0
    # the route's own wording about each line, after the same record (the radix prefix every request shares)
    asked = route_calls(policy)
    assert all("section so far:\n<section>" in p and "the right next line" in p for p in asked)
    assert len({p.split("<section>")[0].rsplit("\n", 2)[0] for p in asked}) == 1


def test_an_unreliable_decision_accepts_nothing(servers):
    _, target, drafter = servers(deciding_target(mass=0.01))
    res = run_method("speccompact", load_trajectory("openai"), target=target, drafter=drafter, config=DECIDE)
    assert res.stats.accepted_lines == 0 and res.stats.unreliable_verdicts == res.stats.proposed_lines > 0
    assert not any(l.origin is LineOrigin.DRAFTED for s in res.slots for l in s.lines)


PREVIOUS = ("## Goal\n- KEEP create /workspace/hello.py\n- STALE deploy to staging\n\n"
            "## Key Decisions\n- KEEP use the write tool")


def test_target_delta_judges_a_branchs_carried_lines_in_one_decision_request(servers):
    policy = deciding_target()
    _, target, _ = servers(policy)
    res = run_method("target_delta", MESSAGES, target=target, previous_summary=PREVIOUS, config=DECIDE)
    carried = [l.text for s in res.slots for l in s.lines if l.origin is LineOrigin.CARRIED]
    assert carried == ["- KEEP create /workspace/hello.py", "- KEEP use the write tool"] and "STALE" not in res.summary
    # one request per branch with carried lines, no prefill of a shared part (the server renders each question)
    assert res.stats.requests["target"]["verify_carried"].requests == 2
    asked = route_calls(policy)
    assert len(asked) == 3 and all("still holds after the conversation" in p for p in asked)


def test_sjc_deletes_on_decisions_in_one_request(servers):
    policy = ScriptedPolicy()
    policy.decide("/etc/invented.conf", p_yes=0.05, after="Is the following true?")
    policy.decide("Is the following true?", p_yes=0.95)
    _, target, _ = servers(policy)
    summary = "## Goal\n- Create /workspace/hello.py\n\n## Next Steps\n1. Edit /etc/invented.conf\n2. Run it\n"
    # the judge decides every entry here (the evidence check would delete the invented path unasked)
    filtered, report = source_judge(summary, MESSAGES, target=target, config={**DECIDE, "evidence_check": False})
    assert [e.kept for e in report.entries] == [True, False, True] and "invented" not in filtered
    assert report.requests == 1 and len(route_calls(policy)) == 3
    assert all("<environment>" in p and "has a source" in p for p in route_calls(policy))


def test_the_body_is_one_sglang_accepts():
    class Batch:
        eta = 0.7

        def __len__(self):
            return 2

        def decision(self):
            return Decision("the record", ("claim one", "claim two"))

    body = decision_body(Batch())
    req = DecisionRequest.model_validate(body)  # extra="forbid": any field sglang does not know fails here
    assert [q.id for q in req.questions] == ["q0", "q1"] and req.prompt_format_version == 1


def test_a_target_without_the_route_is_a_config_error():
    target = ScriptedBackend(draft=None, judge=lambda s, l: 0.9, repair=lambda s, a: "")
    with pytest.raises(ConfigError, match="/v1/decisions"):
        run_method("speccompact", MESSAGES, target=target, drafter=ScriptedBackend(draft=drafter_from(DRAFTS)),
                   config=DECIDE)
    with pytest.raises(ConfigError, match="/v1/decisions"):
        source_judge("## Goal\n- a\n", MESSAGES, target=target, config=DECIDE)
