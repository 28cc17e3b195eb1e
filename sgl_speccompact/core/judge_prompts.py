"""Judge prompt texts: the short-suffix rubric, Source-Judged Compaction and the decision route's claims.

SpecCompact's line judge (``prompts.VERIFY_*``) and SJC's entry judge share
one idea: everything that is the same for every judgement sits in a cached
prefix, the per-judgement text follows it.  With ``short_judge_suffix`` the
rubric and label words (:func:`judge_rubric`) end the compaction's shared
prefix, so a judgement's suffix is the line (or entry) in tags.
"""

from __future__ import annotations

from .prompts import VERIFY_CRITERION, _or_previous, _previous

# ---------------------------------------------------------------- Source-Judged Compaction
# One judge prompt per summary entry.  Everything before the entry -- system
# turn, environment outputs, previous summary -- is identical for all
# entries of one compaction, so the batch shares it as a radix prefix.  The
# question ends the user turn so the answer is the next token.

SOURCE_JUDGE_SYSTEM = (
    "You check summaries of AI agent sessions against the record they summarize. You answer "
    "with exactly one word."
)

SOURCE_JUDGE_CONTEXT = (
    "Below is the record of an agent session: the user's messages, the tool calls the agent "
    "made, and what the tools returned. The agent's own commentary is left out; it is not "
    "evidence.\n\n"
    "{previous_summary}"
    "Record:\n<environment>\n{environment}\n</environment>\n\n"
)

SOURCE_CRITERION = (
    "Does the entry have a source? Answer {positive} if the record{or_previous} states or "
    "directly shows what the entry says, including its names, paths, values and outcomes. "
    "Answer {negative} if the entry is a plan, a guess or a conclusion that no source "
    "supports, or names something that appears in no source. Reply with one word: "
    "{positive} or {negative}."
)

# After a slot method the judge branches from the compaction's own shared
# prefix (instruction, whole conversation, previous summary), already in the
# target's radix cache.  That prefix holds the agent's prose too (in either
# layout), so the criterion names which parts of it are sources.
SOURCE_CRITERION_IN_CONVERSATION = (
    "Does the entry have a source? Only environment outputs are sources: the system and user "
    "messages, the tool calls the agent made and what the tools returned{or_previous}. The "
    "agent's own commentary is not a source. Answer {positive} if a source states or directly "
    "shows what the entry says, including its names, paths, values and outcomes. Answer "
    "{negative} if the entry is a plan, a guess or a conclusion that no source supports, or "
    "names something that appears in no source. Reply with one word: {positive} or {negative}."
)

SOURCE_ENTRY = "An entry of the section \"{section}\" of a summary of this session:\n<entry>\n{entry}\n</entry>"
SOURCE_ENTRY_IN_CONVERSATION = "The summary is finished. An entry of the section \"{section}\" of it:\n<entry>\n{entry}\n</entry>"
SOURCE_ENTRY_SHORT = "An entry of the section \"{section}\":\n<entry>\n{entry}\n</entry>"

# the stand-alone context's rubric (short suffix): the check stated once, before the entries
SOURCE_RUBRIC = "Each request quotes one entry of a summary of this session, in entry tags. {criterion}\n\n"


def source_judge_context(environment: str, previous_summary: str | None = None, positive: str = "",
                         negative: str = "", short: bool = False) -> str:
    """The shared part of every stand-alone judge prompt: the sources (and, ``short``, the rubric)."""
    text = SOURCE_JUDGE_CONTEXT.format(environment=environment, previous_summary=_previous(previous_summary))
    if short:
        criterion = SOURCE_CRITERION.format(positive=positive, negative=negative,
                                            or_previous=_or_previous(bool(previous_summary)))
        text += SOURCE_RUBRIC.format(criterion=criterion)
    return text


