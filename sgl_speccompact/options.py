"""The service's and the launcher's options: their one table of defaults, their checks.

:class:`ServiceSettings` is the one table: every option of the compaction
service and of the launcher's ``[service]`` section, each field named as its
config key (``--max-body-mb`` is ``max_body_mb``) with its default and a
comment.  The launcher's plan, :func:`~sgl_speccompact.service.app.create_app`
and the ``compact`` command all start from :data:`DEFAULTS`; a size given in
MiB turns into bytes in one place, the ``*_bytes`` properties.

Both command lines (``compact`` and ``launch``/``serve``) parse with
:class:`OneLineParser`, whose usage errors are one ``error:`` line and exit
status 2, and check every number with the functions here, which raise a
:class:`~sgl_speccompact.errors.ConfigError` naming the flag (or the config
key the value came from).  A timeout of 0, a negative one, NaN or infinity
would otherwise turn into "no deadline", an immediate failure or a
traceback later; so would a worker count below one or a body limit that is
not a positive finite size.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from typing import Any, NoReturn

from .errors import ConfigError

API_KEY_ENV = "SGL_SPECCOMPACT_API_KEY"  # the service token when --api-key is not given


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one ``error: ...`` line (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} -h)\n")


def positive_number(value: Any, field: str) -> float:
    """``value`` as a float that is finite and above zero (seconds, MiB).

    >>> positive_number(2, "--timeout")
    2.0
    >>> positive_number(float("nan"), "--timeout")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: --timeout: must be a positive finite number, got nan
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"must be a number, got {value!r}", field=field)
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(f"must be a positive finite number, got {value!r}", field=field)
    return number


