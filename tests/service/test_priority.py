"""Background priority: prepares' target requests carry sglang's ``priority``, compacts' do not, and the
launcher starts the target so that the priority counts (checked with sglang 0.5.23's own classes)."""

import argparse

import pytest
from fastapi.testclient import TestClient

from sgl_speccompact.launch.command_line import build_parser, check_server_flags
from sgl_speccompact.launch.plan import build_plan
from sgl_speccompact.launch.servers import AGENT_PRIORITY, PREPARE_PRIORITY, server_command
from sgl_speccompact.service.app import ServiceSettings, create_app

from tests.support.endpoint import InProcessEndpoint, assert_server_accepts
from tests.support.service import MESSAGES
from tests.support.service import wait_idle


def test_prepares_go_at_a_lower_priority_than_compacts_and_every_body_is_valid():
    target = InProcessEndpoint()
    app = create_app(target, None, settings=ServiceSettings(prepare_priority=PREPARE_PRIORITY))
    with TestClient(app) as client:
        body = {"messages": MESSAGES, "method": "target_self"}
        assert client.post("/v1/compact", json={**body, "session": "s", "mode": "prepare"}).status_code == 202
        wait_idle(app)
        prepared = list(target.bodies)
        assert client.post("/v1/compact", json={**body, "session": "other"}).status_code == 200
        compacted = target.bodies[len(prepared):]
    assert prepared and compacted
    assert all(b["priority"] == PREPARE_PRIORITY for b in prepared)
    assert not any("priority" in b for b in compacted)  # the agent's own priority: the server's default
    for b in prepared + compacted:
        assert_server_accepts(b)


def test_without_a_prepare_priority_no_body_names_one():
    target = InProcessEndpoint()
    app = create_app(target, None)
    with TestClient(app) as client:
        client.post("/v1/compact", json={"messages": MESSAGES, "method": "target_self", "session": "s",
                                         "mode": "prepare"})
        wait_idle(app)
    assert target.bodies and not any("priority" in b for b in target.bodies)


def sglang_args(argv: list[str]) -> argparse.Namespace:
    """A launch_server argv as sglang 0.5.23's own parser reads it."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(argv[argv.index("sglang.launch_server") + 1:])


def plan_for(*argv: str):
    return build_plan(build_parser("x").parse_args(list(argv)))


def test_the_launcher_starts_the_target_with_priority_scheduling_sglang_accepts():
    plan = plan_for()
    target, drafter = plan.servers
    cmd = server_command(target, "python")
    assert check_server_flags(cmd) == []
    args = sglang_args(cmd)
    assert args.enable_priority_scheduling and args.default_priority_value == AGENT_PRIORITY
    assert args.schedule_policy in ("fcfs", "lof")  # sglang's validation_hook refuses others with priorities
    assert not args.schedule_low_priority_values_first  # higher values first: the prepares' -100 goes last
    assert AGENT_PRIORITY - PREPARE_PRIORITY > args.priority_scheduling_preemption_threshold  # agent preempts
    assert not sglang_args(server_command(drafter, "python")).enable_priority_scheduling  # the drafter keeps lpm
    assert plan.service.prepare_priority == PREPARE_PRIORITY


def test_servers_not_started_here_get_a_priority_only_when_asked():
    assert plan_for("--target-url", "http://127.0.0.1:1", "--no-drafter").service.prepare_priority is None
    asked = plan_for("--target-url", "http://127.0.0.1:1", "--no-drafter", "--prepare-priority", "-5")
    assert asked.service.prepare_priority == -5
    off = plan_for("--no-priority-scheduling")
    assert off.service.prepare_priority is None
    assert sglang_args(server_command(off.servers[0], "python")).schedule_policy == "lpm"


def test_a_schedule_policy_sglang_refuses_with_priorities_is_a_config_error():
    from sgl_speccompact.errors import ConfigError

    with pytest.raises(ConfigError, match="only with --schedule-policy fcfs or lof, got 'lpm'"):
        plan_for("--target-arg=--schedule-policy lpm")
    assert "lof" in server_command(plan_for("--target-arg=--schedule-policy=lof").servers[0], "python")[-1]
