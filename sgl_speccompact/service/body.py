"""The ``POST /v1/compact`` body: read, bounded, parsed and validated strictly.

Everything here runs before a compaction starts and raises a typed
:mod:`~sgl_speccompact.errors` error naming the field:

* the raw body is bounded in bytes, nesting depth and digits per number
  *before* ``json.loads`` runs, so no input reaches Python's recursion or
  integer-conversion limits (which would be untyped 500s);
* the body model is strict: no string or bool is coerced into a number, no
  empty method name, no unknown field;
* the body must be declared ``application/json`` (415 otherwise), so a web
  page cannot send one as a "simple" cross-site request without a CORS
  preflight;
* config overrides are validated strictly too and may only lower the
  operator's limits (:func:`limit_fields`), never raise them;
* ``chat_template_kwargs`` is an allow-list of plain values
  (:data:`~sgl_speccompact.backends.chat_render.TEMPLATE_KWARGS`): no request brings
  template code or template controls;
* ``routing_key`` is 1-256 printable ASCII characters without spaces (it
  becomes an HTTP header);
* every string must be encodable as UTF-8 (a lone surrogate is a 422 naming
  its field, not a backend error later).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..backends.chat_render import TEMPLATE_KWARGS, check_template_kwargs
from ..config import CompactConfig, check_config, error_message, field_path
from ..options import ServiceSettings
from ..errors import (HistoryTooLongError, InvalidRequestError, MalformedJSONError, RequestTooLargeError,
                     UnsupportedMediaTypeError)


class CompactRequest(BaseModel):
    """Body of ``POST /v1/compact``; strict types, unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", strict=True)

    messages: list[Any]  # OpenAI chat messages, validated by parse_messages
    previous_summary: str | None = None  # summary of turns before `messages`
    method: str | None = Field(None, min_length=1)  # auto | speccompact | hermes | openclaw | target_self | target_delta
    source_judge: bool = False  # run the Source-Judged post-filter
    config: dict[str, Any] | None = None  # CompactConfig overrides (may only tighten limits)
    stream: bool = False  # answer with Server-Sent Events
    focus: str | None = None  # topic the summary should favour (untrusted; redacted and quoted into prompts)
    tools: list[dict[str, Any]] | None = None  # the agent's OpenAI tool schemas (agent-aligned layout)
    layout: Literal["agent", "classic"] | None = None  # target prefix layout (agent when the service has the template)
    chat_template_kwargs: dict[str, Any] | None = None  # what the agent sent (allow-list: TEMPLATE_KWARGS)
    routing_key: str | None = Field(None, min_length=1, max_length=256)  # X-SMG-Routing-Key of the agent's session
    session: str | None = Field(None, min_length=1, max_length=256,
                                pattern=r"^[\x21-\x7e]+$")  # opaque session id (visible ASCII, no spaces): ahead-of-time reuse
    mode: Literal["compact", "prepare"] = "compact"  # prepare: answer 202, compact in the background (needs session)

    @field_validator("routing_key")
    @classmethod
    def _header_safe(cls, key: str | None) -> str | None:
        if key is not None and not _ROUTING_KEY.fullmatch(key):
            raise ValueError("must be printable ASCII without spaces or control characters")
        return key


_ROUTING_KEY = re.compile(r"[!-~]+")  # visible ASCII: safe in an HTTP header value as is


def check_content_type(header: str | None) -> None:
    """Refuse a body not declared as ``application/json`` (parameters such as charset are fine).

    >>> check_content_type("application/json; charset=utf-8")
    >>> check_content_type("text/plain")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.UnsupportedMediaTypeError: content-type: must be application/json, got 'text/plain'
    """
    media = (header or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise UnsupportedMediaTypeError(f"must be application/json, got {(header or '')[:80]!r}",
                                        field="content-type")


# a JSON string, unrolled so the regex engine does not backtrack
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]")
_OPEN = frozenset(b"[{")


