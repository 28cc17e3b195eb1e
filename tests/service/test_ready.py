"""``python -m sgl_speccompact wait``: ready on a 200 from /health; a launcher that died or a timeout is exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.procs import READY_S

from sgl_speccompact.service.ready import NOTE_EVERY_S, POLL_S, Waiting, build_parser, wait_ready

REPO = Path(__file__).resolve().parents[2]


class World:
    """Answers from a script, a fake clock that moves only when the waiter sleeps, and what it said."""

    def __init__(self, answers, alive=lambda: True):
        self.answers = list(answers)
        self.now = 0.0
        self.said: list[str] = []
        self.asked: list[str] = []
        self.is_alive = alive

    def waiting(self) -> Waiting:
        return Waiting(get=self.get, alive=lambda: self.is_alive(), clock=lambda: self.now, sleep=self.sleep,
                       say=self.said.append)

    def get(self, url):
        self.asked.append(url)
        return self.answers.pop(0) if self.answers else None

    def sleep(self, s):
        self.now += s


def test_ready_once_health_answers_200():
    world = World([None, None, 503, 503, 200])
    assert wait_ready("http://127.0.0.1:8000/", 60, world.waiting())
    assert world.asked == ["http://127.0.0.1:8000/health"] * 5
    assert world.said[0] == "waiting for http://127.0.0.1:8000/health ..."  # at once, before the first answer
    assert world.said[1] == ("http://127.0.0.1:8000/ answers /health with 503: a server behind it is not healthy "
                             "yet")  # once, not per poll
    assert world.said[-1] == "ready: http://127.0.0.1:8000/ answered /health after 2 s"


def test_a_launcher_that_ended_stops_the_wait_at_once():
    world = World([None] * 100)
    world.is_alive = lambda: world.now < 1.0
    assert not wait_ready("http://h:1", 1200, world.waiting())
    assert world.now == 1.0 and world.said[-1].startswith("error: the service process ended before")


def test_it_gives_up_at_its_timeout_and_says_it_is_still_waiting_meanwhile():
    world = World([])
    assert not wait_ready("http://h:1", 40, world.waiting())
    assert world.said[-1] == "error: http://h:1/health did not answer within 40 s"
    assert world.now == 40 and world.said.count("still waiting for http://h:1/health (15 s)") == 1
    assert len([s for s in world.said if s.startswith("still waiting")]) == int(40 // NOTE_EVERY_S)
    assert POLL_S < NOTE_EVERY_S


def test_defaults_are_the_service_settings():
    from sgl_speccompact.options import defaults

    args = build_parser().parse_args([])
    assert args.url == f"http://{defaults().host}:{defaults().port}" and args.timeout == defaults().health_wait_s


def test_the_command_ends_when_the_process_it_waits_on_has_ended():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=READY_S)  # reaped: its pid names no process now
    res = subprocess.run([sys.executable, "-m", "sgl_speccompact", "wait", "--url", "http://127.0.0.1:9",
                          "--pid", str(gone.pid)], cwd=REPO, capture_output=True, text=True, timeout=READY_S)
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines() == ["waiting for http://127.0.0.1:9/health ...",
                                       "error: the service process ended before http://127.0.0.1:9/health answered; "
                                       "its output says why"]
