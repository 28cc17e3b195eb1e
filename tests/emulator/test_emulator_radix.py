"""The emulator's radix tree against SGLang's RadixCache semantics
(``sglang/srt/mem_cache/radix_cache.py``, page size 1)."""

from __future__ import annotations

from sgl_speccompact.emulator import RadixTree

NS = (None, None)
LORA = ("drafter", None)


def test_match_after_insert_and_partial_match():
    t = RadixTree()
    assert t.insert(NS, [1, 2, 3, 4]) == 0
    assert t.match(NS, [1, 2, 3, 4, 5])[0] == 4
    assert t.match(NS, [1, 2, 9])[0] == 2  # ends inside an edge: the node is split
    assert t.match(NS, [7])[0] == 0
    assert t.total_size() == 4


def test_insert_reports_the_already_stored_prefix():
    t = RadixTree()
    t.insert(NS, [1, 2, 3])
    assert t.insert(NS, [1, 2, 5, 6]) == 2
    assert t.total_size() == 5
    assert t.match(NS, [1, 2, 5, 6])[0] == 4 and t.match(NS, [1, 2, 3])[0] == 3


def test_limit_caps_the_match():
    # schedule_batch.py passes max_prefix_len as the key limit.
    t = RadixTree()
    t.insert(NS, [1, 2, 3, 4])
    assert t.match(NS, [1, 2, 3, 4], limit=3)[0] == 3
    assert t.match(NS, [1, 2, 3, 4], limit=0)[0] == 0


def test_namespaces_are_disjoint():
    t = RadixTree()
    t.insert(LORA, [1, 2, 3])
    assert t.match(NS, [1, 2, 3])[0] == 0
    assert t.match(LORA, [1, 2, 3])[0] == 3
    assert t.namespace_size(LORA) == 3 and t.namespace_size(NS) == 0


def test_reset_empties_every_namespace():
    t = RadixTree()
    t.insert(NS, [1, 2])
    t.insert(LORA, [1, 2])
    t.reset()
    assert t.total_size() == 0 and t.match(LORA, [1, 2])[0] == 0


def test_eviction_is_lru_over_unlocked_leaves():
    t = RadixTree(capacity_tokens=6)
    t.insert(NS, [1, 1, 1])
    t.insert(NS, [2, 2, 2])
    t.match(NS, [1, 1, 1])  # touch: [2, 2, 2] is now least recently used
    t.insert(NS, [3, 3, 3])  # over capacity: evict the LRU leaf
    assert t.total_size() == 6
    assert t.match(NS, [2, 2, 2])[0] == 0
    assert t.match(NS, [1, 1, 1])[0] == 3 and t.match(NS, [3, 3, 3])[0] == 3


def test_locked_paths_survive_eviction():
    t = RadixTree()
    t.insert(NS, [1, 2, 3])
    t.insert(NS, [4, 5])
    _, node = t.match(NS, [1, 2, 3])
    t.lock(node)
    assert t.evict(100) == 2
    assert t.match(NS, [1, 2, 3])[0] == 3
    t.unlock(node)
    assert t.evict(100) == 3 and t.total_size() == 0


def test_evicting_a_leaf_exposes_its_parent():
    t = RadixTree()
    t.insert(NS, [1, 2, 3, 4])
    t.insert(NS, [1, 2, 5])  # splits into [1, 2] -> {[3, 4], [5]}
    assert t.evict(100) == 5
    assert t.total_size() == 0
