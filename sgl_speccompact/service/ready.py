"""``python -m sgl_speccompact wait``: return once the compaction service is ready.

The launcher answers HTTP only after its SGLang servers are healthy, so a
service that answers ``GET /health`` with 200 is ready for compactions.
``wait`` polls that route (every :data:`POLL_S`) and exits 0 then; it exits
1 when ``--pid`` names the launcher and that process ends first (its own
output says why), or when ``--timeout`` passes.  It says at once what it
waits for, then a line every :data:`NOTE_EVERY_S` while it waits.  The URL
and the time limit default to the service's own settings
(:data:`~sgl_speccompact.options.DEFAULTS`: its host and port, and
``health_wait_s``, the launcher's limit on each server's start)::

    python -m sgl_speccompact.launch --emulate &
    python -m sgl_speccompact wait --pid $!
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable

from ..errors import ConfigError
from ..options import OneLineParser, defaults, positive_number

POLL_S = 0.5  # between two /health requests (seconds)
NOTE_EVERY_S = 15.0  # a "still waiting" line this often (seconds)
REQUEST_TIMEOUT_S = 5.0  # one /health request, at most (seconds)


@dataclass(frozen=True)
class Waiting:
    """What :func:`wait_ready` needs from the world, passed in (tests give fakes)."""

    get: Callable[[str], int | None]  # GET url -> HTTP status, None when nothing answers
    alive: Callable[[], bool]  # whether the process waited on still runs (always True without --pid)
    clock: Callable[[], float] = time.monotonic  # seconds
    sleep: Callable[[float], None] = time.sleep  # waits that many seconds
    say: Callable[[str], None] = print  # one line for the user (the command: on stderr)


def wait_ready(url: str, timeout_s: float, world: Waiting) -> bool:
    """Poll ``url/health`` until it answers 200 (True), the process ends or ``timeout_s`` passes (False)."""
    health = url.rstrip("/") + "/health"
    start = last_note = world.clock()
    world.say(f"waiting for {health} ...")
    degraded = False
    while True:
        status = world.get(health)
        now = world.clock()
        if status == 200:
            world.say(f"ready: {url} answered /health after {now - start:.0f} s")
            return True
        if status is not None and not degraded:  # it listens, but a server behind it is not healthy
            world.say(f"{url} answers /health with {status}: a server behind it is not healthy yet")
            degraded = True
        if not world.alive():
            world.say(f"error: the service process ended before {health} answered; its output says why")
            return False
        if now - start >= timeout_s:
            world.say(f"error: {health} did not answer within {timeout_s:g} s")
            return False
        if now - last_note >= NOTE_EVERY_S:
            world.say(f"still waiting for {health} ({now - start:.0f} s)")
            last_note = now
        world.sleep(POLL_S)


def http_status(url: str) -> int | None:
    """GET ``url``'s status, None when the connection fails or times out."""
    import httpx

    try:
        return httpx.get(url, timeout=REQUEST_TIMEOUT_S).status_code
    except httpx.HTTPError:
        return None


def process_alive(pid: int | None) -> Callable[[], bool]:
    """Whether process ``pid`` still runs (a zombie has ended); always True for None."""
    def alive() -> bool:
        if pid is None:
            return True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # someone else's process: it exists
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return True
    return alive


def build_parser() -> argparse.ArgumentParser:
    """Flags of the ``wait`` subcommand."""
    s = defaults()
    p = OneLineParser(prog="python -m sgl_speccompact wait",
                      description="Wait until the compaction service answers GET /health with 200.")
    p.add_argument("--url", default=f"http://{s.host}:{s.port}",
                   help=f"the service's base URL (default http://{s.host}:{s.port})")
    p.add_argument("--timeout", type=float, default=s.health_wait_s,
                   help=f"give up after this many seconds (default {s.health_wait_s:g})")
    p.add_argument("--pid", type=int, help="stop waiting when this process (the launcher: $! after &) ends")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m sgl_speccompact wait``: 0 once ready, 1 otherwise."""
    args = build_parser().parse_args(argv)
    try:
        positive_number(args.timeout, "--timeout")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    world = Waiting(http_status, process_alive(args.pid), say=lambda line: print(line, file=sys.stderr, flush=True))
    return 0 if wait_ready(args.url, args.timeout, world) else 1
