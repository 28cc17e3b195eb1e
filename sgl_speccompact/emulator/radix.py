"""A radix tree over token ids, with SGLang's prefix-cache semantics.

Mirrors ``sglang/srt/mem_cache/radix_cache.py`` (page size 1) closely enough
for ``cached_tokens`` to come out as the real server reports it:

* one tree per namespace.  SGLang keys children on ``(extra_key, token)``
  where ``extra_key`` is the request's ``extra_key`` with the LoRA id
  appended (``schedule_batch.Req.__init__``), and ``cache_salt`` also splits
  the tree; a separate root per ``(extra_key+lora, cache_salt)`` is the same
  partition;
* ``match`` walks the longest stored prefix, splitting a node when the match
  ends inside it, and refreshes the access time of every node it touches;
* ``lock``/``unlock`` pin a path (a running request's prefix) so eviction
  cannot drop it, like ``inc_lock_ref``/``dec_lock_ref``;
* ``evict`` drops least-recently-used unlocked leaves first.

Unlike SGLang the tree stores no KV indices: the values are the token ids
themselves, because only the lengths matter here.
"""

from __future__ import annotations

import copy
import heapq
import itertools
from dataclasses import dataclass, field

Namespace = tuple[str | None, str | None]  # (extra_key + lora id, cache_salt)
ROOT_NAMESPACE: Namespace = (None, None)


@dataclass(eq=False)
class Node:
    """One edge of the tree: a run of token ids and its subtree."""

    key: list[int] = field(default_factory=list)  # token ids on the edge into this node
    parent: "Node | None" = None  # None only for a namespace root
    children: dict[int, "Node"] = field(default_factory=dict)  # first token -> child
    lock_ref: int = 0  # running requests whose prefix passes through this node
    last_access: int = 0  # logical clock of the last match/insert touching it

    def is_leaf(self) -> bool:
        """True when nothing hangs below this node."""
        return not self.children


