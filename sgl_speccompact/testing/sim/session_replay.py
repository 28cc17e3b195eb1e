"""An agent session and its compactions on the simulator's clock (SIMULATED), three ways.

``replay`` walks a session (:mod:`.session_policy`) and compacts at Hermes's
trigger in one of three modes:

* ``sync``: our method (``speccompact``) when the trigger is reached; the
  agent waits for the whole compaction;
* ``ahead``: our method ahead of time.  When a response's prompt reaches the
  soft threshold, the middle that will not change before the trigger is
  compacted in the background *while the agent's next turns run on the same
  simulated target* (one simulator run: the prepare's requests and the
  agent's chat completions share the servers and the clock).  At the trigger
  the agent waits for what is left of the prepare, then for an incremental
  compaction of the turns after the prepared prefix (``previous_summary`` =
  the prepared summary) -- or, when the prepared prefix alone brings the
  prompt under the soft threshold, no compaction at all: the prepared summary
  replaces the prefix and the turns after it stay verbatim (``applied``).  A
  prepare whose prefix is not reused is wasted work; its GPU time is counted;
* ``hermes``: the Hermes-style baseline synchronously, the reference.

The plugin's own request to the service is charged on the same clock, added
to the stall it is part of (:func:`service_hop_s`): the client cost of one
request (``CLIENT_S_PER_REQUEST`` + ``CLIENT_S_PER_TOKEN`` per token sent, as
``testing/emulator/cost.py``) for ``sync`` and ``ahead``, and for ``ahead``,
whose compacts name the session, the service's store lookup over the
messages sent (``STORE_LOOKUP_S_PER_BYTE``).  ``hermes`` calls the model
itself: its request's client cost is in the cost model's.

Every compaction's agent-perceived stall, GPU seconds (pass time shared out
over the requests in each pass, the agent's own excluded) and lines carried
from the previous summary (origin ``carried``) are recorded.  Only the agent
turns that overlap a prepare are simulated; the others do not change these
numbers.  Tool execution takes no time (this shortens the overlap a prepare
gets: conservative for ``ahead``).
"""

from __future__ import annotations

import json
import statistics
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from ..emulator.cost import CLIENT_S_PER_REQUEST, CLIENT_S_PER_TOKEN, STORE_LOOKUP_S_PER_BYTE
from . import session_policy as sp

CHAT = "/v1/chat/completions"
MODES = {"sync": "speccompact", "ahead": "speccompact", "hermes": "hermes"}  # mode -> method
MAX_TURN_TOKENS = 1024  # an agent turn generates its assistant message's tokens, at most this many


@dataclass
class Compaction:
    """One compaction at the trigger (or an aborted one)."""

    turn: int  # index of the assistant message whose response reached the trigger
    prompt_tokens: int  # that request's prompt
    messages: int  # messages summarized (the remainder after a reused prefix included)
    stall_s: float = 0.0  # the agent's wait before its next request (SIMULATED s)
    gpu_s: float = 0.0  # GPU time of this compaction, its prepare included (SIMULATED s)
    prepared: bool = False  # a prepared prefix was reused
    applied: bool = False  # ... and alone: the turns after it kept verbatim, nothing compacted at the trigger
    wait_s: float = 0.0  # of the stall: the prepare still running at the trigger (SIMULATED s)
    aborted: str | None = None  # the error, when the compaction failed
    ineffective: bool = False  # the next prompt was still at or over the trigger
    service_s: float = 0.0  # of the stall: the plugin's request to the service, store lookup included (SIMULATED s)
    carried_lines: int = 0  # summary lines carried from the previous summary
    lines: int = 0  # summary lines


@dataclass
class Prepared:
    """An ahead-of-time compaction that ran while the agent went on."""

    prefix: list  # the pruned context messages it covered
    previous: str | None  # the previous summary it was incremental on
    result: Any  # its CompactionResult
    gpu_s: float  # its GPU time (SIMULATED s)
    wait_s: float  # how long it outlasted the agent's turns up to the trigger (SIMULATED s)


