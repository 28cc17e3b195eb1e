"""What one forward pass does to one request: SGLang's per-request step logic.

* After its prefill a request gets prompt logprobs (when asked) and its first
  token; a prefill-only request (``max_new_tokens == 0``) appends one dummy
  token and finishes with ``length`` 0.
* Finish checks run after every token in SGLang's order
  (``Req.update_finish_state``): an abort's ``to_finish``, then stop strings
  / stop regex on the decoded tail, then stop token ids and EOS (unless
  ``ignore_eos``), then ``max_new_tokens``.
* ``holds_stop_prefix`` is ``Req.check_match_stop_str_prefix``: a stream
  chunk that may end in a stop string is held back.
"""

from __future__ import annotations

import re

from .jobs import Job
from .model import Distribution, EmulatedModel


class Steps:
    """Request steps for one :class:`EmulatedModel`."""

    def __init__(self, model: EmulatedModel):
        self.model = model

    def prefill(self, job: Job) -> None:
        """The step that completes ``job``'s prefill."""
        if job.logprobs.enabled:
            self._input_logprobs(job)
        if job.prefill_only:
            job.output_ids.append(0)  # the scheduler's dummy token
            job.finished_reason, job.finished_len = job.to_finish or {"type": "length", "length": 0}, 0
            if job.logprobs.enabled:
                self._prefill_only_logprobs(job)
            return
        budget = job.sampling.max_new_tokens
        job.planned = self.model.plan(job.prompt, job.input_ids, job.params(), budget, job.sampling.ignore_eos)
        self.append(job)

    def append(self, job: Job) -> None:
        """Emit the next planned token and run the finish checks (one decode step)."""
        pos = len(job.output_ids)
        token = job.planned[pos] if pos < len(job.planned) else job.planned[-1]
        if job.logprobs.enabled:
            self._output_logprobs(job, token)
        job.output_ids.append(token)
        self.update_finish_state(job)

    def update_finish_state(self, job: Job) -> None:
        """``Req.update_finish_state`` for one new token; an abort's ``to_finish`` first (``check_finished``)."""
        sp, out = job.sampling, job.output_ids
        if job.to_finish is not None:
            job.finished_reason, job.to_finish = job.to_finish, None
            return
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

    def holds_stop_prefix(self, job: Job) -> bool:
        """``Req.check_match_stop_str_prefix``: hold a chunk that may end in a stop string."""
        sp = job.sampling
        if not sp.stop_strs:
            return False
        tail = self.model.decode(job.output_ids[-min(sp.stop_str_max_len + 1, len(job.output_ids)):])
        for stop in filter(None, sp.stop_strs):
            if stop in tail or any(tail.endswith(stop[:i]) for i in range(1, len(stop) + 1)):
                return True
        return False

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
