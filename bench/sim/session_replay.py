"""An agent session and its compactions on the simulator's clock (SIMULATED), every method, two ways.

``replay`` walks a session (:mod:`.session_policy`: the Hermes plugin's own
trigger and pruning) and compacts at that trigger with one method (``speccompact``, ``target_self``, ``hermes``,
``openclaw``) in one of two modes:

* ``sync``: the method runs when the trigger is reached; the agent waits for
  the whole compaction;
* ``ahead``: the method runs ahead of time.  When a response's prompt reaches
  the soft threshold, the middle that will not change before the trigger is
  compacted in the background *while the agent's next turns run on the same
  simulated target* (one simulator run: the prepare's requests, the agent's
  chat completions and its tool calls share the servers and the clock).  At
  the trigger the agent waits for what is left of the prepare, then for an
  incremental compaction of the turns after the prepared prefix
  (``previous_summary`` = the prepared summary) -- or, when the prepared
  prefix alone brings the prompt under the soft threshold, no compaction at
  all: the prepared summary replaces the prefix and the turns after it stay
  verbatim (``applied``).  A prepare whose prefix is not reused is wasted
  work; its GPU time is counted.

With ``priority`` the agent's requests carry a higher sglang priority than
the compaction's (``--enable-priority-scheduling``): they are admitted to
prefill first; decode steps are still shared.

With ``yield_s`` the prepare yields to the agent between requests, as the
service does with ``--prepare-yield-s`` (:mod:`sgl_speccompact.service.yielding`):
each of its target requests waits, before it is sent, while an agent request
is in flight on the target, looking again every ``YIELD_POLL_S``, at most
``yield_s`` (``SimulatedEndpoint.yielding``).  A request already sent runs on
beside the agent's next turn.  The drafter's requests never wait (the agent
does not use the drafter; on the co-located layout its passes still share the
GPUs).

The agent's slowdown while a prepare runs: the same turns (and tool calls)
run once more from the same radix caches without the prepare, and the
agent's decode rate (its completion tokens over its requests' time) of the
two runs is compared (``agent_slowdown`` = rate alone / rate with it).

Each compaction (a prepare too) can draw a new workload (``new_draw(k)``),
so the true summary changes between compactions and carried lines are
accepted only where the drafts happen to match.  Tool calls take the time
``tool_s(i)`` gives (from the trajectories' recorded execution times).

The plugin's own request to the service is charged on the same clock, added
to the stall it is part of (:func:`service_hop_s`): the client cost of one
request (``CLIENT_S_PER_REQUEST`` + ``CLIENT_S_PER_TOKEN`` per token sent, as
``emulator/cost.py``), and ahead of time, whose compacts name the
session, the service's store lookup over the messages sent
(``STORE_LOOKUP_S_PER_BYTE``).

With ``host`` (:mod:`.host_cpu`) the compacting process's CPU, as
``bench/host.py`` measured it on this project's machine (MEASURED (CPU)), is
charged on each compaction's path (:meth:`Simulation.run
<.simulator.Simulation.run>`'s ``host_cpu_s``): at the trigger it is part of
the stall; a prepare ends that much later, which the agent waits for only
where the prepare outlasts its turns.

Every compaction's agent-perceived stall, GPU seconds (pass time shared out
over the requests in each pass, the agent's own excluded), device-seconds
(the same, times the GPUs each server's pass holds) and lines carried from
the previous summary (origin ``carried``) are recorded; with a draw that
evolves from the one before (``new_draw`` returns a workload with
``held_lines``), also how many of the previous summary's facts still held,
how many of them the summary kept (retention) and its content lines; with a
draw that knows its truth (``truth_kept``), what of the whole true summary it
keeps and which of its lines the truth does not hold (staleness); and always
the share of the previous summary the new one keeps (``observed_held``: what
the service observes and ``auto`` predicts the next compaction with).  Only the agent
turns that overlap a prepare are simulated; the others do not change these
numbers.
"""

from __future__ import annotations

