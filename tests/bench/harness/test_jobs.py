"""bench/harness/jobs.py: commands run in worker processes, each one's CPU and wall time, failures reported."""

from __future__ import annotations

from bench.harness.jobs import Job, execute


def test_jobs_run_in_workers_heaviest_first_and_failures_are_reported(tmp_path):
    log = tmp_path / "bad.log"
    jobs = [Job("light", "harness.jobs", (), weight=1.0, call="own_cpu_s"),
            Job("heavy", "harness.jobs", (), weight=5.0, call="own_cpu_s"),
            Job("bad", "regenerate", ("--no-such-flag",), weight=3.0, log=str(log))]
    seen = []
    done = execute(jobs, 1, seen.append, initializer=None)  # one worker: the order is the start order
    assert [d.job.name for d in seen] == ["heavy", "bad", "light"] == [d.job.name for d in done]
    by = {d.job.name: d for d in done}
    assert by["heavy"].error is None and by["heavy"].result >= 0.0 and by["heavy"].cpu_s >= 0.0
    assert by["light"].result >= by["heavy"].result  # the same worker, later: its CPU so far only grew
    assert "SystemExit: 2" in by["bad"].error and "--no-such-flag" in log.read_text()  # argparse's exit, logged


def test_a_job_runs_its_modules_main_with_its_output_in_its_log(tmp_path):
    from bench.harness.jobs import run_job

    log = tmp_path / "tables.log"
    done = run_job(Job("tables", "regenerate", ("--tables",), log=str(log)))  # in this process
    assert done.error is None and done.result == 0 and done.wall_s > 0
    assert "## session-evolving (" in log.read_text()  # what --tables printed went to the log
