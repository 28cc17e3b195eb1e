"""One latency-bench run: its cases, its labelled event log and its critical-path breakdown (SIMULATED).

* **Cases** (:func:`cases`): a slot method (``speccompact``, ``target_self``)
  runs once per layout (``classic``: our own rendering; ``agent``: the agent's
  chat-templated conversation).  Hermes-style runs once per ``hermes_tokens``
  value, always on its own fresh prompt, plus ``hermes@slots`` (as many
  tokens as Target-self wrote on the same draw) when Target-self runs.
* **Breakdown** (:func:`breakdown`): the critical path's time split into
  :data:`PARTS` (they sum to the end-to-end) and its waiting split; the last
  part, ``host_cpu``, is the compacting process's CPU (MEASURED (CPU) by
  ``bench/host.py``, :mod:`bench.sim.host_cpu`), added after the clock's end.
* **Scenario** ``agent-session`` (:func:`run_session`): the agent's session
  runs on the simulated target before the compaction, in a run of its own;
  its time is NOT part of the compaction's end-to-end.
"""

from __future__ import annotations

import re
import time

from .runs import with_layout

SLOT_METHODS = ("speccompact", "target_self")  # methods with a shared target prefix, and so a layout
LAYOUTS = ("classic", "agent")
PARTS = ("before_fork", "drafting", "verifying", "repairing", "generating", "waiting", "after_join", "host_cpu")
WAIT_PARTS = ("to_scheduler", "queued", "other_requests")  # what "waiting" is made of
SERVICE_PART = {"draft": "drafting", "judge": "verifying", "repair": "repairing", "generate": "generating"}
SESSION_NOTE = ("the agent's session (every assistant turn as one chat completion on the simulated target) runs "
                "before each compaction and is NOT part of its end-to-end")


def cases(methods: list[str], layouts: list[str], hermes_tokens: list[int], hermes_slots: bool = True) -> list[dict]:
    """``{"method", "layout", "hermes_tokens", "label"}`` for every run of one history.

    Hermes-style at the slot methods' length (``hermes@slots``) comes after
    Target-self, whose output length it copies.

    >>> [c["label"] for c in cases(["hermes", "speccompact"], ["classic", "agent"], [1200, 2000])]
    ['hermes@1200', 'hermes@2000', 'speccompact/classic', 'speccompact/agent']
    >>> [c["label"] for c in cases(["hermes", "target_self"], ["classic"], [2000])]
    ['hermes', 'target_self', 'hermes@slots']
    """
    out = []
    for m in methods:
        if m == "hermes":
            out += [{"method": m, "layout": "classic", "hermes_tokens": n,
                     "label": f"hermes@{n}" if len(hermes_tokens) > 1 else m} for n in hermes_tokens]
        elif m in SLOT_METHODS:
            out += [{"method": m, "layout": lay, "hermes_tokens": None,
                     "label": f"{m}/{lay}" if len(layouts) > 1 else m} for lay in layouts]
        else:
            out.append({"method": m, "layout": "classic", "hermes_tokens": None, "label": m})
    if hermes_slots and "hermes" in methods and "target_self" in methods:
        out.append({"method": "hermes", "layout": "classic", "hermes_tokens": None, "label": "hermes@slots"})
    return out


def slot_tokens(got: dict) -> int | None:
    """Summary tokens Target-self wrote in this draw (its first layout), for ``hermes@slots``."""
    row = next((r for lab, r in got.items() if lab.startswith("target_self") and "error" not in r), None)
    return row.get("summary_tokens") if row else None


def runner_kwargs(case: dict, tokenizer_path: str) -> dict:
    """Layout arguments of a case (the agent layout renders with the target's tokenizer), for
    :func:`~bench.harness.runs.with_layout`."""
    if case["method"] not in SLOT_METHODS:
        return {}
    if case["layout"] == "agent":
        return {"layout": "agent", "chat_template": tokenizer_path}
    return {"layout": "classic"}


