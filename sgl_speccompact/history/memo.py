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

import threading
from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

V = TypeVar("V")


class Memo:
    """At most ``capacity`` values by key, least recently used forgotten first; safe across threads.

    >>> m = Memo(2); m.get("a", lambda: 1), m.get("b", lambda: 2), m.get("a", lambda: 9), m.get("c", lambda: 3)
    (1, 2, 1, 3)
    >>> "b" in m, "a" in m, m.hits, m.misses
    (False, True, 1, 3)
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"a memo holds at least one value, not {capacity}")
        self.capacity = capacity  # keys kept at most
        self.hits = 0  # look-ups answered from the memo
        self.misses = 0  # look-ups that computed their value
        self._values: OrderedDict[Hashable, object] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The value kept for ``key``; else ``compute()``, kept (computed outside the lock)."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                self.hits += 1
                return self._values[key]  # type: ignore[return-value]
            self.misses += 1
        value = compute()
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self.capacity:
                self._values.popitem(last=False)
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