import json
import statistics
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from sgl_speccompact.emulator.cost import CLIENT_S_PER_REQUEST, CLIENT_S_PER_TOKEN, STORE_LOOKUP_S_PER_BYTE
from sgl_speccompact.methods.auto import held_share
from . import session_policy as sp
from .servers import TOOL_PATH

CHAT = "/v1/chat/completions"
MODES = ("sync", "ahead")  # when a compaction runs: at the trigger, or prepared ahead of time
METHODS = ("speccompact", "target_self", "target_delta", "hermes", "openclaw")  # what compacts
MAX_TURN_TOKENS = 1024  # an agent turn generates its assistant message's tokens, at most this many


@dataclass
class Compaction:
    """One compaction at the trigger (or an aborted one)."""

    turn: int  # index of the assistant message whose response reached the trigger
    prompt_tokens: int  # that request's prompt
    messages: int  # messages summarized (the remainder after a reused prefix included)
    stall_s: float = 0.0  # the agent's wait before its next request (SIMULATED s)
    gpu_s: float = 0.0  # GPU time of this compaction, its prepare included (SIMULATED s)
    device_s: float = 0.0  # the same, times the GPUs each pass holds (SIMULATED s)
    prepared: bool = False  # a prepared prefix was reused
    applied: bool = False  # ... and alone: the turns after it kept verbatim, nothing compacted at the trigger
    wait_s: float = 0.0  # of the stall: the prepare still running at the trigger (SIMULATED s)
    aborted: str | None = None  # the error, when the compaction failed
    ineffective: bool = False  # the next prompt was still at or over the trigger
    service_s: float = 0.0  # of the stall: the plugin's request to the service, store lookup included (SIMULATED s)
    carried_lines: int = 0  # summary lines carried from the previous summary
    lines: int = 0  # summary lines
    content_lines: int = 0  # of the summary's lines, those with content (no blank, heading or empty marker)
    previous_facts: int = 0  # content lines of the previous true summary (an evolving workload's draw)
    held_facts: int = 0  # of which still held
    retained_facts: int = 0  # of which the summary holds
    true_lines: int = 0  # content lines of this compaction's true summary (a draw with ``truth_kept``)
    true_kept: int = 0  # of which the summary keeps (retention of the truth)
    text_lines: int = 0  # content lines of the summary's text
    untrue_lines: int = 0  # of which the truth does not hold (stale lines kept, wrong drafts accepted)
    observed_held: float | None = None  # share of the previous summary's content lines this one keeps (auto sees it)
    host_cpu_s: float = 0.0  # of the stall: the compacting process's CPU at the trigger (MEASURED (CPU) fit; 0: none)


@dataclass
class Prepared:
    """An ahead-of-time compaction that ran while the agent went on."""

    prefix: list  # the pruned context messages it covered
    previous: str | None  # the previous summary it was incremental on
    result: Any  # its CompactionResult
    gpu_s: float  # its GPU time (SIMULATED s)
    device_s: float  # its device-seconds (SIMULATED s)
    wait_s: float  # how long it outlasted the agent's turns up to the trigger (SIMULATED s)
    agent_slowdown: float | None = None  # agent decode rate alone / with the prepare running (None: no turns)
    held_s: float = 0.0  # its requests' waits for the agent's, in all (yield_s; SIMULATED s)
    held: int = 0  # its requests that waited
    host_cpu_s: float = 0.0  # the compacting process's CPU of the prepare, added to its end (MEASURED (CPU) fit)


