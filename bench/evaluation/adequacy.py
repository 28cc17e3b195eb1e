"""The adequacy judge: five binary criteria, scored 0-5 by a judge model.

The criteria and the judge prompt live here and nowhere else.  The judge
sees the conversation and the summary and answers each criterion ``yes`` or
``no`` on its own numbered line; the score is the number of ``yes``.  A reply
that does not answer every criterion gets no score (``score`` None) rather
than a partial one, and the raw reply is always kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CRITERIA = (
    ("goal", "It states the user's goal or task correctly."),
    ("progress", "It says what has been done so far and with what outcome, failures included."),
    ("details", "It keeps the concrete details needed to continue: file paths, commands, identifiers, values "
                "and error messages."),
    ("next_step", "It states what should happen next, consistently with the conversation."),
    ("faithful", "It says nothing that contradicts the conversation or that the conversation does not support."),
)
ADEQUACY_SYSTEM = "You are a strict evaluator of summaries of agent sessions."
ADEQUACY_PROMPT = (
    "Below are an agent session and a summary of it. The summary will replace the session in the agent's "
    "context, so the agent must be able to continue from the summary alone.\n\n"
    "<conversation>\n{history}\n</conversation>\n\n<summary>\n{summary}\n</summary>\n\n"
    "Answer each question about the summary with yes or no, one line each, in the form `N. yes` or `N. no`, "
    "and nothing else.\n{questions}"
)
_ANSWER = re.compile(r"^\W*(\d+)\s*[.):-]?\s*\W*(yes|no)\b", re.IGNORECASE | re.MULTILINE)


def adequacy_prompt(history: str, summary: str) -> str:
    """The judge's user turn for one summary (``history`` is the rendered conversation).

    >>> p = adequacy_prompt("[user]\\nfix a.py", "## Goal\\n- fix a.py")
    >>> p.count("\\n1. "), p.rstrip().splitlines()[-1].startswith("5. It says nothing")
    (1, True)
    """
    questions = "\n".join(f"{i}. {text}" for i, (_, text) in enumerate(CRITERIA, 1))
    return ADEQUACY_PROMPT.format(history=history, summary=summary, questions=questions)


@dataclass
class Adequacy:
    """The judge's verdict on one summary."""

    answers: dict[str, bool | None] = field(default_factory=dict)  # criterion -> yes/no (None: not answered)
    raw: str = ""  # the judge's reply, verbatim

    @property
    def score(self) -> int | None:
        """Number of criteria answered yes (0-5); None unless every criterion was answered."""
        if any(v is None for v in self.answers.values()):
            return None
        return sum(bool(v) for v in self.answers.values())

    def to_json(self) -> dict:
        return {"score": self.score, "answers": self.answers, "raw": self.raw}


def parse_adequacy(reply: str) -> Adequacy:
    """Read ``N. yes|no`` lines; the first answer to each number counts.

    >>> a = parse_adequacy("1. yes\\n2. No\\n3: yes\\n4) yes\\n**5.** no")
    >>> a.score, a.answers["progress"]
    (3, False)
    >>> parse_adequacy("1. yes\\n2. yes").score is None
    True
    """
    answers: dict[str, bool | None] = {name: None for name, _ in CRITERIA}
    names = [name for name, _ in CRITERIA]
    for m in _ANSWER.finditer(reply):
        k = int(m.group(1)) - 1
        if 0 <= k < len(names) and answers[names[k]] is None:
            answers[names[k]] = m.group(2).lower() == "yes"
    return Adequacy(answers, reply)
