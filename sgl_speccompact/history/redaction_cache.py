"""What redaction found before: each text's redaction, kept by a digest of the text.

A session compacts a history that grows between compactions, so most of
its texts were redacted the compaction before.  :func:`cached` returns what
a redaction returned for the same text, byte for byte, without scanning it
again.  The cache is the process's (:data:`REDACTION_CACHE`), shared by
every compaction and session, bounded, and safe from the service's threads.

What it holds is what a prompt shows anyway: for a text with a secret, its
redacted form and the count of secrets per kind; for one without, only that
it has none.  Never a secret, where one was, nor the text: the key is a
16-byte BLAKE2b digest of the text.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Callable

CACHE_CHARS = 32_000_000  # what REDACTION_CACHE holds at most, in characters (least recently used out first)
ENTRY_CHARS = 200  # what one entry costs besides its redacted text: digest, tuple, slot (about, in bytes)
# a cached redaction: the redacted text (None: it had no secret, so it is its own redaction), counts per kind
Cached = tuple["str | None", dict[str, int]]


class RedactionCache:
    """Redactions by the digest of their text: bounded, least recently used out first, thread-safe."""

    def __init__(self, max_chars: int):
        self.max_chars = max_chars  # characters held at most (each redacted text, ENTRY_CHARS per entry)
        self.chars = 0  # characters held now
        self._entries: OrderedDict[bytes, tuple[Cached, int]] = OrderedDict()  # digest -> (entry, its chars)
        self._lock = threading.Lock()  # a service runs compactions in threads

    def get(self, key: bytes) -> Cached | None:
        """The entry for ``key``, now the most recently used; None if absent."""
        with self._lock:
            held = self._entries.get(key)
            if held is None:
                return None
            self._entries.move_to_end(key)
            return held[0]

    def put(self, key: bytes, entry: Cached) -> None:
        """Keep ``entry``, dropping the least recently used ones beyond :attr:`max_chars`."""
        chars = ENTRY_CHARS + len(entry[0] or "")
        with self._lock:
            old = self._entries.pop(key, None)
            self.chars += chars - (old[1] if old else 0)
            self._entries[key] = (entry, chars)
            while self.chars > self.max_chars:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.chars -= dropped

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
            self.chars = 0


REDACTION_CACHE = RedactionCache(CACHE_CHARS)  # the process's redactions, shared by all its compactions


def cached(tag: bytes, text: str, how: Callable[[str], tuple[str, dict[str, int]]]) -> tuple[str, dict[str, int]]:
    """``how(text)``, or what it returned for the same ``text`` before (``tag`` names ``how``).

    The counts are a copy: a caller may change them.

    >>> calls = []
    >>> how = lambda t: (calls.append(t), (t.upper(), {"kind": 1}))[1]
    >>> cached(b"doc", "a secret", how), cached(b"doc", "a secret", how), len(calls)
    (('A SECRET', {'kind': 1}), ('A SECRET', {'kind': 1}), 1)
    """
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16, person=tag).digest()
    entry = REDACTION_CACHE.get(key)
    if entry is None:
        shown, counts = how(text)
        entry = (shown if counts else None, counts)
        REDACTION_CACHE.put(key, entry)
    shown, counts = entry
    return (text if shown is None else shown), dict(counts)
