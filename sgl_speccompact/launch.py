"""``python -m sgl_speccompact.launch``: SGLang servers plus the compaction service.

Starts a target and a drafter SGLang server as child processes, waits for
each one's ``/health``, then serves :func:`sgl_speccompact.service.create_app`
with uvicorn.  Ctrl-C or SIGTERM stops the service and then every child
(each runs in its own process group, which is signalled as a whole, so no
SGLang scheduler or detokenizer process is left behind).

Memory on one GPU
-----------------
SGLang sizes weights plus KV cache as ``--mem-fraction-static`` times the GPU
memory *free when that server starts* (``pre_model_load_memory`` in
``sglang/srt/distributed/bootstrap.py``; the KV budget is computed in
``mem_cache/kv_cache_configurator.py``).  So the servers start one after the
other: the target first, taking its fraction of the whole GPU, then the
drafter, taking its fraction of what the target left.  The defaults (0.60,
then 0.45) leave about a fifth of the GPU for both servers' activations
and CUDA graphs; ``launch/*.toml`` work the arithmetic out per model pair.

Running servers
---------------
``--target-url`` / ``--drafter-url`` use servers that already run; a role
with a URL is not started.  ``--target-url`` may be repeated: the service
then pins each compaction to one target, chosen round-robin, because all of
a compaction's requests share one prefix that should stay in one radix
cache.  An sglang-router URL counts as one target; its cache-aware policy
keeps requests with a shared prefix on one worker.  (``--dp-size`` replicas
behind one server balance requests without regard to prefixes, so several
servers behind ``--target-url`` or a router keep the cache better.)

Scale-out
---------
``--target-workers N`` starts N target servers (worker i on GPU i, port
``target-port + 10 + i``) and then ``sglang-router`` on the target port in
front of them (``[router]`` in a config file); ``--router-url`` uses a running
router.  The policy is ``cache_aware``; :mod:`sgl_speccompact.router` says
what it guarantees and when to use ``manual`` with routing keys instead.

Configuration comes from defaults, then ``--config FILE`` (TOML or JSON, see
``launch/``), then flags.  ``--dry-run`` prints the server commands and the
service config and exits.

Without a GPU
-------------
``--emulate`` serves the real API on two in-process SGLang-API emulators
(:mod:`sgl_speccompact.testing`) whose model is scripted: summaries are lines
echoed from the input, judgements are seeded coin flips.  It is for
developing clients (such as the Hermes Agent plugin) against the real
service; nothing it returns is model output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import BackendError, ConfigError, LaunchError
from .router import ROUTER_POLICIES, RouterSpec, router_command, start_router
from .servers import ServerSpec, server_command, start_server, stop_servers, wait_healthy

SECTIONS = {
    "target": {"model_path", "host", "port", "mem_fraction_static", "tp_size", "dp_size", "context_length",
               "attention_backend", "chat_template", "extra_args", "urls", "tokenizer"},
    "router": {"workers", "port", "policy", "url", "cache_threshold", "balance_abs_threshold",
               "balance_rel_threshold", "extra_args"},
    "drafter": {"model_path", "host", "port", "mem_fraction_static", "tp_size", "dp_size", "context_length",
                "attention_backend", "chat_template", "extra_args", "url", "lora_path", "lora_name", "enabled"},
    "service": {"host", "port", "method", "max_body_mb", "max_workers", "request_timeout_s", "health_wait_s",
                "compaction_timeout_s", "upstream_detail"},
    "compact": None,  # CompactConfig fields, checked by make_config
}

DEFAULTS: dict[str, dict[str, Any]] = {
    "target": {"model_path": "Qwen/Qwen3-8B", "host": "127.0.0.1", "port": 30000, "mem_fraction_static": 0.60,
               "tp_size": 1, "dp_size": 1, "extra_args": [], "urls": []},
    "drafter": {"model_path": "Qwen/Qwen3-0.6B", "host": "127.0.0.1", "port": 30001, "mem_fraction_static": 0.45,
                "tp_size": 1, "dp_size": 1, "extra_args": [], "enabled": True},
    "router": {"workers": 1, "policy": "cache_aware", "cache_threshold": 0.3, "balance_abs_threshold": 64,
               "balance_rel_threshold": 1.5, "extra_args": []},
    "service": {"host": "127.0.0.1", "port": 8000, "method": "speccompact", "max_body_mb": 32.0,
                "max_workers": 32, "request_timeout_s": 120.0, "health_wait_s": 1200.0,
                "compaction_timeout_s": 300.0, "upstream_detail": False},
    "compact": {},
}


@dataclass(frozen=True)
class LaunchPlan:
    """Everything main() will do, decided before anything starts."""

    servers: tuple[ServerSpec, ...]  # servers to start, in start order
    target_urls: tuple[str, ...]  # target server(s) the service uses
    drafter_url: str | None  # drafter server (None: target-only methods)
    drafter_lora_name: str | None  # sent as `lora_path` on drafter requests
    target_chat_template: str | None  # frontend template name (by model path when None)
    drafter_chat_template: str | None  # same, drafter
    service: dict  # host, port, method, limits, timeouts
    compact: dict  # CompactConfig overrides
    target_tokenizer: str | None = None  # the target's HF tokenizer (path or hub name): agent-aligned layout
    router: RouterSpec | None = None  # sglang-router to start in front of the target workers, last
    api_key: str | None = field(default=None, repr=False)  # service bearer token
    upstream_api_key: str | None = field(default=None, repr=False)  # SGLang servers' --api-key
    python: str = sys.executable  # interpreter that runs sglang.launch_server


# ------------------------------------------------------------------ planning


def load_config_file(path: str | os.PathLike) -> dict:
    """Read a launch config (``.toml`` or ``.json``) and check its keys.

    Raises
    ------
    ConfigError
        Unreadable file, bad syntax, unknown section or key.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except OSError as exc:
        raise ConfigError(f"cannot read config {p}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"config {p} is not valid {p.suffix.lstrip('.') or 'TOML'}: {exc}") from exc
    for section, values in data.items():
        if section not in SECTIONS:
            raise ConfigError(f"config {p}: unknown section [{section}]; known: {sorted(SECTIONS)}")
        if not isinstance(values, dict):
            raise ConfigError(f"config {p}: [{section}] must be a table")
        allowed = SECTIONS[section]
        unknown = sorted(set(values) - allowed) if allowed is not None else []
        if unknown:
            raise ConfigError(f"config {p}: unknown key(s) {unknown} in [{section}]; known: {sorted(allowed)}")
    return data


def _merge(base: dict, override: dict) -> dict:
    out = {k: dict(v) for k, v in base.items()}
    for section, values in override.items():
        out.setdefault(section, {}).update(values)
    return out


def _flag_overrides(a: argparse.Namespace) -> dict:
    """Sections from command-line flags (only flags the user gave)."""
    t, d, s = {}, {}, {}
    pairs = [(t, "model_path", a.target_model), (d, "model_path", a.drafter_model), (d, "lora_path", a.drafter_lora),
             (d, "lora_name", a.drafter_lora_name), (t, "port", a.target_port), (d, "port", a.drafter_port),
             (t, "mem_fraction_static", a.target_mem_fraction), (d, "mem_fraction_static", a.drafter_mem_fraction),
             (t, "tp_size", a.tp_size), (t, "dp_size", a.dp_size), (d, "url", a.drafter_url),
             (s, "host", a.service_host), (s, "port", a.service_port), (s, "method", a.method),
             (s, "max_body_mb", a.max_body_mb), (s, "max_workers", a.max_workers),
             (s, "request_timeout_s", a.request_timeout), (s, "health_wait_s", a.health_wait),
             (s, "compaction_timeout_s", a.compaction_timeout), (s, "upstream_detail", a.upstream_detail or None)]
    for sec in (t, d):
        pairs += [(sec, "host", a.server_host), (sec, "context_length", a.context_length),
                  (sec, "attention_backend", a.attention_backend), (sec, "chat_template", a.chat_template)]
    for sec, key, value in pairs:
        if value is not None:
            sec[key] = value
    if a.target_url:
        t["urls"] = list(a.target_url)
    if a.target_tokenizer:
        t["tokenizer"] = a.target_tokenizer
    r = {}
    for key, value in (("workers", a.target_workers), ("url", a.router_url), ("port", a.router_port),
                       ("policy", a.router_policy)):
        if value is not None:
            r[key] = value
    if a.no_drafter:
        d["enabled"] = False
    return {"target": t, "drafter": d, "service": s, "router": r}


def _split_extra(values: list[str]) -> list[str]:
    return [tok for v in values for tok in shlex.split(v)]


def _spec(role: str, sec: dict, extra_cli: list[str]) -> ServerSpec:
    try:
        spec = ServerSpec(
            role=role, model_path=str(sec["model_path"]), host=str(sec["host"]), port=int(sec["port"]),
            mem_fraction_static=float(sec["mem_fraction_static"]), tp_size=int(sec["tp_size"]),
            dp_size=int(sec["dp_size"]),
            context_length=int(sec["context_length"]) if sec.get("context_length") else None,
            attention_backend=sec.get("attention_backend") or None,
            lora_path=str(sec["lora_path"]) if sec.get("lora_path") else None,
            lora_name=str(sec.get("lora_name") or "drafter"),
            extra_args=tuple(_split_extra(list(sec.get("extra_args") or [])) + extra_cli),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"[{role}]: {exc}") from exc
    if not 0.0 < spec.mem_fraction_static < 1.0:
        raise ConfigError(f"[{role}] mem_fraction_static must be in (0, 1), got {spec.mem_fraction_static}")
    return spec


def build_plan(args: argparse.Namespace) -> LaunchPlan:
    """Turn defaults, ``--config`` and flags into a :class:`LaunchPlan`.

    Raises
    ------
    ConfigError
        On an invalid value, a port clash or a bad config file.
    """
    from .config import make_config
    from .service import resolve_api_key

    if args.upstream_api_key is not None and not args.upstream_api_key.strip():
        raise ConfigError("is empty; omit it when the SGLang servers need no key", field="--upstream-api-key")
    merged = DEFAULTS
    if args.config:
        merged = _merge(merged, load_config_file(args.config))
    merged = _merge(merged, _flag_overrides(args))
    t, d, svc = merged["target"], merged["drafter"], merged["service"]
    make_config(merged.get("compact") or {})  # fail now, not on the first request
    target = _spec("target", t, _split_extra(args.target_arg or []))
    drafter = _spec("drafter", d, _split_extra(args.drafter_arg or []))
    target_urls = tuple(u.rstrip("/") for u in (t.get("urls") or []))
    rsec = merged["router"]
    if rsec.get("url"):
        target_urls = target_urls or (str(rsec["url"]).rstrip("/"),)
    drafter_on = bool(d.get("enabled", True))
    drafter_url = (d.get("url") or "").rstrip("/") or None
    servers, router = [], None
    if not target_urls:
        workers = _int(rsec.get("workers", 1), "router.workers")
        if workers > 1:
            servers += target_workers(target, workers)
            router = _router(rsec, target, servers, _split_extra(args.router_arg or []))
            target_urls = (router.url,)
        else:
            servers.append(target)
            target_urls = (target.url,)
    if drafter_on and drafter_url is None:
        servers.append(drafter)
        drafter_url = drafter.url
    ports = [s.port for s in servers] + ([router.port] if router else [])
    if len(set(ports)) != len(ports):
        raise ConfigError(f"two servers share a port ({sorted(ports)}); give them distinct ports")
    if int(svc["port"]) in ports:
        raise ConfigError(f"service port {svc['port']} clashes with an SGLang server port")
    lora_named = bool(d.get("lora_path") or d.get("lora_name"))  # an adapter to address by name
    return LaunchPlan(
        servers=tuple(servers), router=router, target_urls=target_urls, drafter_url=drafter_url if drafter_on else None,
        drafter_lora_name=drafter.lora_name if drafter_on and lora_named else None,
        target_chat_template=t.get("chat_template"), drafter_chat_template=d.get("chat_template"),
        service={k: svc[k] for k in sorted(SECTIONS["service"])}, compact=dict(merged.get("compact") or {}),
        api_key=resolve_api_key(args.api_key), upstream_api_key=args.upstream_api_key,
        python=args.python or sys.executable, target_tokenizer=t.get("tokenizer"),
    )


def _int(value, what: str) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what} must be an integer, got {value!r}") from exc
    if n < 1:
        raise ConfigError(f"{what} must be >= 1, got {n}")
    return n