@dataclass
class SessionRun:
    """One session in one mode."""

    mode: str  # sync | ahead | hermes
    window: int  # the agent's window (tokens)
    trigger: int  # Hermes's trigger (tokens)
    peak_prompt: int = 0  # largest prompt the agent sent (tokens)
    requests: int = 0  # agent requests
    compactions: list = field(default_factory=list)  # Compaction records
    prune_only: int = 0  # triggers with nothing to summarize (pruning alone)
    prepares: int = 0  # ahead-of-time compactions run
    wasted_gpu_s: float = 0.0  # GPU time of prepares never reused (SIMULATED s)

    def summary(self) -> dict:
        done = [c for c in self.compactions if not c.aborted]
        stalls = [c.stall_s for c in done]
        gpu = sum(c.gpu_s for c in self.compactions) + self.wasted_gpu_s
        lines = sum(c.lines for c in done)
        return {"mode": self.mode, "window": self.window, "trigger": self.trigger, "peak_prompt": self.peak_prompt,
                "over_window": self.peak_prompt > self.window, "requests": self.requests,
                "compactions": len(self.compactions), "aborted": sum(1 for c in self.compactions if c.aborted),
                "ineffective": sum(1 for c in self.compactions if c.ineffective), "prune_only": self.prune_only,
                "stall_median_s": statistics.median(stalls) if stalls else None,
                "stall_max_s": max(stalls) if stalls else None, "gpu_s": gpu, "wasted_gpu_s": self.wasted_gpu_s,
                "wasted_share": self.wasted_gpu_s / gpu if gpu else 0.0, "prepares": self.prepares,
                "prepares_reused": sum(1 for c in self.compactions if c.prepared),
                "prepares_applied": sum(1 for c in self.compactions if c.applied),
                "carried_share": sum(c.carried_lines for c in done) / lines if lines else 0.0,
                "stalls_s": stalls, "records": [asdict(c) for c in self.compactions]}


def agent_label(server: str, path: str, body: dict) -> tuple[str | None, str | None]:
    """Simulation labeler: the agent's chat completions are ``agent``; the rest is compaction work."""
    return None, ("agent" if path == CHAT else None)


def compaction_gpu_s(report: dict) -> float:
    """GPU seconds of a run's passes, each shared out over its requests, the agent's share left out."""
    roles = {r.seq: r.role for r in report["requests"]}
    total = 0.0
    for p in report["passes"]:
        if p.requests:
            ours = sum(1 for seq in p.requests if roles.get(seq) != "agent")
            total += (p.end - p.start) * ours / len(p.requests)
    return total


def carried(result: Any) -> tuple[int, int]:
    """``(carried lines, lines)`` of a result's slots."""
    lines = [line for s in getattr(result, "slots", []) for line in s.lines]
    return sum(1 for line in lines if getattr(line.origin, "value", line.origin) == "carried"), len(lines)


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


