"""The canonical order of requests issued at one instant, without serialising whole bodies.

Requests a run's client threads issue at one virtual instant are ordered by
``(server, path, canonical JSON body)`` (``json.dumps(body, sort_keys=True,
default=str)``), so thread timing cannot change the order, and identical
bodies are answered together (:mod:`.events`).  A body carries its prompt's
token ids (tens of thousands), and requests issued together share most of
them (the history), so serialising each whole body costs more than serving
it.  :func:`order_keys` gives strings that compare exactly as the canonical
bodies do, from only what tells them apart:

* a body alone on its ``(server, path)`` at an instant needs no key;
* bodies whose ``input_ids`` are flat lists of plain ints, and whose keys
  that sort before ``input_ids`` serialise alike, have identical canonical
  text up to where their ids differ.  Dropping the same leading ids (each
  followed by ``", "`` in every body) removes the same text at the same
  place from every canonical string, which changes neither their order nor
  their equality, so the key is the canonical JSON of the body with those
  ids dropped;
* a batch (``input_ids`` a list of such lists, in every body of the group)
  is keyed the same way, the same leading ids dropped from each of its
  prompts: up to the first character where two canonical strings differ,
  they have the same prompts in the same places, so the same text was
  dropped before it;
* any other group is keyed by its whole canonical bodies.
"""

from __future__ import annotations

import json

IDS = "input_ids"


def canonical(body) -> str:
    """The canonical JSON text of a body (what the order is defined on)."""
    return json.dumps(body, sort_keys=True, default=str)


def order_keys(bodies: list[dict], plain: list[bool] | None = None) -> list[str]:
    """Keys whose order and equality are those of ``canonical(body)`` for each body.

    >>> bodies = [{"input_ids": [1, 2, 9], "x": 1}, {"input_ids": [1, 2, 10], "x": 1}, {"input_ids": [1, 2, 9], "x": 1}]
    >>> order_keys(bodies)
    ['{"input_ids": [9], "x": 1}', '{"input_ids": [10], "x": 1}', '{"input_ids": [9], "x": 1}']
    >>> order_keys(bodies, [True, True, False])[0]  # one not known plain: the whole bodies
    '{"input_ids": [1, 2, 9], "x": 1}'
    >>> sorted(range(3), key=order_keys(bodies).__getitem__) == sorted(range(3), key=lambda i: canonical(bodies[i]))
    True
    """
    if len(bodies) < 2:
        return [""] * len(bodies)
    drop = shared_ids(bodies, plain)
    if not drop:
        return [canonical(b) for b in bodies]
    if type(bodies[0][IDS][0]) is list:
        return [canonical({**b, IDS: [row[drop:] for row in b[IDS]]}) for b in bodies]
    return [canonical({**b, IDS: b[IDS][drop:]}) for b in bodies]


def shared_ids(bodies: list[dict], plain: list[bool] | None = None) -> int:
    """Leading ids that may be dropped from every body's ``input_ids`` (0: none; see the module doc).

    ``plain``: per body, whether its ``input_ids`` are known to be a non-empty
    list of plain ints or of such lists (checked here when not given).

    >>> shared_ids([{"input_ids": [[1, 2, 3], [1, 2]]}, {"input_ids": [[1, 2, 4]]}])
    1
    >>> shared_ids([{"input_ids": [1, 2, 3]}, {"input_ids": [[1, 2, 4]]}])  # a flat list beside a batch
    0
    """
    lists = [b.get(IDS) if isinstance(b, dict) else None for b in bodies]
    if plain is None:
        plain = [_plain(x) for x in lists]
    if not all(plain):
        return 0
    batches = {type(x[0]) is list for x in lists}
    if len(batches) > 1:
        return 0
    heads = {canonical({k: v for k, v in b.items() if k < IDS}) for b in bodies}
    if len(heads) > 1:
        return 0
    rows = [row for x in lists for row in x] if batches == {True} else lists
    first, n = rows[0], min(map(len, rows)) - 1  # every prompt keeps at least one id after the dropped ones
    for other in rows[1:]:
        n = common_prefix(first, other, n)
    return max(n, 0)


def _plain(ids) -> bool:
    """A non-empty list of plain ints, or a non-empty list of non-empty such lists."""
    if type(ids) is not list or not ids:
        return False
    if type(ids[0]) is list:
        return all(type(row) is list and row and set(map(type, row)) == {int} for row in ids)
    return set(map(type, ids)) == {int}


def common_prefix(a: list, b: list, limit: int) -> int:
    """The length of the longest common prefix of ``a`` and ``b``, at most ``limit`` (slice compares).

    >>> common_prefix([1, 2, 3, 4], [1, 2, 5], 10), common_prefix([1, 2], [1, 2], 1), common_prefix([1], [2], 5)
    (2, 1, 0)
    """
    n = min(len(a), len(b), limit)
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
