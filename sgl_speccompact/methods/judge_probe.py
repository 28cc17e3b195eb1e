"""Can the target judge?  The launcher's start-up probe of its label mass.

Every verdict reads the probabilities of the two label words at the
target's next token (:mod:`~sgl_speccompact.core.judge`).  A target that
answers the judge question puts most of its probability there; one that
meant to write something else puts almost none (p+ + p- of 0.001-0.006 has
been seen), and r = p+/(p+ + p-) is then noise.  Such verdicts are
*unreliable* below ``config.min_label_mass``: no line is accepted and no
SJC entry deleted on one, whatever r says.

:func:`probe_label_mass` asks the target one Source-Judged Compaction
question about a two-message history, exactly as SJC would (one batched
judge request on ``SpecCompactEndpoint``), and returns the verdict's label
mass; :func:`label_mass_warning` words what a low one means.
"""

from __future__ import annotations

from typing import Any

from ..config import CompactConfig
from .source_judge import source_judge

PROBE_MESSAGES = (  # a history any summary's first line has a source in
    {"role": "user", "content": "Create hello.py that prints Hello, World!"},
    {"role": "assistant", "content": "I created hello.py; it prints Hello, World!"},
)
PROBE_SUMMARY = "## Goal\n- Create hello.py that prints Hello, World!\n"  # one entry, one verdict
LIKELY_CAUSES = (
    "a wrong chat template (set --chat-template to the model's own)",
    "a template that opens a thinking block before the answer",
    "label words the model does not use (config positive_label / negative_label)",
)


def probe_label_mass(target: Any, cfg: CompactConfig) -> float:
    """The target's label mass (p+ + p-) on one judge question; one target request.

    Raises
    ------
    BackendError, LabelTokenError
        The target failed, or a label word is no single token in its vocabulary.
    """
    _, report = source_judge(PROBE_SUMMARY, list(PROBE_MESSAGES), target=target, config=cfg)
    return min(e.label_mass for e in report.entries)


def label_mass_warning(mass: float, cfg: CompactConfig) -> str | None:
    """The warning for a label mass below ``cfg.min_label_mass``, naming the likely causes; None if it is not.

    >>> label_mass_warning(0.9, CompactConfig()) is None
    True
    >>> print(label_mass_warning(0.004, CompactConfig()).splitlines()[0])
    the target cannot judge: its judge labels carry 0.004 of the next-token probability (min_label_mass 0.1).
    """
    if mass >= cfg.min_label_mass:
        return None
    causes = "\n".join(f"  - {c}" for c in LIKELY_CAUSES)
    return (f"the target cannot judge: its judge labels carry {mass:.3g} of the next-token probability "
            f"(min_label_mass {cfg.min_label_mass:g}).\nIts verdicts are unreliable: SpecCompact lets the target "
            f"write every line, SJC deletes nothing, and auto picks no judging method.  Likely causes:\n{causes}")