def non_negative_number(value: Any, field: str) -> float:
    """``value`` as a float that is finite and at least zero (seconds; 0 turns a wait off).

    >>> non_negative_number(0, "--prepare-yield-s")
    0.0
    >>> non_negative_number(-1, "--prepare-yield-s")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: --prepare-yield-s: must be a finite number >= 0, got -1
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"must be a number, got {value!r}", field=field)
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ConfigError(f"must be a finite number >= 0, got {value!r}", field=field)
    return number


def count(value: Any, field: str, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an integer in ``[minimum, maximum]`` (workers, ports, sizes).

    >>> count(0, "--max-workers")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: --max-workers: must be an integer >= 1, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"must be an integer, got {value!r}", field=field)
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise ConfigError(f"must be an integer {bound}, got {value!r}", field=field)
    return value


def flag(value: Any, field: str) -> bool:
    """``value`` as a switch: true or false only (no 0, 1 or "yes").

    >>> flag("yes", "[service] calibrate")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: [service] calibrate: must be true or false, got 'yes'
    """
    if not isinstance(value, bool):
        raise ConfigError(f"must be true or false, got {value!r}", field=field)
    return value


def text(value: Any, field: str) -> str:
    """``value`` as a non-empty string (a host, a method name, a store URL).

    >>> text(8000, "[service] host")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: [service] host: must be a non-empty string, got 8000
    """
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"must be a non-empty string, got {value!r}", field=field)
    return value


def port(value: Any, field: str) -> int:
    """A TCP port number, 1 to 65535.

    >>> port(8000, "--service-port")
    8000
    """
    return count(value, field, 1, 65535)


def resolve_api_key(cli_value: str | None) -> str | None:
    """The service token: the flag's value, else ``$SGL_SPECCOMPACT_API_KEY``, else None.

    An empty or blank key is a :class:`ConfigError`, never "auth off".

    >>> resolve_api_key("")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: --api-key: is empty; omit it to run without auth
    """
    for value, where in ((cli_value, "--api-key"), (os.environ.get(API_KEY_ENV), f"${API_KEY_ENV}")):
        if value is None:
            continue
        if not value.strip():
            raise ConfigError("is empty; omit it to run without auth", field=where)
        return value
    return None


LOG_LEVELS = ("debug", "info", "warning", "error")  # --log-level values, most to least said (sgl_speccompact.service.logs)


def log_level(value: Any, field: str) -> str:
    """``value``, checked to be one of :data:`LOG_LEVELS`.

    >>> log_level("debug", "--log-level")
    'debug'
    >>> log_level("loud", "--log-level")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: --log-level: must be one of debug, info, warning, error, got 'loud'
    """
    if value not in LOG_LEVELS:
        raise ConfigError(f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}", field=field)
    return value


def add_log_level_flag(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    """Add ``--log-level`` to a command line (the launcher's, ``serve``'s, the emulator's): the one
    definition of the flag.  ``default`` None leaves the value None, so a config file can set it."""
    parser.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, default=default,
                        help=f"how much to log (default {default or defaults().log_level}): info = start-up, one line "
                             "per compaction and progress of long ones; debug = also every HTTP request's access "
                             "line; warning, error = only those")


MIB = 2**20  # bytes in one MiB: the unit of every size option
DEFAULT_TARGET_MODEL = "Qwen/Qwen3-8B"  # the target model when none is named or reported
DEFAULT_DRAFTER_MODEL = "Qwen/Qwen3-0.6B"  # the drafter model when none is named or reported


@dataclass(frozen=True)
class ServiceSettings:
    """The service's and the launcher's options, with their defaults: the one table.

    Each field is named as the launcher's ``[service]`` key; a flag is the
    key with dashes (``--max-body-mb``) unless the launcher's help says
    otherwise.  Every value is checked here, naming the field.
    """

    host: str = "127.0.0.1"  # interface the service binds (launcher)
    port: int = 8000  # the service's port (launcher)
    method: str = "auto"  # method when a request (or the compact command) names none; auto: the predicted fastest
    max_body_mb: float = 32.0  # larger request bodies get 413 (MiB)
    max_json_depth: int = 64  # deeper nesting of a body's arrays/objects gets 400 (levels)
    max_number_digits: int = 64  # a longer run of digits in one body number gets 400 (digits)
    max_previous_summary_chars: int = 1_000_000  # a longer previous_summary gets 413 (chars)
    max_workers: int = 32  # compactions running at once; more wait for a worker (threads)
    request_timeout_s: float = 120.0  # each SGLang request, from the service or the compact command (seconds)
    health_wait_s: float = 1200.0  # the launcher waits this long for each started server's /health (seconds)
    health_timeout_s: float = 5.0  # each upstream /health probe of the service's /health (seconds)
    compaction_timeout_s: float | None = 300.0  # whole-compaction deadline; None: none (seconds)
    shutdown_grace_s: float = 5.0  # on shutdown, cancelled compactions get this long to end (seconds)
    upstream_detail: bool = False  # show upstream URLs in error bodies and /health (off: roles only)
    session_store: str = "memory"  # where prepared results are kept: memory, or a redis:// URL shared by replicas
    session_store_mb: float = 64.0  # prepared results kept for reuse, at most (MiB of their JSON)
    session_ttl_s: float = 1800.0  # a prepared result older than this is dropped (seconds)
    prepare_workers: int = 4  # prepares (ahead-of-time compactions) computing at once (threads)
    prepare_queue: int = 64  # prepares waiting to start, at most; beyond: 429 with Retry-After
    prepare_queue_mb: float = 64.0  # request bodies of waiting prepares, at most; beyond: 429 (MiB)
    prepare_priority: int | None = None  # SGLang `priority` of prepares' target requests; None: not sent
    prepare_yield_s: float = 2.0  # a prepare's target request waits at most this long while the target serves
    #   foreground requests (GET /v1/loads), per request; 0: never waits (seconds; docs/benchmarks/session.md)
    calibrate: bool = False  # the launcher times each server's passes at start (cost-model fit)
    gpu: str | None = None  # the servers' GPU for the cost model; None: H200 assumed (launcher)
    log_level: str = "info"  # what the launcher, service and emulators log: one of LOG_LEVELS (sgl_speccompact.service.logs)

    def __post_init__(self) -> None:
        for name in ("upstream_detail", "calibrate"):
            flag(getattr(self, name), name)
        for name in ("host", "method", "session_store"):
            text(getattr(self, name), name)
        for name in ("max_json_depth", "max_number_digits", "max_previous_summary_chars", "max_workers",
                     "prepare_workers", "prepare_queue"):
            count(getattr(self, name), name)  # 0 workers: every request would wait forever
        port(self.port, "port")
        for name in ("max_body_mb", "request_timeout_s", "health_wait_s", "health_timeout_s", "session_store_mb",
                     "session_ttl_s", "prepare_queue_mb"):
            positive_number(getattr(self, name), name)
        non_negative_number(self.shutdown_grace_s, "shutdown_grace_s")
        non_negative_number(self.prepare_yield_s, "prepare_yield_s")
        log_level(self.log_level, "log_level")
        if self.compaction_timeout_s is not None:
            positive_number(self.compaction_timeout_s, "compaction_timeout_s")
        if self.prepare_priority is not None:
            count(self.prepare_priority, "prepare_priority", minimum=-(2**31))

    @property
    def max_body_bytes(self) -> int:
        """``max_body_mb`` in bytes.

        >>> ServiceSettings(max_body_mb=1.5).max_body_bytes
        1572864
        """
        return int(self.max_body_mb * MIB)

    @property
    def session_store_bytes(self) -> int:
        """``session_store_mb`` in bytes."""
        return int(self.session_store_mb * MIB)

    @property
    def prepare_queue_bytes(self) -> int:
        """``prepare_queue_mb`` in bytes."""
        return int(self.prepare_queue_mb * MIB)


DEFAULTS = ServiceSettings()  # the table's values: read as ``options.DEFAULTS`` when used, never copied


def defaults() -> ServiceSettings:
    """:data:`DEFAULTS`, read when called: what every consumer starts from (a test may swap the table)."""
    return DEFAULTS
