"""The request side of the simulator: simulated servers and what a client's request becomes.

:class:`SimServer` is one simulated SGLang server (frontend, scheduler,
tokenizer process, cost model); :class:`Requests` (mixed into
:class:`~.simulator.Simulation`) turns a client's transport request into
scheduler jobs with the emulator's own admission (:mod:`~sgl_speccompact.emulator.frontend`,
:mod:`~sgl_speccompact.emulator.chat`), and shapes and delivers the answer.  See :mod:`.simulator`
for the clock.
"""

from __future__ import annotations

import copy
import json
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from sgl_speccompact.emulator.cost import CostModel, Scheduling
from sgl_speccompact.emulator.frontend import BadRequest, Frontend, ServedModel, contract_view, parse_generate
from sgl_speccompact.emulator.jobs import Job, LogprobRequest
from sgl_speccompact.emulator.model import EmulatedModel, EmulatorError
from sgl_speccompact.emulator.radix import RadixTree
from sgl_speccompact.emulator.scheduler import Scheduler
from .timeline import RequestRecord


TOOL_PATH = "/sim/tool"  # not an SGLang route: a client thread waits ``seconds`` of virtual time (a tool call)
LOCAL_TOKENIZE_PATH = "/sim/local_tokenize"  # not an SGLang route: the client's own tokenizer (see _admit_local)
YIELD_PATH = "/sim/yield"  # not an SGLang route: a background request's wait for foreground work (see SimYieldGate)
SERVED = ("/generate", "/v1/chat/completions", "/v1/decisions")  # paths that become scheduler work (foreground load when not background)


class SimServer:
    """One simulated SGLang server: frontend, scheduler, tokenizer process, cost model."""

    def __init__(self, name: str, model: EmulatedModel, served: ServedModel, cost: CostModel,
                 scheduling: Scheduling = Scheduling(), radix_capacity_tokens: int | None = None):
        self.name, self.model, self.served, self.cost, self.scheduling = name, model, served, cost, scheduling
        self.tree = RadixTree(radix_capacity_tokens)
        self.sched = Scheduler(model, self.tree, max_prefill_tokens=scheduling.max_prefill_tokens,
                               chunked_prefill_size=scheduling.chunked_prefill_size,
                               schedule_policy=scheduling.schedule_policy,
                               request_overhead_s=cost.request_overhead_s, spec=cost.spec)
        self.frontend = Frontend(model, served)
        self.gpu = 0  # index of its GPU, set by the Simulation
        self.tokenizer_free = 0.0  # when its tokenizer process is next idle, s
        self.in_pass = False  # a forward pass of this server is running

    def model_info(self) -> dict:
        from sgl_speccompact.emulator.api import _model_info

        return _model_info(self.served)


@dataclass
class Ticket:
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
    done: bool = False  # delivered to the client
    chat_model: str | None = None  # set for /v1/chat/completions: the answer is a chat.completion
    decision: tuple | None = None  # set for /v1/decisions: (request, encoded questions); the answer is its response
    cond: threading.Condition | None = None  # the client waits on it (over the simulation's lock)
    background: bool = False  # sent by a yielding (background) view: not foreground load for other requests
    waited: float = 0.0  # YIELD_PATH: virtual seconds held so far
    plain_ids: bool = False  # its input_ids are a list of plain ints, or a batch of non-empty such lists (checked)


