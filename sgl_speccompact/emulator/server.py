"""``EmulatedServer``: the SGLang-API emulator on a loopback port.

Usage in tests::

    with EmulatedServer(tokenizer_path, policy=ScriptedPolicy()) as srv:
        backend = RuntimeEndpoint(srv.url)

The server runs uvicorn in a background thread and the scheduler in
another; ``close()`` (or leaving the ``with``) stops both.
"""

from __future__ import annotations

import random
import socket
import threading
import time

import uvicorn

from ..service.logs import uvicorn_logging
from .api import create_app
from .cost import CostModel
from .engine import Engine
from .frontend import Frontend, ServedModel, preload
from .model import EmulatedModel
from .policy import ControlledAcceptancePolicy, Policy
from .radix import RadixTree

DEFAULT_CONTEXT_LENGTH = 40960  # Qwen3's max_position_embeddings: sglang's window for it without --context-length


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now, for a server another process will bind.

    It is picked at random below the kernel's ephemeral range, so no
    outgoing connection and no ``bind(("", 0))`` can take it before that
    server binds it (ports in the range come and go with every connection).
    """
    lo = _ephemeral_low()
    for _ in range(100 if lo > 2048 else 0):
        port = _PORTS.randrange(max(1024, lo - 12000), lo)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


_PORTS = random.SystemRandom()  # not the seedable global generator: seeded runs must not pick alike


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; BSD and macOS start at 49152


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (port 0: one the kernel picks), as uvicorn binds its own.

    Binding before the server starts leaves no window in which another
    process could take a port chosen by :func:`free_port`.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def load_tokenizer(path: str):
    """A ``transformers`` fast tokenizer from a local directory (no download)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


class EmulatedServer:
    """An SGLang-API emulator with a real tokenizer and a real radix tree.

    Parameters
    ----------
    tokenizer_path
        Local Hugging Face tokenizer directory (e.g. from
        :func:`~sgl_speccompact.emulator.tokenizer.build_test_tokenizer`).
    policy
        The "model" (default: :class:`ControlledAcceptancePolicy`).
    cost_model
        Optional :class:`CostModel` for simulated latencies.
    model_path
        Reported ``model_path`` (default: ``tokenizer_path``).
    context_length
        Context window, as ``--context-length`` sets it (default
        :data:`DEFAULT_CONTEXT_LENGTH`, Qwen3's ``max_position_embeddings``).
        ``/v1/models`` reports the window; ``/server_info`` reports
        ``context_length`` only when it is given, as sglang does.
    lora_paths
        Loaded adapter names.  ``None`` (default): LoRA is not enabled and
        every request with a ``lora_path`` is a 400, as on a server started
        without ``--enable-lora``.
    radix_capacity_tokens
        Radix-cache capacity (``None``: unbounded).
    max_prefill_tokens
        Uncached tokens per prefill batch.
    host, port
        Where to listen (port 0: a free port, bound at once).
    log_level
        One of :data:`~sgl_speccompact.options.LOG_LEVELS`: ``debug`` logs an
        access line per request (:mod:`sgl_speccompact.service.logs`).  None (default):
        uvicorn's warnings only, no access lines.
    """

    def __init__(self, tokenizer_path: str, policy: Policy | None = None,
                 cost_model: CostModel | None = None, *, model_path: str | None = None,
                 context_length: int | None = None, lora_paths: list[str] | None = None,
                 radix_capacity_tokens: int | None = None, max_prefill_tokens: int = 16384,
                 host: str = "127.0.0.1", port: int = 0, log_level: str | None = None):
        preload()
        tokenizer = load_tokenizer(tokenizer_path)
        self.policy = policy if policy is not None else ControlledAcceptancePolicy()
        self.model = EmulatedModel(self.policy, tokenizer)
        self.tree = RadixTree(radix_capacity_tokens)
        self.engine = Engine(self.model, self.tree, cost_model, max_prefill_tokens)
        path = model_path or tokenizer_path
        self.served = ServedModel(path, tokenizer_path, path, context_length or DEFAULT_CONTEXT_LENGTH,
                                  tuple(lora_paths) if lora_paths is not None else None, context_length)
        self._sock: socket.socket | None = listening_socket(host, port)
        self.host, self.port = host, self._sock.getsockname()[1]
        self.cost_model = cost_model
        self.log_level = log_level
        self._info = self._server_info(max_prefill_tokens, radix_capacity_tokens)
        self.frontend = Frontend(self.model, self.served)
        self.app = create_app(self.engine, self.frontend, self.served, self._info)
        self._uvicorn: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:34567``."""
        return f"http://{self.host}:{self.port}"

    @property
    def tokenizer(self):
        """The server's tokenizer."""
        return self.model.tokenizer

    def start(self, timeout: float = 300.0) -> "EmulatedServer":
        """Start the scheduler and the HTTP server; return once it accepts requests.

        ``timeout`` is a deadline for a machine that hangs, not an expected
        start-up time (the socket is already listening).
        """
        if self._sock is None:
            raise RuntimeError("an EmulatedServer starts once")
        self.engine.start()
        logs = {"log_level": "warning", "access_log": False} if self.log_level is None else uvicorn_logging(self.log_level)
        config = uvicorn.Config(self.app, host=self.host, port=self.port, lifespan="off", **logs)
        self._uvicorn = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [self._sock]},
                                        name="emulator-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"emulated server did not start on {self.url}")
            time.sleep(0.01)
        return self

    def close(self) -> None:
        """Stop serving."""
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=60)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self.engine.stop()

    def __enter__(self) -> "EmulatedServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------- Python access

    def set_policy(self, policy: Policy) -> None:
        """Swap the model's policy (e.g. one shared server, one script per test)."""
        self.policy = self.model.policy = policy

    def stats(self) -> dict:
        """The counters of ``GET /emulator/stats`` (``sessions``: the sessions open and their nodes)."""
        return {**self.engine.stats(), "sessions": self.frontend.sessions.stats()}

    def reset_stats(self) -> None:
        """Zero the counters."""
        self.engine.reset_stats()

    def flush_cache(self) -> bool:
        """Empty the radix cache (False while requests run)."""
        return self.engine.flush()

    def _server_info(self, max_prefill_tokens: int, capacity: int | None) -> dict:
        cost = self.cost_model
        return {
            "model_path": self.served.model_path,
            "tokenizer_path": self.served.tokenizer_path,
            "served_model_name": self.served.served_model_name,
            "context_length": self.served.context_length_arg,  # the launch flag: null unless given
            "page_size": 1,
            "schedule_policy": "fcfs",
            "disable_radix_cache": False,
            "enable_lora": self.served.lora_paths is not None,
            "lora_paths": list(self.served.lora_paths) if self.served.lora_paths else None,
            "max_prefill_tokens": max_prefill_tokens,
            "emulated": True,
            "emulator_radix_capacity_tokens": capacity,
            "emulator_policy": type(self.policy).__name__,
            # sglang 0.5.23 reports no device name; the emulator names the GPU it plays
            "gpu_name": None if cost is None else cost.hardware.name,
            "simulated_cost_model": None if cost is None else {
                "model": cost.model.name,
                "gpu": cost.hardware.name,
                "time_scale": cost.time_scale,
                "note": "simulated latencies from a cost model, not GPU measurements",
            },
        }