@dataclass
class SessionRun:
    """One session in one mode."""

    mode: str  # sync | ahead
    method: str  # speccompact | target_self | hermes | openclaw
    window: int  # the agent's window (tokens)
    priority: bool  # the agent's requests at a higher priority than the compaction's
    trigger: int  # Hermes's trigger (tokens)
    peak_prompt: int = 0  # largest prompt the agent sent (tokens)
    requests: int = 0  # agent requests
    compactions: list = field(default_factory=list)  # Compaction records
    prune_only: int = 0  # triggers with nothing to summarize (pruning alone)
    prepares: int = 0  # ahead-of-time compactions run
    wasted_gpu_s: float = 0.0  # GPU time of prepares never reused (SIMULATED s)
    wasted_device_s: float = 0.0  # device-seconds of prepares never reused (SIMULATED s)
    agent_slowdowns: list = field(default_factory=list)  # agent_slowdown of every prepare with agent turns
    yield_s: float | None = None  # a prepare's target request waits at most this long for the agent's (None: never)
    held_s: float = 0.0  # prepares' requests' waits in all (SIMULATED s)
    held: int = 0  # prepares' requests that waited

    def summary(self) -> dict:
        done = [c for c in self.compactions if not c.aborted]
        stalls = [c.stall_s for c in done]
        gpu = sum(c.gpu_s for c in self.compactions) + self.wasted_gpu_s
        lines = sum(c.lines for c in done)
        return {"mode": self.mode, "method": self.method, "priority": self.priority, "window": self.window,
                "device_s": sum(c.device_s for c in self.compactions) + self.wasted_device_s,
                "agent_slowdowns": list(self.agent_slowdowns), "trigger": self.trigger, "peak_prompt": self.peak_prompt,
                **({"yield_s": self.yield_s, "held_s": self.held_s, "held": self.held} if self.yield_s else {}),
                "over_window": self.peak_prompt > self.window, "requests": self.requests,
                "compactions": len(self.compactions), "aborted": sum(1 for c in self.compactions if c.aborted),
                "ineffective": sum(1 for c in self.compactions if c.ineffective), "prune_only": self.prune_only,
                "stall_median_s": statistics.median(stalls) if stalls else None,
                "stall_max_s": max(stalls) if stalls else None, "gpu_s": gpu, "wasted_gpu_s": self.wasted_gpu_s,
                "wasted_share": self.wasted_gpu_s / gpu if gpu else 0.0, "prepares": self.prepares,
                "prepares_reused": sum(1 for c in self.compactions if c.prepared),
                "prepares_applied": sum(1 for c in self.compactions if c.applied),
                "carried_share": sum(c.carried_lines for c in done) / lines if lines else 0.0,
                "retention": (sum(c.retained_facts for c in done) / sum(c.held_facts for c in done)
                              if any(c.held_facts for c in done) else None),
                "stalls_s": stalls, "records": [asdict(c) for c in self.compactions]}


def agent_label(server: str, path: str, body: dict) -> tuple[str | None, str | None]:
    """Simulation labeler: the agent's chat completions are ``agent``; the rest is compaction work."""
    return None, ("agent" if path == CHAT else None)


def compaction_gpu_s(report: dict, held: dict[str, int] | None = None) -> float:
    """GPU seconds of a run's passes, each shared out over its requests, the agent's share left out.

    ``held`` (server -> GPUs one of its passes holds) turns them into device-seconds.
    """
    roles = {r.seq: r.role for r in report["requests"]}
    total = 0.0
    for p in report["passes"]:
        if p.requests:
            ours = sum(1 for seq in p.requests if roles.get(seq) != "agent")
            total += (p.end - p.start) * ours / len(p.requests) * (held or {}).get(p.server, 1)
    return total


def agent_rate(report: dict) -> float | None:
    """The agent's decode rate in a run: its completion tokens over its requests' time (tokens/s)."""
    mine = [r for r in report["requests"] if r.role == "agent" and r.finished is not None]
    spent = sum(r.finished - r.issued for r in mine)
    return sum(r.completion_tokens for r in mine) / spent if mine and spent > 0 else None


def carried(result: Any) -> tuple[int, int]:
    """``(carried lines, lines)`` of a result's slots."""
    lines = [line for s in getattr(result, "slots", []) for line in s.lines]
    return sum(1 for line in lines if getattr(line.origin, "value", line.origin) == "carried"), len(lines)


def content(result: Any) -> int:
    """Lines of a result's slots that carry content: not blank, not a heading, not an empty marker."""
    lines = [line.text.strip() for s in getattr(result, "slots", []) for line in s.lines]
    return sum(1 for x in lines if x and not x.startswith("#") and x.lower() not in ("(none)", "- (none)"))