WORKER_PORT_OFFSET = 10  # worker i of the target listens on target.port + 10 + i; the router on target.port


def target_workers(target: ServerSpec, n: int) -> list[ServerSpec]:
    """N copies of the target server, one per GPU (``--base-gpu-id i``), on ports target.port + 10 + i."""
    from dataclasses import replace

    return [replace(target, role=f"target{i}", port=target.port + WORKER_PORT_OFFSET + i,
                    extra_args=target.extra_args + ("--base-gpu-id", str(i * target.tp_size)))
            for i in range(n)]


def _router(sec: dict, target: ServerSpec, workers: list[ServerSpec], extra_cli: list[str]) -> RouterSpec:
    policy = str(sec.get("policy") or "cache_aware")
    if policy not in ROUTER_POLICIES:
        raise ConfigError(f"[router] policy must be one of {list(ROUTER_POLICIES)}, got {policy!r}")
    try:
        return RouterSpec(
            worker_urls=tuple(w.url for w in workers), host=target.host,
            port=int(sec.get("port") or target.port), policy=policy,
            cache_threshold=float(sec["cache_threshold"]), balance_abs_threshold=int(sec["balance_abs_threshold"]),
            balance_rel_threshold=float(sec["balance_rel_threshold"]),
            model_path=target.model_path if Path(target.model_path).is_dir() else None,
            extra_args=tuple(_split_extra(list(sec.get("extra_args") or [])) + extra_cli),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"[router]: {exc}") from exc