def labeler():
    """``(server, path, body) -> (lane, role)`` for the event log: the slot and what the request is for."""
    from sgl_speccompact.core.prompts import DRAFTER_SLOT_REQUEST, TARGET_SLOT_REQUEST

    def pattern(template):
        head, _, tail = template.partition("{slot}")
        return re.escape(head) + r"([a-z][a-z0-9_]*)" + re.escape(tail[:8])

    slot_re = re.compile(f"{pattern(TARGET_SLOT_REQUEST)}|{pattern(DRAFTER_SLOT_REQUEST)}")

    def label(server: str, path: str, body: dict):
        if path != "/generate":
            return None, "tokenize"
        texts = body.get("text")
        text = texts[0] if isinstance(texts, list) and texts else (texts or "")
        found = slot_re.findall(text) if isinstance(text, str) else []
        lane = next((g for g in found[-1] if g), None) if found else None
        sp = body.get("sampling_params") or {}
        sp = sp[0] if isinstance(sp, list) and sp else sp
        stop = sp.get("stop") or []
        if "token_ids_logprob" in body:
            role = "judge"
        elif sp.get("max_new_tokens") == 0:
            role = "prefill"
        elif server == "drafter":
            role = "draft"
        elif "\n" in (stop if isinstance(stop, list) else [stop]):
            role = "repair"
        else:
            role = "generate"
        return lane, role

    return label


def _wait(r, whole: bool) -> dict:
    """Waiting of one critical-path request: o_req + tokenizer, scheduler queue, or (``whole``) all of it."""
    if whole:  # a request the slot waits on (token counting, a prefill): its whole latency
        return {"to_scheduler": 0.0, "queued": 0.0, "other_requests": r.latency}
    to_sched = (r.arrived - r.issued) if r.arrived is not None else 0.0
    return {"to_scheduler": to_sched, "queued": r.latency - r.service_s - to_sched, "other_requests": 0.0}


def breakdown(report: dict) -> dict:
    """The critical path's time split into PARTS (they sum to the end-to-end), and its slot.

    ``waiting_split`` divides ``waiting`` into WAIT_PARTS: ``to_scheduler``
    (o_req, client cost, the tokenizer's queue and its encoding),
    ``queued`` (in the scheduler, beyond the request's own forward passes)
    and ``other_requests`` (requests the slot waits on whole).
    """
    from bench.sim.timeline import critical_path

    end = report["e2e_device_s"]  # the clock's end; the host's CPU comes after it
    chain = critical_path(report["requests"], end)
    parts = dict.fromkeys(PARTS, 0.0)
    parts["host_cpu"] = report["host_cpu_s"]
    split = dict.fromkeys(WAIT_PARTS, 0.0)

    def add(r, whole):
        for k, v in _wait(r, whole).items():
            split[k] += v
        parts["waiting"] += r.latency if whole else r.latency - r.service_s

    slotted = [i for i, r in enumerate(chain) if r.lane and r.role != "prefill"]
    first, last = (slotted[0], slotted[-1]) if slotted else (0, len(chain) - 1)
    if slotted:
        parts["before_fork"] = chain[first].issued
    for r in chain[first:last + 1]:
        part = SERVICE_PART.get(r.role)
        if part:
            parts[part] += r.service_s
        add(r, not part)
    if slotted:
        parts["after_join"] = end - chain[last].finished
    return {"critical_slot": chain[last].lane if slotted else None, "parts": parts, "waiting_split": split,
            "chain": [r.seq for r in chain]}


def server_numbers(report: dict, server: str) -> dict:
    """Requests, tokens and busy time of one server in one run."""
    reqs = [r for r in report["requests"] if r.server == server and r.path == "/generate"]
    return {"requests": len(reqs), "prompt_tokens": sum(r.prompt_tokens for r in reqs),
            "cached_tokens": sum(r.cached_tokens for r in reqs),
            "computed_tokens": sum(r.prompt_tokens - r.cached_tokens for r in reqs),
            "completion_tokens": sum(r.completion_tokens for r in reqs),
            "tokenize_requests": sum(r.server == server and r.path == "/tokenize" for r in report["requests"]),
            "tokenized_tokens": sum(r.tokenized for r in report["requests"] if r.server == server),
            "busy_s": report["busy_s"][server]}


def first_target(report: dict) -> dict:
    """Prompt and cached tokens of the compaction's first target ``/generate`` request."""
    first = next((r for r in report["requests"] if r.server == "target" and r.path == "/generate"), None)
    return {"prompt_tokens": first.prompt_tokens if first else None,
            "cached_tokens": first.cached_tokens if first else None,
            "role": first.role if first else None}


