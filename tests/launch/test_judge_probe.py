"""The launcher's start-up judge probe: both judges asked the engine's own question, one picked and named."""

from __future__ import annotations

import pytest

from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.config import CompactConfig
from sgl_speccompact.emulator import ScriptedPolicy
from sgl_speccompact.methods.autopick import AutoPicker
from sgl_speccompact.methods.judge_probe import (PROBE_LINE, PROBE_MESSAGES, label_mass_warning, probe_judges,
                                                 probe_label_mass)
from sgl_speccompact.methods.speccompact import compact


class Plan:
    compact = CompactConfig()  # the launch plan's config: the defaults


def judgements(policy: ScriptedPolicy) -> list[str]:
    """The prompts of every judgement-shaped request the emulated target scored."""
    return [prompt for kind, prompt in policy.calls if kind == "logprobs"]


def test_a_target_that_judges_passes_the_probe_in_one_request(make_emulated_server):
    policy = ScriptedPolicy()
    policy.judge("<line>", p_positive=0.9, mass=0.95, after="<|im_start|>user")
    srv = make_emulated_server(policy=policy, model_path="Qwen/Qwen3-8B")
    mass = probe_label_mass(SpecCompactEndpoint(srv.url), CompactConfig())
    assert mass == pytest.approx(0.95 * 0.7, abs=0.01)  # the best variant of each label: 70% of its share
    assert srv.stats()["total"]["requests"] == 1
    assert label_mass_warning(mass, CompactConfig()) is None


@pytest.mark.parametrize("judge", ["program", "decisions"])
def test_the_probe_asks_exactly_what_a_compaction_asks(make_emulated_server, judge):
    """Before, the probe asked an SJC question about another history: a prompt the engine never sends."""
    policy = ScriptedPolicy()
    policy.decide("Is the following true?", p_yes=0.9)  # first: a decision's claim quotes its line in tags too
    policy.judge("<line>", p_positive=0.9, after="<|im_start|>user")
    policy.on("write only the", "")  # the target writes nothing: no repair line to judge
    srv = make_emulated_server(policy=policy, model_path="Qwen/Qwen3-8B")
    drafter_policy = ScriptedPolicy()
    drafter_policy.on("Generate only the goal slot", PROBE_LINE + "\n", times=1)
    drafter = make_emulated_server(policy=drafter_policy, model_path="Qwen/Qwen3-0.6B")
    cfg = CompactConfig(judge=judge)
    probe_label_mass(SpecCompactEndpoint(srv.url), cfg)
    (asked,) = judgements(policy)
    policy.calls.clear()
    compact(list(PROBE_MESSAGES), target=SpecCompactEndpoint(srv.url), drafter=SpecCompactEndpoint(drafter.url),
            config=cfg)
    assert asked in judgements(policy)  # the very prompt the engine sends about that line
    assert PROBE_LINE in asked


def test_the_probe_picks_the_judge_whose_labels_carry_the_mass(make_emulated_server, capsys):
    from sgl_speccompact.launch.run import check_judge

    policy = ScriptedPolicy()
    policy.decide("Is the following true?", p_yes=0.8, mass=0.5)
    policy.logprobs("<line>", {"The": -0.1}, judgement_only=True)  # the program judge's labels: almost nothing
    srv = make_emulated_server(policy=policy, model_path="Qwen/Qwen3-8B")
    target = SpecCompactEndpoint(srv.url)
    probe = probe_judges(target, CompactConfig())
    assert probe.pick == "decisions" and probe.masses["program"] < 0.01
    assert probe.masses["decisions"] == pytest.approx(0.5)
    picker = AutoPicker(None, "test", "Qwen/Qwen3-8B|none")
    config = check_judge(target, Plan(), picker)
    err = capsys.readouterr().err
    assert config.judge == "decisions"  # the service's default config: compactions use the route
    assert "judge: decisions" in err and "program judge's labels carry less than min_label_mass" in err
    assert "cannot judge" not in err
    assert picker.low_label_mass(CompactConfig().min_label_mass) is None  # auto sees the picked judge's mass


def test_a_target_whose_labels_carry_no_mass_is_warned_about_at_start(make_emulated_server, capsys):
    from sgl_speccompact.launch.run import check_judge

    policy = ScriptedPolicy()  # its next token spreads over the whole vocabulary: the labels get almost nothing
    policy.logprobs("<|im_start|>user", {"The": -0.1}, judgement_only=True)  # what the real model's top token was
    srv = make_emulated_server(policy=policy, model_path="Qwen/Qwen3-8B")
    picker = AutoPicker(None, "test", "Qwen/Qwen3-8B|none")
    config = check_judge(SpecCompactEndpoint(srv.url), Plan(), picker)
    err = capsys.readouterr().err
    assert config.judge == "program" and "neither judge's labels carry" in err
    assert "the target cannot judge" in err
    assert "chat template" in err and "thinking block" in err and "label words" in err
    assert picker.low_label_mass(CompactConfig().min_label_mass) is not None  # auto starts from what it saw


def test_a_probe_that_fails_warns_and_decides_nothing(make_emulated_server, capsys):
    from sgl_speccompact.launch.run import check_judge

    srv = make_emulated_server(policy=ScriptedPolicy(), model_path="Qwen/Qwen3-8B")
    target = SpecCompactEndpoint(srv.url)
    srv.close()  # the target went away after start-up
    picker = AutoPicker(None, "test", "Qwen/Qwen3-8B|none")
    config = check_judge(target, Plan(), picker)
    err = capsys.readouterr().err
    assert "the program judge probe failed" in err and "the decisions judge probe failed" in err
    assert config is Plan.compact and picker.low_label_mass(1.0) is None
