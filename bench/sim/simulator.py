"""One-clock simulation of a SpecCompact deployment (SIMULATED timings).

The project's real programs (``programs`` slot streams, the baselines,
SJC) run unchanged on sglang's real interpreter and threads; only their
transport is replaced: :class:`SimulatedEndpoint` is a
:class:`~sgl_speccompact.backends.endpoint.SpecCompactEndpoint` whose ``_request``
hands each body to an in-process :class:`SimServer`.  A server reuses the
emulator's request handling (sglang's own ``GenerateReqInput`` /
``SamplingParams`` validation in :mod:`~sgl_speccompact.emulator.frontend`, the radix tree, the
policy, the finish checks and logprobs of :mod:`~sgl_speccompact.emulator.scheduler`), so every
request shape the engine sends (batched ``text`` lists, ``input_ids``,
``n`` > 1 samples) is served as the HTTP emulator serves it.

Method: a conservative discrete-event simulation on ONE virtual clock.

* A client thread that sends a request blocks on its answer (a condition
  over the simulator's lock: the monitor it notifies wakes only once the
  client waits).  Virtual time
  does not move while any client thread can still run: the monitor (the
  thread that called :meth:`Simulation.run`) advances it only at
  quiescence, when every thread started by the run is blocked
  (:mod:`.quiescence`, an exact test on the threads' frames; no real-time
  grace period).  A run that stops making progress raises
  :class:`SimulationStalled` with every thread's stack: for ``stall_s``
  real seconds no client thread used CPU time, started or ended and no
  request arrived (a thread blocked in a call the quiescence rules do not
  know), or the threads spent ``busy_cpu_s`` CPU seconds without once
  being quiescent (a busy loop).  A slow or loaded machine is neither: it only
  stretches the real time between quiescent instants.
* Requests are stamped with the virtual time at which they were issued, the
  current clock.  Requests issued at one instant are ordered by
  ``(server, path, canonical JSON body)``, so thread timing cannot change
  the order: the same seed gives the same event log, bit for bit.
  Identical bodies issued at one instant (e.g. two slots counting the same
  drafted lines) cannot be told apart, so they are answered together, when
  the last of them is done.
* A request reaches its server's tokenizer process ``o_req`` after it was
  issued; the tokenizer (one per server, serial) spends
  ``tokens / rate`` on each item given as text (an item given as
  ``input_ids`` skips it, as in sglang's ``TokenizerManager``
  ``_tokenize_one_request``); the item then joins the scheduler's
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

* ``/tokenize`` requests to one server issued at one instant are one
  tokenizer batch (the distinct prompts of all of them, ``o_req`` after
  issue), answered together when it ends and logged as one record: which
  client thread asks for which piece of a shared text depends on thread
  timing (:class:`~sgl_speccompact.backends.token_ids.TokenIdCache`), their union
  does not.  Outside :meth:`Simulation.run` (setting an endpoint up)
  ``/tokenize`` is answered at once, off the clock.

``/v1/chat/completions`` bodies are rendered as the emulator's chat route
renders them (:mod:`~sgl_speccompact.emulator.chat`), then admitted like ``/generate``.  The request
side lives in :mod:`.servers`, the events on the clock in :mod:`.events`.

Every run checks the invariants of :mod:`.timeline` (busy time vs
end-to-end, critical path reconstructible).
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Callable

from sgl_speccompact.emulator.cost import CostModel, Deployment, Scheduling, deployed
from sgl_speccompact.emulator.frontend import ServedModel
from sgl_speccompact.emulator.model import EmulatedModel, EmulatorError
from .quiescence import ThreadWatch
from .events import Events
from .servers import SimServer, Ticket
from .timeline import PassRecord, RequestRecord, check

STALL_S = 60.0  # real seconds without any progress before a run is declared stuck
BUSY_CPU_S = 120.0  # CPU seconds of the client threads without quiescence before a run is declared stuck
POLL_S = 0.002  # real seconds before the first quiescence check when no request arrives
POLL_MAX_S = 0.016  # ... doubling up to this while none arrives
SIM_LORA = "drafter"  # the adapter the "drafter" server has loaded (its lora_path); other servers have no LoRA


class SimulationStalled(EmulatorError):
    """The client threads stopped making progress (see the module doc), or all wait on nothing."""

    code = "simulation_stalled"


class Simulation(Events):
    """Simulated servers on one virtual clock.

    Parameters
    ----------
    servers
        ``{name: SimServer}``.
    deployment
        ``two-gpu`` (one GPU per server) or ``one-gpu`` (all share one).
    stall_s
        Real seconds without progress before :class:`SimulationStalled`.

    Attributes
    ----------
    labeler
        Optional ``labeler(server, path, body) -> (lane, role)`` that names
        each request in the event log (e.g. its slot and what it is for).
    busy_cpu_s
        CPU seconds the client threads may use between two quiescent
        instants before :class:`SimulationStalled` (a busy loop).
    priorities
        ``{role: priority}``: the requests the labeler gives that role carry
        that sglang priority (``--enable-priority-scheduling``: a higher
        value is admitted to prefill first; running requests are never
        preempted, as the simulator models no KV-memory pressure).
    """

    labeler: Callable[[str, str, dict], tuple[str | None, str | None]] | None = None
    busy_cpu_s: float = BUSY_CPU_S
    priorities: dict = {}  # role -> sglang request priority (higher first; empty: every request 0, fcfs)

    def __init__(self, servers: dict[str, SimServer], deployment: Deployment, stall_s: float = STALL_S):
        self.servers, self.deployment, self.stall_s = servers, deployment, stall_s
        self.tokenizer_path = None  # set by build_simulation
        for i, s in enumerate(servers.values()):
            s.gpu = 0 if deployment.shared_gpu else i
        self.gpus = sorted({s.gpu for s in servers.values()})
        self._lock = threading.Lock()  # guards queues and clock; client waits use it too
        self._cv = threading.Condition(self._lock)  # the monitor waits on it
        self._active = False
        self._arrivals = 0  # requests issued so far (under the lock): the monitor's notice that one came
        self._endpoints = weakref.WeakSet()  # SimulatedEndpoints on this simulation
        self.reset()

    def reset(self, keep_cache: bool = False) -> None:
        """Clock to 0, empty logs and counters, and empty caches unless ``keep_cache`` (between runs).

        The endpoints' token-id caches are emptied always: they belong to the client, not the server.
        """
        self.clock = 0.0
        self.requests: list[RequestRecord] = []
        self.passes: list[PassRecord] = []
        self._heap: list = []
        self._events = 0
        self._epoch: list[Ticket] = []
        self._tickets: list[Ticket] = []  # admitted this run
        self._owner: dict[int, Ticket] = {}
        self._gpu_free = {g: 0.0 for g in self.gpus}
        self._gpu_last = {g: None for g in self.gpus}
        for s in self.servers.values():
            if not keep_cache:
                s.tree.reset()
            s.sched.reset_stats()
            s.tokenizer_free, s.in_pass = 0.0, False
        for ep in self._endpoints:  # every run's client starts with a cold token-id cache
            ep.forget_token_ids()

    def endpoint(self, server: str, **kw) -> "SimulatedEndpoint":
        """A :class:`SimulatedEndpoint` on ``server`` (``kw``: SpecCompactEndpoint options)."""
        return SimulatedEndpoint(self, server, **kw)

    # ------------------------------------------------------------------ running

    def run(self, fn: Callable[[], Any], keep_cache: bool = False, host_cpu_s: float = 0.0) -> tuple[Any, dict]:
        """Run ``fn`` on a client thread from virtual time 0; ``(its result, report)``.

        The report holds ``e2e_s``, ``busy_s`` per server, ``gpu_busy_s`` and
        the event log (``requests``, ``passes``).  Raises what ``fn`` raised,
        :class:`SimulationStalled`, or :class:`~.timeline.InvariantViolation`.

        ``host_cpu_s`` is the compacting process's CPU of this run
        (:meth:`.host_cpu.HostCpuModel.seconds`, MEASURED (CPU)), charged on
        the critical path after the clock's end: ``e2e_s`` is
        ``e2e_device_s`` (the clock, the device's passes and the requests'
        overheads) plus ``host_cpu_s``.

        ``keep_cache=True`` keeps the servers' radix trees from the previous
        run (everything else starts afresh): a run that follows an agent's
        session (:mod:`.session`) finds the session's tokens cached, and the
        session's time is not part of this run's clock.
        """
        self.reset(keep_cache)
        box: dict = {}

        def client():
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
                box["error"] = exc
            finally:
                with self._lock:  # the monitor learns at once that the run is over
                    box["done"] = True
                    self._cv.notify()

        watch = ThreadWatch()
        thread = threading.Thread(target=client, name="sim-client", daemon=True)
        self._active = True
        try:
            with watch:
                thread.start()
                self._loop(watch, lambda: "done" not in box)
        except BaseException:
            self._abort()
            raise
        finally:
            self._active = False
        if "error" in box:
            raise box["error"]
        end = self.clock
        report = {"e2e_s": end + host_cpu_s, "e2e_device_s": end, "host_cpu_s": host_cpu_s, **check(self.requests, self.passes, end, list(self.servers), self.gpus),
                  "requests": self.requests, "passes": self.passes}
        return box.get("value"), report

    def _loop(self, watch: ThreadWatch, running: Callable[[], bool]) -> None:
        """Admit and advance at each quiescent instant until ``running()`` (the client's function) is over."""
        while True:
            self._wait_quiescent(watch, running)
            with self._lock:
                self._admit_epoch()
                if not running():
                    return
                woke = self._advance()
            if not woke:
                raise SimulationStalled("every client thread is blocked and no request is in flight:\n"
                                        + watch.describe())

    def _abort(self) -> None:
        """Fail every unanswered request, so client threads unwind after a simulator error."""
        with self._lock:
            self._active = False
            for t in self._epoch + [t for t in self._tickets if not t.done]:
                t.error = EmulatorError("the simulation was aborted")
                t.done = True
                t.cond.notify()
            self._epoch = []

    def _wait_quiescent(self, watch: ThreadWatch, running: Callable[[], bool]) -> None:
        # Looked at when a client thread blocks on its answer (it notifies the monitor; the count of
        # arrivals catches one that came while the monitor was looking), else after a wait that doubles
        # from POLL_S to POLL_MAX_S while nothing arrives: a thread blocked elsewhere (a future, a queue,
        # a join) sends no notice.  Progress is sampled a few times per stall_s; a busy machine only
        # stretches the wait.
        every = self.stall_s / 4
        sample_at, still_since, mark, cpu0 = time.monotonic() + every, None, None, None
        wait = POLL_S
        while True:
            seen = self._arrivals
            if not running() or watch.quiescent():
                return
            now = time.monotonic()
            if now >= sample_at:
                token = (watch.progress(), len(self._epoch))
                cpu = watch.cpu_s()
                cpu0 = cpu if cpu0 is None else cpu0
                if token != mark:
                    mark, still_since = token, now
                elif now - still_since >= self.stall_s:
                    raise SimulationStalled(f"no progress for {self.stall_s:g} s of real time (no client "
                                            "thread used CPU, and none is blocked where it may wait):\n"
                                            + watch.describe())
                if cpu - cpu0 >= self.busy_cpu_s:
                    raise SimulationStalled(f"{cpu - cpu0:.0f} CPU seconds without quiescence (a busy loop?):\n"
                                            + watch.describe())
                sample_at = now + every
            with self._cv:
                if self._arrivals == seen and running():
                    wait = POLL_S if self._cv.wait(wait) else min(2 * wait, POLL_MAX_S)
                else:
                    wait = POLL_S


def _endpoint_base():
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    return SpecCompactEndpoint


class SimulatedEndpoint(_endpoint_base()):
    """``SpecCompactEndpoint`` whose transport is a simulated server on the simulation's clock.

    Everything above ``_request`` (judging, LoRA, chat template, errors) is
    the real endpoint's code.
    """

    def __init__(self, sim: Simulation, server: str, **kw):
        self.sim, self.server_name = sim, server
        super().__init__(f"http://simulated-{server}", **kw)
        sim._endpoints.add(self)
        if not sim._active:  # the tokenizer check is set-up: answered off the clock, never inside a run
            self._token_id_cache()

    def _request(self, method: str, path: str, body: dict | None = None, base: str | None = None):
        return self.sim.call(self.server_name, method, path, body, base or self.base_url,
                             background=self.yield_gate is not None)

    def yielding(self, bound_s: float, poll_s: float | None = None) -> "SimulatedEndpoint":
        """A background view that yields to foreground work on this server, up to ``bound_s`` per request.

        The service's ``with_yield`` view with a
        :class:`~.servers.SimYieldGate` (the same rule, on the clock).
        """
        from .servers import SimYieldGate

        return self.with_yield(SimYieldGate(self.sim, self.server_name, bound_s, poll_s))

    def use_local_tokenizer(self, tokenizer=None) -> None:
        """Tokenize in the client with the server's tokenizer, no ``/tokenize`` request (SIMULATED cost).

        The client's encoding is on the clock: one batch per instant at
        :data:`~..emulator.cost.TOKENIZER_TOKENS_PER_S` (the rate measured
        for sglang's tokenizer process, the same library in the client), no
        request overhead (``Requests._admit_local``).
        """
        from .servers import LOCAL_TOKENIZE_PATH

        model = self.sim.servers[self.server_name].model

        def local(texts: list[str], special: bool) -> list[list[int]]:
            if not self.sim._active:  # setting up: off the clock
                return [model.encode(t, add_special_tokens=special) for t in texts]
            body = {"prompt": list(texts), "add_special_tokens": special}
            return self._request("POST", LOCAL_TOKENIZE_PATH, body)["tokens"]

        self.local_tokenize = local


def build_simulation(tokenizer_path: str, policies: dict, costs: dict[str, CostModel], deployment: Deployment,
                     scheduling: Scheduling = Scheduling(), stall_s: float = STALL_S, tokenizer=None) -> Simulation:
    """A :class:`Simulation` of ``{name: policy}`` servers sharing one tokenizer directory.

    ``costs[name]`` gives each server's model (``model_path`` is the model's name); ``tokenizer``
    is the directory's tokenizer when the caller loaded it already (loading takes seconds).  The
    server named ``"drafter"`` has the adapter :data:`SIM_LORA` loaded; a ``lora_path`` sent to any
    other server is a 400, as on a server started without ``--enable-lora``.
    """
    from sgl_speccompact.emulator.server import load_tokenizer

    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(tokenizer_path)
    costs = deployed(costs, deployment)
    ctx = int(min(getattr(tokenizer, "model_max_length", 32768), 1 << 24))
    servers = {}
    for name, policy in policies.items():
        model = EmulatedModel(policy, tokenizer)
        path = costs[name].model.name
        adapters = (SIM_LORA,) if name == "drafter" else None  # LoRA enabled on the drafter only, as launched
        servers[name] = SimServer(name, model, ServedModel(path, tokenizer_path, path, ctx, adapters), costs[name],
                                  scheduling)
    return Simulation(servers, deployment, stall_s)
