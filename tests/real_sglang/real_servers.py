"""Real sglang 0.5.23 servers on the CPU engine: tiny-model builds, start, weight swaps.

Two ``sglang.launch_server`` processes on loopback serve tiny scripted Qwen3
models (:mod:`sgl_speccompact.testing.tiny_qwen3`): a target and a drafter.
Tests swap weights with ``/update_weights_from_disk`` instead of restarting.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

import scripts
from sgl_speccompact.launch.cpu_kernels import server_env
from sgl_speccompact.testing import tiny_qwen3
from sgl_speccompact.testing.emulator.qwen3 import cache_dir, cached_qwen3_tokenizer
from sgl_speccompact.testing.emulator.server import free_port

TARGET_CONTEXT = 8192  # --context-length of the target: chunking tests reach it with modest histories
KV_TOKENS = 65536  # --max-total-tokens of each server's KV pool
CPU_ARGS = ["--device", "cpu", "--attention-backend", "torch_native", "--disable-cuda-graph",
            "--sampling-backend", "pytorch", "--disable-overlap-schedule", "--dtype", "bfloat16",
            "--max-total-tokens", str(KV_TOKENS), "--log-level", "warning"]


def unavailable(reason: str):
    """Fail in CI, skip elsewhere: the tier must not vanish silently where it is required."""
    if os.environ.get("CI"):
        pytest.fail(f"real SGLang tier could not run: {reason}", pytrace=False)
    pytest.skip(f"real SGLang tier skipped: {reason}")


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
    port = free_port()
    log = log_dir / f"{name}.log"
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--host", "127.0.0.1",
           "--port", str(port), *CPU_ARGS, *extra]
    proc = subprocess.Popen(cmd, env=server_env(os.environ), stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    return Server(name, f"http://127.0.0.1:{port}", proc, model, log)


