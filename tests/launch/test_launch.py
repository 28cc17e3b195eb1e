"""The launcher: dry-run commands, flag checks, config files, child processes."""

from __future__ import annotations

import json
import os
import shlex
import signal
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.support.procs import EXIT_S, READY_S, poll_until, stop, wait_healthy

from sgl_speccompact.errors import ConfigError
from sgl_speccompact.launch.command_line import build_parser, check_server_flags, cuda_available
from sgl_speccompact.launch.plan import load_config_file
from sgl_speccompact.launch.router_process import router_command
from sgl_speccompact.launch.servers import server_command
from sgl_speccompact.emulator import free_port
from tests.support.launch import REPO, launch, parse_dry_run, plan_for

CONFIGS = sorted(c for c in (REPO / "launch").glob("*.toml") if "-cpu" not in c.stem)  # GPU configs; the CPU one: test_launch_cpu.py


def test_dry_run_default_commands():
    res = launch("--dry-run")
    assert res.returncode == 0, res.stderr
    cmds, svc = parse_dry_run(res.stdout)
    assert list(cmds) == ["target", "drafter"]  # target starts first
    assert cmds["target"] == [sys.executable, "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
                              "--host", "127.0.0.1", "--port", "30000", "--mem-fraction-static", "0.6",
                              "--enable-priority-scheduling", "--default-priority-value", "0",
                              "--schedule-policy", "fcfs"]
    assert cmds["drafter"][4:] == ["Qwen/Qwen3-0.6B", "--host", "127.0.0.1", "--port", "30001",
                                   "--mem-fraction-static", "0.45", "--schedule-policy", "lpm"]
    assert "--disable-radix-cache" not in cmds["target"] + cmds["drafter"]
    assert svc["target_urls"] == ["http://127.0.0.1:30000"] and svc["drafter_url"] == "http://127.0.0.1:30001"
    assert svc["drafter_lora_name"] is None and svc["auth"] is None
    assert svc["compact"]["eta"] == 0.7 and svc["service"]["port"] == 8000


def test_dry_run_lora_parallel_and_extras():
    res = launch("--dry-run", "--drafter-lora", "/ckpt/lora", "--tp-size", "2", "--dp-size", "2",
                 "--context-length", "40960", "--attention-backend", "fa3",
                 "--target-arg", "--chunked-prefill-size 8192", "--drafter-arg=--max-loras-per-batch=4",
                 "--api-key", "sekrit-token-42", "--service-port", "9000")
    assert res.returncode == 0, res.stderr
    cmds, svc = parse_dry_run(res.stdout)
    t, d = cmds["target"], cmds["drafter"]
    assert t[t.index("--tp-size") + 1] == "2" and t[t.index("--dp-size") + 1] == "2"
    assert t[-2:] == ["--chunked-prefill-size", "8192"]
    for c in (t, d):
        assert c[c.index("--context-length") + 1] == "40960"
        assert c[c.index("--attention-backend") + 1] == "fa3"
    assert d[d.index("--lora-paths") + 1] == "drafter=/ckpt/lora" and "--enable-lora" in d
    assert "--tp-size" not in d and d[-1] == "--max-loras-per-batch=4"
    assert svc["drafter_lora_name"] == "drafter" and svc["auth"] == "bearer"
    assert "sekrit-token-42" not in res.stdout  # the key itself is never printed


def test_dry_run_with_running_servers_starts_nothing():
    res = launch("--dry-run", "--target-url", "http://gpu1:30000/", "--target-url", "http://gpu2:30000",
                 "--drafter-url", "http://gpu1:30001", "--drafter-lora-name", "sc")
    assert res.returncode == 0, res.stderr
    cmds, svc = parse_dry_run(res.stdout)
    assert cmds == {}
    assert svc["target_urls"] == ["http://gpu1:30000", "http://gpu2:30000"]
    assert svc["drafter_url"] == "http://gpu1:30001" and svc["drafter_lora_name"] == "sc"


