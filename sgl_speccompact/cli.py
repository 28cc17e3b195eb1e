"""``python -m sgl_speccompact compact FILE``: compact one trajectory file.

Reads any format :mod:`sgl_speccompact.history.formats` knows, compacts it on
running SGLang servers and prints the summary and a stats table (or the
whole result as JSON).  When stderr is a terminal, one line there says
what it is doing from the start, then how far it is (block i of n, slots
done, judged lines accepted, tokens).  A server that is down fails at once,
before sglang's frontend is loaded.  A failure is one line on stderr: a usage error
(argparse's) exits 2, any other failure 1, an interrupt 130.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, TextIO

from .errors import BackendUnavailableError, ConfigError, InvalidHistoryError, MalformedJSONError, SpecCompactError
from .service.logs import quiet_sglang
from .config import CompactConfig
from .options import DEFAULT_DRAFTER_MODEL, DEFAULT_TARGET_MODEL, OneLineParser, count, defaults, positive_number
from .history.formats import list_trials, load_history
from .result import CompactionResult

TARGET_ENV, DRAFTER_ENV = "SGLANG_TARGET_URL", "SGLANG_DRAFTER_URL"


def build_parser() -> argparse.ArgumentParser:
    """Flags of the ``compact`` subcommand."""
    p = OneLineParser(prog="python -m sgl_speccompact compact",
                      description="Compact one agent trajectory file on SGLang servers.")
    p.add_argument("file", help="trajectory: OpenAI messages, SWE-agent .traj, mini-swe-agent, tau2-bench")
    from .launch.cpu import CPU_SERVICE_DEFAULTS
    from .methods.names import METHODS

    default = defaults().method
    p.add_argument("--method", default=default,
                   help=f"{default} (default; auto: the method the cost model predicts fastest, see --gpu/--gpus) | "
                        + " | ".join(METHODS))
    p.add_argument("--target-url", default=os.environ.get(TARGET_ENV),
                   help=f"target SGLang server (default ${TARGET_ENV})")
    p.add_argument("--drafter-url", default=os.environ.get(DRAFTER_ENV),
                   help=f"drafter SGLang server (default ${DRAFTER_ENV}); needed by speccompact")
    p.add_argument("--drafter-lora-name", help="LoRA adapter name to send as lora_path on drafter requests")
    p.add_argument("--chat-template", help="frontend chat template name of both servers (default: decided "
                   "from the model type each server reports; an error if it cannot be)")
    p.add_argument("--target-chat-template", help="the target's template (overrides --chat-template)")
    p.add_argument("--drafter-chat-template", help="the drafter's template (overrides --chat-template)")
    p.add_argument("--api-key", help="bearer token of the SGLang servers")
    p.add_argument("--timeout", type=float, help=f"per-request timeout, seconds, > 0 (default "
                   f"{defaults().request_timeout_s:g}; against a server on SGLang's CPU engine the launcher's "
                   f"CPU request timeout, {CPU_SERVICE_DEFAULTS['request_timeout_s']:g})")
    p.add_argument("--trial", type=int, default=0, help="which trial of a multi-trial (tau2) file, >= 0 (default 0)")
    p.add_argument("--list-trials", action="store_true", help="list the file's trials and exit")
    p.add_argument("--previous-summary", metavar="FILE", help="summary of earlier turns (text file)")
    p.add_argument("--source-judge", action="store_true", help="run the Source-Judged post-filter")
    p.add_argument("--focus", help="topic the summary should favour (quoted into the prompts as a label)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="CompactConfig override, VALUE as JSON typed like the service's config field "
                        "(--set eta=0.8; a bare word is a string); repeatable")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--layout", choices=("agent", "classic"),
                   help="target prefix layout (default: agent when --target-tokenizer is given)")
    p.add_argument("--target-tokenizer", metavar="PATH_OR_NAME",
                   help="the target's tokenizer; its chat template renders the agent-aligned layout")
    p.add_argument("--tools", metavar="FILE", help="the agent's OpenAI tools (JSON list), for the agent layout")
    g = p.add_argument_group("method auto (what the cost model predicts on)")
    g.add_argument("--gpu", help="the servers' GPU: H200, H100, A100, L40S or B200 (default H200)")
    g.add_argument("--gpus", type=int, choices=(1, 2), default=1,
                   help="1: the drafter shares the target's GPU (default); 2: it has a GPU of its own")
    g.add_argument("--target-model", help="the target's model (default: the one the server reports, "
                                          f"else {DEFAULT_TARGET_MODEL})")
    g.add_argument("--drafter-model", help="the drafter's model (default: the one the server reports, "
                                           f"else {DEFAULT_DRAFTER_MODEL})")
    return p


def parse_overrides(items: list[str]) -> dict:
    """``["eta=0.8", "positive_label=yes"]`` -> ``{"eta": 0.8, "positive_label": "yes"}``.

    Each VALUE is parsed as JSON with the service body's bounds (no NaN,
    infinity, huge number or deep nesting); a VALUE that is not JSON is a
    bare-word string.  :func:`effective_config` checks the result.

    >>> parse_overrides(["eta=0.8", "positive_label=yes"])
    {'eta': 0.8, 'positive_label': 'yes'}
    """
    from .service.body import check_json_shape, parse_json_value

    limits, out = defaults(), {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"needs FIELD=VALUE, got {item!r}", field="--set")
        try:
            value = raw.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError("is not valid text", field=f"--set {key}") from None
        try:
            check_json_shape(value, limits)
        except MalformedJSONError as exc:
            raise ConfigError(str(exc).removeprefix("body: "), field=f"--set {key}") from None
        try:
            out[key] = parse_json_value(value, limits)
        except MalformedJSONError:
            out[key] = raw  # a bare word is a string
    return out


def effective_config(items: list[str]) -> CompactConfig:
    """The compaction's config: the defaults with the ``--set`` overrides, validated once, here.

    Type-checked as strictly as a request's ``config``: ``--set eta='"0.8"'``
    is a string, not a number.  A bad value is one clear line naming the
    field, not a validation report.  ``auto`` and the runner get this config.

    >>> effective_config(["eta=0.8"]).eta
    0.8
    >>> effective_config(["eta=2"])
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: --set eta: Input should be less than or equal to 1
    """
    from .service.body import strict_config

    return strict_config(CompactConfig(), parse_overrides(items), prefix="--set", sep=" ", error=ConfigError)


def check_args(args: argparse.Namespace) -> None:
    """Numbers among the flags: a positive finite ``--timeout``, a ``--trial`` of 0 or more."""
    if args.timeout is not None:
        positive_number(args.timeout, "--timeout")
    count(args.trial, "--trial", minimum=0)


def read_text_file(path: str, what: str) -> str:
    """A small UTF-8 text file; a clear error for a missing, binary or non-regular file (a FIFO)."""
    p = Path(path)
    if p.exists() and not p.is_file():
        raise InvalidHistoryError("is not a regular file", field=f"{what} {path}")
    try:
        return p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidHistoryError(f"is not UTF-8 text (byte {exc.start}): a binary file?",
                                  field=f"{what} {path}") from None
    except OSError as exc:
        raise InvalidHistoryError(f"cannot be read: {exc.strerror or exc}", field=f"{what} {path}") from None


def stats_table(result: CompactionResult) -> str:
    """Requests and tokens per server and kind, then acceptance, cache ratio, wall time."""
    s = result.stats
    rows = [("server", "kind", "requests", "prompt_tok", "cached_tok", "completion_tok")]
    for server in sorted(s.requests):
        for kind, c in sorted(s.requests[server].items()):
            rows.append((server, kind, c.requests, c.prompt_tokens, c.cached_tokens, c.completion_tokens))
        t = s.totals(server)
        rows.append((server, "total", t.requests, t.prompt_tokens, t.cached_tokens, t.completion_tokens))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(v).ljust(w) if i < 2 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
             for r in rows]

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    lines += [
        "",
        f"cached ratio:    target {pct(s.cached_ratio('target'))}, drafter {pct(s.cached_ratio('drafter'))}",
        f"acceptance rate: {pct(s.acceptance_rate)} ({s.accepted_lines} of {s.proposed_lines} judged lines; "
        f"{s.repaired_lines} repaired, {s.unjudged_lines} unjudged)",
        *([f"judge labels:    p+ + p- min {s.label_mass_min:.3g}, median {s.label_mass_median:.3g}; "
           f"{s.unreliable_verdicts} verdicts below min_label_mass"] if s.label_mass_min is not None else []),
        f"summary:         {result.summary_tokens} tokens" + (", INCOMPLETE (truncated)" if result.truncated else ""),
        *([f"method auto:     {s.auto['reason']}"] if s.auto else []),
        f"wall time:       {s.total_wall_s:.2f} s",
    ]
    return "\n".join(lines)


class ProgressLine:
    """What the compaction is doing, redrawn on one stderr line (a terminal).

    It speaks at once, before sglang's frontend is loaded (seconds), then
    shows the pipeline's totals (:class:`~sgl_speccompact.methods.progress.Progress`):
    block i of n, slots done of the block's, judged lines accepted, tokens.
    """

    def __init__(self, stream: TextIO):
        self.stream = stream  # where to draw (a terminal)
        self.drawn = False  # something is on the line
        self._lock = threading.Lock()  # reports arrive from the slot threads

    def say(self, text: str) -> None:
        """Replace the line with ``[compact] text``."""
        with self._lock:
            self.stream.write(f"\r\x1b[K[compact] {text}")
            self.stream.flush()
            self.drawn = True

    def __call__(self, progress: Any) -> None:
        from .methods.progress import describe  # the pipeline is loaded by the time it reports

        self.say(describe(progress))

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


CONNECT_TIMEOUT_S = 5.0  # how long the first connection to a server may take before the CLI gives up (seconds)


def reachable(url: str, role: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail at once when nothing listens at ``url``, before sglang's frontend is loaded (seconds).

    Raises
    ------
    BackendUnavailableError
        The connection is refused, the host unknown, or ``timeout_s`` passes.
    """
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname:
        return  # not a URL the check can read: the endpoint says what is wrong with it
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname):
        return  # reached through a proxy: only the endpoint's own request can tell
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            pass
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or exc.__class__.__name__
        raise BackendUnavailableError(f"the {role} server at {url} is not reachable ({reason}); start it, "
                                      f"or pass --{role}-url with a running SGLang server's URL") from None


