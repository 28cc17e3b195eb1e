"""A bounded, thread-safe memo: what a compaction computed per message, kept for the next one (pure data).

A session compacts the same messages again and again (each compaction's
history holds the last one's, or a service's stored prefix and the turns
after it).  What depends on one message alone -- its exact ledger entries
(:mod:`~.ledger_entries`) -- is computed once and looked up after, keyed by
the message itself.  The memo holds at most ``capacity`` keys and forgets
the least recently used first, so a long-running service never grows
without bound; one lock guards it, so concurrent compactions share it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

V = TypeVar("V")


def digest(*texts: str) -> bytes:
    """A 128-bit BLAKE2b digest of ``texts`` (each length-prefixed, so no two sequences share one).

    >>> digest("ab", "c") == digest("a", "bc"), len(digest("x"))
    (False, 16)
    """
    h = hashlib.blake2b(digest_size=16)
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.digest()


class Memo:
    """Values by key up to a total weight of ``capacity``, least recently used forgotten first (the newest
    is always kept); safe across threads.

    >>> m = Memo(2); m.get("a", lambda: 1), m.get("b", lambda: 2), m.get("a", lambda: 9), m.get("c", lambda: 3)
    (1, 2, 1, 3)
    >>> "b" in m, "a" in m, m.hits, m.misses
    (False, True, 1, 3)
    >>> w = Memo(5, weigh=len); w.get("x", lambda: "abc"), w.get("y", lambda: "de"), w.get("z", lambda: "f")
    ('abc', 'de', 'f')
    >>> "x" in w, w.weight
    (False, 3)
    """

    def __init__(self, capacity: int, weigh: Callable[[object], int] = lambda value: 1):
        if capacity < 1:
            raise ValueError(f"a memo holds at least one value, not {capacity}")
        self.capacity = capacity  # total weight kept at most
        self.weigh = weigh  # a value -> its weight (at least 1 counts)
        self.weight = 0  # the weight it holds now
        self.hits = 0  # look-ups answered from the memo
        self.misses = 0  # look-ups that computed their value
        self._values: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The value kept for ``key``; else ``compute()``, kept (computed outside the lock)."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                self.hits += 1
                return self._values[key][0]  # type: ignore[return-value]
            self.misses += 1
        value = compute()
        weight = max(1, self.weigh(value))
        with self._lock:
            old = self._values.pop(key, None)  # another thread computed it meanwhile
            self.weight += weight - (old[1] if old else 0)
            self._values[key] = (value, weight)
            while self.weight > self.capacity and len(self._values) > 1:
                self.weight -= self._values.popitem(last=False)[1][1]
        return value

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._values

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)

    def clear(self) -> None:
        """Forget every value (the counts stay)."""
        with self._lock:
            self._values.clear()
            self.weight = 0
