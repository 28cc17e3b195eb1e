"""``python -m sgl_speccompact compact`` with an injected runner and real files."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.procs import READY_S

from sgl_speccompact import cli
from sgl_speccompact.errors import BackendUnavailableError
from sgl_speccompact.history.formats import load_history
from tests.support.cli import Connected, Recorder, URLS, fake_connect

REPO = Path(__file__).resolve().parents[1]
TRAJ_DIR = Path(__file__).resolve().parents[2] / "shared/data/trajectories"
needs_data = pytest.mark.skipif(not TRAJ_DIR.is_dir(),
                                reason=f"shared trajectories not found at {TRAJ_DIR} (clone ../shared beside the repo)")


def traj(fragment: str) -> Path:
    return next(p for p in sorted(TRAJ_DIR.iterdir()) if fragment in p.name)


@needs_data
def test_compact_prints_summary_and_stats_table(capsys):
    path = traj("function_calling_simple")
    runner = Recorder()
    rc = cli.main([str(path), *URLS, "--drafter-lora-name", "drafter"], connect=fake_connect, runner=runner)
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert out.out.startswith("## Goal\n- fix missing_colon.py\n")
    assert re.search(r"^target\s+total\s+4\s+4000\s+3600\s+0$", out.out, re.M)
    assert re.search(r"^drafter\s+draft\s+2\s+900\s+450\s+80$", out.out, re.M)
    assert "acceptance rate: 75.0% (3 of 4 judged lines; 1 repaired" in out.out
    assert "cached ratio:    target 90.0%, drafter 50.0%" in out.out
    assert "wall time:       1.50 s" in out.out
    assert runner.kwargs["messages"] == load_history(path)
    assert runner.kwargs["target"] == Connected("http://t:1", None)
    assert runner.kwargs["drafter"] == Connected("http://d:2", "drafter")
    assert runner.kwargs["on_event"] is None  # stderr is not a terminal here


@needs_data
def test_compact_json_and_options(tmp_path, capsys):
    prev = tmp_path / "prev.md"
    prev.write_text("## Goal\n- earlier")
    runner = Recorder()
    rc = cli.main([str(traj("simulations")), *URLS, "--trial", "2", "--json", "--method", "openclaw",
                   "--previous-summary", str(prev), "--source-judge", "--focus", "the db schema",
                   "--set", "eta=0.8", "--set", "positive_label=yes"],
                  connect=fake_connect, runner=runner)
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert json.loads(out.out)["stats"]["acceptance_rate"] == 0.75
    kw = runner.kwargs
    assert kw["method"] == "openclaw" and kw["source_judge"] and kw["previous_summary"] == "## Goal\n- earlier"
    assert (kw["config"].eta, kw["config"].positive_label) == (0.8, "yes") and kw["focus"] == "the db schema"
    assert kw["messages"] == load_history(traj("simulations"), trial=2)


@needs_data
def test_list_trials(capsys):
    assert cli.main([str(traj("simulations")), "--list-trials"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 10 and lines[0].startswith("0\tid=") and "task=32" in lines[0]


@pytest.mark.parametrize("argv,fail,code", [
    (URLS, BackendUnavailableError("http://t:1 unreachable"), "backend_unavailable"),
    (["--drafter-url", "http://d:2"], None, "speccompact_error"),
    (["--target-url", "http://t:1", "--method", "speccompact"], None, "speccompact_error"),  # no drafter
])
@needs_data
def test_failures_exit_nonzero_with_one_line(capsys, monkeypatch, argv, fail, code):
    monkeypatch.delenv(cli.TARGET_ENV, raising=False)
    monkeypatch.delenv(cli.DRAFTER_ENV, raising=False)
    rc = cli.main([str(traj("marshmallow")), *argv], connect=fake_connect, runner=Recorder(fail))
    err = capsys.readouterr().err
    assert rc == 1
    assert err.count("\n") == 1 and err.startswith(f"error: {code}: ")


@needs_data
def test_not_a_trajectory_is_a_one_line_error(capsys):
    rc = cli.main([str(traj("tasks.json")), *URLS], connect=fake_connect, runner=Recorder())
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: unknown_history_format: ") and err.count("\n") == 1


def test_progress_on_a_terminal(monkeypatch, tmp_path):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    f = tmp_path / "h.json"
    f.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    assert cli.main([str(f), *URLS], connect=fake_connect, runner=Recorder()) == 0
    drawn = tty.getvalue()
    assert drawn.startswith(f"\r\x1b[K[compact] reading {f}")  # at once, before anything slow
    assert drawn.endswith("\r\x1b[K[compact] block 1 of 1: 1 of 6 slots, 3 of 4 judged lines accepted, 4,980 tokens\n")


def test_bad_set_value(capsys, tmp_path):
    f = tmp_path / "h.json"
    f.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    assert cli.main([str(f), *URLS, "--set", "eta"], connect=fake_connect, runner=Recorder()) == 1
    assert "FIELD=VALUE" in capsys.readouterr().err


@needs_data
def test_subprocess_dead_server_is_a_one_line_error():
    res = subprocess.run([sys.executable, "-m", "sgl_speccompact", "compact", str(traj("local.traj")),
                          "--target-url", "http://127.0.0.1:9", "--method", "hermes", "--timeout", "5"],
                         cwd=REPO, capture_output=True, text=True, timeout=READY_S)  # a hang guard: sglang imports
    assert res.returncode == 1
    assert res.stderr.startswith("error: backend_unavailable: ") and res.stderr.count("\n") == 1


def test_main_dispatch_usage():
    res = subprocess.run([sys.executable, "-m", "sgl_speccompact"], cwd=REPO, capture_output=True, text=True,
                         timeout=READY_S)
    assert res.returncode == 2 and "compact FILE" in res.stdout
    res = subprocess.run([sys.executable, "-m", "sgl_speccompact", "frobnicate"], cwd=REPO, capture_output=True,
                         text=True, timeout=READY_S)
    assert res.returncode == 2 and "unknown command" in res.stderr


@needs_data
def test_e2e_cli_on_a_trajectory_with_the_emulator(make_emulated_server, capsys):
    from sgl_speccompact.emulator import ControlledAcceptancePolicy

    target = make_emulated_server(policy=ControlledAcceptancePolicy(seed=1), model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(policy=ControlledAcceptancePolicy(seed=2), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    rc = cli.main([str(traj("function_calling_simple")), "--target-url", target.url, "--drafter-url", drafter.url,
                   "--drafter-lora-name", "drafter", "--method", "speccompact"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    summary, _, table = out.out.partition("\nserver ")
    assert summary.strip()
    assert re.search(r"^target\s+total\s+[1-9]", table, re.M) and re.search(r"^drafter\s+draft\s+[1-9]", table, re.M)
    assert "acceptance rate: " in table and "n/a" not in table.split("acceptance rate: ")[1].split("\n")[0]


@needs_data
def test_method_auto_is_the_default_and_follows_the_gpus(capsys):
    path = str(traj("function_calling"))
    picks = {}
    for gpus in ("1", "2"):  # Qwen3-32B: Target-self on one shared GPU, SpecCompact with the drafter on its own
        runner = Recorder()
        assert cli.main([path, *URLS, "--json", "--target-model", "Qwen/Qwen3-32B", "--gpus", gpus],
                        connect=fake_connect, runner=runner) == 0
        out = json.loads(capsys.readouterr().out)
        auto = out["stats"]["auto"]
        assert runner.kwargs["method"] == out["method"] == auto["method"] and auto["deployment"]["gpus"] == int(gpus)
        assert auto["deployment"]["target"] == "Qwen/Qwen3-32B" and "profile:H200" in auto["cost_model"]
        picks[gpus] = auto["method"]
    assert picks == {"1": "target_self", "2": "speccompact"}
    runner = Recorder()  # an explicit method wins, and records no pick
    assert cli.main([path, *URLS, "--json", "--gpus", "2", "--method", "hermes"], connect=fake_connect,
                    runner=runner) == 0
    assert runner.kwargs["method"] == "hermes" and json.loads(capsys.readouterr().out)["stats"]["auto"] is None
    assert "auto (default" in cli.build_parser().format_help()


def test_layout_flags_reach_the_runner(tmp_path):
    tools = [{"type": "function", "function": {"name": "find_file", "parameters": {"type": "object"}}}]
    f = tmp_path / "tools.json"
    f.write_text(json.dumps(tools))
    rec = Recorder()
    argv = [str(traj("function_calling")), *URLS, "--tools", str(f), "--target-tokenizer", "Qwen/Qwen3-8B",
            "--layout", "agent"]
    assert cli.main(argv, connect=fake_connect, runner=rec) == 0
    assert rec.kwargs["tools"] == tools and rec.kwargs["chat_template"] == "Qwen/Qwen3-8B"
    assert rec.kwargs["layout"] == "agent"
    assert cli.main([str(traj("function_calling")), *URLS], connect=fake_connect, runner=(rec := Recorder())) == 0
    assert "layout" not in rec.kwargs and "tools" not in rec.kwargs  # nothing given: the runner's defaults
    f.write_text("{}")
    assert cli.main(argv, connect=fake_connect, runner=Recorder()) == 1  # not a list: one-line error


def test_the_request_timeout_follows_the_servers_device(make_emulated_server):
    from sgl_speccompact.launch.cpu import CPU_SERVICE_DEFAULTS

    srv = make_emulated_server(model_path="Qwen/Qwen3-8B")
    args = cli.build_parser().parse_args(["history.json", "--target-url", srv.url])
    assert args.timeout is None and cli.connect(srv.url, args).timeout_s == 120.0
    srv._info["device"] = "cpu"  # what sglang's /server_info says on its CPU engine
    assert cli.connect(srv.url, args).timeout_s == CPU_SERVICE_DEFAULTS["request_timeout_s"]
    args.timeout = 30.0
    assert cli.connect(srv.url, args).timeout_s == 30.0


def test_method_auto_sees_the_set_overrides(tmp_path, capsys):
    # a context of 3000 tokens: with the default budgets SpecCompact and Target-self leave a block room; with
    # --set max_tokens_per_slot=2000 (the effective config) no method does, and auto says so before any request
    f = tmp_path / "h.json"
    f.write_text(json.dumps([{"role": "user", "content": "fix a.py"}]))
    small = [str(f), *URLS, "--set", "target_context_tokens=3000"]
    runner = Recorder()
    assert cli.main(small, connect=fake_connect, runner=runner) == 0, capsys.readouterr().err
    assert runner.kwargs["method"] in ("speccompact", "target_self")
    runner = Recorder()
    assert cli.main([*small, "--set", "max_tokens_per_slot=2000"], connect=fake_connect, runner=runner) == 1
    assert "auto has no method" in capsys.readouterr().err and runner.kwargs == {}
