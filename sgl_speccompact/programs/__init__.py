"""The SGLang programs: the one slot program every slot method runs, its loop, judges and steps.

Call them from your own SGLang pipeline: :func:`speccompact` (the target
side: one branch per slot, written by the one slot loop with the method's
proposers, :class:`Proposers`) and :func:`draft_slot` (the drafter side);
the helpers take ``s``: :func:`open_slot`, :func:`verify_line` (the
engine's judge question about a line, asked of the context's
:class:`~sgl_speccompact.core.judging.Judge`), :func:`repair_line`.  :func:`retire` and :func:`scratch` end program
states without sglang 0.5.23's ``__del__`` hang (:mod:`.states`).
:class:`SlotContext` is what a program is asked (built before it runs,
immutable), :class:`SlotRun` one run's changing state.

May import: ``backends``, ``core``, ``history`` and the vocabulary.  Must
not import: methods, service, launch.
"""

from .context import SPECCOMPACT, TARGET_DELTA, TARGET_SELF, Proposers, SlotContext, SlotRun
from .slots import speccompact
from .states import retire, scratch
from .judges import verify_line
from .steps import draft_slot, open_slot, repair_line

__all__ = ["SPECCOMPACT", "TARGET_DELTA", "TARGET_SELF", "Proposers", "SlotContext", "SlotRun", "draft_slot",
           "open_slot", "repair_line", "retire", "scratch", "speccompact", "verify_line"]
