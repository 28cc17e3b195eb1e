"""Every prompt text in one place.

Drafter side: the prompt of SpecCompact Figure 5, verbatim except for
whitespace.  The conversation comes before anything slot-specific, so it is
a radix prefix shared by all slots on the drafter server.

Target side (Figure 6's layout; its wording is not in the paper's text, so
it is ours): one shared prefix -- instruction, rendered history, all slot
contracts -- byte-identical for every slot, then the per-slot request, then
the slot's accepted lines inside the assistant turn.  A verification closes
that turn and asks one question whose answer is a single label word; a
repair simply continues the assistant turn.

Chat roles are applied by the programs through ``sgl.system/user/assistant``;
this module only builds strings.
"""

from __future__ import annotations

from .schema import Slot

# Qwen3-style templates open a reasoning block; an empty one disables thinking.
THINK_OFF = "<think>\n\n</think>\n\n"

SUMMARIZER_SYSTEM = (
    "You are a context summarization assistant. Your task is to read a conversation "
    "between a user and an AI coding assistant, then produce structured summary content "
    "following the requested format.\n\n"
    "Do NOT continue the conversation. Do NOT respond to any questions in the "
    "conversation. ONLY output the requested summary content."
)

# ---------------------------------------------------------------- drafter (Figure 5)

DRAFTER_CONTEXT = (
    "The messages below are a conversation to summarize. The next request will ask for "
    "one section of a structured context checkpoint summary that another LLM will use to "
    "continue the work.\n\n"
    "The complete OpenClaw-style summary schema contains these sections:\n{slot_lines}\n\n"
    "{previous_summary}"
    "Conversation:\n<conversation>\n{trajectory}\n</conversation>\n\n"
    "Keep the requested section concise and consistent with how it would appear inside "
    "the complete OpenClaw-style summary. Preserve exact file paths, function names, and "
    "error messages.\n\n"
)

DRAFTER_SLOT_REQUEST = (
    "Slot request: Generate only the {slot} slot as one section of the complete "
    "OpenClaw-style summary.\nSlot title: {slot_title}\nSlot contract: {slot_contract}\n\n"
    "Use this exact slot-body format:\n{slot_format}\n\n"
    "Return only the slot content, not JSON. Do not include the top-level slot heading. "
    "Nested headings required by the slot contract are allowed."
)

PREVIOUS_SUMMARY_BLOCK = (
    "Summary of the earlier part of the conversation:\n<previous_summary>\n{summary}\n"
    "</previous_summary>\n\n"
)

# ---------------------------------------------------------------- target (Figure 6 layout)

TARGET_SHARED = (
    "The messages below are a conversation to summarize. Each following request asks for "
    "one section of a structured context checkpoint summary that another LLM will use to "
    "continue the work.\n\n"
    "{previous_summary}"
    "Conversation:\n<conversation>\n{trajectory}\n</conversation>\n\n"
    "The summary has these sections:\n{slot_contracts}\n\n"
    "Preserve exact file paths, function names, and error messages.\n\n"
)

TARGET_SLOT_REQUEST = (
    "Slot request: write only the {slot} section ({slot_title}).\n"
    "Contract: {slot_contract}\n"
    "Body format:\n{slot_format}\n\n"
    "Return only the section body, one item per line, without the section heading."
)

VERIFY_QUESTION = (
    "Proposed next line for the {slot_title} section:\n<line>\n{line}\n</line>\n\n"
    "Answer {positive} if this line is supported by the conversation{or_previous} and is "
    "consistent with the lines already written for this section; otherwise answer "
    "{negative}. Reply with one word: {positive} or {negative}."
)


def slot_lines(slots: tuple[Slot, ...]) -> str:
    """The schema as listed in the drafter prompt (Figure 5's ``{slot_lines}``).

    >>> from .schema import OPENCLAW_SLOTS
    >>> slot_lines(OPENCLAW_SLOTS[:2])
    '- goal (Goal)\\n- constraints_preferences (Constraints & Preferences)'
    """
    return "\n".join(f"- {s.name} ({s.title})" for s in slots)


def slot_contracts(slots: tuple[Slot, ...]) -> str:
    """Every slot's title and contract, for the target's shared prefix."""
    return "\n".join(f"- {s.name} ({s.title}): {s.contract}" for s in slots)


def _previous(previous_summary: str | None) -> str:
    return PREVIOUS_SUMMARY_BLOCK.format(summary=previous_summary.strip()) if previous_summary else ""


def drafter_context(history: str, slots: tuple[Slot, ...], previous_summary: str | None = None) -> str:
    """Figure 5 up to the slot request: identical for every slot of one history."""
    return DRAFTER_CONTEXT.format(
        slot_lines=slot_lines(slots), trajectory=history, previous_summary=_previous(previous_summary)
    )


def drafter_slot_request(slot: Slot) -> str:
    """Figure 5's slot request for one slot."""
    return DRAFTER_SLOT_REQUEST.format(
        slot=slot.name, slot_title=slot.title, slot_contract=slot.contract, slot_format=slot.body_format
    )


def drafter_messages(
    history: str, slots: tuple[Slot, ...], slot: Slot, previous_summary: str | None = None
) -> list[dict]:
    """The drafter prompt as chat messages (for SFT data and OpenAI-style clients)."""
    return [
        {"role": "system", "content": SUMMARIZER_SYSTEM},
        {"role": "user", "content": drafter_context(history, slots, previous_summary) + drafter_slot_request(slot)},
    ]


def target_shared(history: str, slots: tuple[Slot, ...], previous_summary: str | None = None) -> str:
    """The user-turn text every target request of one compaction starts with."""
    return TARGET_SHARED.format(
        trajectory=history, slot_contracts=slot_contracts(slots), previous_summary=_previous(previous_summary)
    )


def target_slot_request(slot: Slot) -> str:
    """The per-slot request that follows the shared prefix."""
    return TARGET_SLOT_REQUEST.format(
        slot=slot.name, slot_title=slot.title, slot_contract=slot.contract, slot_format=slot.body_format
    )


def verify_question(slot: Slot, line: str, positive: str, negative: str, has_previous: bool = False) -> str:
    """The judge question for one proposed line.

    >>> from .schema import OPENCLAW_SLOTS
    >>> q = verify_question(OPENCLAW_SLOTS[0], "- fix a.py", "positive", "negative")
    >>> q.splitlines()[2], q.endswith("positive or negative.")
    ('- fix a.py', True)
    """
    return VERIFY_QUESTION.format(
        slot_title=slot.title, line=line, positive=positive, negative=negative,
        or_previous=" or the earlier summary" if has_previous else "",
    )


def section(slot: Slot, lines: list[str]) -> str:
    """One assembled summary section: heading plus body (``(none)`` if empty).

    >>> from .schema import OPENCLAW_SLOTS
    >>> section(OPENCLAW_SLOTS[0], ["- fix a.py", ""])
    '## Goal\\n- fix a.py'
    """
    body = "\n".join(lines).strip("\n")
    return f"## {slot.title}\n{body or '(none)'}"


def assemble(slots: tuple[Slot, ...], bodies: dict[str, list[str]]) -> str:
    """The full summary in schema order."""
    return "\n\n".join(section(s, bodies.get(s.name, [])) for s in slots) + "\n"