class Requests:
    """Client-side entry (:meth:`call`) and answer delivery of a :class:`~.simulator.Simulation`."""

    def call(self, server: str, method: str, path: str, body: dict | None, url: str, background: bool = False):
        """Serve one transport request of a client thread (blocks until answered).

        ``background``: sent by a yielding view (:class:`SimYieldGate`), so
        it is not foreground load for other background requests.
        """
        srv = self.servers[server]
        if path in ("/get_model_info", "/model_info"):
            return srv.model_info()
        if path == "/flush_cache":
            return {"flushed": srv.sched.flush()}
        if path == "/tokenize" and not self._active:  # setting an endpoint up, before any run
            return _tokenize(srv, body or {})
        ticket = Ticket(srv, path, body or {}, background=background)
        if path in (LOCAL_TOKENIZE_PATH, YIELD_PATH):
            pass
        elif path == TOOL_PATH:  # a client-side wait on the clock (an agent's tool call), no server work
            if float(ticket.body.get("seconds", 0.0)) < 0:
                raise EmulatorError(f"{TOOL_PATH}: seconds must be >= 0")
        elif path == "/v1/chat/completions":  # the chat route: render, then the /generate admission
            self._prepare_chat(ticket, url)
        elif path == "/generate":
            self._prepare_generate(ticket, url)
        elif path == "/v1/decisions":  # the decision route: render and check, then one scoring batch
            self._prepare_decisions(ticket, url)
        elif path != "/tokenize":
            raise EmulatorError(f"the simulator does not serve {method} {path}")
        with self._lock:
            if not self._active:
                raise EmulatorError(f"{path}: a simulated server answers only inside Simulation.run")
            ticket.cond = threading.Condition(self._lock)
            self._epoch.append(ticket)
            self._arrivals += 1  # seen by a monitor that was looking at the threads when this came
            self._cv.notify()  # the monitor wakes once this thread waits (it holds the lock until then)
            while not ticket.done:
                ticket.cond.wait()
        if ticket.error is not None:
            raise ticket.error
        return ticket.response

    def _prepare_generate(self, ticket: Ticket, url: str) -> None:
        from sgl_speccompact.backends.http import http_error

        try:
            view = contract_view(ticket.body)
            obj = parse_generate(ticket.body, view)
            ids = view.get("input_ids") if view is not ticket.body else None
            # contract_view checked every id; a batch's empty prompt cannot have ids dropped
            ticket.plain_ids = ids is not None and (type(ids[0]) is int or all(ids))
            ticket.jobs, ticket.single = ticket.server.frontend.jobs(obj, lambda i: self._sink(ticket, i))
            spec = ticket.server.cost.spec
            if spec is not None and any(j.lora_path for j in ticket.jobs):
                spec.check_lora()  # sglang refuses LoRA adapters on a server with this algorithm
        except BadRequest as exc:
            raise http_error(url, 400, json.dumps(exc.body)) from exc
        except ValueError as exc:
            raise http_error(url, 400, json.dumps({"error": {"message": str(exc)}})) from exc
        ticket.results = [None] * len(ticket.jobs)
        ticket.left = len(ticket.jobs)

    def _prepare_chat(self, ticket: Ticket, url: str) -> None:
        from sgl_speccompact.backends.http import http_error
        from sgl_speccompact.emulator.chat import generate_body, parse_chat

        try:
            req = parse_chat(ticket.body)
            gen = generate_body(req, ticket.body, ticket.server.model.tokenizer)
        except BadRequest as exc:
            raise http_error(url, 400, json.dumps(exc.body)) from exc
        ticket.chat_model = req.model or ticket.server.served.served_model_name
        chat = Ticket(ticket.server, ticket.path, gen)
        self._prepare_generate(chat, url)
        ticket.jobs, ticket.single, ticket.results, ticket.left = chat.jobs, True, chat.results, chat.left
        for i, job in enumerate(ticket.jobs):
            job.on_update = self._sink(ticket, i)

    def _prepare_decisions(self, ticket: Ticket, url: str) -> None:
        from sgl_speccompact.backends.http import http_error
        from sgl_speccompact.emulator import decisions

        srv = ticket.server
        try:
            req = decisions.parse(ticket.body, srv.model.tokenizer)
            encoded = decisions.encode(req, srv.model.tokenizer, srv.served.context_length)
        except BadRequest as exc:
            raise http_error(url, 400, json.dumps(exc.body)) from exc
        scoring = Ticket(srv, ticket.path, decisions.scoring_body(encoded))
        self._prepare_generate(scoring, url)
        ticket.jobs, ticket.single, ticket.results, ticket.left = scoring.jobs, False, scoring.results, scoring.left
        ticket.decision = (req, encoded)
        for i, (job, (_, label_ids, _)) in enumerate(zip(ticket.jobs, encoded)):
            job.on_update, job.labels = self._sink(ticket, i), tuple(label_ids)

    def _sink(self, ticket: Ticket, index: int):
        def update(out: dict, finished: bool) -> None:
            if finished:
                ticket.results[index] = out
                ticket.left -= 1
                if ticket.left == 0:
                    self._answer_generate(ticket)
        return update

    # ------------------------------------------------------------ monitor side

    def _admit_tokenize(self, tickets: list[Ticket]) -> None:
        """One server's ``/tokenize`` requests of this instant: one tokenizer batch, one record."""
        srv = tickets[0].server
        prompts = sorted({(p, _adds(t.body)) for t in tickets for p in _prompts(t.body)})
        rec = RequestRecord(seq=len(self.requests), server=srv.name, path="/tokenize", kind="tokenize",
                            items=len(prompts), issued=self.clock)
        if self.labeler is not None:
            rec.lane, rec.role = self.labeler(srv.name, "/tokenize", {"prompt": [p for p, _ in prompts]})
        encoded = _encode(srv, prompts)
        rec.tokenized = sum(map(len, encoded.values()))
        self.requests.append(rec)
        ready = self.clock + srv.cost.request_overhead_s + srv.cost.client_s(rec.tokenized)
        srv.tokenizer_free = max(srv.tokenizer_free, ready) + srv.scheduling.tokenize_s(rec.tokenized)
        for t in tickets:
            t.record, t.bundle, t.response = rec, tickets, _tokenize(srv, t.body, encoded)
            self._tickets.append(t)
            self._push(srv.tokenizer_free, "answer", t)

    def _admit_local(self, tickets: list[Ticket]) -> None:
        """One client's tokenizations of this instant, done in the client: one batch, one record.

        The client encodes the distinct prompts of all of them at
        ``TOKENIZER_TOKENS_PER_S`` (its threads share one interpreter), no
        server and no request overhead; as with ``/tokenize``, which thread
        asks for which piece of a shared text depends on thread timing, their
        union does not.
        """
        from sgl_speccompact.emulator.cost import TOKENIZER_TOKENS_PER_S

        srv = tickets[0].server
        prompts = sorted({(p, _adds(t.body)) for t in tickets for p in _prompts(t.body)})
        rec = RequestRecord(seq=len(self.requests), server=srv.name, path=LOCAL_TOKENIZE_PATH, kind="local_tokenize",
                            items=len(prompts), issued=self.clock, role="client")
        encoded = _encode(srv, prompts)
        rec.tokenized = sum(map(len, encoded.values()))
        self.requests.append(rec)
        for t in tickets:
            t.record, t.bundle, t.response = rec, tickets, _tokenize(srv, t.body, encoded)
            self._tickets.append(t)
            self._push(self.clock + rec.tokenized / TOKENIZER_TOKENS_PER_S, "answer", t)

    def _warmup(self, ticket: Ticket, samples: list[Job]) -> Job:
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

    def _answer_generate(self, ticket: Ticket) -> None:
        """All jobs finished (inside a pass's settle): shape the answer as the HTTP route does."""
        from sgl_speccompact.backends.http import http_error

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
        if ticket.chat_model is not None and ticket.error is None:
            from sgl_speccompact.emulator.chat import chat_response

            ticket.response = chat_response(ticket.response, ticket.chat_model)
        if ticket.decision is not None and ticket.error is None:
            from sgl_speccompact.emulator import decisions

            ticket.response = decisions.response(*ticket.decision, ticket.results)
        self._deliver(ticket)

    def _deliver(self, ticket: Ticket) -> None:
        ticket.ready = True
        if not all(t.ready for t in ticket.bundle):
            return
        for t in ticket.bundle:
            t.record.finished = self.clock
            if t.path != "/tokenize":
                for out in t.results:
                    out["meta_info"]["e2e_latency"] = self.clock - t.record.issued  # SIMULATED, deterministic
            t.done = True
            t.cond.notify()


