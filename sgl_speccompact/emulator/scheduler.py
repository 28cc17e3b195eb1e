"""The emulator's scheduler: SGLang-style continuous batching over a radix tree.

Pure logic with no clock and no thread: a driver calls :meth:`Scheduler.next_batch`,
runs the batch's forward pass (:meth:`Scheduler.run`, the policy calls), and
settles it (:meth:`Scheduler.settle`).  Two drivers: the HTTP emulator's
scheduler thread (:mod:`.engine`) and the one-clock simulator
(:mod:`~bench.sim.simulator`).  Mirrors ``sglang/srt/managers/scheduler.py`` and
``schedule_policy.py`` (sglang 0.5.23), page size 1, no overlap scheduling:

* When requests wait (or a chunked prefill is in progress) the next batch is
  a prefill batch, otherwise one decode step of every running request.
* Prefill admission (``PrefillAdder.add_one_req``): a continuing chunked
  request goes first; then waiting requests in policy order while both
  budgets last: ``max_prefill_tokens`` (default 16384) and, with chunked
  prefill, ``chunked_prefill_size``.  A request that does not fit the chunk
  budget is cut to it and continues in the next prefill batch (one chunked
  request at a time); without chunking a request is refused once one is
  admitted and its uncached tokens reach the remaining budget.
* Schedule policy (``SchedulePolicy.calc_priority``): ``fcfs`` keeps arrival
  order (sglang's default).  ``lpm`` sorts by cached prefix length, longest
  first, after the in-batch prefix caching check: a request whose cached
  prefix is at most 32 tokens and that shares at least 32 tokens with an
  earlier waiting request is moved to the end (``IN_BATCH_PREFIX_CACHING_*``
  thresholds); above 128 waiting requests lpm falls back to fcfs.
* A request's radix match happens when it joins a prefill batch (lpm: when
  the queue is sorted), capped at ``input_len - 1`` and at
  ``logprob_start_len`` when logprobs start inside the prompt
  (``Req._compute_max_prefix_len``).  Prompts of one batch are inserted only
  after its forward pass, so two requests that share an uncached prefix and
  arrive together both miss it under ``fcfs``.
* After a chunk the computed prefix is inserted (``cache_unfinished_req``);
  after its prefill a still-running request's prompt is inserted
  (``checkpoint_kv_cache``); at finish ``(input + output)[:owned]`` is
  inserted (``release_kv_cache``): every token the model computed KV for.

* Speculative decoding (``spec``, :mod:`sgl_speccompact.core.specdecode`): a
  decode pass is one verify step; each running request's shape carries
  ``num_draft_tokens`` new tokens and it keeps ``spec.draw(...)`` of them
  (fewer when it finishes first), drawn from a generator seeded by the
  request's prompt and position, so a run is reproducible.

Differences: the radix capacity counts tree tokens only (not the KV of
running requests), ``min_new_tokens`` and grammar constraints are ignored.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

from .jobs import RUNNING_ABORT, WAITING_ABORT, Job, Stats, abort_reason
from .model import EmulatedModel
from .radix import RadixTree
from .response import build_output
from .request_steps import Steps

log = logging.getLogger(__name__)

SCHEDULE_POLICIES = ("fcfs", "lpm")
IN_BATCH_CHECK = 32  # IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD (schedule_policy.py)
IN_BATCH_DEPRIORITIZE = 32  # IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD
LPM_MAX_QUEUE = 128  # WAITING_QUEUE_PREFIX_MATCH_MAX: lpm falls back to fcfs above this


@dataclass
class Batch:
    """One forward pass."""

    kind: str  # "prefill" or "decode"
    jobs: list[Job]  # requests in the pass
    shapes: list[tuple[int, int]]  # (cached tokens, new tokens) per request, for the cost model
    complete: list[bool]  # per request: its prefill ends in this pass (decode: all True)


class Scheduler:
    """Waiting and running requests of one server, and what each pass does to them.

    Parameters
    ----------
    model
        Policy + tokenizer.
    tree
        The radix cache.
    max_prefill_tokens
        Uncached prompt tokens per prefill batch (sglang's default 16384).
    chunked_prefill_size
        Tokens per prefill chunk (None: no chunking, as ``-1`` in sglang).
    schedule_policy
        ``fcfs`` or ``lpm``.
    request_overhead_s
        ``o_req`` added to ``simulated_latency_s`` when the driver keeps a clock.
    """

    def __init__(self, model: EmulatedModel, tree: RadixTree, *, max_prefill_tokens: int = 16384,
                 chunked_prefill_size: int | None = None, schedule_policy: str = "fcfs",
                 request_overhead_s: float = 0.0, spec=None):
        if schedule_policy not in SCHEDULE_POLICIES:
            raise ValueError(f"schedule_policy {schedule_policy!r} not in {SCHEDULE_POLICIES}")
        self.model, self.tree, self.steps = model, tree, Steps(model)
        self.max_prefill_tokens = max_prefill_tokens
        self.chunked_prefill_size = chunked_prefill_size if chunked_prefill_size and chunked_prefill_size > 0 else None
        self.schedule_policy = schedule_policy
        self.request_overhead_s = request_overhead_s
        self.spec = spec  # SpecDecoding of this server (None: one token per decode step)
        self.waiting: list[Job] = []
        self.running: list[Job] = []
        self.chunked: Job | None = None  # request in the middle of a chunked prefill
        self.reset_stats()

    # ----------------------------------------------------------------- queues

    def add(self, jobs: list[Job]) -> None:
        """Queue ``jobs`` (they can share the next prefill batch)."""
        self.waiting.extend(jobs)

    def busy(self) -> bool:
        """Requests waiting, prefilling or running."""
        return bool(self.waiting or self.running or self.chunked)

    def flush(self) -> bool:
        """Empty the radix cache if idle; False otherwise (``Scheduler.flush_cache``)."""
        if self.busy():
            return False
        self.tree.reset()
        return True

    def reset_stats(self) -> None:
        """Zero every counter."""
        self.per_lora: dict[str, Stats] = defaultdict(Stats)
        self.counters = {"prefill_batches": 0, "decode_steps": 0, "simulated_busy_s": 0.0}

    def stats(self) -> dict:
        """Counters: per LoRA namespace, totals, and radix-tree size."""
        per = {k: vars(v).copy() for k, v in self.per_lora.items()}
        total = Stats()
        for v in self.per_lora.values():
            for k, x in vars(v).items():
                setattr(total, k, getattr(total, k) + x)
        return {"per_lora": per, "total": vars(total).copy(), **self.counters,
                "tree_tokens": self.tree.total_size(), "running": len(self.running),
                "waiting": len(self.waiting) + (self.chunked is not None)}

    def abort(self, rid: str, abort_all: bool = False, passing: list[Job] | None = None,
              now: float | None = None) -> list[Job]:
        """``POST /abort_request``: the tokenizer manager's check, then ``Scheduler.abort_request``.

        Without ``abort_all``, an empty ``rid`` or one no request has exactly
        is ignored.  Otherwise every request whose rid starts with ``rid``
        (every one with ``abort_all``) is aborted: a waiting one, or one in
        the middle of a chunked prefill, finishes now (``Abort in waiting
        queue``); a running one, or one in the pass under way (``passing``),
        gets ``to_finish`` and finishes at its next step, after one more
        token (``FINISH_ABORT``).  Returns the requests finished now.
        """
        passing = list(passing or [])
        if not abort_all and (not rid or not any(j.rid == rid for j in self._queued() + passing)):
            return []
        hit = (lambda j: True) if abort_all else (lambda j: j.rid.startswith(rid))
        now_done = [j for j in self.waiting if hit(j)] + ([self.chunked] if self.chunked and hit(self.chunked) else [])
        self.waiting = [j for j in self.waiting if not hit(j)]
        if self.chunked is not None and hit(self.chunked):
            self.chunked = None
        for job in now_done:
            job.finished_reason = dict(WAITING_ABORT)
            self._finish(job, now)
        for job in self.running + passing:
            if hit(job) and job.finished_reason is None and job not in now_done:
                job.to_finish = dict(RUNNING_ABORT)
        return now_done

    def _queued(self) -> list[Job]:
        return self.waiting + self.running + ([self.chunked] if self.chunked is not None else [])

    # ---------------------------------------------------------------- batches

    def next_batch(self) -> Batch | None:
        """The next forward pass, taking its requests out of the waiting queue."""
        if self.waiting or self.chunked is not None:
            taken = self._admit()
            if taken:
                self.counters["prefill_batches"] += 1
                return Batch("prefill", [j for j, _ in taken], [(j.prefilled, n) for j, n in taken],
                             [j.prefilled + n >= len(j.input_ids) for j, n in taken])
        if not self.running:
            return None
        self.counters["decode_steps"] += 1
        jobs = list(self.running)
        width = 1 if self.spec is None else self.spec.num_draft_tokens
        return Batch("decode", jobs, [(len(j.input_ids) + len(j.output_ids) - 1, width) for j in jobs],
                     [True] * len(jobs))

    def run(self, batch: Batch) -> None:
        """The policy side of a pass (may be slow; no queue changes)."""
        for job, done in zip(batch.jobs, batch.complete):
            if not done:
                continue
            try:
                if batch.kind == "prefill":
                    self.steps.prefill(job)
                else:
                    for _ in range(self._accepted(job, len(batch.jobs))):
                        self.steps.append(job)
                        if job.finished_reason is not None:
                            break
            except Exception as exc:  # one failing request aborts only itself
                log.exception("emulated request %s failed", job.rid)
                job.finished_reason = abort_reason(exc)

    def _accepted(self, job: Job, batch: int) -> int:
        """Tokens ``job`` keeps from this decode pass (1 without speculative decoding)."""
        if self.spec is None:
            return 1
        import random

        key = f"{len(job.input_ids)}:{job.input_ids[-16:]}:{job.sample}:{len(job.output_ids)}"
        return self.spec.draw(random.Random(key), batch)

    def settle(self, batch: Batch, now: float | None = None) -> list[Job]:
        """Update queues and tree after a pass and report to clients; returns finished jobs.

        ``now`` is the driver's simulated clock at the end of the pass (None: no clock).
        """
        finished = []
        for job, (_, n), done in zip(batch.jobs, batch.shapes, batch.complete):
            try:
                if batch.kind == "prefill":
                    job.prefilled += n
                if not done:
                    self._checkpoint(job, job.input_ids[: job.prefilled])
                    continue
                if job.finished_reason is None:
                    if batch.kind == "prefill":
                        self._checkpoint(job, job.input_ids)
                        self.running.append(job)
                    if job.stream and not self.steps.holds_stop_prefix(job):
                        job.on_update(build_output(job, self.model, finished=False), False)
                    continue
                if job in self.running:
                    self.running.remove(job)
                self._finish(job, now)
                finished.append(job)
            except Exception as exc:  # never leave a client waiting
                log.exception("emulated request %s failed", job.rid)
                self._fail(job, exc)
                finished.append(job)
        return finished

    # -------------------------------------------------------------- admission

    def _admit(self) -> list[tuple[Job, int]]:
        """``get_new_batch_prefill``: ``(job, new tokens)`` of the next prefill batch."""
        taken: list[tuple[Job, int]] = []
        rem_in, rem_chunk = self.max_prefill_tokens, self.chunked_prefill_size
        if self.chunked is not None:  # add_chunked_req
            job, self.chunked = self.chunked, None
            rest = len(job.input_ids) - job.prefilled
            n = rest if rem_chunk is None else min(rest, rem_chunk)
            taken.append((job, n))
            if n < rest:
                self.chunked = job
                return taken
            rem_in -= n
            rem_chunk = None if rem_chunk is None else rem_chunk - n
        matches = self._order()
        if any(j.priority for j in self.waiting):  # --enable-priority-scheduling: higher values first, stable
            self.waiting.sort(key=lambda j: -j.priority)
        while self.waiting:
            if rem_in <= 0 or (rem_chunk is not None and rem_chunk <= 0):
                break  # budget_state() != CONTINUE
            job = self.waiting[0]
            matched, node = matches.get(id(job)) or self.tree.match(job.namespace, job.input_ids,
                                                                     _max_prefix(job))
            extend = len(job.input_ids) - matched
            if rem_chunk is None and taken and extend >= rem_in:
                break
            n = extend if rem_chunk is None else min(extend, rem_chunk)
            self.waiting.pop(0)
            job.cached_tokens = job.prefilled = matched
            job.node = node
            self.tree.lock(node)
            taken.append((job, n))
            rem_in -= n
            if rem_chunk is not None:
                rem_chunk -= n
            if n < extend:
                self.chunked = job
                break
        return taken

    def _order(self) -> dict[int, tuple]:
        """Sort the waiting queue by the policy; lpm returns the matches it computed."""
        if self.schedule_policy != "lpm" or len(self.waiting) > LPM_MAX_QUEUE:
            return {}
        matches, demoted, seen = {}, set(), RadixTree()
        for job in self.waiting:
            matches[id(job)] = self.tree.match(job.namespace, job.input_ids, _max_prefix(job))
            if matches[id(job)][0] <= IN_BATCH_CHECK:
                if seen.match(job.namespace, job.input_ids)[0] >= IN_BATCH_DEPRIORITIZE:
                    demoted.add(id(job))
                else:
                    seen.insert(job.namespace, job.input_ids)
        self.waiting.sort(key=lambda j: float("inf") if id(j) in demoted else -matches[id(j)][0])
        return matches

    # ------------------------------------------------------------------ cache

    def _checkpoint(self, job: Job, ids: list[int]) -> None:
        """Insert ``ids`` (the computed prefix) and move the job's lock onto it."""
        self.tree.insert(job.namespace, ids)
        _, node = self.tree.match(job.namespace, ids)
        self.tree.lock(node)
        if job.node is not None:
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

    def _finish(self, job: Job, now: float | None) -> None:
        self._release(job, insert=job.finished_reason.get("type") != "abort")
        if now is not None:
            job.simulated_latency_s = self.request_overhead_s + now - job.sim_arrival
        s = self.per_lora[job.lora_path or "base"]
        s.requests += 1
        s.prompt_tokens += len(job.input_ids)
        s.cached_tokens += job.cached_tokens
        s.completion_tokens += len(job.through_stop)
        s.simulated_latency_s += job.simulated_latency_s or 0.0
        job.on_update(build_output(job, self.model, finished=True), True)

    def _fail(self, job: Job, exc: Exception) -> None:
        """Abort ``job`` after an emulator error, with a minimal final output."""
        if job in self.running:
            self.running.remove(job)
        if self.chunked is job:
            self.chunked = None
        if job.node is not None:
            self.tree.unlock(job.node)
            job.node = None
        reason = abort_reason(exc)
        job.on_update({"text": "", "output_ids": [], "meta_info": {"id": job.rid, "finish_reason": reason}}, True)


def _max_prefix(job: Job) -> int:
    """``Req._compute_max_prefix_len``: keep one token (and logprob positions) to compute."""
    cap = len(job.input_ids) - 1
    if job.logprobs.enabled and job.logprobs.start >= 0:
        cap = min(cap, job.logprobs.start)
    return cap
