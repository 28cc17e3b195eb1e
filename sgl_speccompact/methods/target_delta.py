"""``target_delta``: Target-self for a session whose summary mostly holds.

The previous summary's lines that still hold are judged in bounded
prefill-only batches per slot branch and copied; the target writes only
what the new turns add (the slot loop with ``[carried lines, target
writer]``, :mod:`~sgl_speccompact.programs.slot_loop`).  Without a
previous summary it is Target-self: one generation per branch, and the result says
so (``ran_as: "target_self"``).
"""

from __future__ import annotations

from ..programs.context import TARGET_DELTA
from ..result import SlotResult
from .pipeline import Job, register
from .speccompact import run_slots, slot_context


@register("target_delta", judges=True, new_tokens=lambda cfg: cfg.max_tokens_per_slot)
def target_delta_method(job: Job) -> list[SlotResult]:
    """Target-delta: the shared prefix, one fork per slot; carried lines judged and copied, the rest written."""
    if not job.previous_summary:  # nothing to carry: every line is written, as Target-self writes it
        job.ran_as = "target_self"
    return run_slots(job, slot_context(job, TARGET_DELTA))
