"""Rules for every test the repository collects (tests/, and the docstring examples of the package and bench/)."""

from tests.support.no_silent_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401