class SimYieldGate:
    """The service's :class:`~sgl_speccompact.service.yielding.YieldGate` on the simulator's clock.

    ``hold`` is a :data:`YIELD_PATH` request: the simulation answers it once
    no foreground request (one not sent by a yielding view) is in flight on
    the server, looking again every ``poll_s`` of virtual time, or when
    ``bound_s`` has passed (:func:`~sgl_speccompact.service.yielding.yield_delay`,
    the service's own rule).  The real gate's load is SGLang's snapshot,
    up to ``LOADS_TTL_S`` old and counting waiting and running requests; here
    it is exact and counts every request issued and not answered.
    """

    def __init__(self, sim, server: str, bound_s: float, poll_s: float | None = None):
        from sgl_speccompact.service.yielding import YIELD_POLL_S

        self.sim, self.server, self.bound_s = sim, server, bound_s
        self.poll_s = YIELD_POLL_S if poll_s is None else poll_s

    def hold(self, scope=None) -> float:
        out = self.sim.call(self.server, "POST", YIELD_PATH, {"bound_s": self.bound_s, "poll_s": self.poll_s},
                            f"http://simulated-{self.server}")
        return out["waited_s"]

    def sending(self, body: dict):
        import contextlib

        return contextlib.nullcontext()  # the simulation knows the view's requests as background ones


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