class RadixTree:
    """Namespaced token radix tree with LRU eviction of unlocked leaves.

    Parameters
    ----------
    capacity_tokens
        Most tokens the tree keeps; ``None`` means unbounded.  After every
        insert the tree evicts LRU unlocked leaves until it fits (or nothing
        more is evictable).
    """

    def __init__(self, capacity_tokens: int | None = None):
        self.capacity_tokens = capacity_tokens
        self._clock = itertools.count(1)
        self.reset()

    # ------------------------------------------------------------------ public

    def reset(self) -> None:
        """Drop everything, as ``/flush_cache`` does (``RadixCache.reset``)."""
        self._roots: dict[Namespace, Node] = {}
        self._size = 0

    def clone(self) -> "RadixTree":
        """An independent copy: the same tokens, locks, access times and clock (``copy.deepcopy``'s result, faster)."""
        out = RadixTree(self.capacity_tokens)
        out._size, out._clock = self._size, copy.copy(self._clock)
        for ns, root in self._roots.items():
            top = out._roots[ns] = Node(list(root.key), None, {}, root.lock_ref, root.last_access)
            stack = [(root, top)]
            while stack:
                old, new = stack.pop()
                for first, child in old.children.items():
                    twin = new.children[first] = Node(list(child.key), new, {}, child.lock_ref, child.last_access)
                    stack.append((child, twin))
        return out

    def total_size(self) -> int:
        """Tokens stored across all namespaces."""
        return self._size

    def namespaces(self) -> list[Namespace]:
        """Namespaces that hold at least one token."""
        return [ns for ns, root in self._roots.items() if root.children]

    def match(self, ns: Namespace, ids: list[int], limit: int | None = None) -> tuple[int, Node]:
        """Longest stored prefix of ``ids[:limit]`` in namespace ``ns``.

        Returns
        -------
        tuple[int, Node]
            The matched length and the node where the match ends (lock it to
            protect the prefix).
        """
        key = ids if limit is None else ids[: max(limit, 0)]
        node = self._root(ns)
        node.last_access = now = next(self._clock)
        matched = 0
        while matched < len(key):
            child = node.children.get(key[matched])
            if child is None:
                break
            n = _common_len(child.key, key, matched)
            child.last_access = now
            if n < len(child.key):
                node = self._split(child, n)
                matched += n
                break
            node = child
            matched += n
        return matched, node

    def insert(self, ns: Namespace, ids: list[int]) -> int:
        """Store ``ids``; return how many leading tokens were already stored."""
        node = self._root(ns)
        node.last_access = now = next(self._clock)
        pos = 0
        while pos < len(ids):
            child = node.children.get(ids[pos])
            if child is None:
                leaf = Node(key=list(ids[pos:]), parent=node, last_access=now)
                node.children[ids[pos]] = leaf
                self._size += len(leaf.key)
                break
            n = _common_len(child.key, ids, pos)
            child.last_access = now
            if n < len(child.key):
                child = self._split(child, n)
            node = child
            pos += n
        self.trim()
        return pos

    def lock(self, node: Node) -> None:
        """Pin ``node`` and its ancestors against eviction."""
        while node is not None:
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: Node) -> None:
        """Undo one :meth:`lock` of ``node``."""
        while node is not None:
            node.lock_ref -= 1
            node = node.parent

    def evict(self, num_tokens: int) -> int:
        """Evict at least ``num_tokens`` tokens of LRU unlocked leaves if possible.

        Returns
        -------
        int
            Tokens actually evicted.
        """
        heap = [(n.last_access, id(n), n) for n in self._evictable_leaves()]
        heapq.heapify(heap)
        evicted = 0
        while heap and evicted < num_tokens:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            evicted += self._delete_leaf(node)
            if parent.parent is not None and parent.is_leaf() and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        return evicted

    def namespace_size(self, ns: Namespace) -> int:
        """Tokens stored in one namespace."""
        root = self._roots.get(ns)
        return 0 if root is None else sum(len(n.key) for n in _walk(root))

    # ----------------------------------------------------------------- private

    def _root(self, ns: Namespace) -> Node:
        root = self._roots.get(ns)
        if root is None:
            # The root never holds tokens and is never evicted (SGLang locks it).
            root = self._roots[ns] = Node(lock_ref=1)
        return root

    def _split(self, child: Node, n: int) -> Node:
        """Cut ``child``'s edge after ``n`` tokens; return the new upper node."""
        parent = child.parent
        upper = Node(
            key=child.key[:n],
            parent=parent,
            lock_ref=child.lock_ref,
            last_access=child.last_access,
        )
        parent.children[upper.key[0]] = upper
        child.key = child.key[n:]
        child.parent = upper
        upper.children[child.key[0]] = child
        return upper

    def _evictable_leaves(self) -> list[Node]:
        return [
            n
            for root in self._roots.values()
            for n in _walk(root)
            if n.is_leaf() and n.lock_ref == 0 and n.parent is not None
        ]

    def _delete_leaf(self, node: Node) -> int:
        del node.parent.children[node.key[0]]
        self._size -= len(node.key)
        return len(node.key)

    def trim(self) -> None:
        """Evict LRU unlocked leaves until the tree fits its capacity."""
        if self.capacity_tokens is not None and self._size > self.capacity_tokens:
            self.evict(self._size - self.capacity_tokens)


def _common_len(edge: list[int], ids: list[int], start: int) -> int:
    """Length of the common prefix of ``edge`` and ``ids[start:]``."""
    n = min(len(edge), len(ids) - start)
    if edge[:n] == ids[start : start + n]:  # the common case, compared in C
        return n
    lo, hi = 0, n  # edge[:lo] matches, edge[:hi] does not: halve the gap with slice compares (in C)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if edge[lo:mid] == ids[start + lo : start + mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _walk(root: Node):
    """Every node below ``root`` (not ``root`` itself)."""
    stack = list(root.children.values())
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())