def connect(url: str, args: argparse.Namespace, *, lora_name: str | None = None, role: str = "target") -> Any:
    """A SpecCompactEndpoint for ``url`` (raises BackendUnavailableError if it is down)."""
    reachable(url, role)  # a server that is down fails here, not after sglang's frontend has loaded
    from .backends.endpoint import SpecCompactEndpoint
    from .launch.cpu import CPU_SERVICE_DEFAULTS

    template = getattr(args, f"{role}_chat_template", None) or args.chat_template
    timeout = defaults().request_timeout_s if args.timeout is None else args.timeout
    endpoint = SpecCompactEndpoint(url, api_key=args.api_key, chat_template=template, lora_path=lora_name,
                                   template_flag=f"--chat-template or --{role}-chat-template", timeout_s=timeout)
    if args.timeout is None and endpoint.get_server_info().get("device") == "cpu":
        endpoint.timeout_s = CPU_SERVICE_DEFAULTS["request_timeout_s"]  # a CPU server takes minutes per request
    return endpoint


def _default_runner() -> Callable:
    from .methods import run_method  # imported late: pulls in sglang's frontend

    return run_method


def compact_file(args: argparse.Namespace, *, connect: Callable = connect, runner: Callable | None = None,
                 progress: ProgressLine | None = None) -> CompactionResult:
    """Load ``args.file``, connect, run the method and return its result (``progress`` shows how far)."""
    say = progress.say if progress else lambda text: None
    config = effective_config(args.set)
    messages = load_history(args.file, trial=args.trial)
    previous = read_text_file(args.previous_summary, "--previous-summary") if args.previous_summary else None
    if not args.target_url:
        raise SpecCompactError(f"no target server: pass --target-url URL or set ${TARGET_ENV}")
    if args.method == "speccompact" and not args.drafter_url:
        raise SpecCompactError(f"speccompact needs a drafter: pass --drafter-url URL or set ${DRAFTER_ENV}")
    say(f"{len(messages)} messages; connecting to {args.target_url} (loading SGLang's frontend)")
    target = connect(args.target_url, args)
    drafter = (connect(args.drafter_url, args, lora_name=args.drafter_lora_name, role="drafter")
               if args.drafter_url else None)
    run = runner or _default_runner()
    from .methods.request import AgentLayout, MethodRequest  # imported late, as the runner is

    request = MethodRequest(messages, previous, args.focus or None, source_judge=args.source_judge,
                            layout=AgentLayout(args.layout, _read_tools(args.tools), args.target_tokenizer),
                            on_progress=progress)
    method, choice = resolve_auto(args, request, target, drafter, config)
    say(f"{method}: starting")
    result = run(method, request, target=target, drafter=drafter, config=config)
    if choice is not None:
        result.stats.auto = choice
    return result


