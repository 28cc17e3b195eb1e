"""SGLang servers as child processes: the command line, start, health, stop.

Each server runs in its own session, so it leads a process group holding
SGLang's scheduler and detokenizer too; :func:`stop_servers` signals the
whole group, and a Linux parent-death signal covers a launcher that is
killed outright.  :mod:`sgl_speccompact.launch` decides what to start.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import LaunchError
from .cpu import cpu_flags, env_assignments, server_env
from .speculative import SpecSettings, spec_flags


AGENT_PRIORITY = 0  # --default-priority-value: the priority of requests that name none (the agent's own)
PREPARE_PRIORITY = -100  # the service's prepares: below the agent's by more than sglang's preemption threshold
PRIORITY_POLICIES = ("fcfs", "lof")  # the schedule policies sglang 0.5.23 allows with priority scheduling


@dataclass(frozen=True)
class ServerSpec:
    """One SGLang server to start."""

    role: str  # "target" or "drafter"
    model_path: str  # Hugging Face id or local directory
    host: str  # interface the server binds
    port: int  # its HTTP port
    mem_fraction_static: float  # weights + KV cache, as a share of GPU memory free at its start
    tp_size: int = 1  # tensor-parallel GPUs
    dp_size: int = 1  # data-parallel replicas
    context_length: int | None = None  # max tokens per request (model default when None)
    attention_backend: str | None = None  # SGLang attention kernels (SGLang's choice when None)
    lora_path: str | None = None  # LoRA adapter directory, served as `lora_name`
    lora_name: str = "drafter"  # adapter name the service sends as `lora_path`
    extra_args: tuple[str, ...] = ()  # further launch_server flags, verbatim
    speculative: SpecSettings | None = None  # sglang speculative decoding on this server (None: off)
    priority_scheduling: bool = False  # --enable-priority-scheduling: requests' `priority` orders and preempts
    device: str | None = None  # "cpu": SGLang's CPU engine (launch.cpu); None: a GPU
    max_total_tokens: int | None = None  # KV pool in tokens (CPU: instead of mem_fraction_static)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"


def server_command(spec: ServerSpec, python: str = sys.executable) -> list[str]:
    """The ``sglang.launch_server`` argv for one server.

    Radix caching stays on (no ``--disable-radix-cache``): every SpecCompact
    request reuses the history prefix.  The schedule policy is ``lpm`` unless
    the extras set one: under sglang's cache-aware policies, requests in one
    batch that share a prefix not yet cached are held back until one of them
    has cached it (``_compute_prefix_matches`` in ``managers/schedule_policy.py``),
    which SJC's batched judge request and the first drafts rely on.  A LoRA
    drafter is served under ``spec.lora_name``, the name the service sends as
    ``lora_path``.  A CPU server (``device == "cpu"``) gets the CPU engine's
    flags and a KV pool in tokens instead of a memory fraction
    (:mod:`sgl_speccompact.launch.cpu`).

    With ``priority_scheduling`` the server orders its queue by each
    request's ``priority`` and lets a request preempt running ones that are
    more than ``--priority-scheduling-preemption-threshold`` (10) below it:
    ``--enable-priority-scheduling --default-priority-value 0`` (requests
    without one, such as the agent's own, get 0) and, since sglang 0.5.23
    allows priority scheduling only with ``fcfs`` or ``lof``
    (``arg_groups/validation_hook.py``), ``--schedule-policy fcfs`` instead of
    ``lpm`` unless the extras set one.

    >>> cmd = server_command(ServerSpec("target", "m", "127.0.0.1", 1, 0.5, priority_scheduling=True), "python")
    >>> cmd[cmd.index("--enable-priority-scheduling"):]
    ['--enable-priority-scheduling', '--default-priority-value', '0', '--schedule-policy', 'fcfs']

    >>> server_command(ServerSpec("target", "Qwen/Qwen3-8B", "127.0.0.1", 30000, 0.55), "python")[:5]
    ['python', '-m', 'sglang.launch_server', '--model-path', 'Qwen/Qwen3-8B']
    """
    cpu = spec.device == "cpu"
    cmd = [python, "-m", "sglang.launch_server", "--model-path", spec.model_path, "--host", spec.host,
           "--port", str(spec.port)]
    if not cpu:  # a CPU's fraction would be of host memory: its KV pool is sized in tokens below
        cmd += ["--mem-fraction-static", f"{spec.mem_fraction_static:g}"]
    if spec.tp_size != 1:
        cmd += ["--tp-size", str(spec.tp_size)]
    if spec.dp_size != 1:
        cmd += ["--dp-size", str(spec.dp_size)]
    if spec.context_length:
        cmd += ["--context-length", str(spec.context_length)]
    if cpu:
        cmd += cpu_flags(spec.attention_backend, spec.max_total_tokens, spec.extra_args)
    elif spec.attention_backend:
        cmd += ["--attention-backend", spec.attention_backend]
    if spec.max_total_tokens and not cpu:
        cmd += ["--max-total-tokens", str(spec.max_total_tokens)]
    if spec.lora_path:
        cmd += ["--enable-lora", "--lora-paths", f"{spec.lora_name}={spec.lora_path}"]
    given = {a.split("=")[0] for a in spec.extra_args}
    if spec.priority_scheduling:
        cmd += [] if "--enable-priority-scheduling" in given else ["--enable-priority-scheduling"]
        cmd += [] if "--default-priority-value" in given else ["--default-priority-value", str(AGENT_PRIORITY)]
    if "--schedule-policy" not in given:
        cmd += ["--schedule-policy", "fcfs" if spec.priority_scheduling else "lpm"]
    return cmd + spec_flags(spec.speculative) + list(spec.extra_args)


def shell_command(spec: ServerSpec, python: str = sys.executable) -> str:
    """The server's command as one shell line, its environment first (a CPU server's engine switch).

    >>> shell_command(ServerSpec("t", "m", "h", 1, 0.5, device="cpu"), "py").startswith("SGLANG_USE_CPU_ENGINE=1 ")
    True
    """
    return shlex.join(env_assignments(spec.device) + server_command(spec, python))


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):  # Linux only: SIGTERM the child even if the launcher is SIGKILLed
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_server(spec: ServerSpec, python: str, log_dir: Path | None = None) -> subprocess.Popen:
    """Start one SGLang server in its own process group."""
    cmd = server_command(spec, python)
    print(f"[launch] starting {spec.role}: {shell_command(spec, python)}", file=sys.stderr, flush=True)
    # a new session makes the child a process-group leader: stop_servers signals the whole
    # group (SGLang's scheduler and detokenizer too), and the terminal's Ctrl-C reaches only us
    popen = dict(stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent,
                 env=server_env(spec.device))  # None: inherit; CPU: the engine switch and our kernels
    if log_dir is None:
        return subprocess.Popen(cmd, **popen)
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"{spec.role}.log", "ab") as out:  # the child keeps its own copy
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, **popen)


def port_in_use(host: str, port: int) -> bool:
    """Whether binding ``host:port`` for listening fails now (another process listens there).

    Bound as a server binds (``SO_REUSEADDR``, so a port held only by closed
    connections is free), then closed at once.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def check_ports(ports: list[tuple[str, int, str, str]]) -> None:
    """Refuse to start when a port the launch will listen on is taken: ``(host, port, who, flag)`` each.

    Raises
    ------
    LaunchError
        Naming the port, what would listen there and the flag that moves it.
    """
    for host, port, who, flag in ports:
        if port_in_use(host, port):
            raise LaunchError(f"port {port} ({who}) is already in use on {host}: another process listens there. "
                              f"Stop it, or pick another port with {flag}")


