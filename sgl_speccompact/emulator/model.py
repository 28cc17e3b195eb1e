"""The emulated model: a policy plus a real tokenizer.

Turns a :class:`~sgl_speccompact.emulator.policy.Policy`'s answers into what
a language model produces: a token sequence to decode and a well-defined
next-token distribution at every position.

Distribution rule: the policy names a few tokens with log probabilities;
every other token of the vocabulary shares what is left of the probability
mass equally (the "floor").  If the named tokens already hold all of the
mass they are scaled down so that ``FLOOR_MASS`` remains for the rest.  At
an output position the emitted token gets ``CHOSEN_P`` unless the policy
named it.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass

from ..errors import SpecCompactError
from .policy import Logprobs, Policy
from .prompt_text import LineDecoder, byte_level

FLOOR_MASS = 1e-6  # least total probability left to unnamed tokens
CHOSEN_P = 0.9  # probability of an emitted token the policy did not name
MAX_OUTPUTS = 50_000  # policy outputs whose ids are remembered before the memo starts afresh


class EmulatorError(SpecCompactError):
    """A policy answered something the emulator cannot use (a bug in the script)."""

    code = "emulator_error"


@dataclass(frozen=True)
class Distribution:
    """A next-token distribution: named tokens plus a shared floor."""

    named: dict[int, float]  # token id -> logprob, normalized with the floor
    floor: float  # logprob of every token not in ``named``
    vocab_size: int  # tokens in the vocabulary

    def logprob(self, token_id: int) -> float:
        """Logprob of ``token_id``."""
        return self.named.get(token_id, self.floor)

    def top(self, k: int) -> list[tuple[float, int]]:
        """The ``k`` most likely tokens as ``(logprob, id)``, best first.

        Ties among floor tokens break by lowest id, so the answer is stable.
        """
        best = sorted(self.named.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        out = [(lp, tid) for tid, lp in best]
        tid = 0
        while len(out) < k and tid < self.vocab_size:
            if tid not in self.named:
                out.append((self.floor, tid))
            tid += 1
        return out

    def argmax(self) -> int:
        """The most likely token id."""
        return self.top(1)[0][1]


def make_distribution(named: dict[int, float], vocab_size: int) -> Distribution:
    """Normalize policy logprobs into a :class:`Distribution` (see module doc)."""
    probs = {t: math.exp(lp) for t, lp in named.items() if lp > -math.inf}
    total = sum(probs.values())
    if total > 1.0 - FLOOR_MASS:
        scale = (1.0 - FLOOR_MASS) / total
        probs = {t: p * scale for t, p in probs.items()}
        total = 1.0 - FLOOR_MASS
    rest = max(vocab_size - len(probs), 1)
    floor = math.log(max(1.0 - total, FLOOR_MASS) / rest)
    return Distribution({t: math.log(p) for t, p in probs.items()}, floor, vocab_size)


class EmulatedModel:
    """A policy speaking through a Hugging Face tokenizer.

    Parameters
    ----------
    policy
        What the model says.
    tokenizer
        A ``transformers`` tokenizer (fast); it defines the vocabulary.
    """

    def __init__(self, policy: Policy, tokenizer):
        self.policy = policy
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.eos_ids = list(_eos_ids(tokenizer))
        self._token_cache: dict[str, int] = {}
        self._text_cache: dict[int, str] = {}
        self._outputs: dict[str, tuple[int, ...]] = {}  # a policy output's text -> its ids
        # One tokenizer serves the HTTP thread and the scheduler thread; HF
        # tokenizers may mutate their Rust state (truncation) inside encode.
        self._lock = threading.RLock()
        self._prompts = LineDecoder(self.decode, self.token_texts, self.vocab_size, byte_level(tokenizer))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text`` (by default without special tokens added)."""
        with self._lock:
            return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def encode_many(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        """``[encode(t) for t in texts]`` in one call of the tokenizer (its batch path, the same ids)."""
        if not texts:
            return []
        with self._lock:
            return self.tokenizer(list(texts), add_special_tokens=add_special_tokens)["input_ids"]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Text of ``ids``."""
        with self._lock:
            return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def prompt_text(self, ids: list[int]) -> str:
        """``decode(ids)`` of a prompt, each distinct line decoded once (:mod:`.prompt_text`)."""
        return self._prompts(ids)

    def token_text(self, token_id: int) -> str:
        """Text of one token, as ``return_text_in_logprobs`` shows it (specials kept)."""
        text = self._text_cache.get(token_id)
        if text is None:
            text = self._text_cache[token_id] = self.decode([token_id])
        return text

    def token_texts(self, token_ids: list[int]) -> list[str]:
        """:meth:`token_text` of each id, the ones not seen before decoded in one batch."""
        cache = self._text_cache
        new = [t for t in dict.fromkeys(token_ids) if t not in cache]
        if new:
            with self._lock:
                texts = self.tokenizer.batch_decode([[t] for t in new], skip_special_tokens=False)
            cache.update(zip(new, texts))
        return [cache[t] for t in token_ids]

    def plan(self, prompt: str, ids: list[int], params: dict, budget: int, ignore_eos: bool) -> list[int]:
        """The tokens the model will emit, EOS included, at most ``budget``.

        With ``ignore_eos`` the text is followed by EOS tokens up to the
        budget, so only ``max_new_tokens`` (or a stop) ends the request.
        """
        text = self.policy.generate(prompt, list(ids), params)
        if not isinstance(text, str):
            raise EmulatorError(f"policy.generate returned {type(text).__name__}, not str")
        out = self._output_ids(text)
        eos = self.eos_ids[0]
        pad = max(budget - len(out), 1) if ignore_eos else 1
        return (out + [eos] * pad)[: max(budget, 1)]

    def _output_ids(self, text: str) -> list[int]:
        """``encode(text)`` of a policy's output; a policy repeats its lines, so each is encoded once."""
        ids = self._outputs.get(text)
        if ids is None:
            if len(self._outputs) > MAX_OUTPUTS:
                self._outputs.clear()
            ids = self._outputs[text] = tuple(self.encode(text))
        return list(ids)

    def distribution(self, prompt: str, ids: list[int], params: dict, chosen: int | None = None) -> Distribution:
        """Next-token distribution after ``prompt`` (optionally forcing ``chosen`` in)."""
        raw = self.policy.next_token_logprobs(prompt, list(ids), params)
        named = self._resolve(raw)
        if chosen is not None and chosen not in named:
            named[chosen] = math.log(CHOSEN_P)
        return make_distribution(named, self.vocab_size)

    def _resolve(self, raw: Logprobs) -> dict[int, float]:
        """Token-string keys -> ids; a string that is not one token is a script bug."""
        out: dict[int, float] = {}
        for key, lp in (raw or {}).items():
            tid = key if isinstance(key, int) else self._token_id(key)
            if not 0 <= tid < self.vocab_size:
                raise EmulatorError(f"policy named token id {tid}, outside the vocabulary")
            out[tid] = max(out.get(tid, -math.inf), float(lp))
        return out

    def _token_id(self, text: str) -> int:
        if text not in self._token_cache:
            ids = self.encode(text)
            if len(ids) != 1:
                raise EmulatorError(f"policy named {text!r}, which is {len(ids)} tokens, not one")
            self._token_cache[text] = ids[0]
        return self._token_cache[text]


@functools.lru_cache(maxsize=8)
def _eos_ids(tokenizer) -> tuple[int, ...]:
    """EOS ids as SGLang collects them: the tokenizer's EOS, then chat ends (read once per tokenizer: the
    vocabulary is a dict of every token)."""
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    vocab = tokenizer.get_vocab()
    for tok in ("<|im_end|>", "<|endoftext|>"):
        if tok in vocab and vocab[tok] not in ids:
            ids.append(vocab[tok])
    if not ids:
        raise EmulatorError("the tokenizer has no EOS token")
    return tuple(ids)