def _kind(ticket: Ticket) -> str:
    if ticket.path in ("/tokenize", TOOL_PATH):
        return "tokenize" if ticket.path == "/tokenize" else "tool"
    body = ticket.body
    if "token_ids_logprob" in body or ticket.path == "/v1/decisions":
        return "judge"
    params = body.get("sampling_params") or {}
    params = params[0] if isinstance(params, list) and params else params
    return "prefill" if isinstance(params, dict) and params.get("max_new_tokens") == 0 else "generate"


def _tokenizes(ticket: Ticket) -> bool:
    """Whether the server's tokenizer encodes this request's prompts (not given as ``input_ids``)."""
    return ticket.path != "/generate" or ticket.body.get("input_ids") is None


def _adds(body: dict) -> bool:
    return bool(body.get("add_special_tokens", True))  # TokenizeRequest's default


ENCODED_MAX = 300_000  # texts remembered per tokenizer before the memo starts afresh
_ENCODED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # tokenizer -> {(text, add_special): ids}


def _encode(srv: SimServer, prompts: list[tuple[str, bool]]) -> dict[tuple[str, bool], list[int]]:
    """``(text, add_special_tokens) -> ids`` of each distinct prompt.

    What a tokenizer makes of a text never changes, so a text met before
    (the same history lines in another compaction, another row of the same
    session) is not encoded again; new ones are encoded in one batch per
    flag.  The simulated clock charges the tokens either way.
    """
    memo = _ENCODED.setdefault(srv.model.tokenizer, {})
    if len(memo) > ENCODED_MAX:
        memo.clear()
    for adds in (False, True):
        new = [p for p, a in prompts if a is adds and (p, a) not in memo]
        for p, ids in zip(new, srv.model.encode_many(new, add_special_tokens=adds)):
            memo[(p, adds)] = ids
    return {key: memo[key] for key in prompts}


def _tokenize(srv: SimServer, body: dict, encoded: dict | None = None) -> dict:
    """The ``/tokenize`` answer (sglang's ``TokenizeResponse`` fields) for ``prompt`` (str or list).

    ``encoded``: prompts encoded already (:func:`_encode`); each answer gets its own lists.
    """
    adds = _adds(body)
    ids = [list(encoded[(p, adds)]) if encoded is not None else srv.model.encode(p, add_special_tokens=adds)
           for p in _prompts(body)]
    single = isinstance(body.get("prompt"), str)
    return {"tokens": ids[0] if single else ids, "count": len(ids[0]) if single else [len(i) for i in ids],
            "max_model_len": srv.served.context_length}


def _with_text(ticket: Ticket) -> dict:
    """The body as the labeler reads it: prompts given as ``input_ids`` shown as their text."""
    body = ticket.body
    if body.get("input_ids") is None or not ticket.jobs:
        return body
    texts = [g[0].prompt for g in _by_text(ticket.jobs)]
    return {**{k: v for k, v in body.items() if k != "input_ids"}, "text": texts[0] if ticket.single else texts}
