"""One-clock simulation of a SpecCompact deployment (SIMULATED timings).

The project's real programs (``programs.py`` slot streams, the baselines,
SJC) run unchanged on sglang's real interpreter and threads; only their
transport is replaced: :class:`SimulatedEndpoint` is a
:class:`~sgl_speccompact.endpoint.SpecCompactEndpoint` whose ``_request``
hands each body to an in-process :class:`SimServer`.  A server reuses the
emulator's request handling (sglang's own ``GenerateReqInput`` /
``SamplingParams`` validation in :mod:`.frontend`, the radix tree, the
policy, the finish checks and logprobs of :mod:`.scheduler`), so every
request shape the engine sends (batched ``text`` lists, ``input_ids``,
``n`` > 1 samples) is served as the HTTP emulator serves it.

Method: a conservative discrete-event simulation on ONE virtual clock.

* A client thread that sends a request blocks on its answer.  Virtual time
  does not move while any client thread can still run: the monitor (the
  thread that called :meth:`Simulation.run`) advances it only at
  quiescence, when every thread started by the run is blocked
  (:mod:`.quiescence`, an exact test on the threads' frames; no real-time
  grace period).  A run that cannot make progress for ``stall_s`` real
  seconds raises :class:`SimulationStalled` with every thread's stack.
* Requests are stamped with the virtual time at which they were issued, the
  current clock.  Requests issued at one instant are ordered by
  ``(server, path, canonical JSON body)``, so thread timing cannot change
  the order: the same seed gives the same event log, bit for bit.
  Identical bodies issued at one instant (e.g. two slots counting the same
  drafted lines) cannot be told apart, so they are answered together, when
  the last of them is done.
* A request reaches its server's tokenizer process ``o_req`` after it was
  issued; the tokenizer (one per server, serial) spends
  ``tokens / rate`` on each item; the item then joins the scheduler's
  waiting queue.  ``n`` > 1 sends one prefill-only warm-up per text first and
  the samples when it finishes (sglang's TokenizerManager).
* Each GPU runs one forward pass at a time; a server with work starts its
  next batch as soon as its GPU is free (``two-gpu``: one GPU per server;
  ``one-gpu``: the two servers alternate when both have work).  A pass
  over a batch takes ``CostModel.forward_s`` of its shapes; requests that
  finish in it are answered at its end.
* Events at one instant are all applied before any pass starts.  Between
  answers the simulator never waits on real time, so results do not depend
  on the machine's load.

Every run checks the invariants of :mod:`.timeline` (busy time vs
end-to-end, critical path reconstructible).
"""

from __future__ import annotations

import copy
import hashlib
import heapq
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .cost import CostModel, Deployment, Scheduling
from .frontend import BadRequest, Frontend, ServedModel, parse_generate
from .jobs import Job, LogprobRequest
from .model import EmulatedModel, EmulatorError
from .quiescence import ThreadWatch
from .radix import RadixTree
from .scheduler import Batch, Scheduler
from .timeline import PassRecord, RequestRecord, check

STALL_S = 60.0  # real seconds without quiescence before a run is declared stuck
POLL_S = 0.0005  # real seconds between quiescence checks


class SimulationStalled(EmulatorError):
    """No client thread progressed for ``stall_s`` real seconds, or all wait on nothing."""

    code = "simulation_stalled"


class SimServer:
    """One simulated SGLang server: frontend, scheduler, tokenizer process, cost model."""

    def __init__(self, name: str, model: EmulatedModel, served: ServedModel, cost: CostModel,
                 scheduling: Scheduling = Scheduling(), radix_capacity_tokens: int | None = None):
        self.name, self.model, self.served, self.cost, self.scheduling = name, model, served, cost, scheduling
        self.tree = RadixTree(radix_capacity_tokens)
        self.sched = Scheduler(model, self.tree, max_prefill_tokens=scheduling.max_prefill_tokens,
                               chunked_prefill_size=scheduling.chunked_prefill_size,
                               schedule_policy=scheduling.schedule_policy,
                               request_overhead_s=cost.request_overhead_s)
        self.frontend = Frontend(model, served)
        self.gpu = 0  # index of its GPU, set by the Simulation
        self.tokenizer_free = 0.0  # when its tokenizer process is next idle, s
        self.in_pass = False  # a forward pass of this server is running

    def model_info(self) -> dict:
        from .api import _model_info

        return _model_info(self.served)