def retention(held: Any, result: Any) -> tuple[int, int]:
    """``(facts that still held, of which the summary keeps)``: lines of the summary's text, compared whole.

    >>> from types import SimpleNamespace as N
    >>> retention(["- a", "- b"], N(summary="## Goal\\n- a\\n- c"))
    (2, 1)
    """
    lines = set(str(getattr(result, "summary", "") or "").split("\n"))
    held = list(held or ())
    return len(held), sum(1 for line in held if line in lines)


def service_hop_s(wire: list[dict], tokens: int, session: bool) -> float:
    """Seconds of the plugin's compact request outside the compaction (SIMULATED).

    The client cost of one request carrying ``tokens``, plus, for a request
    naming a session, the service's store lookup over ``wire`` as JSON.

    >>> round(service_hop_s([{"role": "user", "content": "x" * 1000}], 300, session=False) * 1e3, 4)
    1.5324
    >>> service_hop_s([{"role": "user", "content": "x" * 1000}], 300, session=True) > 1.5324e-3
    True
    """
    s = CLIENT_S_PER_REQUEST + CLIENT_S_PER_TOKEN * tokens
    if session:
        s += STORE_LOOKUP_S_PER_BYTE * len(json.dumps(wire, ensure_ascii=False).encode())
    return s


def chat_body(ctx: list[dict], turn_tokens: int) -> dict:
    return {"model": "default", "messages": sp.wire(ctx), "temperature": 0,
            "max_tokens": max(1, min(turn_tokens, MAX_TURN_TOKENS))}


@dataclass
class ReplayHooks:
    """What a replay draws on besides the servers (every field optional)."""

    tool_s: Callable[[int], float] | None = None  # seconds of the agent's i-th tool call (None: instant)
    new_draw: Callable[[int], Any] | None = None  # compaction k's workload draw, returned (None: one draw)
    held: dict | None = None  # server -> GPUs one of its passes holds (device-seconds; None: 1 each)
    alone: dict | None = None  # memo of the agent's rate alone, by its turns (the same for every method)
    priority: bool = False  # the agent's requests at a higher sglang priority than the compaction's
    yield_s: float | None = None  # prepares yield to the agent, at most this long per target request (None: never)
    host: Any = None  # a host_cpu.HostCpuModel: the compacting process's CPU added to each compaction (None: none)


