"""The event side of the simulator: requests, tokenizer batches and forward passes on the virtual clock.

:class:`Events` (mixed into :class:`~.simulator.Simulation`) stamps the
requests issued at one instant in canonical order, queues each item's
arrival after its server's tokenizer, starts a forward pass on each free
GPU, and applies events in time order until a client is answered.  See
:mod:`.simulator` for the method and the monitor that moves the clock.
"""

from __future__ import annotations

import heapq

from sgl_speccompact.emulator.scheduler import Batch
from .canonical import order_keys
from .servers import (LOCAL_TOKENIZE_PATH, SERVED, TOOL_PATH, YIELD_PATH, Requests, SimServer, _by_text, _kind,
                      _tokenizes, _with_text)
from .timeline import PassRecord, RequestRecord


def instant_order(epoch: list) -> list[tuple[tuple, object]]:
    """``(key, ticket)`` of the requests issued at one instant, in canonical order (:mod:`.canonical`).

    Ordered by ``(server, path, canonical body)``; tickets with equal keys
    have identical bodies and keep the order they were issued in.
    """
    groups: dict[tuple[str, str], list] = {}
    for t in epoch:
        groups.setdefault((t.server.name, t.path), []).append(t)
    out = []
    for where in sorted(groups):
        tickets = groups[where]
        keys = order_keys([t.body for t in tickets], [t.plain_ids for t in tickets])
        out += sorted((((*where, k), t) for k, t in zip(keys, tickets)), key=lambda kt: kt[0])
    return out


class Events(Requests):
    """The event queue and the passes of :class:`~.simulator.Simulation` (its state, set by ``reset``)."""

    def _push(self, t: float, kind: str, payload) -> None:
        self._events += 1
        heapq.heappush(self._heap, (t, self._events, kind, payload))

    def _admit_epoch(self) -> None:
        """Stamp the requests issued at this instant, in canonical order, and send them."""
        epoch, self._epoch = self._epoch, []
        tokenize = [t for t in epoch if t.path == "/tokenize"]
        for t in sorted((t for t in epoch if t.path == TOOL_PATH), key=lambda t: float(t.body.get("seconds", 0))):
            t.bundle, t.response = [t], {}
            t.record = RequestRecord(seq=len(self.requests), server=t.server.name, path=TOOL_PATH, kind="tool",
                                     items=0, issued=self.clock, role="tool")
            self.requests.append(t.record)
            self._tickets.append(t)
            self._push(self.clock + float(t.body.get("seconds", 0.0)), "answer", t)
        local = [t for t in epoch if t.path == LOCAL_TOKENIZE_PATH]
        for name in sorted({t.server.name for t in local}):
            self._admit_local([t for t in local if t.server.name == name])
        held = [t for t in epoch if t.path == YIELD_PATH]
        epoch = [t for t in epoch if t.path not in ("/tokenize", TOOL_PATH, LOCAL_TOKENIZE_PATH, YIELD_PATH)]
        # identical bodies get identical answers, so their relative order does not matter
        bundle, last = [], None
        for key, ticket in instant_order(epoch):
            if key != last:
                bundle, last = [], key
            bundle.append(ticket)
            ticket.bundle = bundle
            self._tickets.append(ticket)
            srv = ticket.server
            rec = RequestRecord(seq=len(self.requests), server=srv.name, path=ticket.path,
                                kind=_kind(ticket), items=len(ticket.jobs), issued=self.clock)
            if self.labeler is not None:
                rec.lane, rec.role = self.labeler(srv.name, ticket.path, _with_text(ticket))
            for job in ticket.jobs:  # sglang's priority scheduling, when the simulation gives roles one
                job.priority = self.priorities.get(rec.role, 0)
            ticket.record = rec
            self.requests.append(rec)
            sent = sum(len(g[0].input_ids) for g in _by_text(ticket.jobs))
            ready = self.clock + srv.cost.request_overhead_s + srv.cost.client_s(sent)
            for job in ticket.jobs:
                job.sim_arrival = self.clock
                self._owner[id(job)] = ticket
            for group in _by_text(ticket.jobs):
                n = len(group[0].input_ids) if _tokenizes(ticket) else 0  # input_ids skip the tokenizer
                rec.tokenized += n
                srv.tokenizer_free = max(srv.tokenizer_free, ready) + srv.scheduling.tokenize_s(n)
                first = group if len(group) == 1 else [self._warmup(ticket, group)]
                self._push(srv.tokenizer_free, "arrive", (srv, first))
        for name in sorted({t.server.name for t in tokenize}):
            self._admit_tokenize([t for t in tokenize if t.server.name == name])
        for t in held:  # after this instant's requests: one issued now is already running
            t.bundle, t.response = [t], {"waited_s": 0.0}
            t.record = RequestRecord(seq=len(self.requests), server=t.server.name, path=YIELD_PATH, kind="yield",
                                     items=0, issued=self.clock, role="yield")
            self.requests.append(t.record)
            self._tickets.append(t)
            self._yield_check(t)

    def foreground(self, srv: SimServer) -> int:
        """Requests on ``srv`` issued and not answered that no yielding view sent (what a held one waits on)."""
        return sum(1 for t in self._tickets if t.server is srv and t.path in SERVED and not t.done
                   and not t.background)

    def _yield_check(self, ticket) -> None:
        """Answer a held request now, or look again after the service's rule's delay (``yield_delay``)."""
        from sgl_speccompact.service.yielding import yield_delay

        body = ticket.body
        delay = yield_delay(self.foreground(ticket.server), ticket.waited, float(body["bound_s"]),
                            float(body["poll_s"]))
        if delay <= 0:
            ticket.response = {"waited_s": ticket.waited}
            self._push(self.clock, "answer", ticket)
            return
        ticket.waited += delay
        self._push(self.clock + delay, "yield", ticket)

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
        if kind == "yield":
            self._yield_check(payload)
            return False
        srv, batch, rec = payload
        srv.in_pass = False
        srv.sched.run(batch)
        finished = srv.sched.settle(batch, now=self.clock)
        return any(self._owner[id(j)].done for j in finished if id(j) in self._owner)

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
        dt = srv.cost.pass_s(batch.kind, batch.shapes, lora=any(j.lora_path for j in batch.jobs))
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
