"""One error shape for every status, with what a client needs to fix its request.

Before, a wrong path or HTTP method got FastAPI's ``{"detail": ...}``, an unknown field's error did
not say which fields exist, and a bare message list got "must be a JSON object" with no hint.
"""

from __future__ import annotations

import pytest

from tests.support.service import MESSAGES, make_client


@pytest.fixture
def client():
    return make_client()[0]


@pytest.mark.parametrize("method,path,status,kind", [("GET", "/v1/compactt", 404, "not_found"),
                                                      ("POST", "/nope", 404, "not_found"),
                                                      ("GET", "/v1/compact", 405, "method_not_allowed"),
                                                      ("DELETE", "/health", 405, "method_not_allowed")])
def test_a_wrong_path_or_method_answers_the_services_error_shape(client, method, path, status, kind):
    res = client.request(method, path)
    assert res.status_code == status
    body = res.json()
    assert set(body) == {"error"} and body["error"]["type"] == kind and body["error"]["message"]
    if status == 405:
        assert "allowed:" in body["error"]["message"] and res.headers["allow"]


def test_an_unknown_field_lists_the_valid_fields(client):
    res = client.post("/v1/compact", json={"messages": MESSAGES, "methd": "hermes"})
    assert res.status_code == 422
    err = res.json()["error"]
    assert err["field"] == "methd" and "valid: messages, previous_summary, method," in err["message"]
    res = client.post("/v1/compact", json={"messages": MESSAGES, "config": {"etaa": 0.8}})
    err = res.json()["error"]
    assert err["field"] == "config.etaa" and "valid: eta," in err["message"]


def test_a_bare_message_list_is_told_to_wrap_it(client):
    res = client.post("/v1/compact", json=MESSAGES)
    assert res.status_code == 422
    assert '{"messages": [...]}' in res.json()["error"]["message"]
