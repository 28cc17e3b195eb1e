"""Request bodies and operator limits of the service: a client cannot raise a limit, every bad
field is a typed 4xx naming it, the operator surface names upstreams by role.
"""

from __future__ import annotations

import copy
import json

import pytest
from tests.support.service import MESSAGES, Backend, FakeRunner, make_client

from sgl_speccompact.config import CompactConfig
from sgl_speccompact.errors import BackendUnavailableError, ConfigError, LabelTokenError
from sgl_speccompact.service.app import ServiceSettings, create_app, resolve_api_key

# ------------------------------------------------------------------ 1. clients cannot raise limits


@pytest.mark.parametrize("field,value", [
    ("max_history_messages", "100"), ("max_history_messages", 100.0), ("max_history_messages", True),
    ("max_history_chars", "99999999"), ("max_history_chars", 1e9),
])
def test_limit_raised_by_coercion_is_refused(field, value):
    client, runner = make_client(default_config={"max_history_messages": 5, "max_history_chars": 10_000})
    res = client.post("/v1/compact", json={"messages": MESSAGES + MESSAGES[1:3], "config": {field: value}})
    assert res.status_code == 422, res.text
    assert res.json()["error"]["field"] == f"config.{field}"
    assert runner.calls == []


@pytest.mark.parametrize("field", ["max_new_tokens", "monolithic_max_tokens", "max_summary_tokens",
                                   "max_lines_per_slot", "max_tokens_per_slot"])
def test_every_max_limit_can_only_go_down(field):
    client, runner = make_client()
    res = client.post("/v1/compact", json={"messages": MESSAGES, "config": {field: 10**15}})
    assert res.status_code == 422 and res.json()["error"]["field"] == f"config.{field}"
    ok = client.post("/v1/compact", json={"messages": MESSAGES, "config": {field: 8}})
    assert ok.status_code == 200 and getattr(runner.calls[0]["config"], field) == 8


@pytest.mark.parametrize("config,field", [
    ({"eta": "0.8"}, "config.eta"), ({"eta": True}, "config.eta"), ({"max_new_tokens": "32"}, "config.max_new_tokens"),
    ({"positive_label": 1}, "config.positive_label"), ({"empty_markers": "none"}, "config.empty_markers"),
])
def test_no_string_or_bool_coerced_into_config(config, field):
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
    ({"messages": MESSAGES, "session": 7}, "session"),
    ({"messages": MESSAGES, "session": ""}, "session"),
    ({"messages": MESSAGES, "session": "a b"}, "session"),
    ({"messages": MESSAGES, "session": "s" * 257}, "session"),
    ({"messages": MESSAGES, "session": "caf\u00e9"}, "session"),
])
def test_strict_body_fields(body, field):
    client, runner = make_client()
    res = client.post("/v1/compact", json=body)
    assert res.status_code == 422 and res.json()["error"]["field"] == field, res.text
    assert runner.calls == []


def test_session_id_is_accepted_for_ahead_of_time_compaction():
    """Agents' plugins (OpenClaw's) send their session id; a 422 here would break every compaction."""
    client, runner = make_client()
    res = client.post("/v1/compact", json={"messages": MESSAGES, "session": "agent:main:explicit:s-1"})
    assert res.status_code == 200, res.text
    assert len(runner.calls) == 1


@pytest.mark.parametrize("raw", [
    b'{"messages": ' + b"[" * 1200 + b"]" * 1200 + b"}",
    b'{"messages": [{"role": "user", "content": "x", "name": ' + b'{"a":' * 1100 + b"1" + b"}" * 1100 + b"}]}",
    b'{"messages": [], "config": {"max_new_tokens": ' + b"9" * 5000 + b"}}",
    b'{"messages": [], "config": {"eta": 1e999}}',
    b'{"messages": [], "config": {"eta": NaN}}',
    b'{"messages": "\xff\xfe"}',
])
def test_hostile_json_is_a_typed_400(raw):
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
def test_lone_surrogate_is_422_naming_the_field(raw, field):
    client, runner = make_client()
    res = client.post("/v1/compact", content=raw, headers={"content-type": "application/json"})
    assert res.status_code == 422, res.text
    assert res.json()["error"]["field"] == field
    assert runner.calls == []


def test_previous_summary_has_its_own_limit():
    client, runner = make_client(settings=ServiceSettings(max_previous_summary_chars=1000))
    res = client.post("/v1/compact", json={"messages": MESSAGES, "previous_summary": "x" * 1001})
    assert res.status_code == 413 and res.json()["error"]["field"] == "previous_summary"
    assert client.post("/v1/compact", json={"messages": MESSAGES, "previous_summary": "x" * 1000}).status_code == 200


def test_label_token_error_names_the_field():
    client, _ = make_client(FakeRunner(fail_with=LabelTokenError("no single token", field="config.positive_label")))
    res = client.post("/v1/compact", json={"messages": MESSAGES})
    assert res.status_code == 422 and res.json()["error"]["field"] == "config.positive_label"


def test_label_token_error_from_the_resolver_names_the_label():
    from sgl_speccompact.core.judge import resolve_label_tokens

    ids = {"yes": [5], " yes": [6], "Yes": [7], " Yes": [8]}
    with pytest.raises(LabelTokenError) as info:
        resolve_label_tokens("yes", "nope", lambda form: ids.get(form, [1, 2]))
    assert info.value.field == "config.negative_label"


# ------------------------------------------------------------------ 9. operator surface


