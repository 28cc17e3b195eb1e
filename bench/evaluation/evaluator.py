"""A scripted reader for the retention evaluation's questions, so it runs on the emulator.

:class:`EvaluationPolicy` wraps any policy and answers the three kinds of
evaluation question itself; everything else (the compactions) goes to the
wrapped policy.  Its answers are mechanical, so retention numbers on the
emulator only show that the evaluation runs end to end, never how good a
method is:

* **probe question**: the summary line sharing the most words with the
  question; its first identifier (else its last number), or ``unknown``;
* **adequacy judge**: each criterion ``yes`` with probability ``p_yes``,
  seeded by the criterion and the summary text;
* **next action**: the last shell command the summary names, as
  ``bash: <command>`` when a shell tool is offered, else the first offered
  tool with the summary's last path; ``unknown`` when the summary names none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .adequacy import CRITERIA
from sgl_speccompact.history.identifiers import extract
from .recall import SHELL_TOOLS, ledger_split
from sgl_speccompact.emulator.policy import Logprobs, Policy, seeded_unit

PROBE_MARK = "Using only this summary, answer the question."
ADEQUACY_MARK = "Answer each question about the summary with yes or no"
NEXT_MARK = "What is your next action?"
_STOP = frozenset("what which does must that this with from into have where when their there about".split())


def _between(text: str, start: str, end: str) -> str:
    head, found, tail = text.rpartition(start)
    return tail.split(end, 1)[0] if found else ""


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in _STOP}


def read_answer(summary: str, question: str) -> str:
    """The probe answer a literal reader gives.

    >>> read_answer("## Critical Context\\n- the amber service code is QX7K42\\n- port 8080", "Code of the amber service?")
    'QX7K42'
    >>> read_answer("- nothing here", "Which port must the onyx server use?")
    'unknown'
    """
    want = _words(question)
    best = max(summary.splitlines(), key=lambda ln: len(want & _words(ln)), default="")
    if not want & _words(best):
        return "unknown"
    ids = extract(best)
    if ids:
        return ids[0].text or ids[0].value
    numbers = re.findall(r"\d+", best)
    return numbers[-1] if numbers else "unknown"


def next_action(summary: str, tools: list[str]) -> str:
    """The next action a literal reader names: the summary's last command, never one of its exact
    ledger (a record of what was done, not of what comes next).

    >>> next_action("- ran `pytest -x tests/`", ["bash", "open"]), next_action("- ran `pytest -x`", [])
    ('bash: pytest -x tests/', 'pytest -x')
    >>> next_action("1. run `make test`\\n\\n## Exact Ledger\\n- m1 ran `git status`", [])
    'make test'
    """
    ids = extract(ledger_split(summary)[0])
    cmds = [i.text for i in ids if i.kind == "command"]
    paths = [i.value for i in ids if i.kind == "path"]
    shell = next((t for t in tools if t.lower() in SHELL_TOOLS), None)
    if not tools:
        return cmds[-1] if cmds else "unknown"
    if cmds and shell:
        return f"{shell}: {cmds[-1]}"
    return f"{tools[0]}: {paths[-1]}" if paths else "unknown"


@dataclass
class EvaluationPolicy:
    """``base`` for everything except the evaluation's questions (see the module docstring)."""

    base: Policy  # answers the compactions
    p_yes: float = 0.7  # chance of a yes per adequacy criterion
    seed: int = 0  # seed of the adequacy answers
    user_marker: str = "<|im_start|>user"  # start of the question's turn

    def generate(self, prompt: str, prompt_ids: list[int], params: dict) -> str:
        """See ``Policy``."""
        turn = prompt.rpartition(self.user_marker)[2]
        summary = _between(turn, "<summary>\n", "\n</summary>")
        if PROBE_MARK in turn:
            return read_answer(summary, turn.rpartition("Question:")[2].split("<|im_end|>", 1)[0])
        if ADEQUACY_MARK in turn:
            return "\n".join(f"{k}. {'yes' if seeded_unit(self.seed + k, summary) < self.p_yes else 'no'}"
                             for k in range(1, len(CRITERIA) + 1))
        if NEXT_MARK in turn:
            listed = re.search(r"TOOL is one of: (.*?), and ARGUMENT", turn)
            return next_action(summary, listed.group(1).split(", ") if listed else [])
        return self.base.generate(prompt, prompt_ids, params)

    def next_token_logprobs(self, prompt: str, prompt_ids: list[int], params: dict) -> Logprobs:
        """See ``Policy``."""
        return self.base.next_token_logprobs(prompt, prompt_ids, params)