def run_session(sim, messages: list[dict]) -> dict:
    """The agent's session on the simulated target, in a run of its own (fresh caches); its numbers."""
    from bench.sim.session import replay_session

    target = sim.endpoint("target")
    numbers, report = sim.run(lambda: replay_session(lambda path, body: target._request("POST", path, body),
                                                     messages))
    return {**numbers, "session_s": report["e2e_s"]}


class CaseRunner:
    """Runs one case on a simulation and returns its row fields."""

    def __init__(self, args, runner, tokenizer: str):
        self.args, self.runner, self.tokenizer = args, runner, tokenizer
        self.config = {"agent_context_tokens": args.agent_context_tokens, **(args.config_dict or {})}
        self._endpoints: dict = {}
        self._tokens: dict = {}
        self.synthetic: dict = {}  # (tokens, seed) -> synthetic history, built once per draw

    def history_tokens(self, traj, count) -> int:
        """Tokens of the history's message texts (the drafter's reading length)."""
        key = (traj.path, id(traj.messages))
        if key not in self._tokens:
            text = "\n".join(m.get("content") if isinstance(m.get("content"), str) else str(m.get("content"))
                             for m in traj.messages)
            self._tokens[key] = count(text)
        return self._tokens[key]

    def endpoints(self, sim):
        if id(sim) not in self._endpoints:
            self._endpoints[id(sim)] = (sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter"))
            if getattr(self.args, "local_tokenizer", False):  # the client tokenizes: no /tokenize on the clock
                for ep in self._endpoints[id(sim)]:
                    ep.use_local_tokenizer()
            sim.labeler = labeler()
        return self._endpoints[id(sim)]

    def run(self, sim, case: dict, traj, wl, tp2: bool, history_tokens: int = 0) -> dict:
        """The row fields of one run (or ``error``).

        ``history_tokens`` (:meth:`history_tokens`) sizes the host's CPU of the
        compaction when ``args.host_cpu_model`` holds a
        :class:`~bench.sim.host_cpu.HostCpuModel` (None: left out).
        """
        args, (target, drafter) = self.args, self.endpoints(sim)
        host = getattr(args, "host_cpu_model", None)
        host_s = host.seconds(case["method"], history_tokens) if host is not None else 0.0
        row = {"method": case["method"], "label": case["label"], "layout": case["layout"],
               "hermes_tokens": case["hermes_tokens"], "target_tp": 2 if tp2 else 1,
               "realized_acceptance": round(wl.acceptance, 4)}
        if case["hermes_tokens"]:
            wl.hermes_tokens = case["hermes_tokens"]  # between runs: no request in flight
        kw = runner_kwargs(case, self.tokenizer)
        session = args.scenario == "agent-session"
        from bench.sim.simulator import SimulationStalled
        from bench.sim.workload import decisions_digest

        for attempt in (1, 2):
            try:
                t0 = time.perf_counter()
                if session:
                    row["session"] = run_session(sim, traj.messages)
                result, report = sim.run(lambda: self.runner(
                    case["method"], with_layout(traj.messages, **kw), target=target, drafter=drafter,
                    config=self.config, source_judge=args.source_judge), keep_cache=session, host_cpu_s=host_s)
                break
            except SimulationStalled as exc:  # the harness, not the method: one more try from a fresh clock
                row["stalled"] = f"{exc}"[:3000]
                if attempt == 2:
                    row["error"] = f"SimulationStalled: {exc}"[:3000]
                    return row
            except Exception as exc:  # noqa: BLE001 - one failed row does not end the sweep
                row["error"] = f"{type(exc).__name__}: {exc}"[:3000]
                return row
        one_gpu = len(report["gpu_busy_s"]) == 1
        row.update(e2e_s=report["e2e_s"], e2e_device_s=report["e2e_device_s"], host_cpu_s=report["host_cpu_s"],
                   real_s=time.perf_counter() - t0, summary_tokens=result.summary_tokens,
                   judged_acceptance=result.stats.acceptance_rate, decisions=decisions_digest(result),
                   busy_ok=all(b <= report["e2e_device_s"] + 1e-9 for b in report["busy_s"].values()),
                   gpu_busy_s=report["gpu_busy_s"][0] if one_gpu else None, first_target=first_target(report),
                   agent_tokens=result.stats.agent_tokens, agent_cached_tokens=result.stats.agent_cached_tokens,
                   **breakdown(report), **{s: server_numbers(report, s) for s in ("target", "drafter")})
        return row
