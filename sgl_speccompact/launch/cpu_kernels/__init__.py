"""CPU kernels for SGLang's CPU engine, written for this project.

SGLang 0.5.23's CPU engine calls three ops of its kernel library
(``torch.ops.sgl_kernel.*_cpu``) that the PyPI kernel wheels, built for CUDA,
do not register. ``sgl_kernel``'s loader falls back to ``import common_ops``
from ``sys.path``, so a server started with :data:`KERNEL_DIR` on its
``PYTHONPATH`` finds :mod:`common_ops` here, which registers them with
``torch.library``. The launcher's ``--device cpu`` and the real-server tests
start servers that way; no SGLang code is changed.
"""

from pathlib import Path

# Folder to prepend to a CPU server's PYTHONPATH so `import common_ops` finds ours.
KERNEL_DIR = Path(__file__).resolve().parent


def server_env(base: dict[str, str]) -> dict[str, str]:
    """Return a copy of ``base`` that starts an SGLang server on the CPU engine.

    Examples
    --------
    >>> env = server_env({"PYTHONPATH": "/x"})
    >>> env["SGLANG_USE_CPU_ENGINE"], env["PYTHONPATH"].endswith("/x")
    ('1', True)
    """
    env = dict(base)
    parts = [str(KERNEL_DIR)] + [p for p in env.get("PYTHONPATH", "").split(":") if p]
    env["PYTHONPATH"] = ":".join(parts)
    env["SGLANG_USE_CPU_ENGINE"] = "1"
    return env
