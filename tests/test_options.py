"""The one table of service and launcher defaults (``options.ServiceSettings``) and its checks."""

from __future__ import annotations

from dataclasses import asdict, fields, replace

import pytest

from sgl_speccompact import cli, options
from sgl_speccompact.errors import ConfigError
from sgl_speccompact.options import ServiceSettings
from sgl_speccompact.service.sessions import PrepareLimits
from tests.support.launch import plan_for
from tests.support.service import Backend, FakeRunner

# every value differs from the shipped default, so a consumer with a default of its own shows
CHANGED = dict(method="hermes", max_body_mb=3.0, max_workers=7, request_timeout_s=42.0, health_wait_s=9.0,
               health_timeout_s=1.5, compaction_timeout_s=77.0, upstream_detail=True, session_store_mb=5.0,
               session_ttl_s=99.0, prepare_workers=3, prepare_queue=11, prepare_queue_mb=6.0, prepare_yield_s=0.5,
               port=8123, host="127.0.0.2", max_json_depth=9, max_number_digits=12, max_previous_summary_chars=500)


@pytest.fixture
def changed_table(monkeypatch) -> ServiceSettings:
    table = replace(options.DEFAULTS, **CHANGED)
    monkeypatch.setattr(options, "DEFAULTS", table)
    return table


def test_changed_defaults_are_what_every_field_is_changed_to(changed_table):
    assert {k: getattr(changed_table, k) for k in CHANGED} == CHANGED
    assert all(getattr(ServiceSettings(), k) != v for k, v in CHANGED.items())  # each one a real change


def test_the_launcher_takes_its_service_defaults_from_the_table(changed_table):
    planned = plan_for("--target-url", "http://127.0.0.1:1", "--no-drafter").service
    launcher_keys = {k for k in CHANGED if k not in ("max_json_depth", "max_number_digits", "max_previous_summary_chars",
                                                     "health_timeout_s")}
    assert {k: getattr(planned, k) for k in launcher_keys} == {k: CHANGED[k] for k in launcher_keys}
    assert planned == changed_table  # the plan's typed settings are the table's, none renamed or dropped


def test_the_launcher_help_names_the_tables_defaults(changed_table):
    from sgl_speccompact.launch.command_line import build_parser

    flags = {a.dest: a.help for a in build_parser()._actions}
    named = {"service_port": "8123", "service_host": "127.0.0.2", "max_body_mb": "3", "max_workers": "7",
             "request_timeout": "42", "health_wait": "9", "compaction_timeout": "77", "session_store_mb": "5",
             "session_ttl": "99", "prepare_workers": "3", "prepare_queue": "11", "prepare_queue_mb": "6",
             "prepare_yield_s": "0.5"}
    assert {dest: f"default {value}" in flags[dest] for dest, value in named.items()} == dict.fromkeys(named, True)


def test_the_service_takes_its_defaults_from_the_table(changed_table):
    from sgl_speccompact.service.app import create_app

    app = create_app(Backend("t"), None, runner=FakeRunner(), methods=("hermes",))
    state = app.state.service
    assert state.settings is changed_table
    assert state.sessions.limits == PrepareLimits.of(changed_table) == PrepareLimits(3, 11, 6 * 2**20)
    assert (state.sessions.store.max_bytes, state.sessions.store.ttl_s) == (5 * 2**20, 99.0)
    assert state.compactions.limits.max_workers == 7 and state.upstreams.show_urls


def test_the_compact_command_takes_its_defaults_from_the_table(changed_table, make_emulated_server):
    args = cli.build_parser().parse_args(["history.json", "--target-url", "http://unused"])
    assert args.method == "hermes" and "default 42" in cli.build_parser().format_help()
    srv = make_emulated_server(model_path="Qwen/Qwen3-8B")
    assert cli.connect(srv.url, args).timeout_s == 42.0
    with pytest.raises(ConfigError, match="nests deeper than 9"):  # --set values are bounded as the body is
        cli.parse_overrides(["empty_markers=" + "[" * 10 + "]" * 10])


def test_the_plan_with_no_flags_is_the_shipped_table():
    planned = plan_for("--target-url", "http://127.0.0.1:1", "--no-drafter").service
    assert planned == options.DEFAULTS == ServiceSettings()


def test_a_size_in_mib_turns_into_bytes_in_one_place():
    s = ServiceSettings(max_body_mb=0.5, session_store_mb=2.0, prepare_queue_mb=1.0)
    assert (s.max_body_bytes, s.session_store_bytes, s.prepare_queue_bytes) == (2**19, 2**21, 2**20)
    assert not any(f.name.endswith("_bytes") for f in fields(ServiceSettings))  # one name per option: the MiB one


@pytest.mark.parametrize("field, value", [("max_workers", 0), ("max_body_mb", float("nan")), ("prepare_yield_s", -1),
                                          ("compaction_timeout_s", 0), ("port", 70000), ("prepare_queue", True)])
def test_a_bad_setting_is_a_config_error_naming_it(field, value):
    with pytest.raises(ConfigError, match=field):
        ServiceSettings(**{field: value})


def test_the_settings_are_frozen_and_plain_data():
    with pytest.raises(AttributeError):
        options.DEFAULTS.max_workers = 1  # type: ignore[misc]
    assert asdict(options.DEFAULTS)["method"] == "auto"