class Replay:
    """Replays sessions on one simulation; ``compact(method, messages, previous) -> CompactionResult``."""

    def __init__(self, sim, target, compact: Callable[..., Any], tokens: Callable[[dict], int],
                 hooks: ReplayHooks = ReplayHooks()):  # noqa: B008 - never mutated: read only
        self.sim, self.target, self.compact, self.tokens = sim, target, compact, tokens  # servers, method, counts
        self.hooks = hooks  # tool time, workload draws, GPUs per pass
        self._draws = 0  # compactions (prepares included) drawn so far in this session
        self.drawn: Any = None  # the last draw (its ``held_lines``: facts that still held, for retention)
        sim.labeler = agent_label

    def _draw(self) -> None:
        if self.hooks.new_draw is not None:
            self.drawn = self.hooks.new_draw(self._draws)
        self._draws += 1

    def _host_s(self, method: str, messages: list[dict], previous: str | None) -> float:
        """The host's CPU of compacting ``messages`` (and the previous summary) with ``method`` (0: none)."""
        if self.hooks.host is None:
            return 0.0
        tokens = sum(self.tokens(m) for m in messages)
        if previous:
            tokens += self.tokens({"role": "user", "content": previous})
        return self.hooks.host.seconds(method, tokens)

    def _alone(self, method: str, messages: list[dict], previous: str | None,
               host_s: float = 0.0) -> tuple[Any, float, float, float]:
        self._draw()
        result, report = self.sim.run(lambda: self.compact(method, messages, previous), keep_cache=True,
                                      host_cpu_s=host_s)
        return result, report["e2e_s"], compaction_gpu_s(report), compaction_gpu_s(report, self.hooks.held)

    def _agent(self, bodies: list[dict]) -> None:
        """The agent's turns: each request, then its tool calls' time (when the answer calls tools)."""
        for k, body in enumerate(bodies):
            calls = body.get("tool_calls_after", 0)
            self.target._request("POST", CHAT, {x: v for x, v in body.items() if x != "tool_calls_after"})
            if calls and self.hooks.tool_s is not None:
                self.target._request("POST", TOOL_PATH, {"seconds": sum(self.hooks.tool_s(k + i) for i in
                                                                        range(calls))})

    def _prepare(self, method: str, step: sp.Step, bodies: list[dict]) -> Prepared | None:
        raw = sp.prefix(step)
        if not raw:
            return None
        box: dict = {}
        self._draw()
        host_s = self._host_s(method, sp.wire(sp.paired(raw)), step.previous)  # it ends that much later

        def prepare():
            extra = {"yield_s": self.hooks.yield_s} if self.hooks.yield_s else {}  # compact(..., yield_s=)
            box["result"] = self.compact(method, sp.wire(sp.paired(raw)), step.previous, **extra)
            box["done"] = self.sim.clock

        def both():
            worker = threading.Thread(target=prepare, name="sim-prepare", daemon=True)
            worker.start()
            self._agent(bodies)
            agent_done = self.sim.clock
            worker.join()
            return agent_done

        memo = self.hooks.alone if self.hooks.alone is not None else {}
        key = (id(self.sim), repr(self.sim.servers["target"].cost), json.dumps(bodies, sort_keys=True, default=str))
        if key not in memo:  # the same turns with no prepare, from the same caches
            trees = {n: s.tree.clone() for n, s in self.sim.servers.items()}
            _, alone = self.sim.run(lambda: self._agent(bodies), keep_cache=True)
            for n, s in self.sim.servers.items():
                s.tree = s.sched.tree = trees[n]
            memo[key] = agent_rate(alone)
        agent_done, report = self.sim.run(both, keep_cache=True)
        if "result" not in box:
            return None
        rates = memo[key], agent_rate(report)
        waits = [r.finished - r.issued for r in report["requests"] if r.kind == "yield" and r.finished is not None]
        return Prepared(raw, step.previous, box["result"], compaction_gpu_s(report),
                        compaction_gpu_s(report, self.hooks.held), max(0.0, box["done"] + host_s - agent_done),
                        rates[0] / rates[1] if None not in rates and rates[1] > 0 else None,
                        sum(waits), sum(1 for w in waits if w > 0), host_s)

    def _lookahead(self, ctx: list[dict], rest: list[dict], trigger: int) -> list[dict]:
        """The agent's requests after ``ctx`` up to the one that reaches the trigger (no compaction between)."""
        ctx, bodies = list(ctx), []
        for m in rest:
            if m.get("role") == "assistant":
                prompt = sum(self.tokens(x) for x in ctx)
                bodies.append({**chat_body(ctx, self.tokens(m)), "tool_calls_after": len(m.get("tool_calls") or [])})
                if prompt >= trigger:
                    break
            ctx.append(m)
        return bodies

    def run(self, session: list[dict], policy: sp.Policy, mode: str, method: str = "speccompact") -> SessionRun:
        if mode not in MODES or method not in METHODS:
            raise ValueError(f"mode must be one of {MODES} and method one of {METHODS}, not {mode!r}, {method!r}")
        self.sim.run(lambda: None)  # fresh caches for every session and mode
        self.sim.priorities = {"agent": 1} if self.hooks.priority else {}
        self._draws = 0
        out, tok = SessionRun(mode, method, policy.window, self.hooks.priority, policy.trigger), self.tokens
        out.yield_s = self.hooks.yield_s if mode == "ahead" else None
        ctx: list[dict] = []
        first, prepared, last = True, None, None
        for idx, m in enumerate(session):
            if m.get("role") != "assistant" or not ctx:
                ctx.append(m)
                continue
            prompt = sum(tok(x) for x in ctx)
            out.requests, out.peak_prompt = out.requests + 1, max(out.peak_prompt, prompt)
            if last is not None:
                last.ineffective, last = prompt >= policy.trigger, None
            ctx.append(m)
            if mode == "ahead" and prepared is None and policy.soft <= prompt < policy.trigger:
                prepared = self._prepare(method, sp.plan(ctx, tok, policy, first),
                                         self._lookahead(ctx, session[idx + 1:], policy.trigger))
                out.prepares += prepared is not None
                if prepared is not None:
                    out.held_s, out.held = out.held_s + prepared.held_s, out.held + prepared.held
                if prepared is not None and prepared.agent_slowdown is not None:
                    out.agent_slowdowns.append(prepared.agent_slowdown)
            if prompt < policy.trigger:
                continue
            step = sp.plan(ctx, tok, policy, first)
            mid = sp.middle(step)
            if not mid:
                ctx, out.prune_only = step.ctx, out.prune_only + 1
                continue
            rec = Compaction(idx, prompt, len(mid))
            try:
                result = self._compact(method, step, mid, prepared, rec, out, policy)
            except Exception as exc:  # noqa: BLE001 - an aborted compaction is a result, the session goes on
                rec.aborted, ctx = f"{type(exc).__name__}: {exc}"[:300], step.ctx
            else:
                rec.carried_lines, rec.lines = carried(result)
                rec.held_facts, rec.retained_facts = retention(getattr(self.drawn, "held_lines", ()), result)
                rec.previous_facts, rec.content_lines = getattr(self.drawn, "previous_facts", 0), content(result)
                if hasattr(self.drawn, "truth_kept"):
                    rec.true_lines, rec.true_kept, rec.text_lines, rec.untrue_lines = \
                        self.drawn.truth_kept(result.summary)
                rec.observed_held = held_share(result.summary, step.previous)
                if rec.applied:
                    step.end = step.start + len(prepared.prefix)
                ctx, first = sp.assemble(step, result.summary), False
            prepared = None
            out.compactions.append(rec)
            last = rec
        if prepared is not None:
            out.wasted_gpu_s += prepared.gpu_s
            out.wasted_device_s += prepared.device_s
        return out

    def _hop(self, messages: list[dict], session: bool) -> float:
        """:func:`service_hop_s` of the plugin's compact request carrying ``messages``."""
        return service_hop_s(sp.wire(messages), sum(self.tokens(m) for m in messages), session)

    def _compact(self, method: str, step: sp.Step, mid: list[dict], prepared: Prepared | None, rec: Compaction,
                 out: SessionRun, policy: sp.Policy) -> Any:
        if prepared is not None:
            cut = step.start + len(prepared.prefix)
            now = step.ctx[step.start:cut]
            if sp.wire(now) == sp.wire(prepared.prefix) and step.previous == prepared.previous:
                rest = sp.paired(step.ctx[cut:step.end])
                rec.prepared, rec.wait_s, rec.gpu_s = True, prepared.wait_s, prepared.gpu_s
                rec.device_s = prepared.device_s
                rec.messages = len(rest)
                after = sp.assemble(sp.Step(step.ctx, step.start, cut, step.boundary, step.previous),
                                    prepared.result.summary)
                if not rest or sum(self.tokens(m) for m in after) <= policy.soft:
                    # the plugin asks for exactly the prepared messages: the stored result is the answer
                    rec.applied, rec.messages = True, 0
                    rec.service_s = self._hop(prepared.prefix, session=True)
                    rec.stall_s = prepared.wait_s + rec.service_s
                    return prepared.result
                # the whole middle is sent; the service finds the prefix and compacts the rest incrementally
                rec.service_s = self._hop(prepared.prefix + rest, session=True)
                rec.host_cpu_s = self._host_s(method, sp.wire(rest), prepared.result.summary)
                result, e2e, gpu, dev = self._alone(method, sp.wire(rest), prepared.result.summary, rec.host_cpu_s)
                rec.stall_s, rec.gpu_s = prepared.wait_s + rec.service_s + e2e, rec.gpu_s + gpu
                rec.device_s += dev
                return result
            out.wasted_gpu_s += prepared.gpu_s
            out.wasted_device_s += prepared.device_s
        rec.host_cpu_s = self._host_s(method, sp.wire(mid), step.previous)
        result, e2e, rec.gpu_s, rec.device_s = self._alone(method, sp.wire(mid), step.previous, rec.host_cpu_s)
        rec.service_s = self._hop(mid, session=out.mode == "ahead")
        rec.stall_s = e2e + rec.service_s
        return result
