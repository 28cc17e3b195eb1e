"""SGLang servers on the CPU engine: what ``--device cpu`` changes in a server's launch.

sglang 0.5.23 runs on a CPU without a GPU (and without AMX) when the server
is started with ``SGLANG_USE_CPU_ENGINE=1``, this project's CPU kernels on
its ``PYTHONPATH`` (:mod:`sgl_speccompact.launch.cpu_kernels`) and
:data:`CPU_FLAGS`.  The KV pool is then sized in tokens
(``--max-total-tokens``), not as ``--mem-fraction-static`` of a GPU's
memory: on a CPU that fraction would be taken of host memory.

``--sleep-on-idle``: an idle CPU-engine scheduler otherwise busy-polls at
most of a core.  ``--dtype`` follows what the CPU computes natively
(:func:`cpu_dtype`): bfloat16 where ``/proc/cpuinfo`` lists ``avx512_bf16``
or ``amx_bf16``, float32 elsewhere, where bfloat16 is emulated and slower
(a server's own ``--dtype`` wins).  Requests take seconds to minutes on a
CPU, so the service's timeouts get CPU defaults
(:data:`CPU_SERVICE_DEFAULTS`) unless the config or a flag sets them.

What the CPU engine cannot do: LoRA adapters (``--enable-lora``), because
every LoRA layer pins host memory, which needs a CUDA driver.  A drafter is
then served as a separate model (``--drafter-model``).

Pure: nothing here starts a process; :func:`server_env` is applied by
:func:`~sgl_speccompact.launch.servers.start_server`.
"""

from __future__ import annotations

import os

from ..errors import ConfigError
from ..service.logs import quiet_sglang_env
from .cpu_kernels import server_env as kernel_env

# launch_server flags of every CPU server, (flag, value or None for a switch); a flag the
# server's extra args already give is left to them; --dtype comes from cpu_dtype()
CPU_FLAGS = (("--device", "cpu"), ("--attention-backend", "torch_native"), ("--disable-cuda-graph", None),
             ("--sampling-backend", "pytorch"), ("--disable-overlap-schedule", None), ("--sleep-on-idle", None))
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of CPUs that compute bfloat16 natively
# [service] defaults of a launch whose servers run on the CPU (seconds): a 1-2K-token compaction of a
# 135M model takes minutes on 2 cores, and a one-shot baseline's generation alone can take several
CPU_SERVICE_DEFAULTS = {"request_timeout_s": 900.0, "compaction_timeout_s": 3600.0}
DEFAULT_MAX_TOTAL_TOKENS = 16384  # KV pool of a CPU server, tokens (~2.3 GiB for Qwen3-8B in bfloat16)
LORA_FLAGS = ("--enable-lora", "--lora-paths")  # what the CPU engine cannot serve


def arg_value(args, flag: str) -> str | None:
    """The last value ``args`` give ``flag`` (``--flag v`` or ``--flag=v``); None when absent.

    >>> arg_value(["--port", "1", "--device=cpu"], "--device"), arg_value(["--device"], "--device")
    ('cpu', None)
    """
    found = None
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
        elif arg == flag and i + 1 < len(args):
            found = args[i + 1]
    return found


def has_flag(args, flag: str) -> bool:
    """Whether ``args`` give ``flag`` at all.

    >>> has_flag(["--enable-lora"], "--enable-lora"), has_flag(["--lora-paths=a"], "--lora-paths")
    (True, True)
    """
    return any(a == flag or a.startswith(flag + "=") for a in args)


def resolve_device(role: str, device: str | None, extra_args) -> str | None:
    """A server's device: the ``--device`` of its extra args, else the launcher's (None: a GPU).

    >>> resolve_device("target", None, ["--device", "cpu"]), resolve_device("drafter", "cpu", [])
    ('cpu', 'cpu')
    """
    given = arg_value(list(extra_args), "--device")
    if given and device and given != device:
        raise ConfigError(f"[{role}] device is {device!r} but its server args say --device {given}; give one")
    return given or device or None


