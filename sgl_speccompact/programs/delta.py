"""Target-delta's slot stream: the previous summary's lines that still hold are copied, the target writes the rest.

A single-model method for sessions whose summary mostly holds.  Target-self
rewrites every line of every slot at each compaction; with a previous
summary most of those lines are copies.  Target-delta runs the slot stream
of :mod:`~sgl_speccompact.programs.slot_stream` with the target in the
drafter's place:

* each branch's carried lines are judged together, in one prefill-only
  target request (:mod:`~sgl_speccompact.programs.carried_batch`), each
  question the criterion first and its line last
  (:data:`~sgl_speccompact.core.prompts.CARRIED_QUESTION_SHORT`), so the
  batch shares everything but the lines; the ones that still hold are
  appended to the branch as text, within the cap the evidence rule sets: no
  decode at all;
* then the target continues the branch in one generation, capped at the
  slot's remaining tokens: only what the new turns add.  In a one-branch
  slot with sub-sections, the generation before a carried ``### `` heading
  stops at that heading (``\\n#``), so a new Done line lands under Done.

The target's lines are not judged (the target wrote them); they pass the
same checks, budget and duplicate claim as any line
(:func:`~sgl_speccompact.core.admission.admit`, source ``TARGET``), and one
failing a check or claimed by another branch is skipped instead of ending
the slot: a target that repeats a carried line has only repeated it.  With no previous summary
every branch is one generation, as in Target-self.

Cost per slot branch: one generation, plus one generation per carried
sub-section heading of a one-branch slot; with carried lines, one judge
batch, and before it one prefill of the question they share when there are
two or more.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import sglang as sgl

from ..core.admission import Source, Step
from ..core.carried import section_heading
from ..core.lines import DraftBuffer, LineKind, split_draft
from ..result import SlotResult
from .context import SlotRun
from .slot_stream import SECTION_STOP, SlotStream
from .slots import branches_of, per_slot, run_slot
from .states import on_daemon_thread
from .steps import end_states, fork_slots, gen_on_copy


class DeltaStream(SlotStream):
    """A :class:`~.slot_stream.SlotStream` whose new lines the target writes, unjudged.

    Carried lines take the slot stream's own path (one judge batch, the
    cap, stale lines); :meth:`refill` asks the target instead of the
    drafter, and :meth:`step` admits the target's lines as written.
    """

    ended = "complete"  # why the target's last generation ended: the stop reason once its lines are used
    short_carried = True  # one criterion shared by a slot's carried questions: a short suffix per line

    def refill(self, prefix: tuple[str, ...]) -> str | None:
        """The target continues the branch on a copy, up to the slot's remaining tokens; its
        complete lines fill the buffer.  ``complete`` when it writes nothing more."""
        if self.buffer.done(prefix):
            return self.ended
        left = self.budget.max_tokens - self.budget.tokens
        if left <= 0:
            return "token_budget"
        before_heading = any(section_heading(x, self.slot) for x in self.carried)
        sampling = {"max_tokens": left, "temperature": 0.0}
        if self.section is not None or before_heading:
            sampling["stop"] = SECTION_STOP
        text, meta = self.timed("generate", gen_on_copy, self.s, "delta", sampling)
        self.ctx.recorder.request("target", "generate", meta)
        finished = (meta.get("finish_reason") or {}).get("type") != "length"
        lines, truncated = split_draft(text, finished)
        while not any(a.strip() for a in prefix) and lines and not lines[0].strip():
            lines.pop(0)  # a slot does not open with blank lines
        self.ended = "complete" if finished else "token_budget"
        if not lines:
            return self.ended
        self.buffer = DraftBuffer(prefix, lines, exhausted=True)
        self.cut = lines[-1] if truncated else None
        self.count(lines)
        return None

    def step(self, prefix: tuple[str, ...], line: str) -> str | None:
        """Admit a line the target wrote (source ``TARGET``): checked, budgeted and claimed, never
        judged; a refused line is skipped (the buffer goes on from ``prefix``)."""
        if self.ends_section(line):
            return "complete"
        kind = self.kind(line)
        if kind is LineKind.JUDGE and line == self.cut:
            return "token_budget"  # cut off by the slot's remaining tokens
        done, _ = self.offer(line, Source.TARGET, kind)
        if done.step is Step.STOP:
            return done.reason
        if done.step is Step.DROP:
            self.buffer.prefix = prefix  # skipped: the next buffered line continues the accepted ones
        return None

    def prefetch(self, prefix: tuple[str, ...], line: str) -> None:
        """No drafter: nothing is drafted while a carried line is judged one at a time."""


@sgl.function
def target_delta_program(s, shared, ctx):
    """Target-delta: shared prefix, one fork per branch, carried lines judged and copied, the rest written.

    Returns the :class:`~sgl_speccompact.result.SlotResult` of every slot in
    schema order; the branches run on daemon threads
    (:func:`~.states.on_daemon_thread`).
    """
    return on_daemon_thread(target_delta_body, s, shared, ctx)


def target_delta_body(s, shared, ctx) -> list[SlotResult]:
    """The body of :func:`target_delta_program`, on a daemon thread: fork, every slot, end the forks."""
    if ctx.target is None:
        ctx = replace(ctx, target=s.stream_executor.backend)
    run = SlotRun(ctx, shared)
    forks = fork_slots(s, run, n=sum(len(branches_of(slot, ctx)) for slot in ctx.slots))
    try:
        return per_slot(forks, run, partial(run_slot, stream=DeltaStream))
    finally:
        end_states(forks)