def source_judge_question(entry: str, section: str, positive: str, negative: str,
                          has_previous: bool = False, in_conversation: bool = False, short: bool = False) -> str:
    """The question about one summary entry.

    ``in_conversation``: the question follows the compaction's shared
    prefix (the whole conversation) instead of the environment record.
    ``short``: the criterion is already in the shared part; only the entry is asked.

    >>> q = source_judge_question("- read /a.py", "Progress", "positive", "negative")
    >>> "<entry>\\n- read /a.py\\n</entry>" in q, q.endswith("positive or negative.")
    (True, True)
    >>> "own commentary is not" in source_judge_question("- a", "Goal", "yes", "no", in_conversation=True)
    True
    >>> source_judge_question("- a", "Goal", "yes", "no", short=True)
    'An entry of the section "Goal":\\n<entry>\\n- a\\n</entry>'
    """
    section = section or "(untitled)"
    if short:
        return SOURCE_ENTRY_SHORT.format(section=section, entry=entry)
    labels = dict(positive=positive, negative=negative, or_previous=_or_previous(has_previous))
    if in_conversation:
        return (SOURCE_ENTRY_IN_CONVERSATION.format(section=section, entry=entry) + "\n\n"
                + SOURCE_CRITERION_IN_CONVERSATION.format(**labels))
    return SOURCE_ENTRY.format(section=section, entry=entry) + "\n\n" + SOURCE_CRITERION.format(**labels)


# ---------------------------------------------------------------- the rubric in the shared prefix
# It names the tags without writing them, so the prefix itself never looks like a check.

JUDGE_RUBRIC = (
    "Some requests are checks, answered with one word:\n"
    "- A request that holds only a proposed next line of the section being written, in line "
    "tags. " + VERIFY_CRITERION + "\n"
    "- A request that quotes an entry of the finished summary, in entry tags. {entry_criterion}\n\n"
)


def judge_rubric(positive: str, negative: str, has_previous: bool = False) -> str:
    """Everything every judgement on the shared prefix has in common: the checks and label words.

    >>> r = judge_rubric("positive", "negative")
    >>> r.count("Reply with one word: positive or negative."), "<line>" in r
    (2, False)
    """
    labels = dict(positive=positive, negative=negative, or_previous=_or_previous(has_previous))
    entry = SOURCE_CRITERION_IN_CONVERSATION.format(**labels)
    return JUDGE_RUBRIC.format(entry_criterion=entry, **labels)


# ---------------------------------------------------------------- sglang's /v1/decisions
# The decision route owns its wording: it renders ``input``, a blank line, then
# "Is the following true? <question>" and "Answer with yes or no only." in one
# user turn of the model's chat template.  So each judging path states its
# criterion as a claim about one line; the input is the record the claim is
# about, first, so every request of one compaction shares it as a radix prefix.

DECISION_LINE = (
    "The line below is the right next line of the {title} section: the conversation{or_previous} "
    "supports it, and it is consistent with the section's lines so far.\n<line>\n{line}\n</line>"
)
DECISION_CARRIED = (
    "The line below, from the earlier summary's {title} section, still holds after the conversation: "
    "the conversation does not contradict it or make it obsolete, and did not complete or abandon a step "
    "it names.\n<line>\n{line}\n</line>"
)
DECISION_SOURCE = (
    "The entry below, from the section \"{section}\" of a summary of this session, has a source: the "
    "record{or_previous} states or directly shows what it says, including its names, paths, values and "
    "outcomes.\n<entry>\n{entry}\n</entry>"
)
DECISION_SECTION = "The {title} section so far:\n<section>\n{lines}\n</section>"


def decision_line_claim(title: str, line: str, has_previous: bool = False) -> str:
    """The yes/no claim about a proposed next line of a section.

    >>> decision_line_claim("Goal", "- fix a.py").endswith("<line>\\n- fix a.py\\n</line>")
    True
    """
    return DECISION_LINE.format(title=title, line=line, or_previous=_or_previous(has_previous))


def decision_carried_claim(title: str, line: str) -> str:
    """The yes/no claim about a line carried from the earlier summary (does it still hold?)."""
    return DECISION_CARRIED.format(title=title, line=line)


def decision_source_claim(section: str, entry: str, has_previous: bool = False) -> str:
    """The yes/no claim about a summary entry (does it have a source?)."""
    return DECISION_SOURCE.format(section=section or "(untitled)", entry=entry,
                                  or_previous=_or_previous(has_previous))


def decision_section(title: str, lines: tuple[str, ...] | list[str]) -> str:
    """A section's lines so far, as the input of a next-line claim ends with them.

    >>> decision_section("Goal", [])
    'The Goal section so far:\\n<section>\\n(empty)\\n</section>'
    """
    return DECISION_SECTION.format(title=title, lines="\n".join(lines) or "(empty)")
