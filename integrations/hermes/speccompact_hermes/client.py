"""One compaction request to the sgl_speccompact service, over plain HTTP.

Standard library only, and no client object kept between calls: Hermes
deep-copies the engine for every agent, and a pooled client (locks,
sockets) would make that copy fail and Hermes fall back to its built-in
compressor without saying so.

Every failure becomes a :class:`Failure` with the cooldown Hermes's own
compressor would apply to the same kind of failure: 60, 300, then 900 s for
timeouts (502/504 count as timeouts), 30 s for a body that is not JSON,
600 s for a refused credential, 60 s for anything else.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

TIMEOUT_LADDER = (60, 300, 900)  # cooldown after the 1st, 2nd, 3rd+ timeout in a row (s)
BAD_JSON_COOLDOWN, AUTH_COOLDOWN, OTHER_COOLDOWN = 30, 600, 60  # cooldowns (s)
WIRE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")  # what the service accepts


@dataclass
class Failure(Exception):
    """A compaction request that produced no usable summary."""

    kind: str  # timeout | unreachable | http_error | auth | bad_response | truncated
    detail: str  # one line for logs and get_status()
    status: int | None = None  # HTTP status, when there was one

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"

    def cooldown(self, timeouts_in_a_row: int) -> int:
        """Seconds to wait before the next automatic compaction."""
        if self.kind == "timeout":
            return TIMEOUT_LADDER[min(timeouts_in_a_row, len(TIMEOUT_LADDER)) - 1]
        if self.kind == "auth":
            return AUTH_COOLDOWN
        if self.kind == "bad_response":
            return BAD_JSON_COOLDOWN
        return OTHER_COOLDOWN


@dataclass
class Reply:
    """What the service returned for one compaction."""

    summary: str  # the summary body (no Hermes prefix)
    result: dict = field(repr=False)  # the whole CompactionResult JSON
    latency_s: float  # request round trip, measured here (s)


def _content(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):  # text parts kept, anything else named
        parts = []
        for p in content:
            if isinstance(p, dict) and p.get("type") == "text":
                parts.append(str(p.get("text", "")))
            elif isinstance(p, str):
                parts.append(p)
            else:
                parts.append(f"[{p.get('type', 'attachment') if isinstance(p, dict) else 'attachment'}]")
        return "\n".join(parts)
    return str(content)


def _call(tc: Any) -> dict:
    fn = (tc.get("function") if isinstance(tc, dict) else None) or {}
    args = fn.get("arguments", "")
    return {"id": str(tc.get("call_id") or tc.get("id") or ""), "type": "function",
            "function": {"name": str(fn.get("name") or "?"),
                         "arguments": args if isinstance(args, str) else json.dumps(args)}}


def wire_messages(messages: list[dict], redact: Callable[[str], str]) -> list[dict]:
    """Messages as the service accepts them: known fields, text content, secrets redacted.

    Tool results whose call is not among the messages are dropped (the
    service rejects them).

    >>> wire_messages([{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}],
    ...                 "_compressed_summary": True}], str.upper)
    [{'role': 'user', 'content': 'HI\\n[IMAGE_URL]'}]
    """
    out, calls = [], set()
    for m in messages:
        msg = {k: m[k] for k in WIRE_FIELDS if m.get(k) is not None}
        if "content" in msg:
            msg["content"] = redact(_content(msg["content"]) or "")
        if msg.get("tool_calls"):
            msg["tool_calls"] = [_call(tc) for tc in msg["tool_calls"]]
            for tc in msg["tool_calls"]:
                tc["function"]["arguments"] = redact(tc["function"]["arguments"])
                calls.add(tc["id"])
        if msg.get("role") == "tool" and msg.get("tool_call_id") not in calls:
            continue
        out.append(msg)
    return out


def compact(url: str, body: dict, *, api_key: str | None, timeout_s: float) -> Reply:
    """POST ``body`` to ``<url>/v1/compact``; raise :class:`Failure` on anything but a full summary."""
    data = json.dumps(body, ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url.rstrip("/") + "/v1/compact", data=data, headers=headers, method="POST")
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as res:
            raw = res.read()
    except urllib.error.HTTPError as exc:
        raise _http_failure(exc) from None
    except (TimeoutError, socket.timeout) as exc:
        raise Failure("timeout", f"no answer within {timeout_s:g} s") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (TimeoutError, socket.timeout)):
            raise Failure("timeout", f"no answer within {timeout_s:g} s") from exc
        raise Failure("unreachable", f"{url}: {exc.reason}") from exc
    except (ConnectionError, OSError, http.client.HTTPException) as exc:  # refused, reset, cut off mid-answer
        raise Failure("unreachable", f"{url}: {exc.__class__.__name__}: {exc}") from exc
    latency = time.perf_counter() - t0
    try:
        result = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Failure("bad_response", f"not JSON: {exc}") from exc
    summary = result.get("summary") if isinstance(result, dict) else None
    if not isinstance(summary, str) or not summary.strip():
        raise Failure("bad_response", "no summary in the answer")
    if result.get("truncated"):
        raise Failure("truncated", "the summary is incomplete (cut off, or a section missing)")
    return Reply(summary=summary.strip(), result=result, latency_s=latency)


def reused_messages(result: dict) -> int:
    """Messages the service reused from a prepare, from its answer's ``session`` entry (0 without one).

    >>> reused_messages({"session": {"reused_messages": 58}}), reused_messages({}), reused_messages({"session": 1})
    (58, 0, 0)
    """
    session = result.get("session")
    n = session.get("reused_messages") if isinstance(session, dict) else 0
    return n if isinstance(n, int) else 0


def _http_failure(exc: urllib.error.HTTPError) -> Failure:
    try:
        err = json.loads(exc.read() or b"{}").get("error") or {}
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError, OSError):
        err = {}
    detail = f"HTTP {exc.code} {err.get('type', '')}: {err.get('message', exc.reason)}".replace("  ", " ")
    if exc.code in (408, 429, 502, 504):
        return Failure("timeout", detail, exc.code)
    if exc.code in (401, 403):
        return Failure("auth", detail, exc.code)
    return Failure("http_error", detail, exc.code)


PREPARE_UNSUPPORTED = (400, 404, 405, 422)  # a service without ahead-of-time compaction refuses the fields


def prepare(url: str, body: dict, *, api_key: str | None, timeout_s: float) -> str:
    """POST an ahead-of-time compaction (``"mode": "prepare"``); never raises.

    Returns ``"accepted"`` (2xx: the service compacts in the background),
    ``"unsupported"`` (400/404/405/422: a service that does not know
    ``session``/``mode``) or ``"failed"`` (anything else, tried again later).
    """
    data = json.dumps(body, ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url.rstrip("/") + "/v1/compact", data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as res:
            res.read()
            return "accepted" if 200 <= res.status < 300 else "failed"
    except urllib.error.HTTPError as exc:
        return "unsupported" if exc.code in PREPARE_UNSUPPORTED else "failed"
    except (OSError, ValueError, http.client.HTTPException):  # network errors, timeouts, a cut-off answer
        return "failed"