def check_json_shape(raw: bytes, limits: ServiceSettings) -> None:
    """Refuse a body nested deeper or with longer numbers than ``limits`` allow.

    Runs on the bytes, before any parser: strings are blanked out, then
    digit runs and bracket depth are measured.

    >>> check_json_shape(b'{"a": [[1]], "b": "[[[[[["}', ServiceSettings(max_json_depth=3))
    >>> check_json_shape(b'[[[[1]]]]', ServiceSettings(max_json_depth=3))
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.MalformedJSONError: body: nests deeper than 3 levels
    """
    skeleton = _JSON_STRING.sub(b'""', raw)
    if re.search(rb"[0-9]{%d}" % (limits.max_number_digits + 1), skeleton):
        raise MalformedJSONError(f"has a number with more than {limits.max_number_digits} digits", field="body")
    depth = 0
    for ch in _NOT_BRACKET.sub(b"", skeleton):
        depth += 1 if ch in _OPEN else -1
        if depth > limits.max_json_depth:
            raise MalformedJSONError(f"nests deeper than {limits.max_json_depth} levels", field="body")


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:20]}... is out of range")
    return value


def parse_json_value(raw: bytes, limits: ServiceSettings, field: str = "body") -> Any:
    """Any JSON value, bounded as a body is: no NaN or infinity, no huge number, no deep nesting.

    >>> parse_json_value(b'[1, "a"]', ServiceSettings())
    [1, 'a']
    >>> parse_json_value(b"NaN", ServiceSettings(), field="--set eta")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.MalformedJSONError: --set eta: is not valid JSON: NaN is not JSON
    """
    try:
        check_json_shape(raw, limits)
    except MalformedJSONError as exc:
        raise MalformedJSONError(str(exc).removeprefix("body: "), field=field) from None
    try:
        return json.loads(raw or b"null", parse_constant=_no_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, our hooks
        raise MalformedJSONError(f"is not valid JSON: {exc}", field=field) from None


def parse_json(raw: bytes, limits: ServiceSettings) -> dict:
    """Bounded JSON object from raw bytes (400/413/422 typed errors, never a 500)."""
    if len(raw) > limits.max_body_bytes:
        raise RequestTooLargeError(f"exceeds {limits.max_body_bytes} bytes", field="body")
    body = parse_json_value(raw, limits)
    if isinstance(body, list):  # a bare message list: what a body's messages field holds
        raise InvalidRequestError('must be a JSON object, not a list; send the messages as {"messages": [...]}',
                                  field="body")
    if not isinstance(body, dict):
        raise InvalidRequestError("must be a JSON object", field="body")
    check_encodable(body)
    return body


def _path(parent: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else str(key)


def check_encodable(value: Any, where: str = "") -> None:
    """Raise a 422 naming the first string (or key) that UTF-8 cannot encode.

    >>> check_encodable({"messages": [{"content": "ok"}, {"content": "bad \\ud800"}]})
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.InvalidRequestError: messages[1].content: contains a lone surrogate \
or other text that is not valid Unicode
    """
    stack = [(where, value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidRequestError("contains a lone surrogate or other text that is not valid Unicode",
                                          field=path or "body") from None
        elif isinstance(v, dict):
            for k in reversed(list(v)):
                check_encodable(k, _path(path, "<key>"))
                stack.append((_path(path, k), v[k]))
        elif isinstance(v, list):
            stack.extend((_path(path, i), item) for i, item in reversed(list(enumerate(v))))


def parse_request(body: dict, limits: ServiceSettings) -> CompactRequest:
    """The strict body model; the first error names its field (an unknown one lists the valid fields).

    >>> parse_request({"messages": [{"role": "user", "content": "hi"}], "methd": "x"}, ServiceSettings())
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.InvalidRequestError: methd: unknown field; valid: messages, previous_summary, method, ...
    """
    try:
        req = CompactRequest.model_validate(body)
    except ValidationError as exc:
        e = exc.errors()[0]
        valid = CompactRequest.model_fields if len(e["loc"]) == 1 else ()
        raise InvalidRequestError(error_message(e, valid), field=field_path(e["loc"]) or "body") from None
    check_template_kwargs(req.chat_template_kwargs)
    if req.mode == "prepare" and req.session is None:
        raise InvalidRequestError("a prepare needs a session", field="session")
    if req.mode == "prepare" and req.stream:
        raise InvalidRequestError("a prepare answers 202 at once and cannot stream", field="stream")
    if req.previous_summary is not None and len(req.previous_summary) > limits.max_previous_summary_chars:
        raise HistoryTooLongError(f"has {len(req.previous_summary)} characters, limit is "
                                  f"{limits.max_previous_summary_chars}", field="previous_summary")
    return req


# limits not named max_*: each one sets how much work or output one compaction may cause
OTHER_LIMITS = ("hermes_cap_ratio",)


def limit_fields() -> tuple[str, ...]:
    """Config fields that are operator limits: every ``max_*`` number, and :data:`OTHER_LIMITS`.

    >>> "max_history_messages" in limit_fields(), "hermes_cap_ratio" in limit_fields(), "eta" in limit_fields()
    (True, True, False)
    """
    return tuple(n for n, f in CompactConfig.model_fields.items()
                 if ("max_" in n and f.annotation in (int, float)) or n in OTHER_LIMITS)


def strict_config(base: CompactConfig, overrides: dict, *, prefix: str = "config", sep: str = ".",
                  error: type = InvalidRequestError) -> CompactConfig:
    """``base`` with ``overrides`` (JSON values), validated strictly: no "0.8" or true for a number.

    The one config validation (:func:`~sgl_speccompact.config.check_config`);
    ``prefix`` and ``sep`` name the field in errors (``config.eta``, ``--set eta``).

    >>> strict_config(CompactConfig(), {"eta": 0.8}).eta
    0.8
    >>> strict_config(CompactConfig(), {"eta": "0.8"}, prefix="--set", sep=" ")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.InvalidRequestError: --set eta: Input should be a valid number
    """
    return check_config(overrides, base, where=prefix, sep=sep, error=error)


def request_config(base: CompactConfig, overrides: dict | None) -> CompactConfig:
    """``base`` with a request's overrides, validated strictly; limits may only go down.

    >>> base = CompactConfig(max_history_messages=5)
    >>> request_config(base, {"max_history_messages": 3}).max_history_messages
    3
    >>> request_config(base, {"max_history_messages": "100"})
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.InvalidRequestError: config.max_history_messages: Input should be a valid integer
    """
    if not overrides:
        return base
    cfg = strict_config(base, overrides)
    for name in limit_fields():
        if name in overrides and getattr(cfg, name) > getattr(base, name):
            raise InvalidRequestError(f"may not exceed the service limit {getattr(base, name)}",
                                      field=f"config.{name}")
    return cfg


_MESSAGE_SCHEMA = {
    "type": "object",
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {"anyOf": [{"type": "string"}, {"type": "null"},
                              {"type": "array", "items": {"type": "object", "properties": {
                                  "type": {"const": "text"}, "text": {"type": "string"}}, "required": ["text"]}}]},
        "name": {"type": "string"},
        "tool_call_id": {"type": "string"},
        "tool_calls": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "string"}, "type": {"const": "function"},
            "function": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1},
                                                          "arguments": {"type": "string"}},
                         "required": ["name"]}}, "required": ["function"]}},
    },
    "required": ["role"],
    "additionalProperties": False,
}


def openapi_body() -> dict:
    """``openapi_extra`` of ``POST /v1/compact``: the body schema (the route reads raw bytes)."""
    schema = CompactRequest.model_json_schema()
    schema["properties"]["messages"] = {"type": "array", "items": _MESSAGE_SCHEMA, "minItems": 1}
    kwargs = {k: {"type": "boolean"} if v is bool else {"enum": list(v)} for k, v in TEMPLATE_KWARGS.items()}
    schema["properties"]["chat_template_kwargs"] = {"anyOf": [
        {"type": "object", "properties": kwargs, "additionalProperties": False}, {"type": "null"}]}
    schema["properties"]["routing_key"] = {"anyOf": [
        {"type": "string", "pattern": f"^{_ROUTING_KEY.pattern}$", "maxLength": 256}, {"type": "null"}]}
    config = CompactConfig.model_json_schema()
    schema["properties"]["config"] = {"anyOf": [{"type": "object", "properties": config["properties"],
                                                 "additionalProperties": False}, {"type": "null"}]}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