def check_own(url: str, proc: subprocess.Popen, model_path: str, get: Callable, label: str, flag: str) -> None:
    """Check that the server answering at ``url`` is the one this launch started: ``proc`` is alive and
    ``/get_model_info`` names ``model_path``.

    Raises
    ------
    LaunchError
        Something else answers there (a server started earlier, another model).
    """
    port = url.rsplit(":", 1)[-1]
    if proc.poll() is not None:
        raise LaunchError(f"{label} server exited with code {proc.returncode}, yet {url} answers: another "
                          f"process holds port {port}; stop it, or pick another port with {flag}")
    try:
        res = get(f"{url}/get_model_info")
        served = res.json().get("model_path") if res.status_code == 200 else f"HTTP {res.status_code}"
    except Exception as exc:  # noqa: BLE001 - whatever it is, it is not an SGLang server of ours
        served = f"no model info ({exc.__class__.__name__})"
    if served != model_path:
        raise LaunchError(f"the server answering at {url} serves {served!r}, not the {model_path!r} this launch "
                          f"started as {label}: another server holds port {port}; stop it, or pick another "
                          f"port with {flag}")


def wait_healthy(url: str, proc: subprocess.Popen | None, *, timeout_s: float, get: Callable,
                 label: str, poll_s: float = 2.0, model_path: str | None = None, flag: str = "") -> None:
    """Poll ``url/health`` until it answers 200; with ``model_path``, then check the server is
    ``proc``'s own (:func:`check_own`; ``flag`` moves its port).

    Raises
    ------
    LaunchError
        When ``proc`` exits first, ``timeout_s`` passes, or another server answers at ``url``.
    """
    t0 = time.monotonic()
    last_note = t0
    while True:
        if proc is not None and proc.poll() is not None:
            raise LaunchError(f"{label} server exited with code {proc.returncode} before it became healthy "
                              "(its output is above, or in --log-dir)")
        try:
            healthy = get(f"{url}/health").status_code == 200
        except Exception:  # noqa: BLE001 - not listening yet; the loop ends at the child's exit or the timeout
            healthy = False
        if healthy:
            if proc is not None and model_path is not None:
                check_own(url, proc, model_path, get, label, flag)
            print(f"[launch] {label} healthy at {url} after {time.monotonic() - t0:.0f} s",
                  file=sys.stderr, flush=True)
            return
        now = time.monotonic()
        if now - t0 > timeout_s:
            raise LaunchError(f"{label} server at {url} not healthy after {timeout_s:g} s")
        if now - last_note >= 30:
            print(f"[launch] waiting for {label} at {url}/health ({now - t0:.0f} s)", file=sys.stderr, flush=True)
            last_note = now
        time.sleep(poll_s)


def stop_servers(procs: list[subprocess.Popen], grace_s: float = 30.0) -> None:
    """SIGTERM each child's process group, then SIGKILL what is left after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, sig)  # the group: SGLang's scheduler and detokenizer too
        deadline = time.monotonic() + grace_s
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
        if all(p.poll() is not None and not _group_alive(p.pid) for p in procs):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False
