"""The exact ledger across compactions and within its budget: superseding, ranking, and a budget that holds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sgl_speccompact.core.ledger import HEADING, LedgerSection, parse, parse_count, split_ledger
from sgl_speccompact.core.ledger_budget import fit, merge, rank
from sgl_speccompact.history.ledger_entries import KINDS, LedgerEntry


def words(texts):
    """A stand-in tokenizer: one token a word, one a backtick run, one a line."""
    return [len(t.split()) + t.count("`") // 2 + t.count("\n") for t in texts]


def lumpy(texts):
    """A tokenizer whose count of a joined text exceeds the sum of its lines' (the final check must catch it)."""
    return [len(t) // 3 + 2 * t.count("\n") ** 2 // max(1, len(t) // 80) for t in texts]


def test_a_rerun_command_and_a_rewritten_file_supersede_what_the_previous_summary_said():
    old = [LedgerEntry(3, "ran", "pytest -x", exit="1", carried=True),
           LedgerEntry(4, "wrote", "a.py", via="write", done=True, carried=True),
           LedgerEntry(5, "id", "HAT136", carried=True)]
    new = [LedgerEntry(1, "edited", "a.py", via="edit", done=True), LedgerEntry(2, "ran", "pytest -x", exit="0"),
           LedgerEntry(2, "path", "a.py")]
    got = merge(old, new)
    assert [(e.kind, e.value, e.exit, e.refs, e.carried) for e in got] == [
        ("id", "HAT136", "", 1, True), ("edited", "a.py", "", 3, False), ("ran", "pytest -x", "0", 2, False)]


def test_a_path_named_before_its_file_was_touched_is_one_entry():
    got = merge([], [LedgerEntry(0, "path", "src/a.py"), LedgerEntry(2, "read", "src/a.py", via="cat")])
    assert [(e.index, e.kind, e.refs) for e in got] == [(2, "read", 2)]


def test_rank_puts_what_the_agent_did_first_and_never_counts_repetition():
    es = [LedgerEntry(0, "id", "OLD12", source="call"), LedgerEntry(1, "wrote", "a.py", done=True, source="call"),
          LedgerEntry(2, "ran", "make", exit="2", source="call"), LedgerEntry(3, "id", "AB12", refs=9, source="result"),
          LedgerEntry(4, "id", "NEW12", source="call"), LedgerEntry(5, "ran", "ls", source="call"),
          LedgerEntry(6, "read", "b.py", source="call"), LedgerEntry(7, "id", "X9Y8Z7W6", source="result")]
    # what it did (failure and side effect first), its read, its own ids (newest first), then tools' by specificity
    assert rank(es) == [2, 1, 5, 6, 4, 0, 7, 3]


def test_over_budget_boilerplate_goes_first_and_every_command_stays():
    """A tool output that prints a DTD, a hex dump and a passwd listing over and over outranks nothing the
    agent did: at a budget that holds a few lines, the commands (a plain ``ls .``, ``pip install``) are
    shown and the boilerplate is counted."""
    dtd = "http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd"
    es = [LedgerEntry(1, "ran", "ls .", exit="0", source="call"),
          LedgerEntry(2, "url", dtd, refs=16, source="result", noise=True),
          *[LedgerEntry(2, "hash", f"deadbe{k:02x}", source="result", noise=True) for k in range(20)],
          LedgerEntry(3, "path", "/etc/passwd", source="result"),
          LedgerEntry(4, "ran", "pip install -e .", exit="0", done=True, source="call"),
          LedgerEntry(5, "example", "sed -i s/a/b/ f.py", source="prompt"),
          LedgerEntry(6, "id", "JOB4411X", source="result")]
    out = fit(es, LedgerSection(), 90, words)  # room for the heading, the counts and three short lines
    shown = [e.value for e in out.shown]
    assert shown == ["ls .", "pip install -e .", "JOB4411X"], out.lines
    assert out.counted == {"url": 1, "path": 1, "hash": 20, "example": 1}
    tight = fit(es, LedgerSection(), 70, words)  # one command fits, the other does not: no id before it
    assert [e.kind for e in tight.shown] == ["ran"] and tight.counted["ran"] == 1 and tight.counted["id"] == 1


def test_commands_and_edits_go_last_and_the_oldest_successful_reads_first():
    es = [*[LedgerEntry(i, "read", f"src/r{i}.py", via="open", source="call") for i in range(6)],
          *[LedgerEntry(10 + i, "ran", f"pytest tests/t{i}.py", exit="0", source="call") for i in range(3)],
          LedgerEntry(20, "edited", "src/r0.py", via="edit", done=True, source="call")]
    out = fit(es, LedgerSection(), 110, words)
    kinds = [e.kind for e in out.shown]
    assert kinds.count("ran") == 3 and "edited" in kinds  # every command and edit
    reads = [e.value for e in out.shown if e.kind == "read"]
    assert reads and reads == [f"src/r{i}.py" for i in range(6 - len(reads), 6)]  # the newest reads
    assert out.counted == {"read": 6 - len(reads)}


def test_over_budget_the_rest_becomes_counts_under_their_folder():
    es = [LedgerEntry(i, "path", f"src/marshmallow/m{i}.py") for i in range(30)] + [
        LedgerEntry(30, "wrote", "docs/x.md", via="write", done=True)]
    out = fit(es, LedgerSection(), 60, words)
    assert out.tokens <= 60 and out.lines[0] == HEADING
    shown = [parse(line) for line in out.lines if parse(line)]
    assert "docs/x.md" in [e.value for e in shown]  # a write is kept first, the oldest paths are counted
    assert [e.value for e in shown] == [e.value for e in out.shown]  # in their own order
    (count,) = [parse_count(line) for line in out.lines if parse_count(line)]
    assert count == ("path", 31 - len(shown), "src/marshmallow") and out.counted == {"path": 31 - len(shown)}


def test_counts_of_the_previous_summary_add_up():
    _, carried = split_ledger(f"{HEADING}\n- +5 more paths under `src/a`\n- +2 more commands run\n")
    es = [LedgerEntry(i, "path", f"src/b/m{i}.py") for i in range(10)]
    out = fit(es, carried, 60, words)
    counts = {k: (n, p) for k, n, p in (parse_count(line) for line in out.lines if parse_count(line))}
    assert counts["ran"] == (2, "") and counts["path"][0] == 15 - len(out.shown) and counts["path"][1] == "src"


def test_no_room_gives_no_section():
    es = [LedgerEntry(0, "id", "X12")]
    assert fit(es, LedgerSection(), 0, words).lines == [] and fit(es, LedgerSection(), 3, words).lines == []


VALUES = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd", "Pd", "Po", "Zs")), min_size=1, max_size=30)


@st.composite
def ledgers(draw):
    n = draw(st.integers(0, 60))
    es = [LedgerEntry(i, draw(st.sampled_from(KINDS)), draw(VALUES).strip() or "v", exit=draw(st.sampled_from(
        ["", "0", "1"])), done=draw(st.booleans()), refs=draw(st.integers(1, 3))) for i in range(n)]
    counts = draw(st.dictionaries(st.sampled_from(KINDS), st.integers(1, 50), max_size=3))
    return es, LedgerSection(counts=counts)


@settings(max_examples=300, deadline=None)
@given(ledgers(), st.integers(-5, 400), st.sampled_from([words, lumpy]))
def test_the_budget_always_holds(ledger, budget, count):
    es, carried = ledger
    out = fit(merge([], es), carried, budget, count)
    assert out.tokens <= max(budget, 0) and out.tokens == (count([out.text])[0] if out.lines else 0)
    if out.lines:  # every entry is shown or counted, never both, never lost
        merged = merge([], es)
        assert len(out.shown) + sum(out.counted.values()) == len(merged) + sum(carried.counts.values())
