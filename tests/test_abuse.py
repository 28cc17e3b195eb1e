"""Regression tests of the abuse probes: what an operator or an attacker would try.

Each test names the probe it keeps.  Service probes use the injected
runner of test_service; the cancellation, shutdown and injection probes run
the real methods against emulated SGLang servers.
"""

from __future__ import annotations

import copy
import json

import pytest
from test_service import MESSAGES, Backend, FakeRunner, make_client

from sgl_speccompact.errors import BackendUnavailableError, ConfigError, LabelTokenError
from sgl_speccompact.service import ServiceLimits, create_app, resolve_api_key

# ------------------------------------------------------------------ 1. clients cannot raise limits


@pytest.mark.parametrize("field,value", [
    ("max_history_messages", "100"), ("max_history_messages", 100.0), ("max_history_messages", True),
    ("max_history_chars", "99999999"), ("max_history_chars", 1e9),
])
def test_probe_limit_raised_by_coercion_is_refused(field, value):
    client, runner = make_client(default_config={"max_history_messages": 5, "max_history_chars": 10_000})
    res = client.post("/v1/compact", json={"messages": MESSAGES + MESSAGES[1:3], "config": {field: value}})
    assert res.status_code == 422, res.text
    assert res.json()["error"]["field"] == f"config.{field}"
    assert runner.calls == []


@pytest.mark.parametrize("field", ["max_new_tokens", "monolithic_max_tokens", "max_summary_tokens",
                                   "max_lines_per_slot", "max_tokens_per_slot"])
def test_probe_every_max_limit_can_only_go_down(field):
    client, runner = make_client()
    res = client.post("/v1/compact", json={"messages": MESSAGES, "config": {field: 10**15}})
    assert res.status_code == 422 and res.json()["error"]["field"] == f"config.{field}"
    ok = client.post("/v1/compact", json={"messages": MESSAGES, "config": {field: 8}})
    assert ok.status_code == 200 and getattr(runner.calls[0]["config"], field) == 8


@pytest.mark.parametrize("config,field", [
    ({"eta": "0.8"}, "config.eta"), ({"eta": True}, "config.eta"), ({"max_new_tokens": "32"}, "config.max_new_tokens"),
    ({"positive_label": 1}, "config.positive_label"), ({"empty_markers": "none"}, "config.empty_markers"),
])
def test_probe_no_string_or_bool_coerced_into_config(config, field):
    client, runner = make_client()
    res = client.post("/v1/compact", json={"messages": MESSAGES, "config": config})
    assert res.status_code == 422 and res.json()["error"]["field"] == field, res.text
    assert runner.calls == []


def test_config_arrays_and_ints_for_floats_still_work():
    client, runner = make_client()
    res = client.post("/v1/compact", json={"messages": MESSAGES, "config": {"eta": 1, "empty_markers": ["(none)"]}})
    assert res.status_code == 200, res.text
    assert runner.calls[0]["config"].eta == 1.0 and runner.calls[0]["config"].empty_markers == ("(none)",)


# ------------------------------------------------------------------ 5/7. typed errors, right field


@pytest.mark.parametrize("body,field", [
    ({"messages": MESSAGES, "method": ""}, "method"),
    ({"messages": MESSAGES, "source_judge": 1}, "source_judge"),
    ({"messages": MESSAGES, "stream": "true"}, "stream"),
    ({"messages": MESSAGES, "previous_summary": 7}, "previous_summary"),
    ({"messages": MESSAGES, "config": []}, "config"),
])
def test_probe_strict_body_fields(body, field):
    client, runner = make_client()
    res = client.post("/v1/compact", json=body)
    assert res.status_code == 422 and res.json()["error"]["field"] == field, res.text
    assert runner.calls == []


@pytest.mark.parametrize("raw", [
    b'{"messages": ' + b"[" * 1200 + b"]" * 1200 + b"}",
    b'{"messages": [{"role": "user", "content": "x", "name": ' + b'{"a":' * 1100 + b"1" + b"}" * 1100 + b"}]}",
    b'{"messages": [], "config": {"max_new_tokens": ' + b"9" * 5000 + b"}}",
    b'{"messages": [], "config": {"eta": 1e999}}',
    b'{"messages": [], "config": {"eta": NaN}}',
    b'{"messages": "\xff\xfe"}',
])
def test_probe_hostile_json_is_a_typed_400(raw):
    client, runner = make_client()
    res = client.post("/v1/compact", content=raw, headers={"content-type": "application/json"})
    assert res.status_code == 400, res.text
    assert res.json()["error"]["type"] == "malformed_json" and res.json()["error"]["field"] == "body"
    text = client.get("/metrics").text
    assert 'speccompact_compactions_total{method="-",outcome="rejected"} 1.0' in text


