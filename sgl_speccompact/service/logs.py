"""Logs for people: one ``--log-level`` for the launcher, the service and the emulator.

The level is :attr:`~sgl_speccompact.options.ServiceSettings.log_level`
(the flag :func:`~sgl_speccompact.options.add_log_level_flag` adds, or the
``[service] log_level`` key of a launch config):

* ``info`` (the default): the launcher's start-up lines, one line per
  compaction (method, history tokens, wall time, requests, acceptance,
  complete or truncated), progress lines of compactions that take more than
  a few seconds, warnings and errors;
* ``debug``: also one access line per HTTP request, the service's and, under
  ``launch --emulate``, the emulators' (uvicorn's access log is one logger per
  process, so the setting holds for every server in it), and uvicorn's own
  start-up lines;
* ``warning``, ``error``: only those.

The package's lines go to stderr as ``[service] ...`` (the subpackage that
wrote them), through a handler of the ``sgl_speccompact`` logger only: the
root logger and other libraries' handlers are left as they are.

On a machine without CUDA, HIP, XPU or NPU, importing sglang warns twice that
AWQ and GGUF quantization kernels are unavailable (in
``sglang/srt/layers/quantization/awq/awq.py`` and ``.../gguf.py``, issued
only on such machines).  This package uses neither kernel, so
:func:`quiet_sglang` adds standard ``warnings`` filters that ignore exactly
those two (matched by message and issuing module) in this process, and a
server started on the CPU gets the same filters through ``PYTHONWARNINGS``
(:func:`quiet_sglang_env`); sglang is not changed.
"""

from __future__ import annotations

import logging
import re
import sys
import warnings
from typing import TextIO

from ..options import defaults, log_level

PACKAGE_LOGGER = "sgl_speccompact"  # the logger every module's getLogger(__name__) sits under
# (message start, the module that issues it) of sglang's import-time warnings on a machine with no accelerator
SGLANG_CPU_WARNINGS = (
    ("Only CUDA, HIP and XPU support AWQ", "sglang.srt.layers.quantization.awq.awq"),
    ("Only CUDA, MUSA and NPU support GGUF", "sglang.srt.layers.quantization.gguf"),
)


class PeopleFormatter(logging.Formatter):
    """``[service] message``, with ``warning:``/``error:`` before the message at those levels.

    >>> r = logging.LogRecord("sgl_speccompact.service.runtime", logging.WARNING, "", 0, "slow", None, None)
    >>> PeopleFormatter().format(r)
    '[service] warning: slow'
    """

    def format(self, record: logging.LogRecord) -> str:
        parts = record.name.split(".")
        where = parts[1] if len(parts) > 1 and parts[0] == PACKAGE_LOGGER else parts[0]
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        text = f"[{where}] {level}{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure(level: str | None = None, stream: TextIO | None = None) -> logging.Handler:
    """Send the package's log lines at ``level`` and above to ``stream`` (stderr), once per process.

    A second call replaces the first one's handler (tests run several
    launches in one process).  Returns the handler.
    """
    level = log_level(level or defaults().log_level, "--log-level")
    logger = logging.getLogger(PACKAGE_LOGGER)
    for old in [h for h in logger.handlers if getattr(h, "_sgl_speccompact", False)]:
        logger.removeHandler(old)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler._sgl_speccompact = True  # marks the handler this function owns
    handler.setFormatter(PeopleFormatter())
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False  # one copy of each line, whatever handlers the root logger has
    return handler


def uvicorn_logging(level: str | None = None) -> dict:
    """uvicorn's ``log_level`` and ``access_log`` for ``level``: access lines at ``debug`` only.

    At ``info`` uvicorn's own start-up lines are left out too: the launcher
    prints where the service listens.

    >>> uvicorn_logging("info"), uvicorn_logging("debug")
    ({'log_level': 'warning', 'access_log': False}, {'log_level': 'info', 'access_log': True})
    """
    level = log_level(level or defaults().log_level, "--log-level")
    uvicorn_level = {"debug": "info", "info": "warning"}.get(level, level)
    return {"log_level": uvicorn_level, "access_log": level == "debug"}


def quiet_sglang() -> None:
    """Ignore sglang's two import-time warnings about AWQ and GGUF kernels missing without a GPU.

    Call before sglang is imported (a warning issued at import is issued once).
    """
    for message, module in SGLANG_CPU_WARNINGS:
        warnings.filterwarnings("ignore", message=re.escape(message), category=UserWarning,
                                module=re.escape(module) + r"\Z")


def quiet_sglang_env(current: str | None = None) -> str:
    """``PYTHONWARNINGS`` for an sglang server started on the CPU: ``current`` and the same two filters.

    The variable's message field is the literal start of a message and
    cannot hold a comma, so each is cut at its first one; the module is
    matched exactly.

    >>> quiet_sglang_env("default").split(",")[:2]
    ['default', 'ignore:Only CUDA:UserWarning:sglang.srt.layers.quantization.awq.awq']
    """
    ours = [f"ignore:{message.split(',')[0]}:UserWarning:{module}" for message, module in SGLANG_CPU_WARNINGS]
    return ",".join(([current] if current else []) + ours)