def check_cpu_server(role: str, lora: bool, extra_args) -> None:
    """Refuse what the CPU engine cannot serve: a LoRA adapter.

    >>> check_cpu_server("drafter", True, [])
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: [drafter] SGLang's CPU engine cannot serve LoRA adapters (--enable-lora pins memory through a CUDA driver): serve the drafter as a separate model (--drafter-model PATH, no --drafter-lora)
    """
    if lora or any(has_flag(extra_args, f) for f in LORA_FLAGS):
        raise ConfigError(f"[{role}] SGLang's CPU engine cannot serve LoRA adapters (--enable-lora pins memory "
                          "through a CUDA driver): serve the drafter as a separate model "
                          "(--drafter-model PATH, no --drafter-lora)")


def cpu_dtype(cpuinfo: str | None = None) -> str:
    """The dtype a CPU server loads weights in: bfloat16 where the CPU has native bf16, else float32.

    ``cpuinfo`` is ``/proc/cpuinfo``'s text (read when None; float32 where it cannot be read).

    >>> cpu_dtype("flags : fpu avx512f avx512_bf16"), cpu_dtype("flags : fpu avx2"), cpu_dtype("")
    ('bfloat16', 'float32', 'float32')
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    flags = set(cpuinfo.split())
    return "bfloat16" if flags.intersection(NATIVE_BF16_FLAGS) else "float32"


def cpu_flags(attention_backend: str | None, max_total_tokens: int | None, extra_args,
              dtype: str | None = None) -> list[str]:
    """The launch_server flags a CPU server adds (those its extra args give are theirs).

    ``dtype``: the server's ``--dtype`` (None: :func:`cpu_dtype`).

    >>> cpu_flags(None, None, ["--dtype", "float32"])[:4]
    ['--device', 'cpu', '--attention-backend', 'torch_native']
    >>> "--dtype" in cpu_flags(None, 4096, ["--dtype", "float32"]), cpu_flags(None, 4096, [], "float32")[-4:]
    (False, ['--dtype', 'float32', '--max-total-tokens', '4096'])
    >>> "--sleep-on-idle" in cpu_flags(None, None, [])
    True
    """
    out: list[str] = []
    for flag, value in (*CPU_FLAGS, ("--dtype", dtype or cpu_dtype())):
        if flag == "--attention-backend" and attention_backend:
            value = attention_backend
        if not has_flag(extra_args, flag):
            out += [flag] if value is None else [flag, value]
    if not has_flag(extra_args, "--max-total-tokens"):
        out += ["--max-total-tokens", str(max_total_tokens or DEFAULT_MAX_TOTAL_TOKENS)]
    return out


def server_env(device: str | None, base: dict[str, str] | None = None) -> dict[str, str] | None:
    """The environment a server starts with: the CPU engine's for ``device == "cpu"``, else None (inherit).

    A CPU server also ignores sglang's two warnings that AWQ and GGUF kernels need an accelerator
    (:func:`~sgl_speccompact.service.logs.quiet_sglang_env`).
    """
    if device != "cpu":
        return None
    env = kernel_env(dict(os.environ if base is None else base))
    env["PYTHONWARNINGS"] = quiet_sglang_env(env.get("PYTHONWARNINGS"))  # sglang's notes on kernels a CPU lacks
    return env


def env_assignments(device: str | None, base: dict[str, str] | None = None) -> list[str]:
    """``NAME=value`` words that set a CPU server's environment in a shell (``--dry-run``).

    >>> env_assignments("cpu", {"PYTHONPATH": "/x"})[0]
    'SGLANG_USE_CPU_ENGINE=1'
    >>> env_assignments(None)
    []
    """
    base = dict(os.environ if base is None else base)
    env = server_env(device, base)
    if env is None:
        return []
    return [f"{k}={env[k]}" for k in ("SGLANG_USE_CPU_ENGINE", "PYTHONPATH") if env.get(k) != base.get(k)]
