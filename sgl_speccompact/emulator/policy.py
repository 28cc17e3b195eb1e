"""The emulator's pluggable "model": policies that decide what it says.

A policy answers two questions about a prompt:

* ``generate(prompt, prompt_ids, params) -> str``: the continuation text the
  model would write.  The server tokenizes it and then applies everything
  SGLang applies (``max_new_tokens`` in tokens, stop strings and stop token
  ids with trimming, EOS), so a policy never has to.
* ``next_token_logprobs(prompt, prompt_ids, params) -> dict``: log
  probabilities of a few tokens at the next position.  Keys are token ids or
  token strings (the server resolves a string to its single token id).
  Every token not listed shares the remaining probability mass, so the
  distribution is always well defined.  Prompt-token logprobs (what the
  plain ``RuntimeEndpoint.select`` reads) come from calling this at each
  prompt position.

``params`` is a dict with the request's normalized ``sampling_params``, its
``lora_path`` (``None`` for the base model), so one policy can play both a
drafter (LoRA) and a target, ``judgement``: whether the request has a
judgement's shape (prefill-only with logprobs, :attr:`~.jobs.Job.judgement`),
and ``labels``: a ``/v1/decisions`` question's answer label ids (``yes``
then ``no`` for a yes/no question; empty for any other request).
A judgement is recognised by that shape, never by the prompt's words: a
repair prompt that quotes the rubric is still a generation.

Two policies ship: :class:`ScriptedPolicy` (ordered rules, for tests) and
:class:`ControlledAcceptancePolicy` (seeded judgements with a chosen
acceptance rate, for benchmarks).
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from dataclasses import dataclass, field
from typing import Callable, Protocol, runtime_checkable

TokenKey = int | str  # a token id, or the text of a single token
Logprobs = dict[TokenKey, float]
ANY = object()  # rule matches every lora_path

# Label surface forms that are single tokens in the test tokenizer (and in
# Qwen3's); weights say how a judge's mass spreads over them.
LABEL_FORM_WEIGHTS = (("{w}", 0.7), (" {w}", 0.2), ("{W}", 0.06), (" {W}", 0.04))


@runtime_checkable
class Policy(Protocol):
    """What the emulated model says.  Implementations must be thread-safe."""

    def generate(self, prompt: str, prompt_ids: list[int], params: dict) -> str:
        """Continuation text for ``prompt`` (before any truncation or stop)."""
        ...

    def next_token_logprobs(self, prompt: str, prompt_ids: list[int], params: dict) -> Logprobs:
        """Logprobs of a few tokens at the position after ``prompt``."""
        ...


def label_logprobs(positive: str, negative: str, p_positive: float, mass: float = 0.95) -> Logprobs:
    """A judge's next-token distribution over both labels' surface forms.

    Parameters
    ----------
    positive, negative
        The label words.
    p_positive
        Ratio p+ / (p+ + p-) the judge expresses; every form of one label
        gets the same share, so the best-variant ratio equals ``p_positive``.
    mass
        Total probability on all label forms together.

    Returns
    -------
    dict
        Token string -> logprob (zero-probability entries are left out).
    """
    out: Logprobs = {}
    for word, share in ((positive, p_positive), (negative, 1.0 - p_positive)):
        for form, weight in LABEL_FORM_WEIGHTS:
            p = mass * share * weight
            if p > 0:
                out[form.format(w=word, W=word.capitalize())] = math.log(p)
    return out


def last_segment(prompt: str, marker: str | None) -> str:
    """The text after the last ``marker`` (the whole prompt without one)."""
    if not marker:
        return prompt
    _, found, tail = prompt.rpartition(marker)
    return tail if found else prompt


@dataclass
class Rule:
    """One scripted behaviour: when the prompt matches, answer this way."""

    pattern: str  # substring (or regex when ``regex``) looked for in the prompt
    regex: bool = False  # treat ``pattern`` as a regular expression
    after: str | None = None  # only look at the text after the last occurrence of this
    lora_path: object = ANY  # restrict to one lora_path (None = base model)
    output: str | Callable[[str], str] | None = None  # generation answer
    logprobs: Logprobs | Callable[[str], Logprobs] | None = None  # next-token answer
    judgement_only: bool = False  # answer only judgement-shaped requests (params["judgement"])
    times: int | None = None  # how many more uses; None = unlimited
    hits: int = 0  # how often it has answered

    def matches(self, prompt: str, params: dict) -> bool:
        """Whether this rule applies to ``prompt`` under ``params``."""
        if self.times is not None and self.times <= 0:
            return False
        if self.lora_path is not ANY and params.get("lora_path") != self.lora_path:
            return False
        if self.judgement_only and not params.get("judgement"):
            return False
        text = last_segment(prompt, self.after)
        if self.regex:
            return re.search(self.pattern, text) is not None
        return self.pattern in text


@dataclass
class ScriptedPolicy:
    """Ordered rules keyed on prompt content; the first matching rule answers.

    Generation and logprob rules are separate lists.  A generation request no
    rule answers gets ``default_output`` (never a label word: a generation is
    not a judgement, whatever its prompt says).  A logprob query no rule
    answers gets ``default_logprobs`` (empty: uniform over the vocabulary).
    Judge rules (:meth:`judge`) answer judgement-shaped requests only; plain
    :meth:`logprobs` rules answer every logprob query they match.

    Examples
    --------
    >>> p = ScriptedPolicy()
    >>> _ = p.on("Slot request: write only the goal", "- Fix the build\\n")
    >>> _ = p.judge("<line>\\n- Fix the build", p_positive=0.9, after="<|im_start|>user")
    """

    default_output: str = ""  # answer when no generation rule matches
    default_logprobs: Logprobs = field(default_factory=dict)  # answer when no judge rule matches
    positive: str = "positive"  # label word of an accepting judgement
    negative: str = "negative"  # label word of a rejecting judgement
    gen_rules: list[Rule] = field(default_factory=list)  # generation rules, in order
    logprob_rules: list[Rule] = field(default_factory=list)  # next-token rules, in order
    calls: list[tuple[str, str]] = field(default_factory=list)  # (kind, prompt) log

    def __post_init__(self):
        self._lock = threading.Lock()

    def on(self, pattern: str, output: str | Callable[[str], str], **opts) -> Rule:
        """Add a generation rule; ``opts`` are :class:`Rule` fields."""
        rule = Rule(pattern=pattern, output=output, **opts)
        self.gen_rules.append(rule)
        return rule

    def logprobs(self, pattern: str, logprobs: Logprobs | Callable[[str], Logprobs], **opts) -> Rule:
        """Add a rule putting ``logprobs`` (token -> logprob) on the next token."""
        rule = Rule(pattern=pattern, logprobs=logprobs, **opts)
        self.logprob_rules.append(rule)
        return rule

    def judge(self, pattern: str, p_positive: float, mass: float = 0.95, **opts) -> Rule:
        """Add a judge rule: a matching judgement-shaped request gets ratio ``p_positive``."""
        lp = label_logprobs(self.positive, self.negative, p_positive, mass)
        return self.logprobs(pattern, lp, judgement_only=True, **opts)

    def decide(self, pattern: str, p_yes: float, mass: float = 0.95, **opts) -> Rule:
        """Add a ``/v1/decisions`` rule: a matching question's ``yes`` gets ``p_yes`` of ``mass``, ``no`` the rest."""
        lp = {w: math.log(mass * p) for w, p in (("yes", p_yes), ("no", 1.0 - p_yes)) if p > 0}
        return self.logprobs(pattern, lp, judgement_only=True, **opts)

    def generate(self, prompt: str, prompt_ids: list[int], params: dict) -> str:
        """See :class:`Policy`."""
        with self._lock:  # callables run outside the lock: they may block
            self.calls.append(("generate", prompt))
            rule = self._first(self.gen_rules, prompt, params)
        if rule is not None:
            return rule.output(prompt) if callable(rule.output) else rule.output
        return self.default_output

    def next_token_logprobs(self, prompt: str, prompt_ids: list[int], params: dict) -> Logprobs:
        """See :class:`Policy`."""
        with self._lock:
            self.calls.append(("logprobs", prompt))
            rule = self._first(self.logprob_rules, prompt, params)
        return dict(self.default_logprobs) if rule is None else _resolve(rule, prompt)

    @staticmethod
    def _first(rules: list[Rule], prompt: str, params: dict) -> Rule | None:
        for rule in rules:
            if rule.matches(prompt, params):
                rule.hits += 1
                if rule.times is not None:
                    rule.times -= 1
                return rule
        return None


