"""The launcher's start-up judge probe: a target whose labels carry no mass is named at start."""

from __future__ import annotations

import pytest

from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.config import CompactConfig
from sgl_speccompact.methods.autopick import AutoPicker
from sgl_speccompact.methods.judge_probe import label_mass_warning, probe_label_mass
from sgl_speccompact.emulator import ScriptedPolicy


class Plan:
    compact = CompactConfig()  # the launch plan's config: the defaults


def test_a_target_that_judges_passes_the_probe_in_one_request(make_emulated_server):
    policy = ScriptedPolicy()
    policy.judge("<entry>", p_positive=0.9, mass=0.95)
    srv = make_emulated_server(policy=policy, model_path="Qwen/Qwen3-8B")
    mass = probe_label_mass(SpecCompactEndpoint(srv.url), CompactConfig())
    assert mass == pytest.approx(0.95 * 0.7, abs=0.01)  # the best variant of each label: 70% of its share
    assert srv.stats()["total"]["requests"] == 1
    assert label_mass_warning(mass, CompactConfig()) is None


def test_a_target_whose_labels_carry_no_mass_is_warned_about_at_start(make_emulated_server, capsys):
    from sgl_speccompact.launch.run import check_judge

    policy = ScriptedPolicy()  # its next token spreads over the whole vocabulary: the labels get almost nothing
    policy.logprobs("<entry>", {"The": -0.1})  # what the real model's top next token was
    srv = make_emulated_server(policy=policy, model_path="Qwen/Qwen3-8B")
    picker = AutoPicker(None, "test", "Qwen/Qwen3-8B|none")
    check_judge(SpecCompactEndpoint(srv.url), Plan(), picker)
    err = capsys.readouterr().err
    assert "the target cannot judge" in err
    assert "chat template" in err and "thinking block" in err and "label words" in err
    assert picker.low_label_mass(CompactConfig().min_label_mass) is not None  # auto starts from what it saw


def test_a_probe_that_fails_warns_and_decides_nothing(make_emulated_server, capsys):
    from sgl_speccompact.launch.run import check_judge

    srv = make_emulated_server(policy=ScriptedPolicy(), model_path="Qwen/Qwen3-8B")
    target = SpecCompactEndpoint(srv.url)
    srv.close()  # the target went away after start-up
    picker = AutoPicker(None, "test", "Qwen/Qwen3-8B|none")
    check_judge(target, Plan(), picker)
    assert "the judge probe failed" in capsys.readouterr().err
    assert picker.low_label_mass(1.0) is None