def resolve_auto(args: argparse.Namespace, request: Any, target: Any, drafter: Any,
                 config: CompactConfig) -> tuple[str, dict | None]:
    """The method to run (picked here for ``auto``, so the runner gets a concrete one) and its pick.

    ``config`` is the effective one (:func:`effective_config`, ``--set`` included): ``auto``
    checks the methods' output reserves against its context window and budgets.
    """
    from .methods.autopick import AUTO
    from .methods.names import METHODS
    from .methods.request import Offer
    from .methods.resolve import resolve_method

    if args.method != AUTO:
        return args.method, None
    offer = Offer(config, has_drafter=drafter is not None, offered=METHODS)
    return resolve_method(AUTO, request, offer, auto_picker(args, target, drafter))


def auto_picker(args: argparse.Namespace, target: Any = None, drafter: Any = None) -> Any:
    """What ``--method auto`` predicts on: ``--gpu``, ``--gpus`` and the models (``--target-model`` /
    ``--drafter-model``, else what the servers report), at the prior acceptance."""
    from .methods.resolve import served_picker

    gpus = getattr(args, "gpus", 1)
    return served_picker(target, drafter,
                         fallback_target=getattr(args, "target_model", None) or DEFAULT_TARGET_MODEL,
                         fallback_drafter=getattr(args, "drafter_model", None) or DEFAULT_DRAFTER_MODEL,
                         prefer_served=not getattr(args, "target_model", None),
                         gpus=gpus, gpu=getattr(args, "gpu", None), drafter_shares_gpu=gpus == 1)