def _resolve(rule: Rule, prompt: str) -> Logprobs:
    return dict(rule.logprobs(prompt) if callable(rule.logprobs) else rule.logprobs)


def seeded_unit(seed: int, text: str) -> float:
    """A deterministic number in [0, 1) from ``seed`` and ``text``."""
    digest = hashlib.sha256(f"{seed}\x00{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass
class ControlledAcceptancePolicy:
    """Benchmark policy: judges accept with probability ``p_accept``.

    A judgement is a judgement-shaped request (``params["judgement"]``:
    prefill-only with logprobs); its verdict is a seeded hash of the judged
    turn (the text after the last ``turn_marker``), so the same question
    always gets the same answer and the accept rate over many distinct
    questions is ``p_accept``.  An accepting judge puts ratio ``confident``
    on the positive label, a rejecting one ``1 - confident``.

    Every generation gets plausible text, never a label word:
    ``lines_per_reply`` lines echoed from the prompt's content (its
    ``<conversation>`` block when there is one), picked by seeded hash and
    formatted as list items; once the current assistant turn already holds
    ``max_lines`` lines the reply is empty, so loops that append lines
    terminate.
    """

    p_accept: float = 0.7  # probability that a judge accepts
    seed: int = 0  # seed of every hash-based choice
    positive: str = "positive"  # label word of an accepting judgement
    negative: str = "negative"  # label word of a rejecting judgement
    confident: float = 0.95  # ratio p+/(p+ + p-) of an accepting judgement
    lines_per_reply: int = 3  # lines per generation reply
    max_lines: int = 8  # an assistant turn with this many lines gets an empty reply
    line_chars: int = 100  # longest echoed line (characters)
    turn_marker: str = "<|im_start|>user"  # start of the judged turn
    end_marker: str = "<|im_end|>"  # end of a turn
    assistant_marker: str = "<|im_start|>assistant\n"  # start of the turn being written

    def judged_turn(self, prompt: str) -> str:
        """Content of the last user turn (what a judge prompt asks about)."""
        return last_segment(prompt, self.turn_marker).split(self.end_marker, 1)[0]

    def accepts(self, prompt: str) -> bool:
        """The seeded verdict for a judge prompt."""
        return seeded_unit(self.seed, self.judged_turn(prompt)) < self.p_accept

    def next_token_logprobs(self, prompt: str, prompt_ids: list[int], params: dict) -> Logprobs:
        """See :class:`Policy`: label logprobs for a judgement, nothing named otherwise.

        >>> p = ControlledAcceptancePolicy()
        >>> p.next_token_logprobs("<|im_start|>user\\nReply positive or negative.", [], {"judgement": False})
        {}
        >>> sorted(p.next_token_logprobs("<|im_start|>user\\n- a line", [], {"judgement": True}))[:2]
        [' Negative', ' Positive']
        """
        if not params.get("judgement"):
            return {}
        ratio = self.confident if self.accepts(prompt) else 1.0 - self.confident
        labels = params.get("labels")
        if labels:  # a /v1/decisions question: its own labels, the first one accepting
            return {labels[0]: math.log(0.95 * ratio), labels[1]: math.log(0.95 * (1.0 - ratio))}
        return label_logprobs(self.positive, self.negative, ratio)

    def generate(self, prompt: str, prompt_ids: list[int], params: dict) -> str:
        """See :class:`Policy`."""
        turn = last_segment(prompt, self.assistant_marker)
        done = [ln for ln in turn.splitlines() if ln.strip() and not ln.startswith("<")]
        if len(done) >= self.max_lines:
            return ""
        sources = _content_lines(_conversation(prompt.rpartition(self.assistant_marker)[0] or prompt))
        if not sources:
            return ""
        key = f"{params.get('lora_path')}\x00{turn}"
        picks = [
            sources[int(seeded_unit(self.seed + i, key) * len(sources))]
            for i in range(self.lines_per_reply)
        ]
        return "".join(f"- {line[: self.line_chars]}\n" for line in picks)


def _conversation(text: str) -> str:
    """The last ``<conversation>`` block if there is one, else ``text``."""
    head, found, body = text.rpartition("<conversation>")
    return body.split("</conversation>", 1)[0] if found else text


def _content_lines(text: str) -> list[str]:
    """Non-trivial prompt lines without chat markup, in order, deduplicated."""
    lines = (ln.strip() for ln in text.splitlines())
    keep = [ln for ln in lines if len(ln) > 20 and "<|" not in ln and not ln.startswith("<")]
    return list(dict.fromkeys(keep))
