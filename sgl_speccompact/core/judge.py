"""Label probabilities -> acceptance score -> verdict (SpecCompact eq. 3).

Pure functions only.  The target answers a verification question with one
token; we read the probability of each label word and compute

    r = p+ / (p+ + p-)            accept iff r >= eta

Each label may have several token forms ("positive", " positive",
"Positive", ...); a label's probability is its best single-token variant's.
When no variant of a label has a returned probability and top-k
probabilities came back, the paper's rule substitutes min(1 - sum of
returned p, smallest returned p); with no top-k to apply it to, the
verdict is a :class:`~sgl_speccompact.errors.LabelLogprobError`, never a
silent default.

This is the ONE verdict rule: the one-request judge (exact next-token
logprobs of every variant), the plain two-request select (each variant
scored as a choice) and the batch judge all call :func:`judge_next_token`;
sglang's ``/v1/decisions`` answers are read into the same
:class:`~sgl_speccompact.result.Verdict` by :func:`verdict` too, and that
object travels unchanged to the result's lines and SJC's entries.  A verdict whose labels carry less than
``min_label_mass`` of the next-token probability is not *reliable*
(:func:`gate`): it accepts, keeps and deletes nothing, whatever r says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Hashable, Iterable, Mapping

from ..errors import LabelLogprobError, LabelTokenError
from ..result import Verdict  # the one verdict type: made here, held by the vocabulary for the result


@dataclass(frozen=True)
class LabelTokens:
    """Single-token variants of the two judge labels in one tokenizer."""

    positive: tuple[Hashable, ...]  # token ids (or token strings) meaning "supported"
    negative: tuple[Hashable, ...]  # token ids (or token strings) meaning "unsupported"

    @property
    def all_ids(self) -> list:
        """Every variant, positive first: the ``token_ids_logprob`` list."""
        return [*self.positive, *self.negative]


def gate(v: Verdict, min_label_mass: float) -> Verdict:
    """``v`` with the health gate applied: below ``min_label_mass`` it is unreliable and accepts nothing.

    SpecCompact accepts no line on such a verdict (the target writes the line
    instead), no carried line is kept or marked stale on one, and
    Source-Judged Compaction deletes no entry on one.

    >>> gate(verdict(0.004, 0.001, eta=0.7), 0.05)
    Verdict(p_pos=0.004, p_neg=0.001, score=0.8, accepted=False, reliable=False, substituted=())
    >>> gate(verdict(0.6, 0.3, eta=0.7), 0.05).accepted
    False
    """
    ok = v.label_mass >= min_label_mass
    return replace(v, accepted=v.accepted and ok, reliable=v.reliable and ok)


def label_variants(word: str) -> list[str]:
    """Surface forms of a label word, most likely first, without duplicates.

    >>> label_variants("positive")
    ['positive', ' positive', 'Positive', ' Positive', 'POSITIVE', ' POSITIVE']
    """
    w = word.strip()
    forms = [w, " " + w, w.capitalize(), " " + w.capitalize(), w.upper(), " " + w.upper()]
    return list(dict.fromkeys(forms))


def label_choices(positive: str, negative: str) -> tuple[list[str], int]:
    """The judge select's choices: every variant of both labels, positive first.

    Returns ``(choices, n_positive)``.  The plain select scores each choice,
    so it sees the same variants the one-request judge asks for.

    >>> label_choices("yes", "no")
    (['yes', ' yes', 'Yes', ' Yes', 'YES', ' YES', 'no', ' no', 'No', ' No', 'NO', ' NO'], 6)
    """
    pos = label_variants(positive)
    return pos + label_variants(negative), len(pos)


def choice_logprobs(input_token_logprobs: list[list]) -> list[float | None]:
    """Each choice's next-token logprob after the prompt, from a plain select's entries.

    Every choice's entries (``(logprob, token id, text)``) start with the
    prompt's last tokens; the rest is the choice.  The prompt part is the
    prefix most choices share: a choice that merges with the prompt's last
    token (``ASSISTANT:`` + ``negative`` is ``:n`` + ``egative`` in Qwen3's
    vocabulary) shares less of it and, like a multi-token choice, gets
    ``None`` (the one-request judge skips such variants too).

    >>> choice_logprobs([[(None, 1, "a"), (-0.5, 7, "pos")], [(None, 1, "a"), (-2.0, 8, "neg")],
    ...                  [(None, 1, "a"), (-3.0, 9, "NE"), (-0.1, 10, "G")], [(None, 11, "aN"), (-1.0, 12, "EG")]])
    [-0.5, -2.0, None, None]
    """
    ids = [[e[1] for e in entries] for entries in input_token_logprobs]
    prefix: list[int] = []
    while True:
        n = len(prefix)
        heads = [x[n] for x in ids if len(x) > n + 1 and x[:n] == prefix]  # choices that go on past n
        top = max(set(heads), key=heads.count, default=None)
        if top is None or 2 * heads.count(top) <= len(ids):
            break
        prefix.append(top)
    n = len(prefix)
    return [entries[n][0] if len(entries) == n + 1 and x[:n] == prefix else None
            for entries, x in zip(input_token_logprobs, ids)]


def resolve_label_tokens(
    positive: str, negative: str, encode: Callable[[str], list[int]]
) -> LabelTokens:
    """Find each label's single-token variants with ``encode`` (text -> ids).

    Variants that encode to more than one token are skipped.  A label with no
    single-token variant, or a token shared by both labels, is a
    :class:`~sgl_speccompact.errors.LabelTokenError`.

    >>> vocab = {"positive": [5], " positive": [6], "negative": [7], "Positive": [8, 9]}
    >>> resolve_label_tokens("positive", "negative", lambda t: vocab.get(t, [1, 2]))
    LabelTokens(positive=(5, 6), negative=(7,))
    """
    found = {}
    for label in (positive, negative):
        ids = []
        for form in label_variants(label):
            toks = list(encode(form))
            if len(toks) == 1 and toks[0] not in ids:
                ids.append(toks[0])
        if not ids:
            raise LabelTokenError(
                f"label {label!r} has no single-token variant in the target tokenizer; "
                "choose another label word",
                field="config.positive_label" if label == positive else "config.negative_label",
            )
        found[label] = tuple(ids)
    shared = set(found[positive]) & set(found[negative])
    if shared:
        raise LabelTokenError(f"labels {positive!r} and {negative!r} share tokens {sorted(shared)}",
                              field="config.negative_label")
    return LabelTokens(found[positive], found[negative])


def acceptance_score(p_pos: float, p_neg: float) -> float:
    """r = p+ / (p+ + p-); 0.0 when neither label has mass.

    >>> acceptance_score(0.6, 0.3)
    0.6666666666666667
    """
    total = p_pos + p_neg
    return p_pos / total if total > 0 else 0.0


def verdict(p_pos: float, p_neg: float, eta: float, substituted=(), min_label_mass: float = 0.0) -> Verdict:
    """The verdict from two label probabilities, gated at ``min_label_mass`` (:func:`gate`).

    >>> verdict(0.2, 0.6, eta=0.7).accepted, verdict(0.02, 0.006, eta=0.7, min_label_mass=0.1).reliable
    (False, False)
    """
    r = acceptance_score(p_pos, p_neg)
    return gate(Verdict(p_pos, p_neg, r, r >= eta, substituted=tuple(substituted)), min_label_mass)


def judge_next_token(exact: Mapping[Hashable, float | None] | None,
                     top: Iterable[tuple[Hashable, float | None]] | None,
                     labels: LabelTokens, eta: float, min_label_mass: float = 0.0) -> Verdict:
    """The verdict rule: best variant per label, the missing-label rule from top-k.

    Parameters
    ----------
    exact : mapping, optional
        ``{token: logprob}`` of requested variants (``None`` values count as absent).
    top : iterable of (token, logprob), optional
        The top-k next tokens, if the request asked for them.
    labels : LabelTokens
        Both labels' variants.
    eta : float
        Acceptance threshold on r.
    min_label_mass : float
        Below this p+ + p- the verdict is unreliable (:func:`gate`).

    Raises
    ------
    LabelLogprobError
        A label has no variant in ``exact`` or ``top`` and no top-k came back.

    >>> lab = LabelTokens((5,), (7,))
    >>> judge_next_token({5: None}, [(5, math.log(0.6)), (9, math.log(0.3))], lab, 0.7).substituted
    ('negative',)
    >>> judge_next_token({5: math.log(0.6)}, None, lab, 0.7)
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.LabelLogprobError: no logprob for the negative label's variants (7,) and no top-k logprobs to apply the missing-label rule
    """
    top_probs = {tok: math.exp(lp) for tok, lp in (top or ()) if lp is not None}
    probs = {**top_probs, **{tok: math.exp(lp) for tok, lp in (exact or {}).items() if lp is not None}}
    p, missing = {}, []
    for name, ids in (("positive", labels.positive), ("negative", labels.negative)):
        vals = [probs[i] for i in ids if i in probs]
        if vals:
            p[name] = max(vals)
            continue
        if not top_probs:
            raise LabelLogprobError(f"no logprob for the {name} label's variants {tuple(ids)} and no "
                                    "top-k logprobs to apply the missing-label rule")
        p[name] = missing_label_substitute(top_probs.values())
        missing.append(name)
    return verdict(p["positive"], p["negative"], eta, missing, min_label_mass)


def missing_label_substitute(returned_probs: Iterable[float]) -> float:
    """The paper's stand-in probability for a label absent from the top-k.

    min(1 - sum of returned p, smallest returned p), never below 0.

    >>> missing_label_substitute([0.5, 0.3, 0.05])
    0.05
    >>> round(missing_label_substitute([0.6, 0.35]), 2)
    0.05
    """
    probs = list(returned_probs)
    if not probs:
        return 0.0
    return max(0.0, min(1.0 - sum(probs), min(probs)))
