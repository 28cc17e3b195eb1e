"""Checks of command-line flags and launch-config values: one line naming the flag, no traceback.

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