@dataclass
class _Ticket:
    """A request in flight: its jobs, their outputs and the client's wait."""

    server: SimServer
    path: str
    body: dict
    jobs: list[Job] = field(default_factory=list)
    single: bool = True
    results: list = field(default_factory=list)
    left: int = 0
    response: Any = None
    error: Exception | None = None
    record: RequestRecord | None = None
    bundle: list = field(default_factory=list)  # identical bodies issued at the same instant
    ready: bool = False  # answered by its server (delivered once its whole bundle is)
    done: threading.Event = field(default_factory=threading.Event)


class Simulation:
    """Simulated servers on one virtual clock.

    Parameters
    ----------
    servers
        ``{name: SimServer}``.
    deployment
        ``two-gpu`` (one GPU per server) or ``one-gpu`` (all share one).
    stall_s
        Real seconds without quiescence before :class:`SimulationStalled`.

    Attributes
    ----------
    labeler
        Optional ``labeler(server, path, body) -> (lane, role)`` that names
        each request in the event log (e.g. its slot and what it is for).
    """

    labeler: Callable[[str, str, dict], tuple[str | None, str | None]] | None = None

    def __init__(self, servers: dict[str, SimServer], deployment: Deployment, stall_s: float = STALL_S):
        self.servers, self.deployment, self.stall_s = servers, deployment, stall_s
        for i, s in enumerate(servers.values()):
            s.gpu = 0 if deployment.shared_gpu else i
        self.gpus = sorted({s.gpu for s in servers.values()})
        self._cv = threading.Condition()
        self._active = False
        self.reset()

    def reset(self) -> None:
        """Clock to 0, empty caches, logs and counters (between runs)."""
        self.clock = 0.0
        self.requests: list[RequestRecord] = []
        self.passes: list[PassRecord] = []
        self._heap: list = []
        self._events = 0
        self._epoch: list[_Ticket] = []
        self._tickets: list[_Ticket] = []  # admitted this run
        self._owner: dict[int, _Ticket] = {}
        self._gpu_free = {g: 0.0 for g in self.gpus}
        self._gpu_last = {g: None for g in self.gpus}
        for s in self.servers.values():
            s.tree.reset()
            s.sched.reset_stats()
            s.tokenizer_free, s.in_pass = 0.0, False

    def endpoint(self, server: str, **kw) -> "SimulatedEndpoint":
        """A :class:`SimulatedEndpoint` on ``server`` (``kw``: SpecCompactEndpoint options)."""
        return SimulatedEndpoint(self, server, **kw)

    # ------------------------------------------------------------------ running

    def run(self, fn: Callable[[], Any]) -> tuple[Any, dict]:
        """Run ``fn`` on a client thread from virtual time 0; ``(its result, report)``.

        The report holds ``e2e_s``, ``busy_s`` per server, ``gpu_busy_s`` and
        the event log (``requests``, ``passes``).  Raises what ``fn`` raised,
        :class:`SimulationStalled`, or :class:`~.timeline.InvariantViolation`.
        """
        self.reset()
        box: dict = {}

        def client():
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
                box["error"] = exc

        watch = ThreadWatch()
        thread = threading.Thread(target=client, name="sim-client", daemon=True)
        self._active = True
        try:
            with watch:
                thread.start()
                self._loop(watch, thread)
        except BaseException:
            self._abort()
            raise
        finally:
            self._active = False
        if "error" in box:
            raise box["error"]
        end = self.clock
        report = {"e2e_s": end, **check(self.requests, self.passes, end, list(self.servers), self.gpus),
                  "requests": self.requests, "passes": self.passes}
        return box.get("value"), report

    def _loop(self, watch: ThreadWatch, client: threading.Thread) -> None:
        while True:
            self._wait_quiescent(watch, client)
            with self._cv:
                self._admit_epoch()
            if not client.is_alive():
                return
            if not self._advance():
                raise SimulationStalled("every client thread is blocked and no request is in flight:\n"
                                        + watch.describe())

    def _abort(self) -> None:
        """Fail every unanswered request, so client threads unwind after a simulator error."""
        with self._cv:
            self._active = False
            pending = self._epoch + [t for t in self._tickets if not t.done.is_set()]
            self._epoch = []
        for t in pending:
            t.error = EmulatorError("the simulation was aborted")
            t.done.set()

    def _wait_quiescent(self, watch: ThreadWatch, client: threading.Thread) -> None:
        deadline = time.monotonic() + self.stall_s
        while client.is_alive() and not watch.snapshot():
            if time.monotonic() > deadline:
                raise SimulationStalled(f"no quiescence for {self.stall_s:g} s of real time:\n"
                                        + watch.describe())
            with self._cv:
                self._cv.wait(POLL_S)

    # ------------------------------------------------------------ client side

    def call(self, server: str, method: str, path: str, body: dict | None, url: str):
        """Serve one transport request of a client thread (blocks until answered)."""
        srv = self.servers[server]
        if path in ("/get_model_info", "/model_info"):
            return srv.model_info()
        if path == "/flush_cache":
            return {"flushed": srv.sched.flush()}
        ticket = _Ticket(srv, path, body or {})
        if path == "/generate":
            self._prepare_generate(ticket, url)
        elif path != "/tokenize":
            raise EmulatorError(f"the simulator does not serve {method} {path}")
        with self._cv:
            if not self._active:
                raise EmulatorError(f"{path}: a simulated server answers only inside Simulation.run")
            self._epoch.append(ticket)
            self._cv.notify_all()
        ticket.done.wait()
        if ticket.error is not None:
            raise ticket.error
        return ticket.response

    def _prepare_generate(self, ticket: _Ticket, url: str) -> None:
        from ..endpoint import http_error

        try:
            obj = parse_generate(ticket.body)
            ticket.jobs, ticket.single = ticket.server.frontend.jobs(obj, lambda i: self._sink(ticket, i))
        except BadRequest as exc:
            raise http_error(url, 400, json.dumps(exc.body)) from exc
        except ValueError as exc:
            raise http_error(url, 400, json.dumps({"error": {"message": str(exc)}})) from exc
        ticket.results = [None] * len(ticket.jobs)
        ticket.left = len(ticket.jobs)

    def _sink(self, ticket: _Ticket, index: int):
        def update(out: dict, finished: bool) -> None:
            if finished:
                ticket.results[index] = out
                ticket.left -= 1
                if ticket.left == 0:
                    self._answer_generate(ticket)
        return update

    # ------------------------------------------------------------ monitor side

    def _push(self, t: float, kind: str, payload) -> None:
        self._events += 1
        heapq.heappush(self._heap, (t, self._events, kind, payload))

    def _admit_epoch(self) -> None:
        """Stamp the requests issued at this instant, in canonical order, and send them."""
        epoch, self._epoch = self._epoch, []
        # identical bodies get identical answers, so their relative order does not matter
        keyed = sorted((((t.server.name, t.path, json.dumps(t.body, sort_keys=True, default=str)), i)
                        for i, t in enumerate(epoch)), key=lambda k: k[0])
        bundle, last = [], None
        for (_, _, canonical), i in keyed:
            ticket = epoch[i]
            if (ticket.server.name, ticket.path, canonical) != last:
                bundle, last = [], (ticket.server.name, ticket.path, canonical)
            bundle.append(ticket)
            ticket.bundle = bundle
            self._tickets.append(ticket)
            srv = ticket.server
            rec = RequestRecord(seq=len(self.requests), server=srv.name, path=ticket.path,
                                kind=_kind(ticket), items=len(ticket.jobs), issued=self.clock,
                                digest=hashlib.sha256(canonical.encode()).hexdigest()[:12])
            if self.labeler is not None:
                rec.lane, rec.role = self.labeler(srv.name, ticket.path, ticket.body)
            ticket.record = rec
            self.requests.append(rec)
            ready = self.clock + srv.cost.request_overhead_s
            if ticket.path == "/tokenize":
                ids = [srv.model.encode(p) for p in _prompts(ticket.body)]
                rec.tokenized = sum(map(len, ids))
                srv.tokenizer_free = max(srv.tokenizer_free, ready) + srv.scheduling.tokenize_s(rec.tokenized)
                ticket.response = {"tokens": ids if isinstance(ticket.body.get("prompt"), list) else ids[0],
                                   "count": [len(i) for i in ids], "max_model_len": srv.served.context_length}
                self._push(srv.tokenizer_free, "answer", ticket)
                continue
            for job in ticket.jobs:
                job.sim_arrival = self.clock
                self._owner[id(job)] = ticket
            for group in _by_text(ticket.jobs):
                rec.tokenized += len(group[0].input_ids)
                srv.tokenizer_free = max(srv.tokenizer_free, ready) + srv.scheduling.tokenize_s(len(group[0].input_ids))
                first = group if len(group) == 1 else [self._warmup(ticket, group)]
                self._push(srv.tokenizer_free, "arrive", (srv, first))

    def _warmup(self, ticket: _Ticket, samples: list[Job]) -> Job:
        """sglang's n > 1 path: a prefill-only copy first, the samples once it is answered."""
        head = samples[0]
        sampling = copy.copy(head.sampling)
        sampling.max_new_tokens = 0

        def release(out: dict, finished: bool) -> None:
            if finished:
                ticket.server.sched.add(samples)

        job = Job(rid=f"{head.rid}-warmup", prompt=head.prompt, input_ids=head.input_ids, sampling=sampling,
                  lora_path=head.lora_path, namespace=head.namespace, logprobs=LogprobRequest(), stream=False,
                  on_update=release, sim_arrival=self.clock)
        self._owner[id(job)] = ticket
        ticket.record.items += 1
        return job

    def _advance(self) -> bool:
        """Apply events in time order until a client is answered; False when none is pending."""
        while True:
            if not (self._heap and self._heap[0][0] <= self.clock):
                self._start_passes()
            if not self._heap:
                return False
            self.clock = now = self._heap[0][0]
            woke = False
            while self._heap and self._heap[0][0] == now:
                _, _, kind, payload = heapq.heappop(self._heap)
                woke |= self._apply(kind, payload)
            if woke:
                return True

    def _apply(self, kind: str, payload) -> bool:
        if kind == "arrive":
            srv, jobs = payload
            for job in jobs:
                rec = self._owner[id(job)].record
                rec.arrived = max(rec.arrived or 0.0, self.clock)
            srv.sched.add(jobs)
            return False
        if kind == "answer":
            self._deliver(payload)
            return True
        srv, batch, rec = payload
        srv.in_pass = False
        srv.sched.run(batch)
        finished = srv.sched.settle(batch, now=self.clock)
        return any(self._owner[id(j)].done.is_set() for j in finished if id(j) in self._owner)

    def _start_passes(self) -> None:
        for gpu in self.gpus:
            if self._gpu_free[gpu] > self.clock:
                continue
            ready = [s for s in self.servers.values() if s.gpu == gpu and not s.in_pass and s.sched.busy()]
            if len(ready) > 1:  # time-sharing: the server that did not run last goes first
                ready.sort(key=lambda s: s is self._gpu_last[gpu])
            for srv in ready:
                batch = srv.sched.next_batch()
                if batch is not None:
                    self._start(srv, batch)
                    break

    def _start(self, srv: SimServer, batch: Batch) -> None:
        dt = srv.cost.forward_s(batch.shapes)
        owners = list(dict.fromkeys(self._owner[id(j)].record.seq for j in batch.jobs if id(j) in self._owner))
        rec = PassRecord(id=len(self.passes), server=srv.name, gpu=srv.gpu, kind=batch.kind, start=self.clock,
                         end=self.clock + dt, requests=owners, new_tokens=sum(n for _, n in batch.shapes),
                         context_tokens=sum(c + n for c, n in batch.shapes))
        self.passes.append(rec)
        for seq in owners:
            r = self.requests[seq]
            r.passes.append(rec.id)
            r.service_s += dt
            if r.first_pass is None:
                r.first_pass = self.clock
        srv.sched.counters["simulated_busy_s"] += dt
        srv.in_pass = True
        self._gpu_free[srv.gpu] = rec.end
        self._gpu_last[srv.gpu] = srv
        self._push(rec.end, "pass", (srv, batch, rec))

    def _answer_generate(self, ticket: _Ticket) -> None:
        """All jobs finished (inside a pass's settle): shape the answer as the HTTP route does."""
        from ..endpoint import http_error

        rec = ticket.record
        for out in ticket.results:
            meta = out["meta_info"]
            meta.pop("response_sent_to_client_ts", None)
            rec.prompt_tokens += int(meta.get("prompt_tokens") or 0)
            rec.cached_tokens += int(meta.get("cached_tokens") or 0)
            rec.completion_tokens += int(meta.get("completion_tokens") or 0)
            reason = meta.get("finish_reason") or {}
            if reason.get("type") == "abort" and ticket.error is None:
                ticket.error = http_error(f"simulated {ticket.server.name}", reason.get("status_code") or 500,
                                          reason.get("message", ""))
        ticket.response = ticket.results[0] if ticket.single else ticket.results
        self._deliver(ticket)

    def _deliver(self, ticket: _Ticket) -> None:
        ticket.ready = True
        if not all(t.ready for t in ticket.bundle):
            return
        for t in ticket.bundle:
            t.record.finished = self.clock
            if t.path == "/generate":
                for out in t.results:
                    out["meta_info"]["e2e_latency"] = self.clock - t.record.issued  # SIMULATED, deterministic
            t.done.set()


