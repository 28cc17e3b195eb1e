"""Real sglang 0.5.23 servers on the CPU engine: tiny-model builds, start, weight swaps.

Two ``sglang.launch_server`` processes on loopback, started with the
launcher's own CPU command (``--sleep-on-idle`` among its flags), serve tiny scripted Qwen3
models (:mod:`tests.support.tiny_qwen3`): a target and a drafter.
Tests swap weights with ``/update_weights_from_disk`` instead of restarting.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.real_sglang import scripts
from tests.support import procs
from sgl_speccompact.launch.servers import ServerSpec, server_command
from sgl_speccompact.launch.cpu import server_env
from tests.support import tiny_qwen3
from sgl_speccompact.emulator.qwen3 import cache_dir, cached_qwen3_tokenizer
from sgl_speccompact.emulator.server import free_port

TARGET_CONTEXT = 8192  # --context-length of the target: chunking tests reach it with modest histories
KV_TOKENS = 65536  # --max-total-tokens of each server's KV pool
# beyond the launcher's CPU flags: the tiny models' weights are bfloat16 and their scripts were tuned in
# it, whatever the CPU computes natively
SERVER_ARGS = ("--dtype", "bfloat16", "--log-level", "warning")
TIER = "real SGLang tier"


def unavailable(reason: str):
    """Fail in CI, skip elsewhere (:func:`procs.unavailable`)."""
    procs.unavailable(TIER, reason)


def model_dir(script: tiny_qwen3.Script, name: str) -> str:
    """A built checkpoint for ``script``, cached by the script and the builder's source."""
    key = hashlib.sha256((json.dumps(script.__dict__, sort_keys=True, default=list)
                          + inspect.getsource(tiny_qwen3)).encode()).hexdigest()[:16]
    # "Qwen3" in the folder name is for people reading logs; the chat format comes from config.json
    out = cache_dir() / "tiny-qwen3" / f"Qwen3-tiny-{name}-{key}"
    if not (out / "model.safetensors").is_file():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        tiny_qwen3.build_model(tmp, script, cached_qwen3_tokenizer())
        tmp.rename(out)
    return str(out)


@dataclass
class Server:
    """One started ``sglang.launch_server`` process."""

    name: str  # "target" or "drafter"
    url: str  # http://127.0.0.1:PORT
    proc: subprocess.Popen | None  # the server process (its own process group); None: started elsewhere
    model: str  # checkpoint served now
    log: Path  # stdout and stderr of the process

    def use(self, script: tiny_qwen3.Script, name: str) -> None:
        """Serve ``script``'s weights from now on; the radix cache starts empty."""
        path = model_dir(script, name)
        if path != self.model:
            r = httpx.post(self.url + "/update_weights_from_disk", json={"model_path": path}, timeout=300)
            assert r.status_code == 200 and r.json().get("success"), r.text
            self.model = path
        # sglang refuses to flush while a request runs (a test's abandoned repair, say): wait for idle
        r = httpx.post(self.url + "/flush_cache", params={"timeout": 120}, timeout=180)
        assert r.status_code == 200, f"{self.name}: /flush_cache refused: {r.text}"


@dataclass
class RealServers:
    """The session's target and drafter servers."""

    target: Server  # judges and repairs (TARGET script by default)
    drafter: Server  # drafts (DRAFTER script), a separate model: no LoRA on the CPU engine
    context: int = TARGET_CONTEXT  # the target's context length, tokens
    started: list = field(default_factory=list)  # processes to stop at the end

    def reset(self) -> None:
        self.target.use(scripts.TARGET, "target")
        self.drafter.use(scripts.DRAFTER, "drafter")


def start(name: str, model: str, log_dir: Path, extra: list[str]) -> Server:
    """Start one server with the launcher's own CPU command (:func:`~sgl_speccompact.launch.servers.server_command`)."""
    spec = ServerSpec(name, model, "127.0.0.1", free_port(), 0.5, device="cpu", max_total_tokens=KV_TOKENS,
                      extra_args=(*SERVER_ARGS, *extra))
    log = log_dir / f"{name}.log"
    proc = subprocess.Popen(server_command(spec), env=server_env(spec.device), stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    return Server(name, spec.url, proc, model, log)
