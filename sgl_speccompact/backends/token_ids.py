"""Prompts as token ids: each distinct piece of text is tokenized once.

A compaction sends about a hundred ``/generate`` requests that all carry the
same long history.  Sent as text, SGLang's tokenizer process would encode
that history for every one of them.  Sent as ``input_ids``, it is encoded
once: the prompt is cut into segments at points where tokenization provably
restarts, each new segment is tokenized once (by the server's own
``/tokenize``) and remembered, and a prompt's ids are its segments' ids in
order.

Where tokenization restarts.  A cut goes after a ``"\\n"`` that follows a
non-whitespace character and precedes a printable ASCII character other than
a space.  For the byte-level BPE tokenizers of Qwen2/Qwen3 (and Llama 3 and
GPT-2, which share the regex design), no pre-tokenizer chunk contains both
that newline and the next character, no chunk before the cut depends on what
follows it (the only look-ahead, ``\\s+(?!\\S)``, cannot reach past the
newline), no added token contains a newline, and NFC normalization does not
compose across a newline.  So ``ids(a + b) == ids(a) + ids(b)``.  The rule is
checked against the live server (:func:`concatenates`) before it is used; a
tokenizer that fails (SentencePiece's leading-space marker, for one) keeps
getting text.

Example (with a toy tokenizer, one id per character)::

    >>> segments("[user]\\nfix a.py\\n\\n- done\\n")
    ['[user]\\n', 'fix a.py\\n\\n- done\\n']
    >>> cache = TokenIdCache(lambda texts: [[ord(c) for c in t] for t in texts])
    >>> cache.ids("ab\\ncd") == [ord(c) for c in "ab\\ncd"], cache.tokenized_segments
    (True, 2)
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

# a cut: after "<non-space>\n", before a printable ASCII character that is not a space
# (the newline comes first so the scan jumps from newline to newline)
CUT = re.compile(r"\n(?<=\S\n)(?=[!-~])")

# Texts the rule is checked on: ChatML markup, lists, code, numbers, unicode,
# blank lines, odd lengths.
PROBES = (
    "<|im_start|>system\nYou summarize.<|im_end|>\n<|im_start|>user\n[tool result bash id=c1]\n"
    "Traceback (most recent call last):\n  File \"a.py\", line 3\nValueError: bad\n\n[assistant]\nFix it.\n"
    "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n- Goal: fix a.py\n- Done: 12 tests\n",
    "def f(x):\n    return x\n# café naïve 東京\n'quoted'\n\"double\"\n1234567\n(a)\n{b}\n",
)

Tokenize = Callable[[list[str]], list[list[int]]]  # texts -> ids of each (no special tokens added)


def segments(text: str) -> list[str]:
    """``text`` cut where tokenization restarts (see the module docstring)."""
    cuts = [m.end() for m in CUT.finditer(text)]
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]


def shared_chars(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (slice compares, no character loop).

    >>> shared_chars("abcd", "abxd"), shared_chars("ab", "abc"), shared_chars("", "a")
    (2, 2, 0)
    """
    if len(a) < len(b):
        a, b = b, a
    if a.startswith(b):
        return len(b)
    lo, hi = 0, len(b)  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a.startswith(b[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class Assembled:
    """A prompt whose ids were assembled lately: the head of the next prompt that shares it."""

    text: str  # the prompt
    ends: list[int]  # the character offset where each of its segments ends, in order
    counts: list[int]  # the ids of its segments up to and including each one (same order)
    ids: list[int]  # its ids, without the ids the server adds in front (never handed out)

    def head(self, text: str) -> int:
        """How many of this prompt's segments ``text`` starts with, the last one ending at a restart
        point of ``text`` too (0: none).

        A cut needs the character after it, so only a cut before the first character where the two
        prompts differ is one of ``text``'s too; the segments up to it are the same in both.
        """
        return bisect_right(self.ends, shared_chars(text, self.text) - 1)

    def chars(self, k: int) -> int:
        """The length of this prompt's first ``k`` segments."""
        return self.ends[k - 1] if k else 0


RECENT = 4  # prompts whose assembly a later prompt may start from (a block's history, a few questions)


def restarts_at(text: str, i: int) -> bool:
    """Whether tokenization restarts at character ``i`` of ``text`` (a cut of :func:`segments` is there).

    >>> restarts_at("a.\\n- b", 3), restarts_at("a.\\n\\n- b", 4), restarts_at("a.\\n- b", 0)
    (True, False, False)
    """
    return 0 < i < len(text) and CUT.match(text, i - 1) is not None


def concatenates(tokenize_full: Callable[[str], list[int]], tokenize: Tokenize,
                 prefix: list[int], probes: tuple[str, ...] = PROBES) -> bool:
    """Whether ``prefix + ids of the segments == ids of the whole text`` on every probe.

    ``tokenize_full`` tokenizes as ``/generate`` does (special tokens added);
    ``prefix`` is what it adds in front (``[]`` for Qwen3, a BOS elsewhere).
    """
    for probe in probes:
        parts = segments(probe)
        if len(parts) < 2:
            continue
        joined = list(prefix)
        for ids in tokenize(parts):
            joined.extend(ids)
        if joined != tokenize_full(probe):
            return False
    return True


class TokenIdCache:
    """``text -> token ids``, tokenizing each distinct segment once.

    Parameters
    ----------
    tokenize
        ``texts -> ids`` without special tokens added (the server's ``/tokenize``).
    prefix
        Ids the server's ``/generate`` tokenization adds in front of a prompt.
    max_tokens
        Remembered ids, at most (least recently used segments go first).

    Thread-safe, and no lock is held across ``tokenize`` (a network call):
    the thread that first needs a segment claims it and tokenizes it; a
    thread needing a claimed segment waits on that claim's
    ``threading.Event`` (a plain condition wait, which the one-clock
    simulator recognises as blocked).  So a history two branches share is
    tokenized once.  If the claiming call fails, its waiters claim the
    segments again.
    """

    def __init__(self, tokenize: Tokenize, prefix: list[int] | None = None, max_tokens: int = 4_000_000):
        self._tokenize = tokenize
        self._prefix = list(prefix or [])
        self._max_tokens = max_tokens  # remembered ids (tokens)
        self._memo: OrderedDict[str, list[int]] = OrderedDict()
        self._claims: dict[str, threading.Event] = {}  # segment -> set when its tokenization ends
        self._held = 0  # ids currently remembered (tokens)
        self._lock = threading.Lock()  # guards the dicts and counters only, never held across I/O
        self.tokenized_segments = 0  # segments sent to tokenize, over the cache's life
        self.tokenized_chars = 0  # characters sent to tokenize, over the cache's life
        self._recent: list[Assembled] = []  # the latest assembled prompts, newest first (at most RECENT)

    def ids(self, text: str, tokenize: Tokenize | None = None, prefix: bool = True) -> list[int]:
        """Token ids of ``text`` exactly as the server tokenizes the whole of it.

        ``tokenize`` replaces the cache's own for this call (the caller's
        connection, with its cancellation and timeout).  Without ``prefix``
        the ids the server adds in front are left out: the ids ``text`` adds
        after a restart point of a longer prompt.

        A prompt that starts with one assembled lately (the same history,
        another question) takes that one's ids up to their last shared
        restart point, and cuts and looks up only the rest: a compaction's
        prompts are cut once, not once per request.
        """
        with self._lock:
            recent = list(self._recent)
        base, k, at = None, 0, 0
        for seen in recent:  # newest first; a head of half the prompt or more is taken as it is
            got = seen.head(text)
            if seen.chars(got) > at:
                base, k, at = seen, got, seen.chars(got)
            if 2 * at >= len(text):
                break
        parts = segments(text[at:])
        return self._with(parts, lambda: self._assemble(parts, prefix, text, base, k), tokenize)

    def counts(self, texts: list[str], tokenize: Tokenize | None = None) -> list[int]:
        """Each text's length in tokens (no ids added in front); the new segments of all of them are
        tokenized in one call.

        >>> TokenIdCache(lambda texts: [list(t) for t in texts]).counts(["ab\\ncd", "ab\\n", ""])
        [5, 3, 0]
        """
        split = [segments(t) for t in texts]
        every = [p for parts in split for p in parts]
        return self._with(every, lambda: [sum(len(self._memo[p]) for p in parts) for parts in split], tokenize)

    def _with(self, parts: list[str], use, tokenize: Tokenize | None):
        """``use()`` (called with the lock held) once every segment in ``parts`` is remembered."""
        distinct = list(dict.fromkeys(parts))
        while True:
            with self._lock:
                if all(p in self._memo for p in distinct):
                    return use()
                waits = {id(e): e for p in distinct if (e := self._claims.get(p)) is not None}
                mine = [p for p in distinct if p not in self._memo and p not in self._claims]
                claim = threading.Event()
                for part in mine:
                    self._claims[part] = claim
            if mine:
                self._fill(mine, claim, tokenize or self._tokenize)
            for event in waits.values():
                event.wait()

    def clear(self) -> None:
        """Forget every segment and zero the counters (call with no ``ids`` call in flight)."""
        with self._lock:
            self._memo.clear()
            self._recent.clear()
            self._held = self.tokenized_segments = self.tokenized_chars = 0

    def _fill(self, mine: list[str], claim: threading.Event, tokenize: Tokenize) -> None:
        """Tokenize the claimed segments ``mine`` (no lock held), remember them, release the claim."""
        try:
            got = tokenize(mine)
            with self._lock:
                for part, ids in zip(mine, got, strict=True):
                    self._memo[part] = list(ids)
                    self._held += len(ids)
                self.tokenized_segments += len(mine)
                self.tokenized_chars += sum(map(len, mine))
        finally:
            with self._lock:
                for part in mine:
                    self._claims.pop(part, None)
            claim.set()

    def _assemble(self, parts: list[str], prefix: bool = True, text: str | None = None,
                  base: Assembled | None = None, k: int = 0) -> list[int]:
        """The prompt's ids (lock held): those of the first ``k`` segments of ``base``, then the
        remembered ids of ``parts``; drop the least recently used segments.  With ``text`` (the whole
        prompt), remember it as assembled."""
        ends, counts = (base.ends[:k], base.counts[:k]) if base is not None else ([], [])
        ids = base.ids[:counts[-1]] if counts else []
        memo, end = self._memo, ends[-1] if ends else 0
        for part in parts:
            ids.extend(memo[part])
            memo.move_to_end(part)
            end += len(part)
            ends.append(end)
            counts.append(len(ids))
        while self._held > self._max_tokens and len(memo) > len(parts):
            _, dropped = memo.popitem(last=False)
            self._held -= len(dropped)
        if text:
            self._recent = [Assembled(text, ends, counts, ids), *self._recent[:RECENT - 1]]
        return self._prefix + ids if prefix else list(ids)