def test_only_the_missing_role_is_started():
    plan = plan_for("--target-url", "http://x:1")
    assert [s.role for s in plan.servers] == ["drafter"]
    plan = plan_for("--no-drafter")
    assert [s.role for s in plan.servers] == ["target"] and plan.drafter_url is None


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_ready_configs_load_and_document_memory(config):
    data = load_config_file(config)
    text = config.read_text()
    assert "Memory arithmetic" in text and "KV" in text and "H200" in text and "H100" in text
    res = launch("--config", str(config), "--dry-run")
    assert res.returncode == 0, res.stderr
    cmds, svc = parse_dry_run(res.stdout)
    assert cmds["target"][4] == data["target"]["model_path"]
    assert cmds["drafter"][4] == "Qwen/Qwen3-0.6B"


def test_flags_override_config_file():
    plan = plan_for("--config", str(REPO / "launch/qwen3-32b.toml"), "--target-mem-fraction", "0.7")
    assert plan.servers[0].model_path == "Qwen/Qwen3-32B" and plan.servers[0].mem_fraction_static == 0.7


def test_every_generated_flag_is_known_to_installed_sglang():
    plans = [plan_for(), plan_for("--drafter-lora", "/x", "--tp-size", "2", "--dp-size", "2",
                                  "--context-length", "40960", "--attention-backend", "fa3")]
    plans += [plan_for("--config", str(c)) for c in CONFIGS]
    for plan in plans:
        for spec in plan.servers:
            assert check_server_flags(server_command(spec)) == [], spec
    assert check_server_flags(server_command(plan_for("--target-arg", "--no-such-flag 1").servers[0])) == [
        "--no-such-flag"]


@pytest.mark.parametrize("content,match", [
    ("[target]\nmodel = 'x'\n", "unknown key"),
    ("[gpu]\nx = 1\n", "unknown section"),
    ("[target\n", "not valid"),
])
def test_bad_config_file(tmp_path, content, match):
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=match):
        load_config_file(path)
    res = launch("--config", str(path), "--dry-run")
    assert res.returncode == 2 and "error:" in res.stderr


@pytest.mark.parametrize("argv,match", [
    (["--target-port", "30001"], "distinct ports"),
    (["--service-port", "30000"], "clashes"),
    (["--target-mem-fraction", "1.5"], "mem_fraction_static"),
])
def test_bad_values_raise_config_error(argv, match):
    with pytest.raises(ConfigError, match=match):
        plan_for(*argv)


def test_compact_overrides_checked_at_start(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"compact": {"eta": 5}}))
    with pytest.raises(ConfigError):
        plan_for("--config", str(path))


@pytest.mark.skipif(cuda_available(), reason="a CUDA device is visible: the launcher would start servers")
def test_no_gpu_and_no_urls_exits_with_what_to_pass():
    res = launch()
    assert res.returncode == 2
    assert "no CUDA device" in res.stderr and "--target-url" in res.stderr and "--drafter-url" in res.stderr


def test_serve_requires_target_url():
    res = subprocess.run([sys.executable, "-m", "sgl_speccompact", "serve"], cwd=REPO, capture_output=True,
                         text=True, timeout=READY_S)
    assert res.returncode == 2 and "--target-url" in res.stderr


# ---------------------------------------------------------------- child processes

FAKE_SERVER = textwrap.dedent('''\
    import json, os, subprocess, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    argv = sys.argv[1:]
    assert argv[:2] == ["-m", "sglang.launch_server"], argv
    port = int(argv[argv.index("--port") + 1])
    model = argv[argv.index("--model-path") + 1]
    mode = os.environ.get("FAKE_MODE_%d" % port, "ok")
    if mode == "die":
        sys.exit(3)
    # a grandchild, like SGLang's scheduler: it must die with the group
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.path.join(os.environ["FAKE_DIR"], "%d.pids" % port), "w") as f:
        f.write("%d %d" % (os.getpid(), grandchild.pid))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path == "/health":
                code, body = (200 if mode == "ok" else 503), b""
            elif self.path == "/get_model_info":
                code, body = 200, json.dumps({"model_path": model, "model_type": "qwen3"}).encode()  # as sglang
            else:
                code, body = 404, b""
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
''')


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie has exited; only its parent's wait is missing
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