def service_config(plan: LaunchPlan) -> dict:
    """The service side of a plan as JSON-ready data (secrets redacted)."""
    from .config import make_config

    return {
        "service": plan.service,
        "target_urls": list(plan.target_urls),
        "target_tokenizer": plan.target_tokenizer,
        "drafter_url": plan.drafter_url,
        "drafter_lora_name": plan.drafter_lora_name,
        "chat_template": {"target": plan.target_chat_template, "drafter": plan.drafter_chat_template},
        "auth": "bearer" if plan.api_key else None,
        "upstream_auth": "bearer" if plan.upstream_api_key else None,
        "compact": make_config(plan.compact).model_dump(mode="json"),
    }


def format_dry_run(plan: LaunchPlan) -> str:
    """What ``--dry-run`` prints: one shell command per server, then the service JSON."""
    out = []
    for i, spec in enumerate(plan.servers):
        when = "starts first" if i == 0 else "starts once the one above is healthy"
        out.append(f"# {spec.role} server: {when}; ready when {spec.url}/health answers 200")
        out.append(shlex.join(server_command(spec, plan.python)))
    if plan.router is not None:
        out.append(f"# sglang-router ({plan.router.policy}): starts once the workers are healthy; "
                   f"the service's target is {plan.router.url}")
        out.append(shlex.join(router_command(plan.router, plan.python)))
    if not plan.servers:
        out.append("# no servers to start: using running servers")
    out.append("# service config")
    out.append(json.dumps(service_config(plan), indent=2))
    return "\n".join(out)


