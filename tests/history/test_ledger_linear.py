"""The exact ledger's extraction runs in linear time on adversarial inputs.

The ledger runs the identifier extractor and its action patterns over every
message of every compaction, and redaction over every tool call's arguments,
so a pattern that backtracks quadratically on some run of characters would let
one tool output stall a compaction.  The check is a ratio of CPU times measured
in one run (a text 8x longer must take about 8x longer, never about 64x), never
a wall-clock limit; the texts are runs of the units each pattern scans, without
the part that would complete a match.
"""

from __future__ import annotations

import json
import time

import pytest

from sgl_speccompact.history import identifiers
from sgl_speccompact.history.ledger_entries import ledger_entries
from sgl_speccompact.history.messages import ToolCall, Turn
from sgl_speccompact.history.redaction import redact_arguments
from tests.support.prefilter import uncached

# units repeated into adversarial texts: "a-" was quadratic in the id pattern's digit look-ahead,
# "\n" in the "$ " prompt pattern's leading whitespace
UNITS = ("a-", "1a-", "a_", "\n", " \n", "\n\t", "a.", "a/", "./", "A1", "a1", "0a", "a.Error", "1,", "$1",
         "https://", " ", "aa", "AB12", "```\n", "`a", "$ ", "```x\n``", "#1", "2024-", "a@", "-",
         "ab-cd-", "Error.", "F", "1.", "0-0-")
SMALL, LARGE = 20_000, 160_000
MAX_RATIO = 20.0  # linear: about 8x; quadratic: about 64x


def _text(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _seconds(text: str, min_total_s: float, scan=None) -> float:
    """CPU time of one scan on this thread: the best of runs repeated until ``min_total_s`` passed."""
    scan = scan or identifiers.extract
    best, spent = float("inf"), 0.0
    while spent < min_total_s or best == float("inf"):
        t0 = time.thread_time()
        scan(text)
        took = time.thread_time() - t0
        best, spent = min(best, took), spent + took
    return best


def _ratio(unit: str, floor: float, scan=None) -> float:
    return _seconds(_text(unit, LARGE), floor * 3, scan) / max(_seconds(_text(unit, SMALL), floor, scan), 1e-6)


def _as_history(text: str) -> None:
    """The text as every part of a history the ledger reads: a shell call, a file call, an action's
    arguments, their results and a user message."""
    args = json.dumps({"command": text, "path": text})
    turns = (Turn("user", text), Turn("assistant", "```bash\n" + text + "\n```",
                                      (ToolCall("a", "bash", args), ToolCall("b", "update_x", text))),
             Turn("tool", text, tool_call_id="a"), Turn("tool", text, tool_call_id="b"))
    ledger_entries(turns)


# units of the ledger's own patterns: exit statuses, traceback frames, error lines, JSON strings and escapes
LEDGER_UNITS = UNITS + ("exit code ", "<returncode>", 'File "', '", line ', "Error", "a.b", '"', '\\"', "\\",
                        '"a\\', "> ", "&& ", "git ")
# units of the provenance and read-set patterns: dump, passwd and markup lines, demonstration markers and tags,
# an editor's open-file lines, shell tokens and quotes
PROVENANCE_UNITS = ("0000: ab ", "a1:", "root:x:0:", "xmlns ", "<!DOCTYPE ", "--- ", "-- EXAMPLE ", "<example>",
                    "(Open file: ", "[File: a (", "edit 1:1 ", "cat a.py ", "'a ", '"\\', "sed -i ", "> a ",
                    "- E999 ", "[Errno 1] ")


@pytest.mark.perf
@pytest.mark.parametrize("unit", LEDGER_UNITS, ids=repr)
def test_ledger_extraction_and_argument_redaction_are_linear(unit):
    for scan in (_as_history, uncached(redact_arguments)):
        ratio = _ratio(unit, 0.0, scan)
        for _ in range(2):
            if ratio > MAX_RATIO:
                ratio = min(ratio, _ratio(unit, 0.1, scan))
        assert ratio <= MAX_RATIO, f"{scan.__name__} {unit!r}: CPU time ratio {ratio:.1f}"


def _read_set(text: str) -> None:
    """The text as commands and editor results, through extraction, merging and the read set."""
    from sgl_speccompact.core.ledger_budget import merge
    from sgl_speccompact.core.read_set import read_set

    args = json.dumps({"command": text[:2000]})  # a command line is cut to 160 characters anyway
    turns = (Turn("user", "--- DEMONSTRATION ---\n" + text), Turn("assistant", "```\nedit 1:1\n```\n" + text,
                                                                  (ToolCall("a", "bash", args),)),
             Turn("user", text), Turn("tool", text, tool_call_id="a"))
    read_set(merge([], ledger_entries(turns)))


@pytest.mark.perf
@pytest.mark.parametrize("unit", PROVENANCE_UNITS, ids=repr)
def test_provenance_and_the_read_set_are_linear(unit):
    for scan in (_as_history, _read_set):
        ratio = _ratio(unit, 0.0, scan)
        for _ in range(2):
            if ratio > MAX_RATIO:
                ratio = min(ratio, _ratio(unit, 0.1, scan))
        assert ratio <= MAX_RATIO, f"{scan.__name__} {unit!r}: CPU time ratio {ratio:.1f}"


@pytest.mark.perf
@pytest.mark.parametrize("unit", UNITS, ids=repr)
def test_extraction_is_linear_on_adversarial_runs(unit):
    ratio = _ratio(unit, 0.0)
    for _ in range(2):  # a quadratic pattern is ~64x every time; load on a shared machine is not
        if ratio > MAX_RATIO:
            ratio = min(ratio, _ratio(unit, 0.1))
    assert ratio <= MAX_RATIO, f"{unit!r}: {LARGE // 1000} KB / {SMALL // 1000} KB CPU time ratio {ratio:.1f}"


def test_the_fixed_patterns_find_what_they_found_before():
    """The digit check moved out of the id pattern and the prompt pattern's line-local whitespace
    keep their matches: ids with 2+ digits, "$ " lines after blank lines."""
    found = {(i.kind, i.value) for i in identifiers.extract("see mia_li_3668 and marshmallow-1867 but not a-b-c1")}
    assert found == {("id", "mia_li_3668"), ("id", "marshmallow-1867")}
    assert [i.value for i in identifiers.commands("intro\n\n\n  $ git status\n")] == ["git status"]