@pytest.fixture
def fake_python(tmp_path):
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    wrapper = tmp_path / "fakepython"
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(script))} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def start_launcher(fake_python, tmp_path, env_extra: dict, *extra: str):
    tp, dp, sp = free_port(), free_port(), free_port()
    env = {**os.environ, "FAKE_DIR": str(tmp_path), **{k.format(tp=tp, dp=dp): v for k, v in env_extra.items()}}
    cmd = [sys.executable, "-m", "sgl_speccompact.launch", "--python", str(fake_python), "--no-gpu-check",
           "--target-port", str(tp), "--drafter-port", str(dp), "--service-port", str(sp),
           "--log-dir", str(tmp_path / "logs"), *extra]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, tp, dp, sp


def pids(tmp_path, port) -> list[int]:
    f = tmp_path / f"{port}.pids"
    return [int(x) for x in f.read_text().split()] if f.exists() and f.read_text() else []


def test_child_dying_before_healthy_is_a_clear_error(fake_python, tmp_path):
    proc, tp, dp, sp = start_launcher(fake_python, tmp_path, {"FAKE_MODE_{tp}": "die"})
    out, err = proc.communicate(timeout=READY_S)  # a hang guard: the launcher imports sglang first
    assert proc.returncode == 1
    assert "target server exited with code 3 before it became healthy" in err


def test_sigterm_while_waiting_stops_every_child(fake_python, tmp_path):
    proc, tp, dp, sp = start_launcher(fake_python, tmp_path, {"FAKE_MODE_{tp}": "never"})
    try:
        poll_until(lambda: len(pids(tmp_path, tp)) == 2 or proc.poll() is not None, "the fake target to start")
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        children = pids(tmp_path, tp)
        assert all(alive(p) for p in children)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=EXIT_S)
        assert proc.returncode == 143, err
        poll_until(lambda: not any(alive(p) for p in children), f"no orphans left of {children}", EXIT_S)
        assert not pids(tmp_path, dp)  # the drafter never started: the target was not healthy
    finally:
        stop(proc, signal.SIGKILL)


