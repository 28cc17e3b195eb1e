"""Scale-out behind sglang-router: its command line, and what the service needs from it.

``python -m sgl_speccompact.launch --target-workers N`` starts N target
SGLang servers and one ``sglang-router`` (``sglang_router.launch_router``,
PyPI ``sglang-router==0.3.2``) in front of them; the service then talks to
the router as to one target.  ``--router-url`` uses a router that already
runs.

Policy: ``cache_aware`` (the router's default).  The router keeps, per
worker, a radix tree of the *text* of the requests it sent there.  For each
request it takes the worker whose tree holds the longest prefix of the
request's routing text; if that match covers more than ``cache_threshold``
(0.3) of the text it goes there.  Otherwise the router's documentation says
the worker with the smallest tree gets it; with two idle emulator workers
and requests one at a time, 0.3.2 sent every such request to the same
worker.  Load overrides both when the busiest worker has more than
``balance_abs_threshold`` (64) requests more than the idlest and more than
``balance_rel_threshold`` (1.5) times as many; then the idlest worker
gets it.  What that means here:

* every request of one compaction starts with the same shared prefix (slot
  requests, judgements and repairs add a few hundred characters to a
  prefix of thousands), so after the first one they all follow it to one
  worker;
* an agent's chat turns each extend the previous turn's text, so they stay
  on one worker too;
* the routing text of ``/generate`` is its ``text`` (our chat-templated
  prompt), but that of ``/v1/chat/completions`` is the messages' contents
  joined by spaces, without the template.  So a compaction's prompt never
  matches an agent's chat turns in the router's tree, and cache_aware does
  not know to send the compaction to the worker that served the agent (it
  lands there only when the no-match choice happens to pick it).  For that
  case use ``--policy manual``
  and one routing key per agent session: the agent sends it as the
  ``X-SMG-Routing-Key`` header, and the compaction passes the same key
  (``routing_key``), so both land on the worker the key is pinned to.

The router's tokenizer: at start-up it loads the tokenizer of each worker's
model from the Hugging Face hub (or a local directory of that name) and only
warns when it cannot.  Plain HTTP routing does not use it (cache_aware
routes on raw text); it serves the router's own ``/v1/tokenize`` and
``/v1/detokenize`` and the gRPC mode.  The router has no ``/tokenize``, so
:func:`tokenize_base` sends our token counting to one of its workers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

ROUTER_POLICIES = ("cache_aware", "manual", "round_robin", "power_of_two", "random")


@dataclass(frozen=True)
class RouterSpec:
    """One sglang-router to start in front of target workers."""

    worker_urls: tuple[str, ...]  # the workers' base URLs
    host: str = "127.0.0.1"  # interface the router binds
    port: int = 30000  # its HTTP port (the service's target URL)
    policy: str = "cache_aware"  # routing policy
    cache_threshold: float = 0.3  # cache_aware: min matched share of the routing text to follow the match
    balance_abs_threshold: int = 64  # cache_aware: load gap (requests) that switches to least-loaded...
    balance_rel_threshold: float = 1.5  # ...when the busiest also has this many times the idlest's load
    model_path: str | None = None  # tokenizer source for the router's own /v1/tokenize (None: ask workers)
    extra_args: tuple[str, ...] = ()  # further launch_router flags, verbatim

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"


def router_command(spec: RouterSpec, python: str = sys.executable) -> list[str]:
    """The ``sglang_router.launch_router`` argv.

    >>> router_command(RouterSpec(("http://a:1", "http://b:2"), port=30000), "python")[3:8]
    ['--host', '127.0.0.1', '--port', '30000', '--worker-urls']
    """
    cmd = [python, "-m", "sglang_router.launch_router", "--host", spec.host, "--port", str(spec.port),
           "--worker-urls", *spec.worker_urls, "--policy", spec.policy]
    if spec.policy == "cache_aware":
        cmd += ["--cache-threshold", f"{spec.cache_threshold:g}",
                "--balance-abs-threshold", str(spec.balance_abs_threshold),
                "--balance-rel-threshold", f"{spec.balance_rel_threshold:g}"]
    if spec.model_path:
        cmd += ["--model-path", spec.model_path]
    return cmd + list(spec.extra_args)


def start_router(spec: RouterSpec, python: str = sys.executable, log_path=None):
    """Start the router as a child process in its own process group (stop it with ``servers.stop_servers``)."""
    import shlex
    import subprocess

    from .servers import _die_with_parent

    cmd = router_command(spec, python)
    print(f"[launch] starting router: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    popen = dict(stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent)
    if log_path is None:
        return subprocess.Popen(cmd, **popen)
    with open(log_path, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, **popen)
