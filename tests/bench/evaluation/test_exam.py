"""The recall exam: probes derived from a history's structure, and the acceptance on every shared trajectory.

The acceptance runs no compaction: ``tests/methods/golden_summaries.json``
holds every method's summary of every shared trajectory, and
``tests/methods/test_golden_summaries.py`` holds that file to today's code.
"""

from __future__ import annotations

import json

import pytest

from bench.evaluation.exam import actions, changed_files, error_of, failed, grade, probes
from bench.harness.recall_exam import GATED, MIN_SCORE, by_method, from_summaries
from tests.support.paths import TRAJECTORIES



def call(cid: str, name: str, **args) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def step(cid: str, name: str, result: str, **args) -> list[dict]:
    return [{"role": "assistant", "content": "", "tool_calls": [call(cid, name, **args)]},
            {"role": "tool", "tool_call_id": cid, "content": result}]


HISTORY = [{"role": "user", "content": "Book the flight for mia_li_3668 and fix setup.py"},
           *step("a", "read_file", "name = 'x'\nversion = '1.0'", path="setup.py"),
           *step("b", "bash", "exit code 1\nTraceback (most recent call last):\nKeyError: 'v'", command="pytest -x"),
           *step("c", "bash", "", command="sed -i 's/a b/c/' setup.py && pip install -e ."),
           *step("d", "book_reservation", '{"reservation_id": "HAT136", "flights": ["HAT204"]}', user_id="mia_li_3668"),
           *step("e", "bash", "Error: ENOENT\n[Errno 2] No such file or directory: 'b.cfg'", command="cat b.cfg"),
           {"role": "assistant", "content": "Now the text action.\n```\nedit 3:3\n  x = 1\nend_of_edit\n```"},
           {"role": "user", "content": "[File: /repo/setup.py (9 lines total)]\n3:  x = 1"},
           {"role": "tool", "tool_call_id": "z", "content": "diff --git a/src/app.py b/src/app.py\n+x"}]


def answers(found, category):
    return [p.answer for p in found if p.category == category]


def test_probes_come_from_calls_results_and_text_actions():
    found = probes(HISTORY)
    assert answers(found, "recall") == ["setup.py", "pytest -x", "sed -i 's/a b/c/' setup.py && pip install -e .",
                                        "mia_li_3668", "cat b.cfg", "edit 3:3", "HAT136", "HAT204"]  # a tool's last
    assert answers(found, "artifacts") == ["setup.py", "app.py"]  # sed -i's target, the text edit, the patch
    assert answers(found, "continuation") == ["cat b.cfg", "[Errno 2] No such file or directory"]
    assert answers(found, "decisions") == ["sed -i 's/a b/c/' setup.py && pip install -e .", "book_reservation",
                                           "edit 3:3"]


def test_failures_and_their_errors():
    assert failed("<returncode>2</returncode>") and not failed("<returncode>0</returncode>\nError: x")
    assert failed("Your proposed edit has introduced new syntax error(s).") and not failed("all 3 passed")
    assert error_of("ERRORS:\n- E999 IndentationError: unexpected indent\n  raise ValueError(msg)") == \
        "IndentationError"
    assert error_of("Traceback (most recent call last):\n  raise KeyError\nValueError: bad") == "ValueError"


def test_an_editor_that_names_no_file_changed_the_one_its_result_shows():
    (edit,) = [a for a in actions(HISTORY) if a.command == "edit 3:3"]
    assert changed_files(edit) == ["/repo/setup.py"]
    failing = actions([{"role": "assistant", "content": "```\nedit 1:1\n```"},
                       {"role": "user", "content": "Your proposed edit has introduced new syntax error(s).\n"
                                                   "[File: /r/a.py (3 lines total)]"}])
    assert changed_files(failing[0]) == []  # refused: nothing changed, and nothing done


def test_grading_is_verbatim():
    g = grade(probes(HISTORY), "- ran `pytest -x` exit `1`\n- `setup.py` ...")
    assert g["recall"]["answered"] == 2 and "HAT136" in g["recall"]["missed"]


@pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason="shared trajectories not found")
def test_every_method_answers_continuation_and_decisions_and_lists_every_command_and_edit():
    """Acceptance, on every shared trajectory and method at the default budget: continuation and decision
    probes >= 0.95; every command the agent ran and every file it changed is in the ledger itself."""
    from sgl_speccompact.history.formats import load_history
    from tests.methods.test_golden_summaries import GOLDEN as FILE

    golden = json.loads(FILE.read_text())
    table = by_method(from_summaries(golden))
    assert len(table) == 5
    for row in table:
        for category in GATED:
            assert row[category] >= MIN_SCORE, (row["method"], category, row[category])
    for name, cases in golden.items():
        asked = probes(load_history(TRAJECTORIES / name))
        must = [p.answer for p in asked if p.category in ("artifacts", "decisions", "continuation")
                or p.question == "which command did it run"]
        for case, parts in cases.items():
            missing = [a for a in must if a not in parts["ledger"]]
            assert not missing, (name, case, missing)


@pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason="shared trajectories not found")
def test_the_script_grades_a_file_of_summaries_and_says_what_they_are(tmp_path, capsys):
    from bench import recall_exam

    out = tmp_path / "exam.json"
    assert recall_exam.main(["--summaries", "tests/methods/golden_summaries.json", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["conditions"]["label"].startswith("SIMULATED") and len(report["rows"]) == 5 * 8
    assert "| speccompact | 8 | 1.0 |" in capsys.readouterr().out
