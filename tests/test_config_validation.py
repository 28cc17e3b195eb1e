"""One validation for every way a compaction option is set: the same strict types, the same message.

Before, the HTTP body and ``--set`` refused ``min_label_mass: true`` and ``"0.5"``, but a launcher
config file's ``[compact]`` table turned them into 1.0 and 0.5 and the service started, and so did
``CompactConfig(...)`` and ``make_config`` in Python.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from sgl_speccompact import cli
from sgl_speccompact.config import CompactConfig, make_config
from sgl_speccompact.errors import ConfigError
from sgl_speccompact.launch import command_line as launch
from sgl_speccompact.service.app import create_app
from tests.support.cli import one_clear_line
from tests.support.service import Backend, FakeRunner, MESSAGES

BAD = [  # (field, JSON/TOML value, Python value, pydantic's message)
    ("min_label_mass", "true", True, "Input should be a valid number"),
    ("min_label_mass", '"0.5"', "0.5", "Input should be a valid number"),
    ("max_lines_per_slot", "12.0", 12.0, "Input should be a valid integer"),
    ("max_lines_per_slot", "true", True, "Input should be a valid integer"),
    ("redact_secrets", "1", 1, "Input should be a valid boolean"),
    ("redact_secrets", '"false"', "false", "Input should be a valid boolean"),
    ("empty_markers", "[1]", [1], "Input should be a valid string"),
]
IDS = [f"{f}={v}" for f, v, _, _ in BAD]


@pytest.mark.parametrize("field,raw,value,message", BAD, ids=IDS)
def test_the_http_body_refuses_it(field, raw, value, message):
    client = TestClient(create_app(Backend("t"), Backend("d"), runner=FakeRunner()))
    res = client.post("/v1/compact", json={"messages": MESSAGES, "config": {field: value}})
    assert res.status_code == 422, res.text
    err = res.json()["error"]
    assert err["field"].startswith(f"config.{field}") and err["message"] == f"{err['field']}: {message}"


@pytest.mark.parametrize("field,raw,value,message", BAD, ids=IDS)
def test_set_refuses_it(field, raw, value, message):
    with pytest.raises(ConfigError) as got:
        cli.effective_config([f"{field}={raw}"])
    assert got.value.field.startswith(f"--set {field}") and got.value.message == message


def dry_run_with(tmp_path, capsys, config: str) -> str:
    """``serve --dry-run`` with a config file holding ``config``; its stderr, once it exited non-zero."""
    path = tmp_path / "c.toml"
    path.write_text(config)
    try:
        rc = launch.main(["--target-url", "http://t:1", "--drafter-url", "http://d:2", "--config", str(path),
                          "--dry-run"], serve_only=True)
    except SystemExit as exc:
        rc = exc.code
    assert rc not in (0, None)
    return capsys.readouterr().err


@pytest.mark.parametrize("field,raw,value,message", BAD, ids=IDS)
def test_a_config_file_refuses_it(tmp_path, capsys, field, raw, value, message):
    err = dry_run_with(tmp_path, capsys, f"[compact]\n{field} = {raw}\n")  # each JSON value reads the same in TOML
    one_clear_line(err, f"[compact] {field}")
    assert message in err


@pytest.mark.parametrize("field,raw,value,message", BAD, ids=IDS)
def test_the_python_api_refuses_it(field, raw, value, message):
    for make in (lambda: CompactConfig(**{field: value}), lambda: make_config({field: value}),
                 lambda: make_config(CompactConfig(), **{field: value})):
        with pytest.raises(ConfigError) as got:
            make()
        assert got.value.field.startswith(field) and got.value.message == message


def test_good_values_still_pass_every_way(tmp_path):
    assert CompactConfig(min_label_mass=1, empty_markers=["(none)"]).min_label_mass == 1.0
    assert make_config({"eta": 0.8, "empty_markers": ["(none)", "n/a"]}).empty_markers == ("(none)", "n/a")
    assert cli.effective_config(["eta=0.8", 'empty_markers=["x"]']).empty_markers == ("x",)
    client = TestClient(create_app(Backend("t"), Backend("d"), runner=FakeRunner()))
    assert client.post("/v1/compact", json={"messages": MESSAGES, "config": {"eta": 1}}).status_code == 200


def test_an_unknown_field_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="min_lable_mass: unknown field; valid: eta, .*min_label_mass"):
        make_config({"min_lable_mass": 0.5})
    with pytest.raises(ConfigError, match=r"--set etaa: unknown field; valid: eta, "):
        cli.effective_config(["etaa=0.8"])


@pytest.mark.parametrize("line,word", [('calibrate = "yes"', "[service] calibrate"),
                                       ("upstream_detail = 1", "[service] upstream_detail"),
                                       ("host = 8000", "[service] host")])
def test_service_switches_and_names_are_strict_too(tmp_path, capsys, line, word):
    one_clear_line(dry_run_with(tmp_path, capsys, f"[service]\n{line}\n"), word)