def _read_tools(path: str | None) -> list | None:
    if not path:
        return None
    try:
        tools = json.loads(read_text_file(path, "--tools"))
    except json.JSONDecodeError as exc:
        raise SpecCompactError(f"--tools {path}: not JSON: {exc}") from exc
    if not isinstance(tools, list):
        raise SpecCompactError(f"--tools {path}: expected a JSON list of tools")
    return tools


def main(argv: list[str] | None = None, *, connect: Callable = connect, runner: Callable | None = None) -> int:
    """Entry point of ``python -m sgl_speccompact compact``; returns the exit status."""
    args = build_parser().parse_args(argv)
    progress = ProgressLine(sys.stderr) if sys.stderr.isatty() and not args.json and not args.list_trials else None
    if progress:
        progress.say(f"reading {args.file}")
    quiet_sglang()  # before the frontend imports sglang
    try:
        try:
            check_args(args)
            if args.list_trials:
                for t in list_trials(args.file):
                    print(f"{t.index}\tid={t.id or '-'}\ttask={t.task_id or '-'}\ttrial={t.trial}\t"
                          f"messages={t.messages}")
                return 0
            result = compact_file(args, connect=connect, runner=runner, progress=progress)
        finally:
            if progress:
                progress.close()  # its last line stays; what follows starts below it
    except SpecCompactError as exc:
        print(f"error: {exc.code}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # --previous-summary unreadable
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if args.json:
        print(json.dumps(result.to_json_dict(), indent=2, ensure_ascii=False))
    else:
        print(result.summary)
        print()
        print(stats_table(result))
    return 0