def test_deep_strings_are_not_nesting():
    client, _ = make_client()
    msgs = [{"role": "user", "content": "[" * 5000 + "{" * 5000 + " 1" + "9" * 500}]
    assert client.post("/v1/compact", json={"messages": MESSAGES[:1] + msgs}).status_code == 200


@pytest.mark.parametrize("raw,field", [
    (b'{"messages": [{"role": "user", "content": "a \\ud800 b"}]}', "messages[0].content"),
    (b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}',
     "messages[0].content[0].text"),
    (b'{"messages": [{"role": "user", "content": "x"}], "previous_summary": "\\ud83d"}', "previous_summary"),
])
def test_probe_lone_surrogate_is_422_naming_the_field(raw, field):
    client, runner = make_client()
    res = client.post("/v1/compact", content=raw, headers={"content-type": "application/json"})
    assert res.status_code == 422, res.text
    assert res.json()["error"]["field"] == field
    assert runner.calls == []


def test_probe_previous_summary_has_its_own_limit():
    client, runner = make_client(limits=ServiceLimits(max_previous_summary_chars=1000))
    res = client.post("/v1/compact", json={"messages": MESSAGES, "previous_summary": "x" * 1001})
    assert res.status_code == 413 and res.json()["error"]["field"] == "previous_summary"
    assert client.post("/v1/compact", json={"messages": MESSAGES, "previous_summary": "x" * 1000}).status_code == 200


def test_probe_label_token_error_names_the_field():
    client, _ = make_client(FakeRunner(fail_with=LabelTokenError("no single token", field="config.positive_label")))
    res = client.post("/v1/compact", json={"messages": MESSAGES})
    assert res.status_code == 422 and res.json()["error"]["field"] == "config.positive_label"


def test_label_token_error_from_the_resolver_names_the_label():
    from sgl_speccompact.judge import resolve_label_tokens

    ids = {"yes": [5], " yes": [6], "Yes": [7], " Yes": [8]}
    with pytest.raises(LabelTokenError) as info:
        resolve_label_tokens("yes", "nope", lambda form: ids.get(form, [1, 2]))
    assert info.value.field == "config.negative_label"


# ------------------------------------------------------------------ 9. operator surface


def test_probe_empty_api_key_is_an_error(monkeypatch):
    with pytest.raises(ConfigError):
        create_app(Backend("t"), Backend("d"), api_key="", runner=FakeRunner(), methods=("speccompact",))
    with pytest.raises(ConfigError):
        resolve_api_key("  ")
    monkeypatch.setenv("SGL_SPECCOMPACT_API_KEY", "")
    with pytest.raises(ConfigError):
        resolve_api_key(None)
    monkeypatch.setenv("SGL_SPECCOMPACT_API_KEY", "k")
    assert resolve_api_key(None) == "k"


def test_probe_error_bodies_name_upstreams_by_role():
    url = "http://10.1.2.3:30000"
    failing = FakeRunner(fail_with=BackendUnavailableError(
        f"{url}/generate unreachable: HTTPConnectionPool(host='10.1.2.3', port=30000) http://other:9/x"))
    client, _ = make_client(failing, target=Backend("t", url))
    body = client.post("/v1/compact", json={"messages": MESSAGES}).json()
    msg = body["error"]["message"]
    assert "10.1.2.3" not in msg and "30000" not in msg and "other:9" not in msg
    assert msg.startswith("target/generate unreachable")
    detailed, _ = make_client(FakeRunner(fail_with=BackendUnavailableError(f"{url}/generate down")),
                              target=Backend("t", url), limits=ServiceLimits(expose_upstream_urls=True))
    assert url in detailed.post("/v1/compact", json={"messages": MESSAGES}).json()["error"]["message"]


def test_probe_health_names_upstreams_by_role():
    client, _ = make_client(target=Backend("t", "http://127.0.0.1:9"), drafter=Backend("d"),
                            limits=ServiceLimits(health_timeout_s=2))
    res = client.get("/health")
    assert res.status_code == 503
    assert "127.0.0.1" not in res.text and ":9" not in res.text
    assert set(res.json()["upstreams"]) == {"target", "drafter"}
    detailed, _ = make_client(target=Backend("t", "http://127.0.0.1:9"), drafter=Backend("d"),
                              limits=ServiceLimits(health_timeout_s=2, expose_upstream_urls=True))
    assert detailed.get("/health").json()["upstreams"]["target"]["url"] == "http://127.0.0.1:9/health"


def test_probe_input_is_never_mutated_by_rejections():
    client, _ = make_client(default_config={"max_history_messages": 2})
    sent = copy.deepcopy(MESSAGES)
    client.post("/v1/compact", content=json.dumps({"messages": sent}).encode())
    assert sent == MESSAGES
