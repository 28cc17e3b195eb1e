"""Running a :class:`~sgl_speccompact.launch.plan.LaunchPlan`: servers up, service, servers down.

:func:`run` first refuses a plan whose ports are taken (naming the port and
the flag that moves it), then starts the plan's SGLang servers one after
the other (each waits for the previous one's ``/health``, see "Memory on
one GPU" in :mod:`sgl_speccompact.launch`, and must be the server it
started: its process alive, ``/get_model_info`` naming its model path),
then the router if any, then serves the
compaction service with uvicorn until Ctrl-C, SIGTERM or a server's death,
and stops every child it started on the way out.  :func:`run_emulated`
does the same on two in-process SGLang-API emulators.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from ..errors import BackendError, ConfigError, LaunchError
from ..service.logs import configure as configure_logs
from ..service.logs import uvicorn_logging
from ..options import DEFAULT_DRAFTER_MODEL, DEFAULT_TARGET_MODEL
from .deployment import auto_picker
from .plan import LaunchPlan, build_plan, listen_ports
from .router_process import start_router
from .servers import check_ports, start_server, stop_servers, wait_healthy


SHUTDOWN_GRACE_S = 3  # uvicorn's limit on draining open connections at shutdown (seconds)
# cancelled compactions have answered service_stopping at once; a thread still blocked in an upstream
# read gets this long to end before the process leaves (seconds)
THREAD_GRACE_S = 1.0


class _Terminated(BaseException):
    """SIGTERM arrived; unwinds to the cleanup in run()."""


def _on_sigterm(signum, frame):
    raise _Terminated()


def _build_app(plan: LaunchPlan, http):
    from ..backends.endpoint import SpecCompactEndpoint
    from ..service.app import create_app, http_probe

    svc = plan.service
    timeout = svc.request_timeout_s
    targets = [SpecCompactEndpoint(u, api_key=plan.upstream_api_key, chat_template=plan.target_chat_template,
                                   timeout_s=timeout, template_flag="--chat-template or --target-chat-template")
               for u in plan.target_urls]
    drafter = None
    if plan.drafter_url:
        drafter = SpecCompactEndpoint(plan.drafter_url, api_key=plan.upstream_api_key,
                                      chat_template=plan.drafter_chat_template,
                                      lora_path=plan.drafter_lora_name, timeout_s=timeout,
                                      template_flag="--chat-template or --drafter-chat-template")
    cost_models = cost_fits(plan, http)
    picker = auto_picker(plan, cost_models)
    log_auto(picker)
    compact = check_judge(targets[0], plan, picker)
    settings = replace(svc, shutdown_grace_s=THREAD_GRACE_S)  # the plan's settings, as they are, to the service
    return create_app(targets if len(targets) > 1 else targets[0], drafter, api_key=plan.api_key, settings=settings,
                      default_config=compact, health_probe=http_probe(http, settings.health_timeout_s),
                      chat_template=plan.target_tokenizer, cost_models=cost_models, auto=picker)


def log_auto(picker) -> None:
    """One line on what ``method="auto"`` will predict on."""
    from ..methods.autopick import describe

    print(f"[launch] method auto predicts on {describe(picker.deployment)} ({picker.source}), "
          f"acceptance prior {picker.acceptance.prior:g}", file=sys.stderr, flush=True)


def check_judge(target, plan: LaunchPlan, picker):
    """Probe both judges once, with the engine's own question (one request each); say which one
    compactions use and why, warn when neither can judge, and let ``auto`` start from what the
    probe saw.  Returns the service's default config, with the picked judge."""
    from ..backends.calibration_probe import log
    from ..config import make_config
    from ..methods.judge_probe import label_mass_warning, probe_judges

    cfg = plan.compact
    probe = probe_judges(target, cfg)
    for name, why in probe.errors.items():  # a probe that fails decides nothing: compactions report their own
        log(f"[launch] warning: the {name} judge probe failed ({why})")
    if probe.mass is None:
        return cfg
    picker.observe("probe", None, probe.mass)
    warning = label_mass_warning(probe.mass, cfg)
    log(f"[launch] judge: {probe.pick} ({probe.reason})")
    if warning:
        log(f"[launch] warning: {warning}")
    return make_config(cfg, judge=probe.pick) if probe.pick != cfg.judge else cfg


def cost_fits(plan: LaunchPlan, http) -> dict:
    """Each server's cost-model parameters: probed now (``calibrate``), saved, or a shipped profile.

    Raises
    ------
    BackendError
        ``calibrate`` is on and a probe fails.
    ConfigError
        ``calibrate`` is on and a served model has no cost-model preset.
    """
    from ..backends.calibration_probe import log, report_line, resolve_cost_fit

    svc = plan.service
    headers = {"Authorization": f"Bearer {plan.upstream_api_key}"} if plan.upstream_api_key else None
    roles = [("target", plan.target_urls[0])] + ([("drafter", plan.drafter_url)] if plan.drafter_url else [])
    tps = {spec.role: spec.tp_size for spec in plan.servers}  # servers started here; 1 for a given URL
    out = {}
    for role, url in roles:
        if svc.calibrate:
            log(f"[launch] calibrating the {role} at {url} (a few seconds of /generate calls)")
            if plan.speculative.get(role) is not None:
                # the probe's random prompts accept no draft tokens: every step is a full verify pass
                log(f"[launch] warning: the {role} runs {plan.speculative[role].algorithm} speculative decoding; "
                    "the fit times its verify passes on prompts that accept no drafts, so calibrate it without "
                    "speculative decoding (--{role}-speculative none) for the cost model's plain passes")
        try:
            fit = resolve_cost_fit(http, url, calibrate_now=svc.calibrate, gpu=svc.gpu,
                                   headers=headers, tp=tps.get(role, 1))
        except ValueError as exc:  # no preset for this model
            if svc.calibrate:
                raise ConfigError(str(exc)) from exc
            log(f"[launch] {role}: no cost model ({exc})")
            continue
        except BackendError as exc:
            if svc.calibrate:
                raise
            log(f"[launch] {role}: no cost model ({exc})")
            continue
        log(report_line(role, fit))
        out[role] = fit
    return out