def _prompts(body: dict) -> list[str]:
    prompt = body.get("prompt")
    return [prompt] if isinstance(prompt, str) else list(prompt or [])


def _by_text(jobs: list[Job]) -> list[list[Job]]:
    """Jobs grouped by prompt (one group per text; a group holds its n samples)."""
    groups: list[list[Job]] = []
    for job in jobs:
        if job.sample == 0:
            groups.append([job])
        else:
            groups[-1].append(job)
    return groups


def _kind(ticket: _Ticket) -> str:
    if ticket.path == "/tokenize":
        return "tokenize"
    body = ticket.body
    if "token_ids_logprob" in body:
        return "judge"
    params = body.get("sampling_params") or {}
    params = params[0] if isinstance(params, list) and params else params
    return "prefill" if isinstance(params, dict) and params.get("max_new_tokens") == 0 else "generate"


def _endpoint_base():
    from ..endpoint import SpecCompactEndpoint

    return SpecCompactEndpoint


class SimulatedEndpoint(_endpoint_base()):
    """``SpecCompactEndpoint`` whose transport is a simulated server on the simulation's clock.

    Everything above ``_request`` (judging, LoRA, chat template, errors) is
    the real endpoint's code.
    """

    def __init__(self, sim: Simulation, server: str, **kw):
        self.sim, self.server_name = sim, server
        super().__init__(f"http://simulated-{server}", **kw)

    def _request(self, method: str, path: str, body: dict | None = None, base: str | None = None):
        return self.sim.call(self.server_name, method, path, body, base or self.base_url)


def build_simulation(tokenizer_path: str, policies: dict, costs: dict[str, CostModel], deployment: Deployment,
                     scheduling: Scheduling = Scheduling(), stall_s: float = STALL_S) -> Simulation:
    """A :class:`Simulation` of ``{name: policy}`` servers sharing one tokenizer directory.

    ``costs[name]`` gives each server's model (``model_path`` is the model's name).
    """
    from .server import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_path)
    ctx = int(min(getattr(tokenizer, "model_max_length", 32768), 1 << 24))
    servers = {}
    for name, policy in policies.items():
        model = EmulatedModel(policy, tokenizer)
        path = costs[name].model.name
        servers[name] = SimServer(name, model, ServedModel(path, tokenizer_path, path, ctx, None), costs[name],
                                  scheduling)
    return Simulation(servers, deployment, stall_s)
