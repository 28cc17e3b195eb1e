"""Planted-fact probes (RULER-style): synthetic facts at chosen depths of a real history.

A :class:`Fact` is a sentence carrying one exact value (a code, a path, a
branch name, a port) plus a question whose answer is that value.  Facts come
from a seed (:func:`make_facts`), so a run is reproducible.  Two kinds:

* ``tool_output``: the sentence is appended to an environment output (a
  ``tool`` message, or a ``user`` observation after the first user message in
  text-action formats), so it looks like something the environment said;
* ``user_constraint``: the sentence is a new ``user`` message, placed where
  no tool call is waiting for its result.

Every fact of one set is about a different subject word, so each question
has exactly one right answer.

``depth`` is the position in the history as a fraction of its messages (0.0
the start, 1.0 the end); the fact goes to the nearest fitting place.  All
facts go into ONE copy of the history (:func:`plant`); the caller's list is
never changed.  A summary keeps a fact when it contains the value verbatim
(:func:`present`); with a model, :func:`probe_prompt` asks the question
against the summary alone and :func:`answered` checks the reply.
"""

from __future__ import annotations

import copy
import random
from dataclasses import asdict, dataclass

KINDS = ("tool_output", "user_constraint")
DEPTHS = (0.1, 0.5, 0.9)  # default planting depths
_WORDS = ("amber", "birch", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo", "juniper",
          "kestrel", "lagoon", "meadow", "nimbus", "onyx", "prairie", "quartz", "raven", "sierra", "tundra")
_ALNUM = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
PROBE_SYSTEM = "You answer questions about a session from its summary only."
PROBE_PROMPT = (
    "Here is the summary of an agent session:\n<summary>\n{summary}\n</summary>\n\n"
    "Using only this summary, answer the question. Reply with the exact value only, or \"unknown\" if the "
    "summary does not say.\nQuestion: {question}"
)


@dataclass(frozen=True)
class Fact:
    """One planted fact."""

    kind: str  # tool_output | user_constraint
    depth: float  # where it goes, as a fraction of the history's messages
    text: str  # the sentence inserted into the history
    value: str  # the exact value a summary must keep
    question: str  # asks for ``value``

    def to_json(self) -> dict:
        return asdict(self)


def _code(rng: random.Random) -> str:
    while True:  # an upper-case code the extractor sees as an id: 2+ letters and 2+ digits
        code = "".join(rng.choice(_ALNUM) for _ in range(6))
        if sum(c.isdigit() for c in code) >= 2 and sum(c.isalpha() for c in code) >= 2:
            return code


def make_fact(kind: str, depth: float, rng: random.Random, subject: str | None = None) -> Fact:
    """One fact of ``kind`` about ``subject`` (a word; drawn when None), its values drawn from ``rng``.

    >>> make_fact("user_constraint", 0.5, random.Random(0), subject="amber").question
    'What must the branch for the amber work be named?'
    """
    a, b = rng.sample(_WORDS, 2)
    a = subject or a
    n = rng.randrange(100, 1000)
    if kind == "tool_output":
        if rng.random() < 0.5:
            code = _code(rng)
            return Fact(kind, depth, f"NOTICE: the access code for the {a} service is {code}.", code,
                        f"What is the access code for the {a} service?")
        path = f"/var/log/{a}/{b}-{n}.log"
        return Fact(kind, depth, f"NOTICE: the {a} job writes its log to {path}.", path,
                    f"Which file does the {a} job write its log to?")
    if kind == "user_constraint":
        if rng.random() < 0.5:
            branch = f"release-{a}-{n}"
            return Fact(kind, depth, f"One more requirement: commit the {a} work on a branch named {branch}.",
                        branch, f"What must the branch for the {a} work be named?")
        port = str(rng.randrange(20000, 30000))
        return Fact(kind, depth, f"One more requirement: the {a} server must listen on port {port}.", port,
                    f"Which port must the {a} server listen on?")
    raise ValueError(f"unknown fact kind {kind!r}; one of {list(KINDS)}")


