"""The emulator's scheduler: SGLang-style continuous batching over a radix tree.

Mirrors ``sglang/srt/managers/scheduler.py`` with its default settings
(``schedule_policy="fcfs"``, page size 1, no speculative decoding):

* One loop.  When requests wait it forms a prefill batch from them (at most
  ``max_prefill_tokens`` uncached tokens; the first request always fits),
  otherwise it runs one decode step for every running request.
* A request's radix match happens when it joins a prefill batch
  (``Req.init_next_round_input``), capped at ``input_len - 1`` and at
  ``logprob_start_len`` when logprobs start inside the prompt
  (``Req._compute_max_prefix_len``).  Prompts of the same batch are inserted
  only after its forward pass, so two requests that share an uncached prefix
  and arrive together both miss it.  SGLang's "in-batch prefix caching"
  (deprioritizing such duplicates) exists only in the cache-aware policies
  (``lpm``, ``dfs-weight``, ...); the default ``fcfs`` does not do it, and
  neither does the emulator.
* After its prefill a still-running request's prompt is inserted
  (``checkpoint_kv_cache``), so later batches hit it while it decodes.
* At finish ``(input + output)[:owned]`` is inserted (``release_kv_cache``):
  every token the model computed KV for, i.e. the prompt and all output
  tokens through the stop except the last one sampled.
* Finish checks run after every token in SGLang's order
  (``Req.update_finish_state``): stop strings / stop regex on the decoded
  tail, then stop token ids and EOS (unless ``ignore_eos``), then
  ``max_new_tokens``.  A prefill-only request (``max_new_tokens == 0``)
  appends one dummy token and finishes with ``length`` 0.

Differences: no chunked prefill (a prompt longer than the budget is
prefilled in one pass), the radix capacity counts tree tokens only (not the
KV of running requests), ``min_new_tokens`` and grammar constraints
(``regex``, ``json_schema``) are ignored, and ``n > 1`` samples are
identical because policies are deterministic.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from .cost import CostModel
from .model import Distribution, EmulatedModel
from .radix import Namespace, Node, RadixTree
from .response import build_output

log = logging.getLogger(__name__)


@dataclass
class LogprobRequest:
    """What logprobs a request asked for, resolved as the scheduler does."""

    enabled: bool = False  # return_logprob
    start: int = -1  # resolved logprob_start_len (-1: no prompt logprobs)
    top_n: int = 0  # top_logprobs_num
    token_ids: list[int] | None = None  # token_ids_logprob
    with_text: bool = False  # return_text_in_logprobs


@dataclass
class LogprobRecord:
    """Logprobs gathered while a request runs, as ``(logprob, token_id)`` pairs."""

    input_token: list[tuple[float | None, int]] = field(default_factory=list)  # prompt tokens
    input_top: list[list[tuple[float, int]] | None] = field(default_factory=list)  # per prompt position
    input_ids: list[list[tuple[float, int]] | None] = field(default_factory=list)  # requested ids, per prompt position
    output_token: list[tuple[float, int]] = field(default_factory=list)  # emitted tokens
    output_top: list[list[tuple[float, int]]] = field(default_factory=list)  # per output position
    output_ids: list[list[tuple[float, int]]] = field(default_factory=list)  # requested ids, per output position


@dataclass
class Job:
    """One request inside the engine (a batch request becomes several jobs)."""

    rid: str  # request id as returned in meta_info["id"]
    prompt: str  # prompt text the policy sees
    input_ids: list[int]  # prompt token ids
    sampling: Any  # sglang SamplingParams, normalized and verified
    lora_path: str | None  # adapter name (None: base model)
    namespace: Namespace  # radix namespace: (extra_key + lora, cache_salt)
    logprobs: LogprobRequest  # requested logprobs
    stream: bool  # send a chunk per decoded token
    on_update: Callable[[dict, bool], None]  # receives (output dict, finished); engine thread
    arrival: float = field(default_factory=time.perf_counter)  # real arrival time, perf_counter
    sim_arrival: float = 0.0  # simulated arrival time, s
    planned: list[int] = field(default_factory=list)  # tokens the policy will emit
    output_ids: list[int] = field(default_factory=list)  # tokens emitted so far
    finished_reason: dict | None = None  # SGLang finish_reason JSON once finished
    finished_len: int | None = None  # output tokens through the stop
    cached_tokens: int = 0  # prompt tokens served from the radix cache
    node: Node | None = None  # locked radix node
    lp: LogprobRecord = field(default_factory=LogprobRecord)  # gathered logprobs
    simulated_latency_s: float | None = None  # SIMULATED latency, when a cost model runs

    @property
    def prefill_only(self) -> bool:
        """``max_new_tokens == 0`` (``Req.is_prefill_only``)."""
        return self.sampling.max_new_tokens == 0

    @property
    def through_stop(self) -> list[int]:
        """Emitted tokens up to and including the stop (``output_ids_through_stop``)."""
        return self.output_ids if self.finished_len is None else self.output_ids[: self.finished_len]

    def params(self) -> dict:
        """What the policy is told about the request."""
        sp = self.sampling
        keys = ("max_new_tokens", "temperature", "top_p", "top_k", "stop_strs", "stop_token_ids")
        return {"sampling_params": {k: getattr(sp, k) for k in keys}, "lora_path": self.lora_path}


@dataclass
class Stats:
    """Counters per LoRA namespace (``"base"`` for the base model)."""

    requests: int = 0  # finished requests
    prompt_tokens: int = 0  # prompt tokens of finished requests
    cached_tokens: int = 0  # of which served from the radix cache
    completion_tokens: int = 0  # output tokens through the stop
    simulated_latency_s: float = 0.0  # sum of SIMULATED request latencies


class Engine:
    """Scheduler thread running jobs through an :class:`EmulatedModel`.

    Parameters
    ----------
    model
        Policy + tokenizer.
    tree
        The radix cache.
    cost
        Optional cost model; with it every forward pass takes simulated time
        (scaled real sleeps) and finished requests report
        ``simulated_latency_s``.
    max_prefill_tokens
        Uncached prompt tokens per prefill batch (SGLang's default 16384).
    """

    def __init__(self, model: EmulatedModel, tree: RadixTree, cost: CostModel | None = None,
                 max_prefill_tokens: int = 16384):
        self.model = model
        self.tree = tree
        self.cost = cost
        self.max_prefill_tokens = max_prefill_tokens
        self._cv = threading.Condition()
        self._waiting: list[Job] = []
        self._running: list[Job] = []
        self._busy = 0  # jobs taken out of the queues by the current round
        self._stop = False
        self._thread: threading.Thread | None = None
        self._sim = 0.0  # simulated clock at the end of the last forward, s
        self._fwd = None  # (sim start, sim end, real start) of the forward in progress
        self.reset_stats()

    # ----------------------------------------------------------------- control

    def start(self) -> None:
        """Start the scheduler thread."""
        self._thread = threading.Thread(target=self._loop, name="emulator-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the scheduler thread (pending jobs are dropped)."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def submit(self, jobs: list[Job]) -> None:
        """Queue ``jobs`` together, so they can share one prefill batch."""
        with self._cv:
            now = self.sim_now()
            for job in jobs:
                job.sim_arrival = now
            self._waiting.extend(jobs)
            self._cv.notify_all()

    def idle(self) -> bool:
        """No waiting or running request (``Scheduler.is_fully_idle``)."""
        with self._cv:
            return not (self._waiting or self._running or self._busy)

    def flush(self) -> bool:
        """Empty the radix cache if idle; False otherwise (``Scheduler.flush_cache``)."""
        with self._cv:
            if self._waiting or self._running or self._busy:
                return False
            self.tree.reset()
            return True

    def sim_now(self) -> float:
        """The simulated clock now, s (advances only during forward passes)."""
        if self._fwd is None or self.cost is None or self.cost.time_scale <= 0:
            return self._sim
        start, end, real = self._fwd
        return min(end, start + (time.perf_counter() - real) / self.cost.time_scale)

    # ------------------------------------------------------------------- stats

    def reset_stats(self) -> None:
        """Zero every counter."""
        self._stats: dict[str, Stats] = defaultdict(Stats)
        self._counters = {"prefill_batches": 0, "decode_steps": 0, "simulated_busy_s": 0.0}

    def stats(self) -> dict:
        """Counters: per LoRA namespace, totals, and radix-tree size."""
        with self._cv:
            per = {k: vars(v).copy() for k, v in self._stats.items()}
            total = Stats()
            for v in self._stats.values():
                for k, x in vars(v).items():
                    setattr(total, k, getattr(total, k) + x)
            return {
                "per_lora": per,
                "total": vars(total).copy(),
                **self._counters,
                "tree_tokens": self.tree.total_size(),
                "running": len(self._running),
                "waiting": len(self._waiting),
            }

    # -------------------------------------------------------------------- loop

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not (self._waiting or self._running or self._stop):
                    self._cv.wait()
                if self._stop:
                    return
                gather = bool(self._waiting) and not self._running
            if gather and self.cost is not None and self.cost.batch_window_s > 0:
                time.sleep(self.cost.batch_window_s)  # let concurrent arrivals join
            self._round()

    def _round(self) -> None:
        # Queues and tree change only under the lock; policy calls (which may
        # be slow or block in tests) run outside it, between the two phases.
        with self._cv:
            batch = self._admit()
            jobs = batch or list(self._running)
            self._busy = len(batch)
            if batch:
                shapes = [(j.cached_tokens, len(j.input_ids) - j.cached_tokens) for j in batch]
            else:
                shapes = [(len(j.input_ids) + len(j.output_ids) - 1, 1) for j in jobs]
        self._forward(shapes)
        step = self._prefill_one if batch else self._append
        for job in jobs:
            self._guard(job, step)
        with self._cv:
            self._busy = 0
            self._counters["prefill_batches" if batch else "decode_steps"] += 1
            for job in jobs:
                try:
                    self._settle(job, prefilled=bool(batch))
                except Exception as exc:  # never leave a client waiting
                    log.exception("emulated request %s failed", job.rid)
                    self._fail(job, exc)

    def _admit(self) -> list[Job]:
        """Take waiting jobs into a prefill batch, matching their prefixes now."""
        batch, budget = [], self.max_prefill_tokens
        while self._waiting:
            job = self._waiting[0]
            matched, node = self.tree.match(job.namespace, job.input_ids, self._max_prefix(job))
            if batch and len(job.input_ids) - matched > budget:
                break
            self._waiting.pop(0)
            job.cached_tokens, job.node = matched, node
            self.tree.lock(node)
            budget -= len(job.input_ids) - matched
            batch.append(job)
        return batch

    @staticmethod
    def _max_prefix(job: Job) -> int:
        """``Req._compute_max_prefix_len``: keep one token (and logprob positions) to compute."""
        cap = len(job.input_ids) - 1
        if job.logprobs.enabled and job.logprobs.start >= 0:
            cap = min(cap, job.logprobs.start)
        return cap

    def _forward(self, shapes: list[tuple[int, int]]) -> None:
        """Account (and sleep, scaled) one forward pass of the cost model."""
        if self.cost is None or not shapes:
            return
        dt = self.cost.forward_s(shapes)
        self._fwd = (self._sim, self._sim + dt, time.perf_counter())
        if self.cost.time_scale > 0:
            time.sleep(dt * self.cost.time_scale)
        self._sim += dt
        self._fwd = None
        self._counters["simulated_busy_s"] += dt

    def _guard(self, job: Job, step: Callable[[Job], None]) -> None:
        """Run one step of ``job``; a failure aborts only that job."""
        try:
            step(job)
        except Exception as exc:
            log.exception("emulated request %s failed", job.rid)
            job.finished_reason = _abort_reason(exc)

    def _fail(self, job: Job, exc: Exception) -> None:
        """Abort ``job`` after an emulator error, with a minimal final output."""
        if job in self._running:
            self._running.remove(job)
        if job.node is not None:
            self.tree.unlock(job.node)
            job.node = None
        reason = _abort_reason(exc)
        job.on_update({"text": "", "output_ids": [], "meta_info": {"id": job.rid, "finish_reason": reason}}, True)

    def _settle(self, job: Job, prefilled: bool) -> None:
        """After a step: update queues and tree, then report (under the lock)."""
        if job.finished_reason is None:
            if prefilled:
                self._checkpoint(job)
                self._running.append(job)
            if job.stream and not self._holds_stop_prefix(job):
                job.on_update(build_output(job, self.model, finished=False), False)
            return
        if job in self._running:
            self._running.remove(job)
        self._finish(job)

    # ------------------------------------------------------------ request steps

    def _prefill_one(self, job: Job) -> None:
        if job.logprobs.enabled:
            self._input_logprobs(job)
        if job.prefill_only:
            job.output_ids.append(0)  # the scheduler's dummy token
            job.finished_reason, job.finished_len = {"type": "length", "length": 0}, 0
            if job.logprobs.enabled:
                self._prefill_only_logprobs(job)
            return
        budget = job.sampling.max_new_tokens
        job.planned = self.model.plan(job.prompt, job.input_ids, job.params(), budget,
                                      job.sampling.ignore_eos)
        self._append(job)

    def _append(self, job: Job) -> None:
        """Emit the next planned token and run the finish checks."""
        pos = len(job.output_ids)
        token = job.planned[pos] if pos < len(job.planned) else job.planned[-1]
        if job.logprobs.enabled:
            self._output_logprobs(job, token)
        job.output_ids.append(token)
        self._update_finish_state(job)

    def _update_finish_state(self, job: Job) -> None:
        """``Req.update_finish_state`` for one new token."""
        sp, out = job.sampling, job.output_ids
        if sp.stop_strs or sp.stop_regex_strs:
            tail_len = min(max(sp.stop_str_max_len, sp.stop_regex_max_len) + 1, len(out))
            tail = self.model.decode(out[-tail_len:])
            for stop in sp.stop_strs:
                if stop in tail:
                    job.finished_reason, job.finished_len = {"type": "stop", "matched": stop}, len(out)
                    return
            for pattern in sp.stop_regex_strs:
                if re.search(pattern, tail):
                    job.finished_reason, job.finished_len = {"type": "stop", "matched": pattern}, len(out)
                    return
        token = out[-1]
        if not sp.ignore_eos and (token in (sp.stop_token_ids or ()) or token in self.model.eos_ids):
            job.finished_reason, job.finished_len = {"type": "stop", "matched": token}, len(out)
            return
        if len(out) >= sp.max_new_tokens:
            job.finished_reason = {"type": "length", "length": sp.max_new_tokens}
            job.finished_len = sp.max_new_tokens

    def _checkpoint(self, job: Job) -> None:
        """Insert the prompt after prefill and move the lock onto it."""
        self.tree.insert(job.namespace, job.input_ids)
        _, node = self.tree.match(job.namespace, job.input_ids)
        self.tree.lock(node)
        self.tree.unlock(job.node)
        job.node = node

    def _release(self, job: Job, insert: bool = True) -> None:
        """``release_kv_cache``: insert what was computed, unlock, evict to capacity."""
        if insert:
            n_in = len(job.input_ids)
            committed = n_in + max(len(job.output_ids) - 1, 0)
            owned = min(committed, n_in + len(job.through_stop))
            self.tree.insert(job.namespace, (job.input_ids + job.output_ids)[:owned])
        if job.node is not None:
            self.tree.unlock(job.node)
            job.node = None
        self.tree.trim()

    def _finish(self, job: Job) -> None:
        self._release(job, insert=job.finished_reason.get("type") != "abort")
        if self.cost is not None:
            job.simulated_latency_s = self.cost.request_overhead_s + self._sim - job.sim_arrival
        self._count(job)
        job.on_update(build_output(job, self.model, finished=True), True)

    def _holds_stop_prefix(self, job: Job) -> bool:
        """``Req.check_match_stop_str_prefix``: hold a chunk that may end in a stop string."""
        sp = job.sampling
        if not sp.stop_strs:
            return False
        tail = self.model.decode(job.output_ids[-min(sp.stop_str_max_len + 1, len(job.output_ids)):])
        for stop in filter(None, sp.stop_strs):
            if stop in tail or any(tail.endswith(stop[:i]) for i in range(1, len(stop) + 1)):
                return True
        return False

    def _count(self, job: Job) -> None:
        s = self._stats[job.lora_path or "base"]
        s.requests += 1
        s.prompt_tokens += len(job.input_ids)
        s.cached_tokens += job.cached_tokens
        s.completion_tokens += len(job.through_stop)
        s.simulated_latency_s += job.simulated_latency_s or 0.0

    # ---------------------------------------------------------------- logprobs

    def _dist(self, job: Job, ids: list[int], chosen: int | None = None) -> Distribution:
        prompt = job.prompt if ids is job.input_ids else self.model.decode(ids)
        return self.model.distribution(prompt, ids, job.params(), chosen)

    def _input_logprobs(self, job: Job) -> None:
        """Prompt logprobs from ``start``: first entry None, as the scheduler pads it."""
        lp, req, ids = job.lp, job.logprobs, job.input_ids
        if not 0 <= req.start < len(ids):
            return
        lp.input_token.append((None, ids[req.start]))
        lp.input_top.append(None)
        lp.input_ids.append(None)
        for pos in range(req.start + 1, len(ids)):
            dist = self._dist(job, ids[:pos])
            lp.input_token.append((dist.logprob(ids[pos]), ids[pos]))
            lp.input_top.append(dist.top(req.top_n) if req.top_n > 0 else None)
            lp.input_ids.append(_ids_logprobs(dist, req.token_ids))

    def _prefill_only_logprobs(self, job: Job) -> None:
        """No sampled token: only top-k / requested-id logprobs at the next position."""
        req = job.logprobs
        if req.top_n <= 0 and not req.token_ids:
            return
        dist = self._dist(job, job.input_ids)
        if req.top_n > 0:
            job.lp.output_top.append(dist.top(req.top_n))
        if req.token_ids:
            job.lp.output_ids.append(_ids_logprobs(dist, req.token_ids))

    def _output_logprobs(self, job: Job, token: int) -> None:
        req = job.logprobs
        prefix = job.input_ids + job.output_ids
        dist = self._dist(job, prefix if job.output_ids else job.input_ids, chosen=token)
        job.lp.output_token.append((dist.logprob(token), token))
        if req.top_n > 0:
            job.lp.output_top.append(dist.top(req.top_n))
        if req.token_ids:
            job.lp.output_ids.append(_ids_logprobs(dist, req.token_ids))


def _ids_logprobs(dist: Distribution, token_ids: list[int] | None) -> list[tuple[float, int]] | None:
    return None if not token_ids else [(dist.logprob(t), t) for t in token_ids]


def _abort_reason(exc: Exception) -> dict:
    """``FINISH_ABORT.to_json`` for an emulator-side failure (HTTP 500)."""
    return {"type": "abort", "message": f"{type(exc).__name__}: {exc}",
            "status_code": 500, "err_type": "InternalServerError"}
