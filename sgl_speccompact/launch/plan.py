"""Launch planning: defaults, then ``--config FILE``, then flags, into a :class:`LaunchPlan`.

Everything :mod:`sgl_speccompact.launch` will start is decided here, before
anything starts, so ``--dry-run`` can print it (:func:`format_dry_run`).
Nothing here starts a process; the only I/O is reading the config file.

Config files are TOML or JSON with the sections of :data:`SECTIONS`
(``launch/*.toml`` are ready ones).  A flag the user gave overrides the
file, which overrides the defaults: :data:`DEFAULTS` for the servers and
the router, the one table :data:`sgl_speccompact.options.DEFAULTS` for the
``[service]`` section, which the plan carries as a typed
:class:`~sgl_speccompact.options.ServiceSettings` (one name per option, as
the config key).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tomllib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import CompactConfig, check_config
from ..errors import ConfigError
from ..core.gpus import GPUS, match_gpu
from ..options import (DEFAULT_DRAFTER_MODEL, DEFAULT_TARGET_MODEL, ServiceSettings, count, defaults, flag,
                       log_level, non_negative_number, port, positive_number, resolve_api_key, text)
from .cpu import CPU_SERVICE_DEFAULTS, check_cpu_server, resolve_device
from .packaged import resolve_model_path
from .router_process import ROUTER_POLICIES, RouterSpec, router_command
from .servers import PREPARE_PRIORITY, PRIORITY_POLICIES, ServerSpec, shell_command
from .speculative import check_server, describe, parse_spec_flag, spec_from_table
from .templates import checkpoint_template

SECTIONS = {
    "target": {"model_path", "host", "port", "mem_fraction_static", "tp_size", "dp_size", "context_length",
               "attention_backend", "chat_template", "extra_args", "urls", "tokenizer", "speculative",
               "priority_scheduling", "device", "max_total_tokens"},
    "router": {"workers", "port", "policy", "url", "cache_threshold", "balance_abs_threshold",
               "balance_rel_threshold", "extra_args"},
    "drafter": {"model_path", "host", "port", "mem_fraction_static", "tp_size", "dp_size", "context_length",
                "attention_backend", "chat_template", "extra_args", "url", "lora_path", "lora_name", "enabled",
                "speculative", "device", "max_total_tokens"},
    "service": {"host", "port", "method", "max_body_mb", "max_workers", "request_timeout_s", "health_wait_s",
                "compaction_timeout_s", "upstream_detail", "session_store_mb", "session_ttl_s", "calibrate", "gpu",
                "session_store", "prepare_workers", "prepare_queue", "prepare_queue_mb", "prepare_priority",
                "prepare_yield_s", "log_level"},
    "compact": None,  # CompactConfig fields, checked by check_config
}

# the servers' and the router's defaults; the [service] section's are the one table, options.DEFAULTS
DEFAULTS: dict[str, dict[str, Any]] = {
    "target": {"model_path": DEFAULT_TARGET_MODEL, "host": "127.0.0.1", "port": 30000, "mem_fraction_static": 0.60,
               "tp_size": 1, "dp_size": 1, "extra_args": [], "urls": [], "priority_scheduling": True},
    "drafter": {"model_path": DEFAULT_DRAFTER_MODEL, "host": "127.0.0.1", "port": 30001, "mem_fraction_static": 0.45,
                "tp_size": 1, "dp_size": 1, "extra_args": [], "enabled": True},
    "router": {"workers": 1, "policy": "cache_aware", "cache_threshold": 0.3, "balance_abs_threshold": 64,
               "balance_rel_threshold": 1.5, "extra_args": []},
    "compact": {},
}


def service_defaults() -> dict[str, Any]:
    """The ``[service]`` section's defaults: the one table's values of its keys (read when called)."""
    return {key: getattr(defaults(), key) for key in SECTIONS["service"]}


STORE_SCHEMES = ("redis", "rediss", "unix")  # --session-store URLs the service can open (Redis)

# [service] key -> (its flag, its check): every value, from a flag or a config file, is checked at start
SERVICE_CHECKS = {
    "port": ("--service-port", port),
    "max_body_mb": ("--max-body-mb", positive_number),
    "max_workers": ("--max-workers", count),
    "request_timeout_s": ("--request-timeout", positive_number),
    "health_wait_s": ("--health-wait", positive_number),
    "compaction_timeout_s": ("--compaction-timeout", positive_number),
    "session_store_mb": ("--session-store-mb", positive_number),
    "session_ttl_s": ("--session-ttl", positive_number),
    "prepare_workers": ("--prepare-workers", count),
    "prepare_queue": ("--prepare-queue", count),
    "prepare_queue_mb": ("--prepare-queue-mb", positive_number),
    "prepare_yield_s": ("--prepare-yield-s", non_negative_number),
    "log_level": ("--log-level", log_level),
    "upstream_detail": ("--upstream-detail", flag),
    "calibrate": ("--calibrate", flag),
    "host": ("--service-host", text),
    "method": ("--method", text),
}


@dataclass(frozen=True)
class LaunchPlan:
    """Everything main() will do, decided before anything starts."""

    servers: tuple[ServerSpec, ...]  # servers to start, in start order
    target_urls: tuple[str, ...]  # target server(s) the service uses
    drafter_url: str | None  # drafter server (None: target-only methods)
    drafter_lora_name: str | None  # sent as `lora_path` on drafter requests
    target_chat_template: str | None  # frontend template name (None: from the served model's type)
    drafter_chat_template: str | None  # same, drafter
    service: ServiceSettings  # host, port, method, limits, timeouts, prepares: the [service] section, typed
    compact: CompactConfig  # the config every compaction starts from (the [compact] section), validated
    target_tokenizer: str | None = None  # the target's HF tokenizer (path or hub name): agent-aligned layout
    router: RouterSpec | None = None  # sglang-router to start in front of the target workers, last
    api_key: str | None = field(default=None, repr=False)  # service bearer token
    upstream_api_key: str | None = field(default=None, repr=False)  # SGLang servers' --api-key
    python: str = sys.executable  # interpreter that runs sglang.launch_server
    speculative: dict = field(default_factory=dict)  # role -> SpecSettings or None, for the servers started


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
             (s, "compaction_timeout_s", a.compaction_timeout), (s, "upstream_detail", a.upstream_detail or None),
             (s, "session_store_mb", a.session_store_mb), (s, "session_ttl_s", a.session_ttl),
             (s, "calibrate", getattr(a, "calibrate", False) or None), (s, "gpu", getattr(a, "gpu", None)),
             (s, "session_store", getattr(a, "session_store", None)),
             (s, "prepare_workers", getattr(a, "prepare_workers", None)),
             (s, "prepare_queue", getattr(a, "prepare_queue", None)),
             (s, "prepare_queue_mb", getattr(a, "prepare_queue_mb", None)),
             (s, "prepare_priority", getattr(a, "prepare_priority", None)),
             (s, "prepare_yield_s", getattr(a, "prepare_yield_s", None)),
             (s, "log_level", getattr(a, "log_level", None)),
             (t, "priority_scheduling", False if getattr(a, "no_priority_scheduling", False) else None)]
    for sec in (t, d):
        pairs += [(sec, "host", a.server_host), (sec, "context_length", a.context_length),
                  (sec, "attention_backend", a.attention_backend), (sec, "chat_template", a.chat_template),
                  (sec, "device", getattr(a, "device", None)),
                  (sec, "max_total_tokens", getattr(a, "max_total_tokens", None))]
    pairs += [(t, "chat_template", a.target_chat_template), (d, "chat_template", a.drafter_chat_template)]
    for sec, key, value in pairs:
        if value is not None:
            sec[key] = value
    if a.target_url:
        t["urls"] = list(a.target_url)
    if a.target_tokenizer:
        t["tokenizer"] = a.target_tokenizer
    for sec, value in ((t, getattr(a, "target_speculative", None)), (d, getattr(a, "drafter_speculative", None))):
        if value is not None:  # the flag replaces the config's whole table
            spec = parse_spec_flag(value)
            sec["speculative"] = {"algorithm": "none"} if spec is None else {
                "algorithm": spec.algorithm, "draft_model_path": spec.draft_model_path}
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


def check_service(svc: dict, from_flags: dict) -> None:
    """Check every number of the ``[service]`` section; an error names the flag or the config key.

    >>> check_service({"max_workers": 0}, {})
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: [service] max_workers: must be an integer >= 1, got 0
    """
    for key, (name, check) in SERVICE_CHECKS.items():
        if key in svc:
            check(svc[key], name if key in from_flags else f"[service] {key}")
    store = svc.get("session_store")
    if store is not None and store != "memory" and str(store).split("://", 1)[0] not in STORE_SCHEMES:
        where = "--session-store" if "session_store" in from_flags else "[service] session_store"
        raise ConfigError(f"must be memory or a redis://, rediss:// or unix:// URL, got {str(store)[:40]!r}",
                          field=where)
    if svc.get("gpu") is not None:
        gpu_name(svc["gpu"], "--gpu" if "gpu" in from_flags else "[service] gpu", calibrating=bool(svc.get("calibrate")))


def gpu_name(value: Any, field: str, *, calibrating: bool = False) -> str:
    """A GPU with a shipped cost-model profile (any name with ``calibrating``: the fit keys on it).

    >>> gpu_name("NVIDIA H100 80GB HBM3", "--gpu")
    'NVIDIA H100 80GB HBM3'
    >>> gpu_name("NOPE", "--gpu")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: --gpu: unknown GPU 'NOPE'; known: A100, B200, H100, H200, L40S (an unlisted ...
    """
    if not isinstance(value, str) or not value.strip() or not value.isprintable():
        raise ConfigError(f"must be a GPU name, got {value!r}", field=field)
    if match_gpu(value) is None and not calibrating:
        raise ConfigError(f"unknown GPU {value!r}; known: {', '.join(sorted(GPUS))} (an unlisted GPU needs --calibrate)",
                          field=field)
    return value


def _check_server(role: str, sec: dict) -> None:
    port(sec["port"], f"[{role}] port")
    for key in ("tp_size", "dp_size"):
        count(sec[key], f"[{role}] {key}")
    for key in ("context_length", "max_total_tokens"):
        if sec.get(key) is not None:
            count(sec[key], f"[{role}] {key}")
    if sec.get("device") not in (None, "cpu", "cuda"):
        raise ConfigError(f"[{role}] device must be 'cpu' or 'cuda', got {sec['device']!r}")


def _spec(role: str, sec: dict, extra_cli: list[str]) -> ServerSpec:
    _check_server(role, sec)
    try:
        spec = ServerSpec(
            role=role, model_path=resolve_model_path(str(sec["model_path"])), host=str(sec["host"]),
            port=int(sec["port"]),
            mem_fraction_static=float(sec["mem_fraction_static"]), tp_size=int(sec["tp_size"]),
            dp_size=int(sec["dp_size"]),
            context_length=int(sec["context_length"]) if sec.get("context_length") else None,
            attention_backend=sec.get("attention_backend") or None,
            lora_path=str(sec["lora_path"]) if sec.get("lora_path") else None,
            lora_name=str(sec.get("lora_name") or "drafter"),
            extra_args=tuple(_split_extra(list(sec.get("extra_args") or [])) + extra_cli),
            priority_scheduling=bool(sec.get("priority_scheduling", False)),
            max_total_tokens=int(sec["max_total_tokens"]) if sec.get("max_total_tokens") else None,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"[{role}]: {exc}") from exc
    _check_priority(spec)
    device = resolve_device(role, sec.get("device"), spec.extra_args)
    if device == "cpu":
        check_cpu_server(role, bool(spec.lora_path), spec.extra_args)
    spec = replace(spec, device=device)
    if not 0.0 < spec.mem_fraction_static < 1.0:
        raise ConfigError(f"[{role}] mem_fraction_static must be in (0, 1), got {spec.mem_fraction_static}")
    speculative = spec_from_table(sec["speculative"], role) if sec.get("speculative") else None
    if speculative is not None:
        lora = bool(spec.lora_path) or any(a.split("=")[0] in ("--enable-lora", "--lora-paths")
                                           for a in spec.extra_args)
        check_server(speculative, role, lora=lora, server_args=spec.extra_args)
        spec = replace(spec, speculative=speculative)
    return spec


def _check_priority(spec: ServerSpec) -> None:
    """Refuse a schedule policy sglang would refuse with priority scheduling (only fcfs and lof)."""
    if not spec.priority_scheduling:
        return
    args = list(spec.extra_args)
    for i, a in enumerate(args):
        name, _, value = a.partition("=")
        if name == "--schedule-policy":
            value = value or (args[i + 1] if i + 1 < len(args) else "")
            if value not in PRIORITY_POLICIES:
                raise ConfigError(f"sglang allows priority scheduling only with --schedule-policy "
                                  f"{' or '.join(PRIORITY_POLICIES)}, got {value!r}; pass --no-priority-scheduling "
                                  "to keep it", field=f"[{spec.role}] extra_args")


def prepare_priority(svc: dict, servers: list[ServerSpec]) -> int | None:
    """The ``priority`` the service gives its prepares' target requests.

    The ``[service] prepare_priority`` given, else :data:`PREPARE_PRIORITY`
    when this launch starts the target with priority scheduling, else None
    (not sent: a server started elsewhere may refuse or ignore it).

    >>> prepare_priority({"prepare_priority": None}, [ServerSpec("target", "m", "h", 1, 0.5, priority_scheduling=True)])
    -100
    >>> prepare_priority({"prepare_priority": None}, []) is None, prepare_priority({"prepare_priority": -5}, [])
    (True, -5)
    """
    if svc.get("prepare_priority") is not None:
        value = svc["prepare_priority"]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"must be an integer, got {value!r}", field="--prepare-priority")
        return value
    targets = [s for s in servers if s.role.startswith("target")]
    return PREPARE_PRIORITY if targets and all(s.priority_scheduling for s in targets) else None


def build_plan(args: argparse.Namespace) -> LaunchPlan:
    """Turn defaults, ``--config`` and flags into a :class:`LaunchPlan`.

    Raises
    ------
    ConfigError
        On an invalid value, a port clash or a bad config file.
    """
    if args.upstream_api_key is not None and not args.upstream_api_key.strip():
        raise ConfigError("is empty; omit it when the SGLang servers need no key", field="--upstream-api-key")
    merged = _merge(DEFAULTS, {"service": service_defaults()})
    from_file = load_config_file(args.config) if args.config else {}
    merged = _merge(merged, from_file)
    flags = _flag_overrides(args)
    merged = _merge(merged, flags)
    t, d, svc = merged["target"], merged["drafter"], merged["service"]
    check_service(svc, flags["service"])
    # fail now, not on the first request; validated once, as strictly as a request's config
    compact = check_config(merged.get("compact") or {}, where="[compact]", sep=" ")
    target = _spec("target", t, _split_extra(args.target_arg or []))
    drafter = _spec("drafter", {**d, "priority_scheduling": False}, _split_extra(args.drafter_arg or []))
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
    if servers and all(s.device == "cpu" for s in servers):
        given = set(from_file.get("service") or {}) | set(flags["service"])
        svc = {**svc, **{k: v for k, v in CPU_SERVICE_DEFAULTS.items() if k not in given}}
    templates = chat_templates(t.get("chat_template"), d.get("chat_template"), servers, target_urls, drafter_url)
    return LaunchPlan(
        servers=tuple(servers), router=router, target_urls=target_urls, drafter_url=drafter_url if drafter_on else None,
        drafter_lora_name=drafter.lora_name if drafter_on and lora_named else None,
        target_chat_template=templates[0], drafter_chat_template=templates[1],
        # the one table, with what the config file and the flags gave over it
        service=replace(defaults(), **{k: svc[k] for k in SECTIONS["service"] - {"prepare_priority"}},
                        prepare_priority=prepare_priority(svc, servers)), compact=compact,
        api_key=resolve_api_key(args.api_key), upstream_api_key=args.upstream_api_key,
        python=args.python or sys.executable, target_tokenizer=t.get("tokenizer"),
        speculative={s.role: s.speculative for s in servers},
    )


PORT_FLAGS = {"target": "--target-port", "drafter": "--drafter-port"}  # role -> the flag that moves its port


def listen_ports(plan: LaunchPlan) -> list[tuple[str, int, str, str]]:
    """``(host, port, who, flag)`` of every port the plan's processes will listen on: its servers' in start
    order, then the router's, then the service's; ``flag`` moves the port."""
    out = []
    for spec in plan.servers:
        role = spec.role.rstrip("0123456789")
        flag = PORT_FLAGS.get(role, "--target-port")
        where = f"{flag} (or [{role}] port)" + (" (workers listen on it + 10 + i)" if role != spec.role else "")
        out.append((spec.host, spec.port, f"the {spec.role} SGLang server", where))
    if plan.router is not None:
        out.append((plan.router.host, plan.router.port, "sglang-router", "--router-port (or [router] port)"))
    out.append((plan.service.host, plan.service.port, "the compaction service", "--service-port (or [service] port)"))
    return out


def chat_templates(target: str | None, drafter: str | None, servers: list[ServerSpec],
                   target_urls: tuple[str, ...], drafter_url: str | None) -> tuple[str | None, str | None]:
    """The target's and drafter's frontend chat templates: the given ones, else each started local
    checkpoint's own (:func:`~sgl_speccompact.launch.templates.checkpoint_template`); a drafter
    served by the target's server takes the target's."""
    started = {s.role.rstrip("0123456789"): s for s in servers}
    if target is None and "target" in started:
        target = checkpoint_template(started["target"].model_path, "target")
    if drafter is None and "drafter" in started:
        drafter = checkpoint_template(started["drafter"].model_path, "drafter")
    elif drafter is None and drafter_url in target_urls:
        drafter = target
    return target, drafter


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
    return [replace(target, role=f"target{i}", port=target.port + WORKER_PORT_OFFSET + i,
                    extra_args=target.extra_args + ("--base-gpu-id", str(i * target.tp_size)))
            for i in range(n)]


def _router(sec: dict, target: ServerSpec, workers: list[ServerSpec], extra_cli: list[str]) -> RouterSpec:
    policy = str(sec.get("policy") or "cache_aware")
    if policy not in ROUTER_POLICIES:
        raise ConfigError(f"[router] policy must be one of {list(ROUTER_POLICIES)}, got {policy!r}")
    router_port = port(sec.get("port") or target.port, "[router] port")
    try:
        return RouterSpec(
            worker_urls=tuple(w.url for w in workers), host=target.host, port=router_port, policy=policy,
            cache_threshold=float(sec["cache_threshold"]), balance_abs_threshold=int(sec["balance_abs_threshold"]),
            balance_rel_threshold=float(sec["balance_rel_threshold"]),
            model_path=target.model_path if Path(target.model_path).is_dir() else None,
            extra_args=tuple(_split_extra(list(sec.get("extra_args") or [])) + extra_cli),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"[router]: {exc}") from exc


def service_config(plan: LaunchPlan) -> dict:
    """The service side of a plan as JSON-ready data (secrets redacted)."""
    from ..service.redis_store import safe_url

    return {
        "service": {**asdict(plan.service), "session_store": safe_url(plan.service.session_store)},
        "target_urls": list(plan.target_urls),
        "target_tokenizer": plan.target_tokenizer,
        "drafter_url": plan.drafter_url,
        "drafter_lora_name": plan.drafter_lora_name,
        "chat_template": {"target": plan.target_chat_template, "drafter": plan.drafter_chat_template},
        "auth": "bearer" if plan.api_key else None,
        "upstream_auth": "bearer" if plan.upstream_api_key else None,
        "compact": plan.compact.model_dump(mode="json"),
        "speculative": {role: describe(s) for role, s in plan.speculative.items()},
    }


def format_dry_run(plan: LaunchPlan, notes: str = "") -> str:
    """What ``--dry-run`` prints: one shell command per server, ``notes`` (comment lines), then the
    service JSON, last so that it parses from its heading to the end."""
    out = []
    for i, spec in enumerate(plan.servers):
        when = "starts first" if i == 0 else "starts once the one above is healthy"
        out.append(f"# {spec.role} server: {when}; ready when {spec.url}/health answers 200")
        out.append(shell_command(spec, plan.python))
    if plan.router is not None:
        out.append(f"# sglang-router ({plan.router.policy}): starts once the workers are healthy; "
                   f"the service's target is {plan.router.url}")
        out.append(shlex.join(router_command(plan.router, plan.python)))
    if not plan.servers:
        out.append("# no servers to start: using running servers")
    if notes:
        out.append(notes)
    out.append("# service config")
    out.append(json.dumps(service_config(plan), indent=2))
    return "\n".join(out)