def held_port():
    """A port another process listens on (here: a socket of the test's own)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


@pytest.mark.parametrize("role,flag", [("target", "--target-port"), ("drafter", "--drafter-port"),
                                       ("service", "--service-port")])
def test_a_busy_port_is_refused_before_anything_starts(fake_python, tmp_path, role, flag):
    # before: the servers started, the launcher waited on whatever answered, the service died late
    sock, port = held_port()
    with sock:
        tp, dp, sp = free_port(), free_port(), free_port()
        ports = {"target": tp, "drafter": dp, "service": sp, role: port}
        cmd = [sys.executable, "-m", "sgl_speccompact.launch", "--python", str(fake_python), "--no-gpu-check",
               "--target-port", str(ports["target"]), "--drafter-port", str(ports["drafter"]),
               "--service-port", str(ports["service"])]
        res = subprocess.run(cmd, cwd=REPO, env={**os.environ, "FAKE_DIR": str(tmp_path)}, capture_output=True,
                             text=True, timeout=READY_S)
    assert res.returncode == 1, res.stderr[-2000:]
    assert f"port {port}" in res.stderr and flag in res.stderr and "already in use" in res.stderr
    assert "starting target" not in res.stderr and not list(tmp_path.glob("*.pids"))  # nothing started


def test_the_server_waited_for_must_be_the_one_started(make_emulated_server):
    # before: an SGLang-API server already on the port answered /health, and the launcher served it
    import httpx

    from sgl_speccompact.errors import LaunchError
    from sgl_speccompact.launch.servers import wait_healthy as launcher_wait

    foreign = make_emulated_server(model_path="someone/else")
    port = foreign.url.rsplit(":", 1)[1]
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with httpx.Client(timeout=10) as http:
            with pytest.raises(LaunchError, match=rf"serves 'someone/else', not the 'Qwen/Qwen3-8B'.*port {port}"
                                                  r".*--target-port"):
                launcher_wait(foreign.url, mine, timeout_s=30, get=http.get, label="target",
                              model_path="Qwen/Qwen3-8B", flag="--target-port")
            launcher_wait(foreign.url, mine, timeout_s=30, get=http.get, label="target", model_path="someone/else",
                          flag="--target-port")  # its own model: accepted
            mine.kill()
            mine.wait()
            with pytest.raises(LaunchError, match=rf"exited with code .*another process holds port {port}"):
                from sgl_speccompact.launch.servers import check_own

                check_own(foreign.url, mine, "someone/else", http.get, "target", "--target-port")
    finally:
        mine.kill()
        mine.wait()


def test_emulate_refuses_a_busy_service_port_before_the_emulators_start():
    sock, port = held_port()
    with sock:
        res = launch("--emulate", "--service-port", str(port))
    assert res.returncode == 1, res.stderr[-2000:]
    assert f"port {port} (the compaction service)" in res.stderr and "--service-port" in res.stderr
    assert "emulated target on" not in res.stderr


EMULATOR_WRAPPER = textwrap.dedent('''\
    # Stands in for `python -m sglang.launch_server ...`: runs the SGLang-API emulator instead.
    import os, sys
    argv = sys.argv[1:]
    assert argv[:2] == ["-m", "sglang.launch_server"], argv

    def flag(name, default=None):
        return argv[argv.index(name) + 1] if name in argv else default

    port = flag("--port")
    with open(os.path.join(os.environ["FAKE_DIR"], "%s.pids" % port), "w") as f:
        f.write(str(os.getpid()))
    cmd = [sys.executable, "-m", "sgl_speccompact.emulator", "--tokenizer", os.environ["EMU_TOKENIZER"],
           "--host", flag("--host"), "--port", port, "--model-path", flag("--model-path")]
    if "--lora-paths" in argv:
        cmd += ["--lora-paths", flag("--lora-paths").split("=")[0]]
    os.execv(sys.executable, cmd)
''')


@pytest.mark.e2e  # the launcher's child processes, end to end
@pytest.mark.skipif(not (Path(__file__).parents[3] / "shared/data/trajectories").is_dir(),
                    reason="shared trajectories not found beside the repo")
def test_launch_with_emulated_servers_compacts_then_sigterm_leaves_no_orphans(tmp_path, emulator_tokenizer_path):
    import httpx

    from sgl_speccompact.history.formats import load_history

    script = tmp_path / "emulator_wrapper.py"
    script.write_text(EMULATOR_WRAPPER)
    wrapper = tmp_path / "emupython"
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(script))} \"$@\"\n")
    wrapper.chmod(0o755)
    proc, tp, dp, sp = start_launcher(wrapper, tmp_path, {"EMU_TOKENIZER": emulator_tokenizer_path},
                                      "--drafter-lora", "/adapters/drafter", "--api-key", "tok")
    base = f"http://127.0.0.1:{sp}"
    try:
        wait_healthy(base, proc)
        assert set(httpx.get(f"{base}/health", timeout=EXIT_S).json()["upstreams"]) == {"target", "drafter"}
        traj = next((Path(__file__).parents[3] / "shared/data/trajectories").glob("*function_calling_simple*"))
        body = {"messages": load_history(traj), "method": "speccompact"}  # explicit: the default auto may not pick it
        assert httpx.post(f"{base}/v1/compact", json=body, timeout=READY_S).status_code == 401
        res = httpx.post(f"{base}/v1/compact", json=body, headers={"Authorization": "Bearer tok"}, timeout=READY_S)
        assert res.status_code == 200, res.text
        out = res.json()
        assert out["summary"].strip() and out["stats"]["requests"]["drafter"] and out["stats"]["auto"] is None
        # the service keeps the acceptance observed on this model pair for method auto
        text = httpx.get(f"{base}/metrics", timeout=EXIT_S).text
        assert re.search(r'^speccompact_observed_acceptance\{pair="[^"]+\|[^"]+"\} ', text, re.M), text[-2000:]
        children = pids(tmp_path, tp) + pids(tmp_path, dp)
        assert len(children) == 2 and all(alive(p) for p in children)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=EXIT_S)
        assert proc.returncode in (0, 143), err[-3000:]
        poll_until(lambda: not any(alive(p) for p in children), f"no orphans left of {children}", EXIT_S)
    finally:
        stop(proc, signal.SIGKILL)


def test_api_key_from_environment():
    res = launch("--dry-run", env={"SGL_SPECCOMPACT_API_KEY": "from-env-123"})
    _, svc = parse_dry_run(res.stdout)
    assert svc["auth"] == "bearer" and "from-env-123" not in res.stdout
    # an empty key is a mistake, not "auth off"
    for args, env in ((("--dry-run",), {"SGL_SPECCOMPACT_API_KEY": ""}), (("--dry-run", "--api-key", ""), {}),
                      (("--dry-run", "--upstream-api-key", " "), {})):
        res = launch(*args, env=env)
        assert res.returncode == 2 and "is empty" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.e2e  # the launcher's child processes, end to end
def test_serve_against_running_servers(make_emulated_server, tmp_path):
    import httpx

    from sgl_speccompact.emulator import ControlledAcceptancePolicy

    target = make_emulated_server(policy=ControlledAcceptancePolicy(), model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(policy=ControlledAcceptancePolicy(), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    sp = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sgl_speccompact", "serve", "--target-url", target.url,
                             "--target-url", target.url, "--drafter-url", drafter.url, "--service-port", str(sp)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{sp}"
    try:
        wait_healthy(base, proc)
        health = httpx.get(f"{base}/health", timeout=EXIT_S).json()
        assert set(health["upstreams"]) == {"target[0]", "target[1]", "drafter"}
        msgs = [{"role": "user", "content": "Please fix the failing test in the parser module today."}]
        res = httpx.post(f"{base}/v1/compact", json={"messages": msgs}, timeout=READY_S)
        assert res.status_code == 200 and res.json()["summary"].strip()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=EXIT_S)
        assert proc.returncode in (0, 143)
    finally:
        stop(proc, signal.SIGKILL)


def test_schedule_policy_from_extras_wins_over_the_lpm_default():
    res = launch("--dry-run", "--no-priority-scheduling", "--target-arg=--schedule-policy=fcfs")
    assert res.returncode == 0, res.stderr
    cmds, _ = parse_dry_run(res.stdout)
    assert "lpm" not in cmds["target"] and "--schedule-policy=fcfs" in cmds["target"]
    assert cmds["drafter"][-2:] == ["--schedule-policy", "lpm"]


def test_dry_run_shows_the_router_in_front_of_target_workers():
    res = launch("--dry-run", "--target-workers", "2", "--router-policy", "manual", "--target-tokenizer", "Qwen/Qwen3-8B")
    assert res.returncode == 0, res.stderr
    cmds, svc = parse_dry_run(res.stdout)
    assert list(cmds) == ["target0", "target1", "drafter", "sglang-router"]  # the router starts last
    for i in (0, 1):
        cmd = cmds[f"target{i}"]
        assert cmd[cmd.index("--port") + 1] == str(30010 + i) and cmd[cmd.index("--base-gpu-id") + 1] == str(i)
    router = cmds["sglang-router"]
    assert router[1:3] == ["-m", "sglang_router.launch_router"]
    assert router[router.index("--worker-urls") + 1:router.index("--policy")] == [
        "http://127.0.0.1:30010", "http://127.0.0.1:30011"]
    assert router[router.index("--policy") + 1] == "manual" and router[router.index("--port") + 1] == "30000"
    assert svc["target_urls"] == ["http://127.0.0.1:30000"] and svc["target_tokenizer"] == "Qwen/Qwen3-8B"


def test_router_plan_checks():
    plan = plan_for("--target-workers", "3")
    assert plan.router.policy == "cache_aware" and len(plan.router.worker_urls) == 3
    assert "--cache-threshold" in router_command(plan.router)
    assert plan_for("--router-url", "http://r:30000/").target_urls == ("http://r:30000",)
    assert plan_for("--router-url", "http://r:30000").router is None  # a running router: nothing to start
    with pytest.raises(ConfigError):
        plan_for("--target-workers", "0")
    with pytest.raises(ConfigError, match="share a port"):
        plan_for("--target-workers", "2", "--router-port", "30011")


def test_auto_is_the_default_method_everywhere():
    assert plan_for().service.method == "auto"
    for config in CONFIGS:
        assert plan_for("--config", str(config)).service.method == "auto", config.name
    method = next(a for a in build_parser()._actions if a.dest == "method")
    assert method.help.startswith("default method: auto")


def test_auto_deployment_follows_the_plan():
    from sgl_speccompact.core.calibration import profile_fit
    from sgl_speccompact.launch.deployment import auto_picker

    shared = auto_picker(plan_for("--target-model", "Qwen/Qwen3-32B"))
    own = auto_picker(plan_for("--target-model", "Qwen/Qwen3-32B", "--drafter-arg", "--base-gpu-id 1"))
    assert (shared.deployment.gpus, shared.deployment.drafter_shares_gpu) == (1, True)
    assert (own.deployment.gpus, own.deployment.drafter_shares_gpu) == (2, False)
    history = [{"role": "user", "content": "x" * 12000}]
    allowed = ("speccompact", "hermes", "openclaw", "target_self")
    assert (shared.pick(history, allowed)["method"], own.pick(history, allowed)["method"]) == (
        "target_self", "speccompact")
    # the two-H100 config: TP=2 target, the drafter beside it on GPU 1, the shipped speculative tables
    two = auto_picker(plan_for("--config", str(REPO / "launch/qwen3-32b-2xh100.toml")))
    d = two.deployment
    assert (d.gpus, d.drafter_shares_gpu, d.single_model_tp, d.target_spec.algorithm) == (2, True, 2, "EAGLE3")
    assert d.target_tp == 2  # two-gpu-tp2-colocated: SpecCompact's target is priced at TP=2 too
    assert "H100" in d.hardware.name
    # a calibrated fit replaces the profile, per server, and the source says so
    fit = profile_fit("Qwen/Qwen3-0.6B", "A100").__class__(**{**profile_fit("Qwen/Qwen3-0.6B", "A100").to_dict(),
                                                             "source": "calibrated"})
    cal = auto_picker(plan_for(), {"drafter": fit})
    assert "drafter: calibrated" in cal.source and cal.deployment.drafter_hardware is not None
    external = auto_picker(plan_for("--target-url", "http://t:1", "--drafter-url", "http://d:2"))
    assert external.deployment is None and "one shared GPU assumed" in external.source


def auto_notes(stdout: str) -> list[str]:
    return [line for line in stdout.split("# service config")[0].splitlines() if "history at prior" in line
            or line.startswith("# method=auto")]


def test_dry_run_shows_what_auto_predicts_on_and_its_pick():
    one = launch("--dry-run")
    assert one.returncode == 0, one.stderr
    notes = auto_notes(one.stdout)
    deployment = json.loads(notes[0].split("predicts on: ", 1)[1])
    assert deployment["gpus"] == 1 and deployment["drafter_shares_gpu"] and deployment["gpu"] == "H200"
    picks = [line.split(": ")[1].split()[0] for line in notes[1:]]
    assert len(picks) == 2 and set(picks) <= {"speccompact", "target_self", "hermes", "openclaw"}
    assert "predicted, not measured" in notes[1]
    # the deployment follows the plan: the drafter on a second GPU
    two = launch("--dry-run", "--drafter-arg=--base-gpu-id 1")
    assert two.returncode == 0, two.stderr
    moved = json.loads(auto_notes(two.stdout)[0].split("predicts on: ", 1)[1])
    assert moved["gpus"] == 2 and not moved["drafter_shares_gpu"]
    cmds, svc = parse_dry_run(one.stdout)  # the service JSON still parses to the end
    assert svc["service"]["method"] == "auto"
    explicit = launch("--dry-run", "--method", "target_self")
    assert explicit.returncode == 0 and not auto_notes(explicit.stdout)