# -------------------------------------------------------------- checks


def cuda_available() -> bool:
    """Whether a CUDA device is visible: ``nvidia-smi -L``, else ``torch.cuda``.

    torch is imported only here, only when nvidia-smi is missing or fails.
    """
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            res = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
            if res.returncode == 0 and "GPU" in res.stdout:
                return True
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # no torch, or a torch that cannot load its CUDA libraries
        return False


def check_server_flags(argv: list[str]) -> list[str]:
    """Flags in a launch_server argv that the installed sglang does not know.

    Parses with sglang's own argument parser (``ServerArgs.add_cli_args``);
    values are not checked beyond what argparse does.
    """
    try:
        from sglang.srt.server_args import ServerArgs
    except ImportError:  # servers run by another interpreter (--python): it will check them itself
        return []

    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    tail = argv[argv.index("sglang.launch_server") + 1:] if "sglang.launch_server" in argv else argv
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
        try:
            _, unknown = parser.parse_known_args(tail)
        except SystemExit:  # argparse rejected a value; sglang's own message says which
            return ["(invalid value: run the command for sglang's message)"]
    return [u for u in unknown if u.startswith("-")]


# ------------------------------------------------------------ the service process


SHUTDOWN_GRACE_S = 3  # uvicorn's limit on draining open connections at shutdown (seconds)


class _Terminated(BaseException):
    """SIGTERM arrived; unwinds to the cleanup in run()."""