def service_server(app, **config):
    """A uvicorn server for ``app`` that stops its compactions as soon as shutdown begins.

    uvicorn tells the app only after its connections drained (or were cut
    at ``timeout_graceful_shutdown``); cancelling first lets every open
    request answer ``service_stopping`` and every event stream end with its
    ``error`` event within that drain.
    """
    import uvicorn

    class _Server(uvicorn.Server):
        async def shutdown(self, sockets=None):
            app.state.compactions.stop()
            await super().shutdown(sockets)

    return _Server(uvicorn.Config(app, **config))


def exit_process(code: int) -> NoReturn:
    """End the process now with ``code``, once :func:`run` has returned (servers stopped, streams ended).

    The interpreter's own exit would first collect a heap of several
    hundred thousand objects (sglang's modules: seconds on a busy CPU) and
    join every worker thread, also one still blocked in a read from a
    stopped upstream; nothing of either is needed once the service stopped.
    Logging handlers and the standard streams are flushed first.  Only the
    command lines call this; :func:`run` itself returns.
    """
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: nothing left to lose
            pass
    os._exit(code)


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

    configure_logs(plan.service.log_level)
    procs: list[subprocess.Popen] = []
    old_term = signal.signal(signal.SIGTERM, _on_sigterm)
    http = httpx.Client(timeout=10.0)
    ports = listen_ports(plan)  # the servers' first, in start order
    try:
        check_ports(ports)  # before anything starts: a port taken now would fail minutes later
        for spec, (*_, flag) in zip(plan.servers, ports):
            procs.append(start_server(spec, plan.python, log_dir))
            # the server answering must be the one just started, not one already on its port
            wait_healthy(spec.url, procs[-1], timeout_s=plan.service.health_wait_s, get=http.get, label=spec.role,
                         model_path=spec.model_path, flag=flag)
        if plan.router is not None:
            log = (log_dir / "router.log") if log_dir else None
            if log_dir:
                log_dir.mkdir(parents=True, exist_ok=True)
            procs.append(start_router(plan.router, plan.python, log))
            wait_healthy(plan.router.url, procs[-1], timeout_s=plan.service.health_wait_s,
                         get=http.get, label="router")
        app = _build_app(plan, http)
        # a bounded graceful shutdown: open streams and stuck clients do not hold SIGTERM up
        server = service_server(app, host=plan.service.host, port=plan.service.port,
                                timeout_graceful_shutdown=SHUTDOWN_GRACE_S, **uvicorn_logging(plan.service.log_level))
        died: list = []
        threading.Thread(target=_watch, args=(procs, server, died), daemon=True).start()
        print(f"[launch] service on http://{plan.service.host}:{plan.service.port} "
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
EMULATED_MODELS = (("target", DEFAULT_TARGET_MODEL, 0), ("drafter", DEFAULT_DRAFTER_MODEL, 1))  # role, reported path, seed


def with_urls(args: argparse.Namespace, target: str, drafter: str) -> argparse.Namespace:
    """``args`` pointed at a running target and drafter (the emulators'), starting no server."""
    args.target_url, args.drafter_url, args.no_drafter = [target], drafter, False
    return args


def run_emulated(args: argparse.Namespace) -> int:
    """``--emulate``: the service on a target and a drafter emulator started in this process."""
    from ..emulator import ControlledAcceptancePolicy, EmulatedServer, default_tokenizer
    from ..emulator.__main__ import emulated_cost_model

    print(EMULATE_BANNER, file=sys.stderr, flush=True)
    timed = args.emulate_gpu is not None or args.emulate_speed is not None
    try:
        costs = {role: emulated_cost_model(path.split("/")[-1], args.emulate_gpu, args.emulate_speed or 1.0)
                 for role, path, _ in EMULATED_MODELS} if timed else {}
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if timed:
        print(f"[launch] EMULATED GPU: answers are delayed by SIMULATED pass times of "
              f"{costs['target'].hardware.name}, not measured on a GPU", file=sys.stderr, flush=True)
    args.drafter_lora_name = args.drafter_lora_name or "drafter"
    adapters = {"target": None, "drafter": [args.drafter_lora_name]}  # the drafter serves its LoRA by name
    try:  # the service's port, before the emulators start: a taken port fails now, not after them
        check_ports(listen_ports(build_plan(with_urls(copy.copy(args), "http://127.0.0.1:1", "http://127.0.0.1:2"))))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except LaunchError as exc:
        print(f"[launch] error: {exc}", file=sys.stderr, flush=True)
        return 1
    with contextlib.ExitStack() as stack:
        tokenizer, name = default_tokenizer()
        urls = {role: stack.enter_context(EmulatedServer(tokenizer, policy=ControlledAcceptancePolicy(seed=seed),
                                                         cost_model=costs.get(role), model_path=path,
                                                         lora_paths=adapters[role])).url
                for role, path, seed in EMULATED_MODELS}
        print(f"[launch] emulated target on {urls['target']}, drafter on {urls['drafter']} ({name} tokenizer)",
              file=sys.stderr, flush=True)
        try:
            plan = build_plan(with_urls(args, urls["target"], urls["drafter"]))
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return run(plan)
