"""Summary slots as data: the six OpenClaw slots of SpecCompact Figure 5.

A slot is one section of the structured summary.  Each has a ``name`` (used
in prompts and results), a ``title`` (the section heading), a ``contract``
(what belongs in it) and a ``body_format`` (how its lines look).  The
contracts are the paper's wording; the body formats are OpenClaw's section
bodies.  Pass any tuple of :class:`Slot` as a custom schema.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .errors import ConfigError


class Slot(BaseModel):
    """One section of the summary."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")  # identifier, e.g. "next_steps"
    title: str = Field(min_length=1)  # heading in the summary, e.g. "Next Steps"
    contract: str = Field(min_length=1)  # what the slot must contain
    body_format: str = Field(min_length=1)  # the exact shape of the slot body
    sections: tuple[str, ...] = ()  # sub-section titles ("### <title>" lines) written as separate branches

    @field_validator("sections")
    @classmethod
    def _sections_distinct(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        v = tuple(t.strip() for t in v)
        if any(not t or "\n" in t for t in v) or len(set(v)) != len(v):
            raise ValueError("sections must be distinct one-line titles")
        return v

    @field_validator("title", "contract", "body_format")
    @classmethod
    def _no_surrounding_space(cls, v: str) -> str:
        return v.strip()


OPENCLAW_SLOTS: tuple[Slot, ...] = (
    Slot(
        name="goal",
        title="Goal",
        contract=(
            "What is the user trying to accomplish? Can be multiple items if the "
            "session covers different tasks."
        ),
        body_format="- [What the user is trying to accomplish]",
    ),
    Slot(
        name="constraints_preferences",
        title="Constraints & Preferences",
        contract=(
            "Any constraints, preferences, or requirements mentioned by the user. "
            "Return (none) if none were mentioned."
        ),
        body_format="- [Constraint, preference or requirement]\n(or (none))",
    ),
    Slot(
        name="progress",
        title="Progress",
        contract=(
            "Use the OpenClaw Progress substructure: Done contains completed "
            "tasks/changes; In Progress contains current work; Blocked contains "
            "issues preventing progress, if any."
        ),
        body_format=(
            "### Done\n- [x] [Completed task/change]\n\n### In Progress\n"
            "- [ ] [Current work]\n\n### Blocked\n- [Issue preventing progress, if any]"
        ),
        sections=("Done", "In Progress", "Blocked"),
    ),
    Slot(
        name="key_decisions",
        title="Key Decisions",
        contract="Decisions with brief rationale, using the pattern Decision: rationale.",
        body_format="- **[Decision]**: [Brief rationale]",
    ),
    Slot(
        name="next_steps",
        title="Next Steps",
        contract="Ordered list of what should happen next.",
        body_format="1. [First next step]\n2. [Second next step]",
    ),
    Slot(
        name="critical_context",
        title="Critical Context",
        contract=(
            "Any data, examples, or references needed to continue. Return (none) if "
            "not applicable. Preserve exact file paths, function names, and error "
            "messages."
        ),
        body_format="- [Data, example or reference needed to continue]\n(or (none))",
    ),
)


def validate_schema(slots: tuple[Slot, ...] | list[Slot]) -> tuple[Slot, ...]:
    """Check a schema and return it as a tuple.

    >>> [s.name for s in validate_schema(OPENCLAW_SLOTS)][:2]
    ['goal', 'constraints_preferences']
    """
    slots = tuple(slots)
    if not slots:
        raise ConfigError("a schema needs at least one slot")
    for s in slots:
        if not isinstance(s, Slot):
            raise ConfigError(f"schema entries must be Slot, got {type(s).__name__}")
    names = [s.name for s in slots]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"duplicate slot names in schema: {dup}")
    return slots