def _on_sigterm(signum, frame):
    raise _Terminated()


def _build_app(plan: LaunchPlan, http):
    from .endpoint import SpecCompactEndpoint
    from .service import ServiceLimits, create_app, http_probe

    svc = plan.service
    timeout = float(svc["request_timeout_s"])
    targets = [SpecCompactEndpoint(u, api_key=plan.upstream_api_key, chat_template=plan.target_chat_template,
                                   timeout_s=timeout) for u in plan.target_urls]
    drafter = None
    if plan.drafter_url:
        drafter = SpecCompactEndpoint(plan.drafter_url, api_key=plan.upstream_api_key,
                                      chat_template=plan.drafter_chat_template,
                                      lora_path=plan.drafter_lora_name, timeout_s=timeout)
    deadline = float(svc["compaction_timeout_s"])
    limits = ServiceLimits(max_body_bytes=int(float(svc["max_body_mb"]) * 2**20),
                           max_workers=int(svc["max_workers"]), compaction_timeout_s=deadline if deadline > 0 else None,
                           expose_upstream_urls=bool(svc["upstream_detail"]))
    return create_app(targets if len(targets) > 1 else targets[0], drafter, api_key=plan.api_key, limits=limits,
                      default_config=plan.compact, default_method=svc["method"],
                      health_probe=http_probe(http, limits.health_timeout_s), chat_template=plan.target_tokenizer)


def _watch(procs: list[subprocess.Popen], server, died: list) -> None:
    while not server.should_exit:
        for p in procs:
            if p.poll() is not None:
                print(f"[launch] an SGLang server (pid {p.pid}) exited with code {p.returncode}; stopping",
                      file=sys.stderr, flush=True)
                died.append(p)
                server.should_exit = True
                return
        time.sleep(1.0)