def test_empty_api_key_is_an_error(monkeypatch):
    with pytest.raises(ConfigError):
        create_app(Backend("t"), Backend("d"), api_key="", runner=FakeRunner(), methods=("speccompact",))
    with pytest.raises(ConfigError):
        resolve_api_key("  ")
    monkeypatch.setenv("SGL_SPECCOMPACT_API_KEY", "")
    with pytest.raises(ConfigError):
        resolve_api_key(None)
    monkeypatch.setenv("SGL_SPECCOMPACT_API_KEY", "k")
    assert resolve_api_key(None) == "k"


def test_error_bodies_name_upstreams_by_role():
    url = "http://10.1.2.3:30000"
    failing = FakeRunner(fail_with=BackendUnavailableError(
        f"{url}/generate unreachable: HTTPConnectionPool(host='10.1.2.3', port=30000) http://other:9/x"))
    client, _ = make_client(failing, target=Backend("t", url))
    body = client.post("/v1/compact", json={"messages": MESSAGES}).json()
    msg = body["error"]["message"]
    assert "10.1.2.3" not in msg and "30000" not in msg and "other:9" not in msg
    assert msg.startswith("target/generate unreachable")
    detailed, _ = make_client(FakeRunner(fail_with=BackendUnavailableError(f"{url}/generate down")),
                              target=Backend("t", url), settings=ServiceSettings(upstream_detail=True))
    assert url in detailed.post("/v1/compact", json={"messages": MESSAGES}).json()["error"]["message"]


def test_health_names_upstreams_by_role():
    client, _ = make_client(target=Backend("t", "http://127.0.0.1:9"), drafter=Backend("d"),
                            settings=ServiceSettings(health_timeout_s=2))
    res = client.get("/health")
    assert res.status_code == 503
    assert "127.0.0.1" not in res.text and ":9" not in res.text
    assert set(res.json()["upstreams"]) == {"target", "drafter"}
    detailed, _ = make_client(target=Backend("t", "http://127.0.0.1:9"), drafter=Backend("d"),
                              settings=ServiceSettings(health_timeout_s=2, upstream_detail=True))
    assert detailed.get("/health").json()["upstreams"]["target"]["url"] == "http://127.0.0.1:9/health"


def test_input_is_never_mutated_by_rejections():
    client, _ = make_client(default_config={"max_history_messages": 2})
    sent = copy.deepcopy(MESSAGES)
    res = client.post("/v1/compact", content=json.dumps({"messages": sent}).encode(),
                      headers={"content-type": "application/json"})
    assert res.status_code == 413, res.text
    assert sent == MESSAGES


# ------------------------------------------------------------------ limits and types


@pytest.mark.parametrize("field,operator,asked", [  # before: 200, the operator's limit raised
    ("hermes_cap_ratio", 1.0, 50), ("hermes_cap_ratio", 1.0, 1e300),
])
def test_no_request_field_raises_an_operator_limit(field, operator, asked):
    client, runner = make_client(default_config={field: operator})
    res = client.post("/v1/compact", json={"messages": MESSAGES, "config": {field: asked}})
    assert res.status_code == 422 and res.json()["error"]["field"] == f"config.{field}", res.text
    assert runner.calls == []


_UNBOUNDED_BEFORE = ("draft_temperature", "repair_temperature", "agent_context_tokens")


@pytest.mark.parametrize("field", _UNBOUNDED_BEFORE)
def test_numeric_config_fields_have_finite_bounds(field):
    # before: 1e300 and 10**60 were accepted (200) for these fields
    client, runner = make_client()
    big = 10**60 if CompactConfig.model_fields[field].annotation is int else 1e300
    res = client.post("/v1/compact", json={"messages": MESSAGES, "config": {field: big}})
    assert res.status_code == 422 and res.json()["error"]["field"] == f"config.{field}", res.text
    assert runner.calls == []


def test_every_numeric_config_field_has_an_upper_bound():
    import annotated_types

    for name, f in CompactConfig.model_fields.items():
        if f.annotation in (int, float):
            assert any(isinstance(m, (annotated_types.Le, annotated_types.Lt)) for m in f.metadata), name


@pytest.mark.parametrize("key", [  # before: 200 here, 500/502 once the header reached an upstream
    "caf\u00e9", "a\r\nX-Injected: 1", "a\nb", "nul\x00byte", "tab\there", "sp ace", "\x7f",
    "x" * 257,  # the one case refused before too (length), kept as a guard
])
def test_routing_key_is_printable_ascii(key):
    from tests.support.service import RoutedBackend

    client, runner = make_client(target=RoutedBackend("t"))
    res = client.post("/v1/compact", json={"messages": MESSAGES, "routing_key": key})
    assert res.status_code == 422 and res.json()["error"]["field"] == "routing_key", res.text
    assert runner.calls == []
    ok = client.post("/v1/compact", json={"messages": MESSAGES, "routing_key": "session-1:a_b.C~9"})
    assert ok.status_code == 200 and runner.calls[0]["target"].routing_key == "session-1:a_b.C~9"


@pytest.mark.parametrize("content_type", [  # before: 200, a cross-site form could start a compaction
    None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/jsonp", "text/json",
])
def test_json_endpoint_requires_application_json(content_type):
    client, runner = make_client()
    headers = {"content-type": content_type} if content_type else {}
    res = client.post("/v1/compact", content=json.dumps({"messages": MESSAGES}).encode(), headers=headers)
    assert res.status_code == 415, res.text
    assert res.json()["error"]["type"] == "unsupported_media_type"
    assert runner.calls == []
    for ok in ("application/json", "Application/JSON; charset=utf-8"):
        res = client.post("/v1/compact", content=json.dumps({"messages": MESSAGES}).encode(),
                          headers={"content-type": ok})
        assert res.status_code == 200, (ok, res.text)
