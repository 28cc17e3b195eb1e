"""No silent skips: under CI (``CI`` set, as ``.ci/run`` sets it) a skipped test fails, with its reason.

Every test that CI collects must run there: a skip for a missing server,
package, file or tool turns into a failure that names it.  An optional extra
that needs what CI does not have (the ``sglang`` marker: GPU servers of one's
own) is deselected by ``addopts`` instead, never skipped.  Elsewhere a skip
stays a skip, and ``-rfEs`` in ``addopts`` prints its reason.

The repository's ``conftest.py`` imports these hooks, so they hold for every
test and docstring example the default run and each ``.ci/run`` step collect.
"""

from __future__ import annotations

import os

import pytest


def skip_fails_under_ci(report) -> None:
    """Turn ``report`` (a test's phase or a collection) into a failure when it is a skip and ``CI`` is set."""
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, where every collected test must run: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    skip_fails_under_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    skip_fails_under_ci(outcome.get_result())
