"""A prompt's token ids back to text, each distinct block of lines decoded once.

A request sent as ``input_ids`` reaches the scripted model as text (a policy
reads prompts), so the front end decodes it.  The requests of one compaction
share nearly all their lines (the history, the slot contracts), so decoding
every prompt whole repeats work in proportion to the history on every
request.  :class:`LineDecoder` cuts a prompt's ids into blocks of lines and
decodes each distinct block once.

Where a block ends: after a token whose text ends in a newline, when the
token before it has an id divisible by :data:`BLOCK_SPREAD` (content-defined
cuts, about one newline in :data:`BLOCK_SPREAD`).  A cut depends only on the
two tokens at it, so the same run of lines is cut the same way in every
prompt that holds it, whatever comes before, and its blocks are found in the
memo.

Why the result is exactly ``decode(ids)``.  A byte-level decoder (GPT-2's,
Qwen2/Qwen3's, Llama 3's) maps every token to its bytes and decodes the
concatenated bytes as UTF-8, replacing invalid sequences.  Cut after a token
whose bytes end in ``\\n``, the bytes before the cut end on a character
boundary (``\\n`` is one byte, and it also ends any broken sequence before
it), so decoding the blocks and joining them gives the same text.
transformers' optional clean-up of tokenization spaces only rewrites
patterns that start with a space and hold no newline, so none spans a cut.
Other decoders (SentencePiece's leading-space marker, for one, strips a
space at the start of each decode) are decoded whole, as are ids outside
the vocabulary (the whole decode raises as it did).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

BLOCK_SPREAD = 16  # a newline ends a block when the id before it is divisible by this (blocks of ~16 lines)
MAX_BLOCKS = 100_000  # distinct blocks remembered before the memo starts afresh
UNKNOWN = 2  # newline table: not classified yet (0: no newline at its end, 1: a newline)
HEAD = 16  # a prompt's first ids: prompts are looked up by them
RECENT = 4  # prompts remembered per head


def byte_level(tokenizer) -> bool:
    """Whether ``tokenizer`` is a fast tokenizer with a byte-level decoder (cuts are exact)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    from tokenizers import decoders

    return isinstance(backend.decoder, decoders.ByteLevel)


@dataclass
class Decoded:
    """A prompt decoded before: where its blocks end and its text up to each end."""

    ids: list[int]  # its ids (kept, not copied)
    ends: list[int]  # where its blocks end (ascending, the last at len(ids))
    offsets: list[int]  # its text's length up to each end
    text: str  # its whole text


class LineDecoder:
    """``decode(ids)`` of one model, block by block with a memo of blocks.

    A prompt usually extends one decoded a moment before (the same history,
    another slot's request; the same branch, one line longer), so the
    decoder first looks among the :data:`RECENT` prompts that began with the
    same :data:`HEAD` ids, newest first, for a long shared start (compared
    in C), takes that prompt's text up to its last block end inside the
    shared start, and cuts and decodes only the rest.

    Parameters
    ----------
    decode
        ``ids -> text``: the model's whole decode (special tokens kept).
    token_texts
        ``ids -> [text of each id]``, one token each.
    vocab_size
        Ids the tokenizer knows (``0 .. vocab_size - 1``).
    exact
        Whether cutting after a newline is exact for this tokenizer
        (:func:`byte_level`); when False every prompt is decoded whole.

    Safe to share between threads: the memos are dicts and the table a
    numpy array, written under the GIL; a race only decodes a block twice.
    """

    def __init__(self, decode, token_texts, vocab_size: int, exact: bool, max_blocks: int = MAX_BLOCKS):
        self._decode, self._token_texts, self.exact = decode, token_texts, exact
        self._max_blocks = max_blocks  # memo size bound
        self._newline = np.full(vocab_size, UNKNOWN, dtype=np.uint8)  # token id -> its text ends in a newline
        self._blocks: dict[tuple[int, ...], str] = {}  # one block's ids -> its text
        self._recent: dict[tuple[int, ...], list[Decoded]] = {}  # first HEAD ids -> prompts, newest last

    def __call__(self, ids: list[int]) -> str:
        if not self.exact or len(ids) <= HEAD:
            return self._decode(ids)
        recent = self._recent.setdefault(tuple(ids[:HEAD]), [])
        start, ends, offsets, text = _shared(ids, recent)
        cuts = self._cuts(ids, start)
        if cuts is None:
            return self._decode(ids)
        blocks = self._blocks
        if len(blocks) > self._max_blocks:
            blocks.clear()
        parts = [text]
        length = offsets[-1] if offsets else 0
        for stop in (*cuts, len(ids)):
            key = tuple(ids[start:stop])
            part = blocks.get(key)
            if part is None:
                part = blocks[key] = self._decode(key)
            parts.append(part)
            length += len(part)
            ends.append(stop)
            offsets.append(length)
            start = stop
        out = "".join(parts)
        recent.append(Decoded(ids, ends, offsets, out))
        del recent[:-RECENT]
        return out

    def _cuts(self, ids: list[int], start: int) -> list[int] | None:
        """Where ``ids[start:]`` is cut into blocks (positions in ``ids``, inside ``start + 1 .. len - 1``).

        None: the rest is not all ids of the vocabulary (the prompt is decoded whole).
        """
        try:
            arr = np.frombuffer(array("q", ids[start:] if start else ids), dtype=np.int64)
        except (TypeError, OverflowError):
            return None
        table = self._newline
        if not len(arr) or arr.min() < 0 or arr.max() >= len(table):
            return [] if not len(arr) else None
        nl = table[arr]
        if (nl == UNKNOWN).any():
            new = np.unique(arr[nl == UNKNOWN]).tolist()
            for tid, text in zip(new, self._token_texts(new)):
                table[tid] = text.endswith("\n")
            nl = table[arr]
        ends = (nl[1:] == 1) & (arr[:-1] % BLOCK_SPREAD == 0)  # token i + 1 ends a line; token i is a cut's mark
        if len(ends):
            ends[-1] = False  # never cut after the last token
        return (np.flatnonzero(ends) + (start + 2)).tolist()

    def cuts(self, ids: list[int]) -> list[int] | None:
        """Where ``ids`` is cut into blocks when decoded on its own; None: it is decoded whole."""
        return self._cuts(ids, 0) if self.exact and ids else None


def _shared(ids: list[int], recent: list[Decoded]) -> tuple[int, list[int], list[int], str]:
    """``(start, ends, offsets, text)``: a long reusable start of ``ids`` among ``recent`` prompts, newest first."""
    best, start, k = None, 0, 0
    for old in reversed(recent):
        n = common_prefix(old.ids, ids)
        j = bisect_right(old.ends, n)  # old's blocks that end inside the shared start
        if j and old.ends[j - 1] > start:
            best, start, k = old, old.ends[j - 1], j
        if start * 10 >= len(ids) * 9:  # nine tenths reused: good enough, look no further
            break
    if best is None:
        return 0, [], [], ""
    return start, best.ends[:k], best.offsets[:k], best.text[:best.offsets[k - 1]]


def common_prefix(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (slice compares, in C).

    >>> common_prefix([1, 2, 3], [1, 2, 4, 5]), common_prefix([1, 2], [1, 2, 3]), common_prefix([], [1])
    (2, 2, 0)
    """
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo
