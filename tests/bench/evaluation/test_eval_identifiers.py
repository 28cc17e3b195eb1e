"""The identifier extractor and the recall/invention rules.

The expected sets for three shared trajectories were written by hand from the
files (sources: user messages, tool results, the assistant's tool calls and
fenced code blocks; not the system prompt, not assistant prose).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sgl_speccompact.history.identifiers import extract
from bench.evaluation.recall import history_text, retention, source_text, summary_retention
from sgl_speccompact.history.formats import load_history

REPO = Path(__file__).resolve().parents[2]
# shared/ sits beside the checkout (CI), or beside its parent folder (a worktree)
TRAJ = next((p for p in (REPO.parent / "shared" / "data" / "trajectories",
                         REPO.parents[1] / "shared" / "data" / "trajectories") if p.is_dir()),
            REPO.parent / "shared" / "data" / "trajectories")

MISSING = "/Users/fuchur/Documents/24/git_sync/swe-agent-test-repo/tests/missing_colon.py"

EXPECTED = {
    "SWE-agent__mini-swe-agent__tests__test_data__local.traj.json": {
        ("command", "echo 'hello world'"),
        ("command", "echo MICRO_SWE_AGENT_FINAL_OUTPUT"),
        ("hash", "70e8776746b5306e55485e9194adc80af0ba8a76137cd27564658ce0e0de5f5c"),
    },
    "princeton-nlp__SWE-agent__trajectories__demonstrations__function_calling_simple.traj": {
        ("path", "missing_colon.py"),
        ("path", MISSING + ":4"),
        ("path", "buggy-input.png"),
        ("path", "/SWE-agent__test-repo"),
        ("path", "tests/missing_colon.py"),
        ("path", "/SWE-agent__test-repo/tests/missing_colon.py"),
        ("path", "/usr/bin/env"),
        ("path", "a/tests/missing_colon.py"),
        ("path", "b/tests/missing_colon.py"),
        ("error", "SyntaxError"),
        ("number", "100line"),
        ("number", "10line"),
        ("hash", "20edef5"),
        ("command", "python tests/missing_colon.py"),
    },
    "SWE-agent__mini-swe-agent__tests__test_data__github_issue.traj.json": {
        ("path", "missing_colon.py"),
        ("path", MISSING + ":4"),
        ("path", MISSING),
        ("path", "/path/to/working/dir"),
        ("path", "newfile.py"),
        ("path", "filename.py"),
        ("path", "tests/missing_colon.py"),
        ("path", "/usr/bin/env"),
        ("path", "README.md"),
        ("path", "build_and_push_docker.sh"),
        ("path", "pyproject.toml"),
        ("path", "existing_lint_error.py"),
        ("path", "filetoread.txt"),
        ("path", "test_tribonaccy.py"),
        ("path", "/testbed/tests/missing_colon.py:5"),
        ("error", "SyntaxError"),
        ("error", "ValueError"),
        ("error", "ZeroDivisionError"),
        ("command", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
        ("command", "ls -la"),
        ("command", "cat <<'EOF' > newfile.py"),
        ("command", "sed -i 's/old_string/new_string/g' filename.py"),
        ("command", "sed -i 's/old_string/new_string/' filename.py"),
        ("command", "sed -i '1s/old_string/new_string/' filename.py"),
        ("command", "sed -i '1,10s/old_string/new_string/g' filename.py"),
        ("command", "nl -ba filename.py | sed -n '10,20p'"),
        ("command", "cat " + MISSING.replace("tests/", "tests/./")),
        ("command", "ls -la tests/"),
        ("command", "cat tests/missing_colon.py"),
        ("command", "sed -i 's/def division(a: float, b: float) -> float/def division(a: float, b: float) -> float:/' "
                    "tests/missing_colon.py"),
        ("command", "python3 tests/missing_colon.py"),
        ("command", 'python3 -c "from tests.missing_colon import division; print(division(23, 0))"'),
        ("command", "cat > tests/missing_colon.py << 'EOF'"),
    },
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_extractor_matches_hand_written_sets(name):
    path = TRAJ / name
    if not path.is_file():
        pytest.skip(f"shared trajectories absent ({path})")
    got = {(i.kind, i.value) for i in extract(source_text(load_history(path)))}
    assert got == EXPECTED[name], {"missing": EXPECTED[name] - got, "unexpected": got - EXPECTED[name]}


@pytest.mark.parametrize("text, expected", [
    ("see https://github.com/o/r/pull/12.", [("url", "https://github.com/o/r/pull/12")]),
    ("at src/app.py:42:7 and ./b.js", [("path", "src/app.py:42"), ("path", "b.js")]),
    ("marshmallow.exceptions.ValidationError and ENOENT", [("error", "ValidationError"), ("error", "ENOENT")]),
    ("UUID 123e4567-e89b-12d3-a456-426614174000, PR #1867, res ZFA04Y on 2024-05-15",
     [("id", "123e4567-e89b-12d3-a456-426614174000"), ("id", "#1867"), ("id", "ZFA04Y"), ("id", "2024-05-15")]),
    ("paid $1,200.50 for 2 bags in 3.0 hours (80%)",
     [("number", "1200.5usd"), ("number", "2bag"), ("number", "3h"), ("number", "80%")]),
    ("and/or I/O 07/17/2024 e.g. v3.11 utf-8 </output> 1/2 b", []),
])
def test_extractor_kinds(text, expected):
    assert [(i.kind, i.value) for i in extract(text)] == expected


HISTORY = [
    {"role": "system", "content": "You can run bash."},
    {"role": "user", "content": "Tests in tests/test_io.py fail with KeyError; the upload limit is 25 MB."},
    {"role": "assistant", "content": "Let me run them.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pytest -x"}'}}]},
    {"role": "tool", "tool_call_id": "c1",
     "content": 'File "/repo/src/io.py", line 88, in load\nKeyError: \'size\'\n1 failed in 2.31s'},
]


def test_recall_counts_kept_identifiers_and_drops_lower_it():
    full = "## Goal\n- fix KeyError at src/io.py:88 (tests/test_io.py)\n- keep the 25 MB limit\n- ran `pytest -x`: 2.31s"
    dropped = "## Goal\n- fix KeyError at src/io.py:88 (tests/test_io.py)"
    r_full = summary_retention(HISTORY, full, {})["summary"]
    r_drop = summary_retention(HISTORY, dropped, {})["summary"]
    assert r_full["recall"] == 1.0 and r_full["invented"] == []
    assert r_drop["recall"] < r_full["recall"]
    assert "number:25mb" in r_drop["lost"] and "command:pytest -x" in r_drop["lost"]


def test_an_invented_path_and_line_number_are_counted():
    summary = "## Progress\n- error at src/io.py:89 in src/loader.py; KeyError\n- see src/io.py"
    r = summary_retention(HISTORY, summary, {"progress": summary})
    assert r["summary"]["invented"] == ["path:src/io.py:89", "path:src/loader.py"]
    assert r["summary"]["by_kind"]["path"]["invented"] == 2
    assert r["slots"]["progress"]["invented_count"] == 2


def test_assistant_prose_is_history_but_not_a_source():
    msgs = HISTORY + [{"role": "assistant", "content": "Maybe utils/cache.py is involved."}]
    assert "utils/cache.py" not in source_text(msgs) and "utils/cache.py" in history_text(msgs)
    r = summary_retention(msgs, "- check utils/cache.py", {})["summary"]
    assert r["invented"] == []  # said in the history, so not invented...
    assert "path:utils/cache.py" not in r["kept"]  # ...but not a source identifier either


def test_per_slot_recall_is_over_all_history_identifiers():
    src = extract(source_text(HISTORY))
    hist = history_text(HISTORY)
    one = retention(src, extract(hist), hist, "KeyError")
    assert one["kept"] == ["error:KeyError"] and one["recall"] == pytest.approx(1 / len(src))
