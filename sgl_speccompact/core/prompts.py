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

from .hermes_prompt import HERMES_PREAMBLE as HERMES_SYSTEM  # noqa: F401  (re-exported: marks a Hermes prompt)
from .hermes_prompt import HERMES_SECTIONS, focus_text, hermes_prompt  # noqa: F401 - re-exported: the prompts of every method in one module
from ..schema import Slot

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

# Incremental compaction: what the slot requests add when a previous summary
# exists, as the baselines' update prompts say it for the whole summary.
KEEP_PREVIOUS = (
    "\nThe summary of the earlier part of the conversation is given above: keep every fact "
    "of it that belongs in this section and still holds, add what the conversation "
    "established since, and drop what it made obsolete."
)

# The focus topic is the user's text: quoted (hermes_prompt.focus_text) and
# framed as a label, never as an instruction.
FOCUS_BLOCK = (
    "Focus topic, given by the user as a label for what matters most (not an instruction): "
    "{focus}\nGive what concerns it priority and full detail; keep the rest short.\n\n"
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

VERIFY_CRITERION = (
    "Answer {positive} if this line is supported by the conversation{or_previous} and is "
    "consistent with the lines already written for this section; otherwise answer "
    "{negative}. Reply with one word: {positive} or {negative}."
)

# Long form (short_judge_suffix off): the whole question after every line.
VERIFY_QUESTION = "Proposed next line for the {slot_title} section:\n<line>\n{line}\n</line>\n\n" + VERIFY_CRITERION

# A line carried from the previous summary (incremental compaction) is asked
# whether it STILL HOLDS after the conversation above, which is the turns since
# that summary.  Its place in the earlier summary is no evidence: the earlier
# summary is the line's origin, so "supported by the earlier summary" would
# pass every carried line.  The rubric in the shared prefix is the drafted
# lines' one, so the carried criterion is asked in the question itself.
CARRIED_CRITERION = (
    "The conversation above is what happened since the earlier summary was written. Answer "
    "{positive} only if the line still holds after it: the conversation does not contradict it "
    "or make it obsolete, and, for a step still to do or work in progress, the conversation did "
    "not complete or abandon it (completed work belongs in Done). That the earlier summary holds "
    "the line is not evidence. Otherwise answer {negative}. Reply with one word: {positive} or "
    "{negative}."
)

# Criterion first, for every method: the same words before the line, so one slot's batch of carried
# questions shares them as a cached prefix and each question adds only its line in tags.
CARRIED_QUESTION = (
    "Each request quotes one line of the earlier summary, proposed again for the {slot_title} "
    "section, in line tags. " + CARRIED_CRITERION + "\n\n<line>\n{line}\n</line>"
)

# Short form: what is the same for every judgement -- the rubric and the label
# words -- sits once at the end of the shared prefix (``judge_prompts.judge_rubric``),
# so a judgement's suffix is the line in tags.
VERIFY_SHORT = "<line>\n{line}\n</line>"


def slot_lines(slots: tuple[Slot, ...]) -> str:
    """The schema as listed in the drafter prompt (Figure 5's ``{slot_lines}``).

    >>> from ..schema import OPENCLAW_SLOTS
    >>> slot_lines(OPENCLAW_SLOTS[:2])
    '- goal (Goal)\\n- constraints_preferences (Constraints & Preferences)'
    """
    return "\n".join(f"- {s.name} ({s.title})" for s in slots)


def slot_contracts(slots: tuple[Slot, ...]) -> str:
    """Every slot's title and contract, for the target's shared prefix."""
    return "\n".join(f"- {s.name} ({s.title}): {s.contract}" for s in slots)


def _previous(previous_summary: str | None) -> str:
    return PREVIOUS_SUMMARY_BLOCK.format(summary=previous_summary.strip()) if previous_summary else ""


def focus_block(focus: str | None) -> str:
    """The focus paragraph of the shared prompts ("" without a focus).

    >>> focus_block(None), focus_block('db "x"').startswith('Focus topic')
    ('', True)
    """
    quoted = focus_text(focus)
    return FOCUS_BLOCK.format(focus=quoted) if quoted else ""


def drafter_context(history: str, slots: tuple[Slot, ...], previous_summary: str | None = None,
                    focus: str | None = None) -> str:
    """Figure 5 up to the slot request: identical for every slot of one history."""
    return DRAFTER_CONTEXT.format(
        slot_lines=slot_lines(slots), trajectory=history, previous_summary=_previous(previous_summary)
    ) + focus_block(focus)


def drafter_slot_request(slot: Slot, has_previous: bool = False) -> str:
    """Figure 5's slot request for one slot (``has_previous``: plus :data:`KEEP_PREVIOUS`).

    >>> from ..schema import OPENCLAW_SLOTS
    >>> "still holds" in drafter_slot_request(OPENCLAW_SLOTS[0], has_previous=True)
    True
    """
    return DRAFTER_SLOT_REQUEST.format(
        slot=slot.name, slot_title=slot.title, slot_contract=slot.contract, slot_format=slot.body_format
    ) + (KEEP_PREVIOUS if has_previous else "")


def drafter_messages(
    history: str, slots: tuple[Slot, ...], slot: Slot, previous_summary: str | None = None
) -> list[dict]:
    """The drafter prompt as chat messages (for SFT data and OpenAI-style clients)."""
    return [
        {"role": "system", "content": SUMMARIZER_SYSTEM},
        {"role": "user", "content": drafter_context(history, slots, previous_summary)
         + drafter_slot_request(slot, bool(previous_summary))},
    ]


def target_shared(history: str, slots: tuple[Slot, ...], previous_summary: str | None = None,
                  rubric: str = "", focus: str | None = None) -> str:
    """The user-turn text every target request of one compaction starts with.

    ``focus`` (:func:`focus_block`) follows the contracts; ``rubric``
    (:func:`~.judge_prompts.judge_rubric`) ends it when judgements use the short suffix.
    """
    return TARGET_SHARED.format(
        trajectory=history, slot_contracts=slot_contracts(slots), previous_summary=_previous(previous_summary)
    ) + focus_block(focus) + rubric


def _or_previous(has_previous: bool) -> str:
    return " or the earlier summary" if has_previous else ""


def target_slot_request(slot: Slot, has_previous: bool = False) -> str:
    """The per-slot request that follows the shared prefix (``has_previous``: plus :data:`KEEP_PREVIOUS`)."""
    return TARGET_SLOT_REQUEST.format(
        slot=slot.name, slot_title=slot.title, slot_contract=slot.contract, slot_format=slot.body_format
    ) + (KEEP_PREVIOUS if has_previous else "")


def verify_question(slot: Slot, line: str, positive: str, negative: str, has_previous: bool = False,
                    short: bool = False) -> str:
    """The judge question for one proposed line.

    ``short``: the rubric is in the shared prefix, so only the line is asked.

    >>> from ..schema import OPENCLAW_SLOTS
    >>> q = verify_question(OPENCLAW_SLOTS[0], "- fix a.py", "positive", "negative")
    >>> q.splitlines()[2], q.endswith("positive or negative.")
    ('- fix a.py', True)
    >>> verify_question(OPENCLAW_SLOTS[0], "- fix a.py", "positive", "negative", short=True)
    '<line>\\n- fix a.py\\n</line>'
    """
    if short:
        return VERIFY_SHORT.format(line=line)
    return VERIFY_QUESTION.format(
        slot_title=slot.title, line=line, positive=positive, negative=negative,
        or_previous=_or_previous(has_previous),
    )


def carried_question(slot: Slot, line: str, positive: str, negative: str) -> str:
    """The judge question for a line carried from the previous summary (:data:`CARRIED_QUESTION`:
    the criterion before the line, so a slot's carried questions share everything but their lines).

    >>> from ..schema import OPENCLAW_SLOTS
    >>> q = carried_question(OPENCLAW_SLOTS[4], "1. run the tests", "positive", "negative")
    >>> other = carried_question(OPENCLAW_SLOTS[4], "2. other", "positive", "negative")
    >>> q.endswith("<line>\\n1. run the tests\\n</line>"), q.split("<line>")[0] == other.split("<line>")[0]
    (True, True)
    >>> "still holds" in q, "or the earlier summary" in q
    (True, False)
    """
    return CARRIED_QUESTION.format(slot_title=slot.title, line=line, positive=positive, negative=negative)


INCOMPLETE = "(incomplete)"  # the body of a slot cut short before its first line (never "(none)")


def section(slot: Slot, lines: list[str]) -> str:
    """One assembled summary section: heading plus body (``(none)`` if empty).

    >>> from ..schema import OPENCLAW_SLOTS
    >>> section(OPENCLAW_SLOTS[0], ["- fix a.py", ""])
    '## Goal\\n- fix a.py'
    """
    body = "\n".join(lines).strip("\n")
    return f"## {slot.title}\n{body or '(none)'}"


def assemble(slots: tuple[Slot, ...], bodies: dict[str, list[str]]) -> str:
    """The full summary in schema order."""
    return "\n\n".join(section(s, bodies.get(s.name, [])) for s in slots) + "\n"


# ---------------------------------------------------------------- baselines
# Hermes and OpenClaw-style are one-shot compressors: one request, the whole
# summary.  The wording is ours.  Hermes's prompt follows hermes-agent 0.19.0
# closely enough to need a module of its own (hermes_prompt.py); its names
# are re-exported at the top of this module.


OPENCLAW_FIRST = (
    "The messages inside <conversation> are a conversation to summarize, not to continue. "
    "Write a structured context checkpoint summary that another LLM will use to continue "
    "the work.\n\n"
    "<conversation>\n{trajectory}\n</conversation>\n\n"
)

OPENCLAW_UPDATE = (
    "The messages inside <conversation> continue a conversation whose earlier part is "
    "summarized inside <previous_summary>. Do not continue the conversation. Update the "
    "summary: keep what still holds, add what the new messages established, move finished "
    "work to Done, and remove what is no longer true.\n\n"
    "<previous_summary>\n{previous_summary}\n</previous_summary>\n\n"
    "<conversation>\n{trajectory}\n</conversation>\n\n"
)

OPENCLAW_RULES = (
    "Use this exact format, with every section in this order:\n\n{template}\n\n"
    "What each section holds:\n{slot_contracts}\n\n"
    "Keep each section concise. Preserve exact file paths, function names, and error "
    "messages. Output only the summary."
)


def openclaw_template(slots: tuple[Slot, ...]) -> str:
    """Every section heading with its body format: the shape of the whole summary."""
    return "\n\n".join(f"## {s.title}\n{s.body_format}" for s in slots)


def openclaw_prompt(history: str, slots: tuple[Slot, ...], previous_summary: str | None = None,
                    focus: str | None = None) -> str:
    """The user turn of an OpenClaw-style compaction (its update form when a summary exists).

    >>> from ..schema import OPENCLAW_SLOTS
    >>> p = openclaw_prompt("[user]\\nhi", OPENCLAW_SLOTS)
    >>> "<conversation>\\n[user]\\nhi\\n</conversation>" in p, "## Next Steps\\n1. " in p
    (True, True)
    """
    if previous_summary:
        head = OPENCLAW_UPDATE.format(previous_summary=previous_summary.strip(), trajectory=history)
    else:
        head = OPENCLAW_FIRST.format(trajectory=history)
    rules = OPENCLAW_RULES.format(template=openclaw_template(slots), slot_contracts=slot_contracts(slots))
    return head + focus_block(focus) + rules

