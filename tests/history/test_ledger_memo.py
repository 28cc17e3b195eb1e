"""Per-message memo of the ledger's extraction: a compaction scans only the messages it has not seen."""

from __future__ import annotations

import threading
from unittest import mock

import pytest

from sgl_speccompact.history import ledger_entries as module
from sgl_speccompact.history.ledger_entries import ledger_entries
from sgl_speccompact.history.memo import Memo
from sgl_speccompact.history.messages import parse_messages
from tests.support.methods import tool_loop


def _full(e):
    return (e.index, e.kind, e.value, e.via, e.args, e.at, e.exit, e.error, e.done, e.source, e.noise, e.hit)


def test_a_later_compaction_scans_only_the_new_messages_and_finds_the_same_entries():
    messages = tool_loop(12, lines=6)
    turns = parse_messages(messages)
    memo = Memo(1000)
    with mock.patch.object(module, "extract", wraps=module.extract) as scans:
        first = ledger_entries(turns[:17], memo=memo)
        scanned_first = scans.call_count
        again = ledger_entries(turns, memo=memo)  # the session goes on: 17 messages seen, the rest new
        scanned_again = scans.call_count - scanned_first
        alone = ledger_entries(turns)  # no memo: every message scanned
        scanned_alone = scans.call_count - scanned_first - scanned_again
    assert [_full(e) for e in first] == [_full(e) for e in ledger_entries(turns[:17])]
    assert [_full(e) for e in again] == [_full(e) for e in alone]  # outcomes and indices as without the memo
    assert 0 < scanned_again < scanned_alone  # only the messages it had not seen
    looked_up = sum(t.role != "system" for t in turns[:17]) + sum(t.role != "system" for t in turns)
    assert memo.hits + memo.misses == looked_up and memo.hits >= 16  # every message of the first call a hit


def test_the_same_messages_at_other_indices_get_their_new_indices():
    turns = parse_messages(tool_loop(4, lines=3))
    memo = Memo(100)
    ledger_entries(turns, memo=memo)
    shifted = ledger_entries(turns, indices=[i + 40 for i in range(len(turns))], memo=memo)
    assert memo.hits >= len(turns) - 1
    assert [_full(e) for e in shifted] == [_full(e) for e in ledger_entries(turns, [i + 40 for i in range(len(turns))])]


def test_the_memo_is_bounded_and_safe_across_threads():
    histories = [parse_messages(tool_loop(3 + k, lines=2 + k)) for k in range(6)]
    want = [[_full(e) for e in ledger_entries(h)] for h in histories]
    memo = Memo(9)  # far fewer than the messages: entries are forgotten and computed again all the time
    got: dict[int, list] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for _ in range(5):
                got[k] = [_full(e) for e in ledger_entries(histories[k], memo=memo)]
                assert len(memo) <= 9
        except BaseException as exc:  # noqa: BLE001 - reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(histories))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and [got[k] for k in range(len(histories))] == want
    assert len(memo) <= 9 and memo.hits + memo.misses > 0


def test_a_memo_holds_at_least_one_value():
    with pytest.raises(ValueError):
        Memo(0)