def make_facts(seed: int, depths=DEPTHS, kinds=KINDS) -> list[Fact]:
    """One fact per (kind, depth), reproducible from ``seed``.

    >>> make_facts(7) == make_facts(7), make_facts(7) == make_facts(8)
    (True, False)
    >>> [(f.kind, f.depth) for f in make_facts(0, depths=(0.2,))]
    [('tool_output', 0.2), ('user_constraint', 0.2)]
    """
    rng = random.Random(seed)
    pairs = [(d, kind) for d in depths for kind in kinds]
    if len(pairs) > len(_WORDS):
        raise ValueError(f"at most {len(_WORDS)} facts, got {len(pairs)}")
    subjects = rng.sample(_WORDS, len(pairs))  # one subject per fact: every question has one answer
    return [make_fact(kind, d, rng, subject) for (d, kind), subject in zip(pairs, subjects)]


def env_outputs(messages: list[dict]) -> list[int]:
    """Indices of environment outputs: ``tool`` messages, else user messages after the first.

    Text-action agents (mini-swe-agent, SWE-agent without function calling)
    return observations as ``user`` messages; a history with ``tool``
    messages uses those only (its user messages are a person talking).

    >>> env_outputs([{"role": "user"}, {"role": "assistant"}, {"role": "user"}])
    [2]
    """
    tools = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    if tools:
        return tools
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    return users[1:]


def _open_call(messages: list[dict], i: int) -> bool:
    """Whether inserting before ``i`` would split tool calls from their results."""
    return 0 < i <= len(messages) - 1 and messages[i].get("role") == "tool"


def _nearest(candidates: list[int], target: float) -> int | None:
    return min(candidates, key=lambda i: (abs(i - target), i)) if candidates else None


def plant(messages: list[dict], facts: list[Fact]) -> tuple[list[dict], list[dict]]:
    """A copy of ``messages`` with every fact planted, and where each went.

    Returns ``(planted, placements)``; each placement is the fact's JSON with
    ``message_index`` (in the planted copy; None when the history has no
    place for that kind, e.g. no environment output) and ``how``.

    >>> msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}]
    >>> out, where = plant(msgs, [Fact("user_constraint", 1.0, "Use port 8080.", "8080", "Port?")])
    >>> [m["role"] for m in out], where[0]["message_index"], len(msgs)
    (['user', 'assistant', 'user'], 2, 2)
    """
    out = copy.deepcopy(list(messages))
    placements = []
    for fact in sorted(facts, key=lambda f: f.kind != "tool_output"):  # appends first: indices stay put
        target = fact.depth * len(out)
        if fact.kind == "tool_output":
            i = _nearest(env_outputs(out), target)
            if i is not None:
                content = out[i].get("content")
                if isinstance(content, list):  # content parts
                    out[i]["content"] = content + [{"type": "text", "text": "\n" + fact.text}]
                else:
                    out[i]["content"] = (content + "\n" if content else "") + fact.text
            placements.append({**fact.to_json(), "message_index": i, "how": "appended to an environment output"})
        else:
            i = _nearest([j for j in range(1, len(out) + 1) if not _open_call(out, j)], target)
            out.insert(i, {"role": "user", "content": fact.text})
            for p in placements:  # earlier placements at or after i moved by one
                if p["message_index"] is not None and p["message_index"] >= i:
                    p["message_index"] += 1
            placements.append({**fact.to_json(), "message_index": i, "how": "new user message"})
    return out, placements


def present(summary: str, fact: Fact) -> bool:
    """Whether the summary keeps the fact's value verbatim.

    >>> f = Fact("tool_output", 0.5, "code is QX7K42.", "QX7K42", "code?")
    >>> present("- access code QX7K42", f), present("- an access code was issued", f)
    (True, False)
    """
    return fact.value in summary


def probe_prompt(summary: str, fact: Fact) -> str:
    """The question about ``fact``, to be answered from ``summary`` alone."""
    return PROBE_PROMPT.format(summary=summary, question=fact.question)


def answered(reply: str, fact: Fact) -> bool:
    """Whether a model's reply gives the fact's value (verbatim, anywhere in the reply).

    >>> f = Fact("user_constraint", 0.9, "port 24680", "24680", "Port?")
    >>> answered("24680", f), answered("unknown", f)
    (True, False)
    """
    return fact.value in " ".join(reply.split())
