"""The simulator's event log: one record per request and per forward pass.

Everything here is SIMULATED time (seconds on the simulator's one virtual
clock), never a measurement.  Two invariants are checked on every run
(:func:`check`), and a violation raises :class:`InvariantViolation`:

* end-to-end >= each server's busy time (and the shared GPU's, one-gpu):
  a server runs one forward pass at a time;
* the critical path is reconstructible from the log (:func:`critical_path`):
  every request on it was issued at the instant its predecessor's answer
  arrived (virtual time moves only when a response is delivered), back to
  time 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

from sgl_speccompact.emulator.model import EmulatorError

EPS = 1e-9  # float slack of the invariant checks, s


class InvariantViolation(EmulatorError):
    """A simulated run broke one of the timeline invariants (a simulator bug)."""

    code = "simulation_invariant"


@dataclass
class RequestRecord:
    """One transport request (a ``/generate`` body with all its items, or a ``/tokenize``)."""

    seq: int  # issue order (deterministic: sorted within one virtual instant)
    server: str  # "target" or "drafter"
    path: str  # "/generate" or "/tokenize"
    kind: str  # "prefill", "judge", "generate" or "tokenize" (from the body)
    items: int  # jobs (texts x samples; n > 1 adds one warm-up prefill per text)
    issued: float  # virtual time the client sent it, s
    arrived: float | None = None  # the last item reached the scheduler (after o_req + tokenizer), s
    first_pass: float | None = None  # start of the first forward pass it took part in, s
    finished: float | None = None  # the answer was delivered, s
    passes: list[int] = field(default_factory=list)  # forward passes it took part in (ids)
    service_s: float = 0.0  # sum of those passes' durations, s
    prompt_tokens: int = 0  # over its items
    cached_tokens: int = 0  # over its items
    completion_tokens: int = 0  # over its items
    tokenized: int = 0  # tokens its server's tokenizer process encoded for it
    lane: str | None = None  # caller's label (e.g. the slot), from Simulation.labeler
    role: str | None = None  # caller's label (e.g. "draft", "repair"), from Simulation.labeler

    @property
    def latency(self) -> float:
        """Issue to answer, s."""
        return (self.finished or self.issued) - self.issued

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class PassRecord:
    """One forward pass of one server."""

    id: int  # order of start
    server: str  # which server ran it
    gpu: int  # which GPU
    kind: str  # "prefill" or "decode"
    start: float  # s
    end: float  # s
    requests: list[int]  # seq of the requests whose jobs were in it (with repeats removed)
    new_tokens: int  # sum of new tokens
    context_tokens: int  # sum of cached + new tokens

    def to_json(self) -> dict:
        return asdict(self)


def busy_s(passes: list[PassRecord], server: str | None = None, gpu: int | None = None) -> float:
    """Sum of pass durations of one server (or one GPU), s."""
    return sum(p.end - p.start for p in passes
               if (server is None or p.server == server) and (gpu is None or p.gpu == gpu))


def critical_path(requests: list[RequestRecord], end: float,
                  prefer: Callable[[RequestRecord, RequestRecord], bool] | None = None) -> list[RequestRecord]:
    """The chain of requests that determines the end-to-end time ``end``, first to last.

    Walks back from the request answered last: each request's predecessor
    is one answered exactly when it was issued (the same ``lane`` preferred,
    then ``prefer(candidate, request)``, then the latest issued).  Raises
    :class:`InvariantViolation` when a link is missing.
    """
    done = [r for r in requests if r.finished is not None]
    if not done:
        return []
    last = max(done, key=lambda r: (r.finished, r.seq))
    if abs(last.finished - end) > EPS:
        raise InvariantViolation(f"end-to-end {end!r} s is not the last answer's time {last.finished!r} s")
    chain, seen = [last], {last.seq}  # seen: records answered at once (a yield that did not wait) cannot loop
    while chain[-1].issued > EPS:
        r = chain[-1]
        cands = [c for c in done if c.seq not in seen and abs(c.finished - r.issued) <= EPS]
        if not cands:
            raise InvariantViolation(f"request {r.seq} issued at {r.issued!r} s, when no answer arrived")
        chain.append(max(cands, key=lambda c: (c.lane == r.lane and r.lane is not None,
                                               bool(prefer and prefer(c, r)), c.issued, c.seq)))
        seen.add(chain[-1].seq)
    return chain[::-1]


def check(requests: list[RequestRecord], passes: list[PassRecord], end: float,
          servers: list[str], gpus: list[int]) -> dict:
    """Both invariants; returns ``{"busy_s": {server: s}, "gpu_busy_s": {gpu: s}}``."""
    busy = {s: busy_s(passes, server=s) for s in servers}
    gpu = {g: busy_s(passes, gpu=g) for g in gpus}
    for name, b in [*busy.items(), *((f"gpu {g}", v) for g, v in gpu.items())]:
        if b > end + EPS:
            raise InvariantViolation(f"{name} busy {b:.6f} s exceeds the end-to-end {end:.6f} s")
    critical_path(requests, end)
    return {"busy_s": busy, "gpu_busy_s": gpu}
