"""Standard-library HTTP fakes for the Hermes plugin tests.

* :class:`FakeLLM`: an OpenAI-compatible chat server whose replies (tool
  calls or text) and ``usage.prompt_tokens`` a function decides, streamed or not,
  so a real Hermes ``AIAgent`` can run a conversation that crosses its
  compaction threshold.
* :class:`ServiceProxy`: sits in front of the compaction service, records
  every body it forwards, and can answer 500, answer late, or forward.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server:
    def __init__(self, handler):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass

    def body(self) -> dict:
        n = int(self.headers.get("content-length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def send_json(self, status: int, data: dict) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


class FakeLLM(_Server):
    """Chat completions decided per request: ``decide(body) -> (message, prompt_tokens)``.

    ``message`` is ``{"content": ...}``, ``{"tool_calls": [...]}`` or ``{"error": ...}`` (a 400).  Every
    request body is kept in ``requests``.
    """

    def __init__(self, decide):
        self.decide, self.requests = decide, []
        self.lock = threading.Lock()
        super().__init__(_LLMHandler)

    def next_reply(self, body: dict) -> tuple[dict, int]:
        with self.lock:
            self.requests.append(body)
        return self.decide(body)


class _LLMHandler(_Handler):
    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            return self.send_json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        self.send_json(404, {"error": "not found"})

    def do_POST(self):
        llm: FakeLLM = self.server.owner
        if not self.path.endswith("/chat/completions"):
            return self.send_json(404, {"error": "not found"})
        body = self.body()
        message, prompt_tokens = llm.next_reply(body)
        if "error" in message:  # e.g. the prompt is over the model's window
            return self.send_json(400, {"error": {"message": message["error"], "type": "invalid_request_error",
                                                  "code": "context_length_exceeded"}})
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 10, "total_tokens": prompt_tokens + 10}
        calls = [{"index": i, **c} for i, c in enumerate(message.get("tool_calls") or [])]
        finish = "tool_calls" if calls else "stop"
        if not body.get("stream"):
            msg = {"role": "assistant", "content": message.get("content"), **({"tool_calls": calls} if calls else {})}
            return self.send_json(200, {"id": "c1", "object": "chat.completion", "created": 0, "model": "fake-model",
                                        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                                        "usage": usage})
        delta = {"role": "assistant", "content": message.get("content") or ""}
        if calls:
            delta["tool_calls"] = calls
        chunks = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                  {"choices": [], "usage": usage}]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for c in chunks:
            c.update({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "fake-model"})
            self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class ServiceProxy(_Server):
    """Forwards ``/v1/compact`` to ``upstream``; ``mode`` = forward | error500 | slow | canned (answer ``canned``).

    Also ``auth401`` (a service started with another ``--api-key``) and ``kill`` (the request is read,
    then the connection closes with no answer, as when the service process dies mid-compaction).
    """

    def __init__(self, upstream: str, slow_s: float = 5.0):
        self.upstream, self.mode, self.slow_s, self.bodies = upstream.rstrip("/"), "forward", slow_s, []
        self.replies: list[tuple[int, bytes]] = []  # (status, body) of every forwarded answer
        self.canned: dict = {}  # the 200 answer in mode "canned"
        self.refuse_session = False  # answer 422 to bodies naming "session" or "mode", as a service without prepare
        super().__init__(_ProxyHandler)


class _ProxyHandler(_Handler):
    def do_POST(self):
        proxy: ServiceProxy = self.server.owner
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        proxy.bodies.append(json.loads(raw))
        if proxy.refuse_session and ({"session", "mode"} & set(proxy.bodies[-1])):
            return self.send_json(422, {"error": {"type": "invalid_request", "message": "extra fields not permitted"}})
        if proxy.mode == "error500":
            return self.send_json(500, {"error": {"type": "internal", "message": "injected failure"}})
        if proxy.mode == "auth401":
            return self.send_json(401, {"error": {"type": "unauthorized", "message": "bad or missing API key"}})
        if proxy.mode == "kill":
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(2)  # no status line: the client sees the connection drop
            return
        if proxy.mode == "canned":
            return self.send_json(200, proxy.canned)
        if proxy.mode == "slow":
            time.sleep(proxy.slow_s)
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
        req = urllib.request.Request(proxy.upstream + self.path, data=raw, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=300) as res:
                status, out = res.status, res.read()
        except urllib.error.HTTPError as exc:
            status, out = exc.code, exc.read()
        except urllib.error.URLError as exc:  # no upstream (a proxy that only answers late)
            status, out = 502, json.dumps({"error": {"type": "bad_gateway", "message": str(exc.reason)}}).encode()
        proxy.replies.append((status, out))
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            pass
