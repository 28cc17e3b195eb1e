"""Build ``/generate`` output dicts exactly as SGLang 0.5.23 shapes them.

Sources mirrored:

* ``sglang/srt/managers/tokenizer_manager.py`` ``_handle_batch_output``:
  ``{"text", "output_ids", "meta_info"}``; ``meta_info`` keys and their order
  (``id``, ``finish_reason``, ``prompt_tokens``, ``weight_version``,
  ``num_retractions``, logprob fields, ``reasoning_tokens``,
  ``completion_tokens``, ``cached_tokens``, ``weight_versions``, ``cached_tokens_details``, ``dp_rank``,
  ``e2e_latency``);
* ``add_logprob_to_meta_info`` / ``detokenize_logprob_tokens``: logprob
  entries are ``(logprob, token_id, text_or_None)``, per-position lists are
  ``None`` where the scheduler had no values;
* ``sglang/srt/managers/detokenizer_manager.py`` ``trim_matched_stop``: a
  matched stop token is dropped from the ids, a matched stop string cuts the
  text at its first occurrence (kept with ``no_stop_trim``);
* ``sglang/srt/managers/scheduler_components/output_streamer.py``: output
  ids and output logprobs run through the stop (``max(len, 1)`` logprob
  rows, so a prefill-only request still gets its next-token row).

Emulator additions: ``simulated_latency_s`` when a cost model runs (a
simulation, never a measurement).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .jobs import Job
    from .model import EmulatedModel


def build_output(job: "Job", model: "EmulatedModel", finished: bool) -> dict:
    """The response dict for ``job`` (final when ``finished``, else a stream chunk)."""
    return {
        "text": output_text(job, model, finished),
        "output_ids": list(job.through_stop),
        "meta_info": meta_info(job, model, finished),
    }


def output_text(job: "Job", model: "EmulatedModel", finished: bool) -> str:
    """Decoded output with the detokenizer's stop trimming."""
    sp = job.sampling
    ids = list(job.through_stop)
    matched = (job.finished_reason or {}).get("matched") if finished else None
    if isinstance(matched, int) and not sp.no_stop_trim and ids:
        ids = ids[:-1]
    text = model.decode(ids, skip_special_tokens=sp.skip_special_tokens)
    if isinstance(matched, str):
        pos = text.find(matched)
        if pos != -1:
            text = text[: pos + len(matched)] if sp.no_stop_trim else text[:pos]
    if not finished and text.endswith("\ufffd"):
        text = text.rstrip("\ufffd")  # an incomplete UTF-8 sequence waits for more tokens
    return text


def meta_info(job: "Job", model: "EmulatedModel", finished: bool) -> dict:
    """``meta_info`` in the server's key order."""
    out_len = len(job.through_stop)
    info = {
        "id": job.rid,
        "finish_reason": job.finished_reason if finished else None,
        "prompt_tokens": len(job.input_ids),
        "weight_version": "default",
        "num_retractions": 0,
    }
    if job.logprobs.enabled:
        info.update(logprob_fields(job, model, max(out_len, 1)))
    info["reasoning_tokens"] = 0
    info["completion_tokens"] = out_len
    info["cached_tokens"] = job.cached_tokens
    info["weight_versions"] = [{"version": "default", "start": 0, "end": out_len}]
    info["cached_tokens_details"] = {"device": job.cached_tokens, "host": 0} if job.cached_tokens > 0 else None
    info["dp_rank"] = None
    if finished:
        info["e2e_latency"] = time.perf_counter() - job.arrival
        info["response_sent_to_client_ts"] = time.time()
        if job.simulated_latency_s is not None:
            info["simulated_latency_s"] = job.simulated_latency_s
    return info


def logprob_fields(job: "Job", model: "EmulatedModel", end: int) -> dict:
    """The logprob keys of ``meta_info`` (``add_logprob_to_meta_info``)."""
    lp, req = job.lp, job.logprobs
    text = req.with_text

    def rows(rows_):
        return [None if r is None else entries(r) for r in rows_]

    def entries(pairs):
        return [(v, t, model.token_text(t) if text else None) for v, t in pairs]

    fields = {
        "input_token_logprobs": entries(lp.input_token),
        "output_token_logprobs": entries(lp.output_token[:end]),
        "output_token_logprobs_length": len(lp.output_token[:end]),
    }
    if req.top_n > 0:
        fields["input_top_logprobs"] = rows(lp.input_top)
        fields["output_top_logprobs"] = rows(lp.output_top[:end])
    if req.token_ids is not None:
        fields["input_token_ids_logprobs"] = rows(lp.input_ids)
        fields["output_token_ids_logprobs"] = rows(lp.output_ids[:end])
    return fields
