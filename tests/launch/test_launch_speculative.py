"""Speculative decoding per server in the launcher: TOML tables, flags, sglang's parser, refusals."""

from __future__ import annotations

import argparse
import doctest
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import sgl_speccompact.launch.speculative as speculative
from sgl_speccompact.errors import ConfigError
from sgl_speccompact.launch.command_line import build_parser
from sgl_speccompact.launch.plan import build_plan
from sgl_speccompact.launch.servers import server_command
from sgl_speccompact.launch.speculative import ALGORITHMS, LORA_REFUSED, SpecSettings, check_server, spec_from_table

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted(c for c in (REPO / "launch").glob("*.toml") if "-cpu" not in c.stem)  # the GPU configs (speculative decoding)


@pytest.fixture(scope="module")
def sglang_parser():
    """sglang 0.5.23's own launch_server argument parser (nothing starts)."""
    from sglang.srt.server_args import ServerArgs

    p = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(p)
    return p


def sglang_args(parser, argv: list[str]) -> argparse.Namespace:
    """The namespace sglang's parser makes of a launch_server argv; every flag must be known."""
    tail = argv[argv.index("sglang.launch_server") + 1:]
    ns, unknown = parser.parse_known_args(tail)
    assert unknown == [], unknown
    return ns


def plan_for(*argv: str):
    return build_plan(build_parser().parse_args(list(argv)))


def test_docstring_examples():
    failed, attempted = doctest.testmod(speculative, optionflags=doctest.ELLIPSIS)
    assert failed == 0 and attempted >= 4


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_become_sglang_speculative_args(config, sglang_parser):
    plan = plan_for("--config", str(config), "--drafter-lora", "/adapters/drafter")
    target, drafter = plan.servers
    t = sglang_args(sglang_parser, server_command(target))
    d = sglang_args(sglang_parser, server_command(drafter))
    assert t.context_length == 40960 and d.context_length == 40960
    assert t.speculative_algorithm in ("EAGLE3", "DFLASH") and t.speculative_draft_model_path
    if "32b" in config.name:
        assert (t.speculative_algorithm, t.speculative_draft_model_path) == ("EAGLE3", "AngelSlim/Qwen3-32B_eagle3")
        assert (t.speculative_num_steps, t.speculative_eagle_topk, t.speculative_num_draft_tokens) == (3, 1, 4)
    else:
        assert (t.speculative_algorithm, t.speculative_draft_model_path) == ("DFLASH", "z-lab/Qwen3-8B-DFlash-b16")
        assert t.speculative_dflash_block_size == 16
    # the LoRA drafter runs NGRAM, which sglang's own LoRA check accepts
    assert d.speculative_algorithm == "NGRAM" and d.speculative_draft_model_path is None
    assert d.enable_lora and d.lora_paths
    from sglang.srt.arg_groups.lora_hook import check_lora_speculative_compatibility

    check_lora_speculative_compatibility(d)


