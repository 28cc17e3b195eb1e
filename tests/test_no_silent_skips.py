"""Under CI a skipped test fails with its reason; elsewhere it is a skip whose reason is printed."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import REPO

INNER = '''
import pytest

pytestmark = pytest.mark.filterwarnings("ignore")

def test_skipped_in_its_body():
    pytest.skip("no server here")

@pytest.mark.skipif(True, reason="no tool here")
def test_skipped_by_a_mark():
    pass

@pytest.mark.parametrize("path", [])
def test_with_no_parameters(path):
    pass

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_expected_to_fail():
    assert False

def test_that_runs():
    pass
'''


def run_inner(tmp_path, ci: str | None) -> tuple[int, str]:
    """pytest on :data:`INNER` with the rule as its only plugin; ``CI`` set to ``ci`` (None: unset)."""
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci is not None else {})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "-p", "tests.support.no_silent_skips", "-c", os.devnull, "--rootdir", str(tmp_path),
                          str(tmp_path / "test_inner.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    return res.returncode, res.stdout + res.stderr


def test_under_ci_every_kind_of_skip_fails_naming_its_reason(tmp_path):
    rc, out = run_inner(tmp_path, "true")
    assert rc == 1, out
    assert "1 failed, 1 passed, 1 xfailed, 2 errors" in out, out
    for reason in ("no server here", "no tool here", "got empty parameter set"):
        assert f"skipped under CI, where every collected test must run: Skipped: {reason}" in out, (reason, out)


def test_elsewhere_a_skip_stays_a_skip_and_its_reason_is_printed(tmp_path):
    rc, out = run_inner(tmp_path, None)
    assert rc == 0, out
    assert "1 passed, 3 skipped, 1 xfailed" in out, out
    assert "SKIPPED [1] test_inner.py:7: no server here" in out, out
