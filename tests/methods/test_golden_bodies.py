"""Every request body each method sends, on a fixed history, against two emulators.

The bodies the target and the drafter receive (prompts as token ids,
sampling parameters, judge queries) are compared with a recorded golden
file, so a refactor that changes a single prompt token or adds a request
fails here.  Slot branches run concurrently, so the bodies are compared as
a sorted multiset, not in arrival order.  Token counting (``/tokenize``)
shares a segment cache between the branches, so which branch asks for a
text, and in which batch, depends on timing: those requests are compared as
the set of texts counted, not one by one.  The Hermes
prompt's date rule reads today's date: it is pinned to the day the golden
file was recorded (``RECORDED``), so the comparison does not depend on the day.
Session ids and rids are random: a session is named by the order it was
opened in, and a request that continues another names the digest of that
request's body (:func:`canonical`), so a continuation of the wrong node fails.

Regenerate the golden file (after a change that means to alter requests)::

    SGL_SPECCOMPACT_GOLDEN=write python -m pytest tests/methods/test_golden_bodies.py
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.methods.request import MethodRequest
from sgl_speccompact.emulator import ControlledAcceptancePolicy, EmulatedServer

from tests.support.methods import tool_loop

GOLDEN = Path(__file__).with_name("golden_bodies.json")
RECORDED = datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc)  # the day golden_bodies.json was written
HISTORY = json.loads((Path(__file__).resolve().parents[2] / "examples" / "history.json").read_text())
PREVIOUS = "## Goal\n- Fix the failing test in tests/test_app.py\n\n## Progress\n### Done\n- [x] Ran the suite"
CHUNKED = {"max_summary_tokens": 512, "monolithic_max_tokens": 512, "max_tokens_per_slot": 80,
           "target_context_tokens": 4000}  # small enough to cut tool_loop(8) into blocks

# name -> (method, messages, run_method keywords)
CASES = {
    "speccompact": ("speccompact", HISTORY, {}),
    "speccompact_previous_focus": ("speccompact", HISTORY, {"previous_summary": PREVIOUS, "focus": "the test"}),
    "target_self_previous": ("target_self", HISTORY, {"previous_summary": PREVIOUS}),
    "hermes_focus": ("hermes", HISTORY, {"focus": "the test", "previous_summary": PREVIOUS}),
    "openclaw": ("openclaw", HISTORY, {}),
    "openclaw_sjc": ("openclaw", HISTORY, {"source_judge": True, "previous_summary": PREVIOUS}),
    "openclaw_chunked": ("openclaw", tool_loop(8, lines=30), {"config": CHUNKED}),
    "auto": ("auto", HISTORY, {}),
}
IGNORED_PATHS = ("/health", "/emulator/stats", "/emulator/reset_stats", "/flush_cache")


class Recording:
    """ASGI wrapper that keeps every request's path and body."""

    def __init__(self, app):
        self.app, self.seen = app, []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in IGNORED_PATHS:
            return await self.app(scope, receive, send)
        chunks = []

        async def recorded():
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
            return message
        try:
            return await self.app(scope, recorded, send)
        finally:
            self.seen.append((scope["method"], scope["path"], b"".join(chunks)))


class Canonical:
    """Bodies with their random names replaced: sessions by their order, rids by what they name."""

    def __init__(self):
        self.sessions: dict[str, str] = {}  # session id -> "session-<k>"
        self.rids: dict[str, str] = {}  # rid -> "<digest of its body>:<item>"

    def session(self, sid):
        return self.sessions.setdefault(sid, f"session-{len(self.sessions)}") if isinstance(sid, str) else sid

    def body(self, body):
        if not isinstance(body, dict):
            return body
        out = {k: v for k, v in body.items() if k != "rid"}
        if "session_id" in out:
            out["session_id"] = self.session(out["session_id"])
        if isinstance(out.get("session_params"), dict):
            params = dict(out["session_params"])
            params["id"] = self.session(params.get("id"))
            if "rid" in params:
                params["rid"] = self.rids[params["rid"]]
            out["session_params"] = params
        digest = hashlib.sha256(json.dumps(out, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
        rids = body.get("rid")
        for i, rid in enumerate(rids if isinstance(rids, list) else [rids] if rids else []):
            self.rids[rid] = f"{digest}:{i}"
        return out


def entry(server: str, method: str, path: str, raw: bytes, names: Canonical) -> dict:
    """A request as the golden file holds it: readable settings, a digest of the whole body."""
    body = names.body(json.loads(raw) if raw else None)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    shown = {}
    if isinstance(body, dict):
        shown = {k: v for k, v in body.items() if k in ("sampling_params", "return_logprob", "lora_path",
                                                          "logprob_start_len", "token_ids_logprob",
                                                          "session_params", "session_id")}
        prompt = body.get("input_ids", body.get("text"))
        shown["prompt_size"] = len(prompt) if isinstance(prompt, (list, str)) else None
    return {"server": server, "request": f"{method} {path}", **shown,
            "sha256": hashlib.sha256(canonical.encode()).hexdigest()[:16]}


@pytest.fixture(scope="module")
def servers(emulator_tokenizer_path):
    made = {}
    for role, seed, kw in (("target", 1, {"model_path": "Qwen/Qwen3-8B"}),
                           ("drafter", 2, {"model_path": "Qwen/Qwen3-0.6B", "lora_paths": ["drafter"]})):
        srv = EmulatedServer(emulator_tokenizer_path, policy=ControlledAcceptancePolicy(seed=seed), **kw)
        srv.app = Recording(srv.app)  # before start(): uvicorn serves self.app
        made[role] = srv.start()
    yield made
    for srv in made.values():
        srv.close()


def bodies(servers, case: str) -> list[dict]:
    method, messages, kw = CASES[case]
    for srv in servers.values():
        srv.app.seen.clear()
        assert srv.flush_cache()
    target = SpecCompactEndpoint(servers["target"].url, timeout_s=60)
    drafter = SpecCompactEndpoint(servers["drafter"].url, lora_path="drafter", timeout_s=60)
    kw = dict(kw)
    run_method(method, MethodRequest(messages, focus=kw.pop("focus", None)), target=target, drafter=drafter, **kw)
    out = []
    for role, srv in servers.items():
        names = Canonical()  # in the order the server received them: a parent before its continuations
        out += [entry(role, *seen, names) for seen in srv.app.seen if seen[1] != "/tokenize"]
    for role, srv in servers.items():
        texts = sorted({text for _, path, raw in srv.app.seen if path == "/tokenize"
                        for text in counted(json.loads(raw))})
        if texts:
            out.append({"server": role, "request": "POST /tokenize", "distinct_texts": len(texts),
                        "sha256": hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:16]})
    return sorted(out, key=lambda e: json.dumps(e, sort_keys=True))


def counted(body: dict) -> list[str]:
    """The texts one ``/tokenize`` request counts."""
    prompt = body.get("prompt", body.get("text"))
    return [prompt] if isinstance(prompt, str) else list(prompt or [])


class _OnRecordedDay(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return RECORDED if tz is None else RECORDED.astimezone(tz)


def test_request_bodies_match_the_golden_file(servers, monkeypatch):
    from sgl_speccompact.core import hermes_prompt

    monkeypatch.setattr(hermes_prompt, "datetime", SimpleNamespace(datetime=_OnRecordedDay,
                                                                    timezone=datetime.timezone))
    got = {case: bodies(servers, case) for case in CASES}
    if os.environ.get("SGL_SPECCOMPACT_GOLDEN") == "write":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    for case in CASES:
        assert got[case] == want[case], case
    assert sorted(want) == sorted(CASES)
