"""Can the target judge, and with which judge?  The launcher's start-up probe of both judges.

Every verdict reads how much of the next-token probability the two labels
carry (the *label mass*, :mod:`~sgl_speccompact.core.judge`).  A target
that answers the judge question puts most of its probability there; one
that meant to write something else puts almost none, and r = p+/(p+ + p-)
is then noise.  Such verdicts are *unreliable* below
``config.min_label_mass``: no line is accepted or kept and no SJC entry
deleted on one, whatever r says.

What a judge carries depends on the prompt it is asked, not only on the
label words, so the probe asks each judge the engine's own question: the
first drafted line of the first slot of a small history, on the slot
program's own shared prefix and slot opening
(:func:`~sgl_speccompact.programs.judges.first_line`, :func:`first_line_verdict`),
exactly as a compaction asks it.  It measures both judges (:data:`~sgl_speccompact.config.JUDGES`):
the label-logprob program judge and sglang's ``POST /v1/decisions``, one
request each, and :func:`pick_judge` picks the one whose labels carry the
mass: the configured one (the program judge by default: the paper's
protocol, sharing the radix prefix with the drafting) while it carries
``min_label_mass``, else the other if that one does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..backends.endpoint import connect
from ..config import JUDGES, CompactConfig, make_config
from ..errors import ConfigError, SpecCompactError
from ..programs.context import SPECCOMPACT
from ..programs.judges import first_line
from ..programs.states import on_daemon_thread, retire
from ..schema import OPENCLAW_SLOTS
from ..backends.layout import plan_layout
from .pipeline import Backends, Method, start
from .request import MethodRequest
from .speccompact import shared_text, slot_context

PROBE_MESSAGES = (  # a history the probe line has a source in
    {"role": "user", "content": "Create hello.py that prints Hello, World!"},
    {"role": "assistant", "content": "I created hello.py; it prints Hello, World!"},
)
PROBE_LINE = "- Create hello.py that prints Hello, World!"  # the first Goal line a drafter would propose
LIKELY_CAUSES = (
    "a wrong chat template (set --chat-template to the model's own)",
    "a template that opens a thinking block before the answer",
    "label words the model does not use (config positive_label / negative_label)",
)


@dataclass(frozen=True)
class JudgeProbe:
    """What the probe measured of each judge, and the judge it picked."""

    masses: dict[str, float] = field(default_factory=dict)  # judge -> label mass on the engine's question
    errors: dict[str, str] = field(default_factory=dict)  # judge -> why it could not be measured
    pick: str = "program"  # the judge compactions use (config.judge)
    reason: str = ""  # why, in words

    @property
    def mass(self) -> float | None:
        """The picked judge's label mass (None: it could not be measured)."""
        return self.masses.get(self.pick)


def first_line_verdict(target: Any, cfg: CompactConfig, messages: list[dict] | tuple = PROBE_MESSAGES,
                       line: str = PROBE_LINE, slot: str | None = None):
    """What ``cfg.judge`` answers about ``line`` as the first line of ``slot`` (the first slot by default)
    in a compaction of ``messages``: the engine's own prompt, one target request.  A
    :class:`~sgl_speccompact.core.judging.Judged`: ``verdicts[0]`` and the request's cost.

    Raises
    ------
    BackendError, LabelTokenError, ConfigError
        The target failed or refused, or a label word is no single token in its vocabulary.
    """
    return on_daemon_thread(_first_line_verdict, connect(target), cfg, list(messages), line, slot)


def _first_line_verdict(target, cfg: CompactConfig, messages: list[dict], line: str, slot: str | None):
    request = MethodRequest(messages).parsed(cfg)
    probe = Method("probe", program=lambda job: [], judges=True)  # a judging method: its labels are checked
    job = start(probe, request, Backends(target), cfg, OPENCLAW_SLOTS)
    job.layout = plan_layout(None, list(request.messages), target=job.target)
    ctx = slot_context(job, SPECCOMPACT)
    shared, _, _ = shared_text(job)
    asked = next((s for s in job.slots if s.name == slot), None) if slot is not None else None
    if slot is not None and asked is None:
        raise ConfigError(f"no slot {slot!r} in the schema", field="slot")
    state = first_line.run(shared=shared, ctx=ctx, line=line, slot=asked, backend=job.target)
    try:
        err = state.error()
    finally:
        retire([state])
    if err is not None:
        raise err if isinstance(err, SpecCompactError) else SpecCompactError(str(err))
    return state.ret_value


def probe_label_mass(target: Any, cfg: CompactConfig) -> float:
    """The label mass (p+ + p-) of ``cfg.judge``'s verdict on the engine's own question; one request."""
    return first_line_verdict(target, cfg).verdicts[0].label_mass


def probe_judges(target: Any, cfg: CompactConfig) -> JudgeProbe:
    """Both judges' label mass on the engine's own question, and the one to use (:func:`pick_judge`)."""
    masses, errors = {}, {}
    for name in JUDGES:
        try:
            masses[name] = probe_label_mass(target, make_config(cfg, judge=name))
        except SpecCompactError as exc:  # one judge that fails decides nothing about the other
            errors[name] = str(exc)
    pick, reason = pick_judge(masses, cfg)
    return JudgeProbe(masses, errors, pick, reason)


def pick_judge(masses: dict[str, float], cfg: CompactConfig) -> tuple[str, str]:
    """The judge whose labels carry the mass: ``(name, why)``.

    The configured judge while its mass reaches ``min_label_mass``; else the
    other judge if its does; else the configured one (neither can judge:
    every verdict is unreliable, and :func:`label_mass_warning` says so).

    >>> pick_judge({"program": 1e-5, "decisions": 0.04}, CompactConfig(min_label_mass=0.01))[0]
    'decisions'
    >>> pick_judge({"program": 0.9, "decisions": 0.99}, CompactConfig())[0]
    'program'
    >>> print(pick_judge({"program": 1e-5}, CompactConfig())[1])
    neither judge's labels carry min_label_mass 0.1 (program 1e-05, decisions not measured): keeping program
    """
    mine, floor = cfg.judge, cfg.min_label_mass
    other = next(j for j in JUDGES if j != mine)
    seen = ", ".join(f"{j} {masses[j]:.3g}" if j in masses else f"{j} not measured" for j in (mine, other))
    if masses.get(mine, -1.0) >= floor:
        return mine, f"its labels carry {masses[mine]:.3g} of the next-token probability ({seen}; " \
                     f"min_label_mass {floor:g})"
    if masses.get(other, -1.0) >= floor:
        return other, f"the {mine} judge's labels carry less than min_label_mass {floor:g}, the {other} " \
                      f"judge's carry enough ({seen})"
    return mine, f"neither judge's labels carry min_label_mass {floor:g} ({seen}): keeping {mine}"


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
            f"write every line, carried lines are not kept, SJC deletes nothing, and auto picks no judging "
            f"method.  Likely causes:\n{causes}")