def run(plan: LaunchPlan, *, log_dir: Path | None = None) -> int:
    """Start the plan's servers, serve until stopped, stop the servers.

    Returns
    -------
    int
        Exit status: 0 after a clean stop, 1 on failure, 143 on SIGTERM,
        130 on Ctrl-C.
    """
    import httpx
    import uvicorn

    procs: list[subprocess.Popen] = []
    old_term = signal.signal(signal.SIGTERM, _on_sigterm)
    http = httpx.Client(timeout=10.0)
    try:
        for spec in plan.servers:
            procs.append(start_server(spec, plan.python, log_dir))
            wait_healthy(spec.url, procs[-1], timeout_s=float(plan.service["health_wait_s"]),
                         get=http.get, label=spec.role)
        if plan.router is not None:
            log = (log_dir / "router.log") if log_dir else None
            if log_dir:
                log_dir.mkdir(parents=True, exist_ok=True)
            procs.append(start_router(plan.router, plan.python, log))
            wait_healthy(plan.router.url, procs[-1], timeout_s=float(plan.service["health_wait_s"]),
                         get=http.get, label="router")
        app = _build_app(plan, http)
        # a bounded graceful shutdown: open streams and stuck clients do not hold SIGTERM up
        server = uvicorn.Server(uvicorn.Config(app, host=plan.service["host"], port=int(plan.service["port"]),
                                               log_level="info", timeout_graceful_shutdown=SHUTDOWN_GRACE_S))
        died: list = []
        threading.Thread(target=_watch, args=(procs, server, died), daemon=True).start()
        print(f"[launch] service on http://{plan.service['host']}:{plan.service['port']} "
              f"(POST /v1/compact, GET /health, GET /metrics)", file=sys.stderr, flush=True)
        server.run()
        return 1 if died else 0
    except (LaunchError, BackendError, ConfigError) as exc:
        print(f"[launch] error: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    except _Terminated:
        return 143
    finally:
        if procs:
            print("[launch] stopping SGLang servers", file=sys.stderr, flush=True)
            stop_servers(procs)
        http.close()
        signal.signal(signal.SIGTERM, old_term)


# ------------------------------------------------------------------ emulated servers

EMULATE_BANNER = (
    "[launch] EMULATED: target and drafter are SGLang-API emulators on this CPU with a SCRIPTED model "
    "(ControlledAcceptancePolicy): summaries are lines echoed from the input and judgements are seeded "
    "coin flips, not model output. Use it to develop clients against the real API."
)
EMULATED_MODELS = (("target", "Qwen/Qwen3-8B", 0), ("drafter", "Qwen/Qwen3-0.6B", 1))  # role, reported path, seed


def run_emulated(args: argparse.Namespace) -> int:
    """``--emulate``: the service on a target and a drafter emulator started in this process."""
    from .testing import ControlledAcceptancePolicy, EmulatedServer, default_tokenizer

    print(EMULATE_BANNER, file=sys.stderr, flush=True)
    with contextlib.ExitStack() as stack:
        tokenizer, name = default_tokenizer()
        urls = {role: stack.enter_context(EmulatedServer(tokenizer, policy=ControlledAcceptancePolicy(seed=seed),
                                                         model_path=path)).url
                for role, path, seed in EMULATED_MODELS}
        print(f"[launch] emulated target on {urls['target']}, drafter on {urls['drafter']} ({name} tokenizer)",
              file=sys.stderr, flush=True)
        args.target_url, args.drafter_url, args.no_drafter = [urls["target"]], urls["drafter"], False
        args.drafter_lora_name = args.drafter_lora_name or "drafter"
        try:
            plan = build_plan(args)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return run(plan)


# ------------------------------------------------------------------ CLI


def build_parser(prog: str = "python -m sgl_speccompact.launch") -> argparse.ArgumentParser:
    """Command-line flags (every value defaults to None so the config file can set it)."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Extra SGLang flags: --target-arg=--kv-cache-dtype=fp8_e5m2 or "
                                       "--target-arg '--chunked-prefill-size 8192' (split like a shell).")
    p.add_argument("--config", help="launch config, TOML or JSON (see launch/)")
    p.add_argument("--dry-run", action="store_true", help="print the server commands and service config, exit")
    p.add_argument("--emulate", action="store_true",
                   help="no GPU: serve on two in-process SGLang-API emulators with a scripted model")
    g = p.add_argument_group("SGLang servers to start")
    g.add_argument("--target-model", help="target model path (default Qwen/Qwen3-8B)")
    g.add_argument("--drafter-model", help="drafter model path (default Qwen/Qwen3-0.6B)")
    g.add_argument("--drafter-lora", metavar="PATH", help="LoRA adapter for the drafter (--enable-lora --lora-paths)")
    g.add_argument("--drafter-lora-name", metavar="NAME",
                   help="adapter name sent as lora_path (default 'drafter'); give it with --drafter-url too")
    g.add_argument("--server-host", help="interface the SGLang servers bind (default 127.0.0.1)")
    g.add_argument("--target-port", type=int, help="default 30000")
    g.add_argument("--drafter-port", type=int, help="default 30001")
    g.add_argument("--target-mem-fraction", type=float, help="--mem-fraction-static of the target (default 0.60)")
    g.add_argument("--drafter-mem-fraction", type=float,
                   help="--mem-fraction-static of the drafter, of the memory the target left (default 0.45)")
    g.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, help="target tensor parallel")
    g.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, help="target data parallel")
    g.add_argument("--context-length", type=int, help="both servers' --context-length")
    g.add_argument("--attention-backend", help="both servers' --attention-backend")
    g.add_argument("--chat-template", help="frontend chat template name (default: by model path)")
    g.add_argument("--target-arg", action="append", metavar="ARGS", help="extra launch_server flags (repeatable)")
    g.add_argument("--drafter-arg", action="append", metavar="ARGS", help="extra launch_server flags (repeatable)")
    g.add_argument("--python", help="interpreter that runs sglang.launch_server (default: this one)")
    g.add_argument("--log-dir", help="write each server's output to DIR/<role>.log instead of the terminal")
    g.add_argument("--no-gpu-check", action="store_true", help="start servers even if no CUDA device is visible")
    g = p.add_argument_group("scale-out with sglang-router")
    g.add_argument("--target-workers", type=int, metavar="N",
                   help="start N target servers (one per GPU, ports target-port+10+i) behind sglang-router")
    g.add_argument("--router-port", type=int, help="the router's port (default: --target-port)")
    g.add_argument("--router-policy", choices=ROUTER_POLICIES,
                   help="routing policy (default cache_aware; manual for X-SMG-Routing-Key sessions)")
    g.add_argument("--router-arg", action="append", metavar="ARGS", help="extra launch_router flags (repeatable)")
    g.add_argument("--router-url", help="use this running sglang-router as the target")
    g.add_argument("--target-tokenizer", metavar="PATH_OR_NAME",
                   help="the target's tokenizer: its chat template renders the agent-aligned layout")
    g = p.add_argument_group("running SGLang servers")
    g.add_argument("--target-url", action="append",
                   help="use this target server (repeatable: each compaction goes to one, round-robin)")
    g.add_argument("--drafter-url", help="use this drafter server")
    g.add_argument("--no-drafter", action="store_true", help="no drafter: serve hermes/openclaw/target_self only")
    g.add_argument("--upstream-api-key", help="bearer token of the SGLang servers")
    g = p.add_argument_group("compaction service")
    g.add_argument("--service-host", help="default 127.0.0.1")
    g.add_argument("--service-port", type=int, help="default 8000")
    g.add_argument("--api-key", help="require this bearer token (default: $SGL_SPECCOMPACT_API_KEY, else none)")
    g.add_argument("--method", help="default method: speccompact | hermes | openclaw | target_self")
    g.add_argument("--max-body-mb", type=float, help="request body limit in MiB (default 32)")
    g.add_argument("--max-workers", type=int, help="compactions run at once (default 32)")
    g.add_argument("--request-timeout", type=float, help="per SGLang request, seconds (default 120)")
    g.add_argument("--health-wait", type=float, help="seconds to wait for each server's /health (default 1200)")
    g.add_argument("--compaction-timeout", type=float,
                   help="whole-compaction deadline in seconds, 0 for none (default 300)")
    g.add_argument("--upstream-detail", action="store_true",
                   help="show upstream URLs in error bodies and /health (default: roles only)")
    return p


def main(argv: list[str] | None = None, *, serve_only: bool = False) -> int:
    """Entry point of ``python -m sgl_speccompact.launch`` (and ``... serve``).

    With ``serve_only`` no server is started: ``--target-url`` is required.
    """
    args = build_parser("python -m sgl_speccompact serve" if serve_only else
                        "python -m sgl_speccompact.launch").parse_args(argv)
    if serve_only and not args.target_url:
        print("serve needs --target-url URL (and --drafter-url URL, or --no-drafter)", file=sys.stderr)
        return 2
    if serve_only and not args.drafter_url:
        args.no_drafter = True
    if args.emulate:
        if args.target_url or args.drafter_url or args.dry_run:
            print("--emulate starts its own emulated servers: drop --target-url/--drafter-url/--dry-run",
                  file=sys.stderr)
            return 2
        return run_emulated(args)
    try:
        plan = build_plan(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(format_dry_run(plan))
        return 0
    if plan.servers and not args.no_gpu_check and not cuda_available():
        roles = " and ".join(s.role for s in plan.servers) + (" servers" if len(plan.servers) > 1 else " server")
        print(f"error: no CUDA device found, so the {roles} cannot start here. Pass --target-url URL and "
              "--drafter-url URL (or --no-drafter) to use SGLang servers running elsewhere, or use --dry-run "
              "to see the commands.", file=sys.stderr)
        return 2
    for spec in plan.servers:
        unknown = check_server_flags(server_command(spec, plan.python))
        if unknown:
            print(f"error: {spec.role} flags unknown to the installed sglang: {unknown}", file=sys.stderr)
            return 2
        if "--disable-radix-cache" in spec.extra_args:
            print(f"warning: radix cache disabled on the {spec.role}; every request re-prefills the history",
                  file=sys.stderr)
    rc = run(plan, log_dir=Path(args.log_dir) if args.log_dir else None)
    _exit_if_stuck(rc)
    return rc


def _exit_if_stuck(rc: int) -> None:
    """End the process now if a compaction is still blocked in an upstream request.

    Every compaction was cancelled and given ``shutdown_grace_s`` at
    shutdown; a request already on the wire still blocks its threads until
    its timeout, and the interpreter joins thread-pool workers at exit.
    Stopping within seconds matters more to an operator.
    """
    from .service_runtime import THREAD_NAME

    stuck = [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()
             and (t.name == THREAD_NAME or not t.daemon)]
    if stuck:
        print(f"[launch] {len(stuck)} thread(s) still inside an upstream request; exiting without them",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(rc)


if __name__ == "__main__":
    sys.exit(main())