class Replay:
    """Replays sessions on one simulation; ``compact(method, messages, previous) -> CompactionResult``."""

    def __init__(self, sim, target, compact: Callable[..., Any], tokens: Callable[[dict], int]):
        self.sim, self.target, self.compact, self.tokens = sim, target, compact, tokens  # servers, method, counts
        sim.labeler = agent_label

    def _alone(self, method: str, messages: list[dict], previous: str | None) -> tuple[Any, float, float]:
        result, report = self.sim.run(lambda: self.compact(method, messages, previous), keep_cache=True)
        return result, report["e2e_s"], compaction_gpu_s(report)

    def _prepare(self, step: sp.Step, bodies: list[dict]) -> Prepared | None:
        raw = sp.prefix(step)
        if not raw:
            return None
        box: dict = {}

        def prepare():
            box["result"] = self.compact("speccompact", sp.wire(sp.paired(raw)), step.previous)
            box["done"] = self.sim.clock

        def both():
            worker = threading.Thread(target=prepare, name="sim-prepare", daemon=True)
            worker.start()
            for body in bodies:
                self.target._request("POST", CHAT, body)
            agent_done = self.sim.clock
            worker.join()
            return agent_done

        agent_done, report = self.sim.run(both, keep_cache=True)
        if "result" not in box:
            return None
        return Prepared(raw, step.previous, box["result"], compaction_gpu_s(report), max(0.0, box["done"] - agent_done))

    def _lookahead(self, ctx: list[dict], rest: list[dict], trigger: int) -> list[dict]:
        """The agent's requests after ``ctx`` up to the one that reaches the trigger (no compaction between)."""
        ctx, bodies = list(ctx), []
        for m in rest:
            if m.get("role") == "assistant":
                prompt = sum(self.tokens(x) for x in ctx)
                bodies.append(chat_body(ctx, self.tokens(m)))
                if prompt >= trigger:
                    break
            ctx.append(m)
        return bodies

    def run(self, session: list[dict], policy: sp.Policy, mode: str) -> SessionRun:
        self.sim.run(lambda: None)  # fresh caches for every session and mode
        out, tok = SessionRun(mode, policy.window, policy.trigger), self.tokens
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
                prepared = self._prepare(sp.plan(ctx, tok, policy, first),
                                         self._lookahead(ctx, session[idx + 1:], policy.trigger))
                out.prepares += prepared is not None
            if prompt < policy.trigger:
                continue
            step = sp.plan(ctx, tok, policy, first)
            mid = sp.middle(step)
            if not mid:
                ctx, out.prune_only = step.ctx, out.prune_only + 1
                continue
            rec = Compaction(idx, prompt, len(mid))
            try:
                result = self._compact(step, mid, prepared, mode, rec, out, policy)
            except Exception as exc:  # noqa: BLE001 - an aborted compaction is a result, the session goes on
                rec.aborted, ctx = f"{type(exc).__name__}: {exc}"[:300], step.ctx
            else:
                rec.carried_lines, rec.lines = carried(result)
                if rec.applied:
                    step.end = step.start + len(prepared.prefix)
                ctx, first = sp.assemble(step, result.summary), False
            prepared = None
            out.compactions.append(rec)
            last = rec
        if prepared is not None:
            out.wasted_gpu_s += prepared.gpu_s
        return out

    def _hop(self, messages: list[dict], session: bool) -> float:
        """:func:`service_hop_s` of the plugin's compact request carrying ``messages``."""
        return service_hop_s(sp.wire(messages), sum(self.tokens(m) for m in messages), session)

    def _compact(self, step: sp.Step, mid: list[dict], prepared: Prepared | None, mode: str, rec: Compaction,
                 out: SessionRun, policy: sp.Policy) -> Any:
        if prepared is not None:
            cut = step.start + len(prepared.prefix)
            now = step.ctx[step.start:cut]
            if sp.wire(now) == sp.wire(prepared.prefix) and step.previous == prepared.previous:
                rest = sp.paired(step.ctx[cut:step.end])
                rec.prepared, rec.wait_s, rec.gpu_s = True, prepared.wait_s, prepared.gpu_s
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
                result, e2e, gpu = self._alone("speccompact", sp.wire(rest), prepared.result.summary)
                rec.stall_s, rec.gpu_s = prepared.wait_s + rec.service_s + e2e, rec.gpu_s + gpu
                return result
            out.wasted_gpu_s += prepared.gpu_s
        result, e2e, rec.gpu_s = self._alone(MODES[mode], sp.wire(mid), step.previous)
        rec.service_s = self._hop(mid, session=mode == "ahead") if mode != "hermes" else 0.0
        rec.stall_s = e2e + rec.service_s
        return result