def test_dry_run_prints_speculative_flags_and_outputs_note():
    res = subprocess.run([sys.executable, "-m", "sgl_speccompact.launch", "--dry-run", "--target-speculative",
                          "eagle3:AngelSlim/Qwen3-8B_eagle3", "--drafter-speculative", "ngram"], cwd=REPO,
                         capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if "sglang.launch_server" in ln]
    target, drafter = (shlex.split(ln) for ln in lines)
    assert target[target.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert target[target.index("--speculative-draft-model-path") + 1] == "AngelSlim/Qwen3-8B_eagle3"
    assert drafter[drafter.index("--speculative-algorithm") + 1] == "NGRAM"
    assert '"outputs": "lossless at temperature 0 up to numerics' in res.stdout


def test_flag_replaces_config_table_and_none_turns_it_off(sglang_parser):
    cfg = str(REPO / "launch/qwen3-32b.toml")
    t = sglang_args(sglang_parser, server_command(plan_for("--config", cfg, "--target-speculative",
                                                           "NGRAM").servers[0]))
    assert t.speculative_algorithm == "NGRAM" and t.speculative_num_steps is None  # no EAGLE3 leftovers
    plan = plan_for("--config", cfg, "--target-speculative", "none", "--drafter-speculative", "none")
    assert all("--speculative-algorithm" not in server_command(s) for s in plan.servers)
    assert plan.speculative == {"target": None, "drafter": None}
    assert "--speculative-algorithm" not in server_command(plan_for().servers[0])  # default: off


def test_ngram_and_dflash_options_reach_sglang(sglang_parser, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[target.speculative]\nalgorithm = "DFLASH"\ndraft_model_path = "z-lab/Qwen3-8B-DFlash-b16"\n'
                    'num_draft_tokens = 8\ndflash_block_size = 8\n'
                    '[drafter.speculative]\nalgorithm = "ngram"\nnum_draft_tokens = 8\n'
                    '[drafter.speculative.ngram]\nmax_bfs_breadth = 1\nmatch_type = "PROB"\n')
    target, drafter = plan_for("--config", str(path)).servers
    t = sglang_args(sglang_parser, server_command(target))
    d = sglang_args(sglang_parser, server_command(drafter))
    assert (t.speculative_dflash_block_size, t.speculative_num_draft_tokens) == (8, 8)
    assert (d.speculative_ngram_max_bfs_breadth, d.speculative_ngram_match_type) == (1, "PROB")
    assert d.speculative_num_draft_tokens == 8


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_lora_refusals_match_sglangs_own_check(algorithm, sglang_parser):
    """Our refusal of an algorithm on a LoRA server is exactly sglang's (lora_hook)."""
    from sglang.srt.arg_groups.lora_hook import check_lora_speculative_compatibility

    ns = sglang_parser.parse_args(["--model-path", "m", "--enable-lora", "--lora-paths", "d=/x",
                                   "--speculative-algorithm", algorithm])
    try:
        check_lora_speculative_compatibility(ns)
        sglang_refuses = False
    except ValueError:
        sglang_refuses = True
    assert (algorithm in LORA_REFUSED) == sglang_refuses
    settings = SpecSettings(algorithm, None if algorithm == "NGRAM" else "draft/path")
    if sglang_refuses:
        with pytest.raises(ConfigError, match="refuses"):
            check_server(settings, "drafter", lora=True)
    else:
        check_server(settings, "drafter", lora=True)


@pytest.mark.parametrize("argv,match", [
    (["--drafter-lora", "/x", "--drafter-speculative", "STANDALONE:Qwen/Qwen3-0.6B"], "LoRA adapter"),
    (["--drafter-arg=--enable-lora", "--drafter-speculative", "standalone:m"], "LoRA adapter"),
    (["--target-speculative", "DFLASH"], "needs draft_model_path"),
    (["--target-speculative", "EAGLE3"], "needs draft_model_path"),
    (["--drafter-speculative", "NGRAM:some/model"], "takes no draft_model_path"),
    (["--target-speculative", "MEDUSA:x"], "must be one of"),
    (["--target-speculative", "NGRAM", "--target-arg=--pp-size 2"], "pipeline parallelism"),
    (["--target-speculative", "NGRAM", "--target-arg=--speculative-algorithm EAGLE"], "keep one"),
])
def test_refused_flag_combinations(argv, match):
    with pytest.raises(ConfigError, match=match):
        plan_for(*argv)


@pytest.mark.parametrize("table,match", [
    ({"algorithm": "EAGLE3", "draft_model_path": "h", "eagle_topk": 4}, "set num_steps"),
    ({"algorithm": "DFLASH", "draft_model_path": "d", "num_steps": 3}, "must be 1"),
    ({"algorithm": "DFLASH", "draft_model_path": "d", "num_draft_tokens": 8, "dflash_block_size": 16}, "equal"),
    ({"algorithm": "EAGLE3", "draft_model_path": "h", "dflash_block_size": 16}, "DFLASH only"),
    ({"algorithm": "EAGLE3", "draft_model_path": "h", "ngram": {"capacity": 5}}, "NGRAM only"),
    ({"algorithm": "NGRAM", "ngram": {"depth": 5}}, "keys must be among"),
    ({"algorithm": "NGRAM", "num_steps": 0}, "positive integer"),
    ({"draft_model_path": "h"}, "needs algorithm"),
    ({"algorithm": "NGRAM", "steps": 3}, "unknown key"),
])
def test_refused_tables(table, match):
    with pytest.raises(ConfigError, match=match):
        spec_from_table(table, "target")


def test_refusal_is_one_line_on_the_command_line(tmp_path):
    res = subprocess.run([sys.executable, "-m", "sgl_speccompact.launch", "--dry-run", "--drafter-lora", "/x",
                          "--drafter-speculative", "STANDALONE:Qwen/Qwen3-0.6B"], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 2
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: [drafter.speculative]") and "STANDALONE" in err[0]
