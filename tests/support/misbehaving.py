"""An HTTP upstream that misbehaves on purpose, route by route: slow, trickling, hanging or garbage answers.

``Upstream({"/v1/loads": Trickle(b'{"loads": []}', every_s=0.5)})`` serves
on a loopback port until ``close()``; ``/get_model_info`` answers as an
SGLang server's does unless a route replaces it.  Every wait (a hang, the
gaps of a trickle) ends at ``close()``, so a test never leaves a thread
behind.  ``finished[path]`` counts the answers sent in full, ``started[path]``
the requests that arrived.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MODEL_INFO = {"model_path": "Qwen/Qwen3-8B", "is_generation": True}  # what /get_model_info answers by default


def busy_loads(running: int, waiting: int = 0) -> dict:
    """A ``/v1/loads?include=core`` answer of one DP rank."""
    return {"loads": [{"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": waiting}]}


@dataclass
class Answer:
    """A whole JSON answer (``status``), after ``delay_s`` (a slow server)."""

    body: Any  # the JSON answered
    status: int = 200  # its HTTP status
    delay_s: float = 0.0  # wait before answering (seconds; ends at close)


@dataclass
class Trickle:
    """``body`` one byte every ``every_s`` seconds, under a Content-Length of the whole."""

    body: bytes  # the bytes sent
    every_s: float  # the gap between two bytes (seconds)


@dataclass
class Hang:
    """Never answers until ``release`` is set (or the upstream closes); then answers ``then``."""

    then: Answer = field(default_factory=lambda: Answer({}))  # the answer once released
    release: threading.Event = field(default_factory=threading.Event)  # set: answer now


@dataclass
class Garbage:
    """A 200 whose body is not JSON."""

    body: bytes = b"\x00not json {"  # the bytes sent


class Upstream:
    """The server (see the module doc); ``url`` is its base URL."""

    def __init__(self, routes: dict):
        self.routes = {"/get_model_info": Answer(MODEL_INFO), **routes}  # path (no query) -> behaviour
        self.started, self.finished = Counter(), Counter()
        self.closing = threading.Event()  # set by close(): every wait ends
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                outer._serve(self)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer._serve(self)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _serve(self, handler) -> None:
        path = handler.path.split("?", 1)[0]
        self.started[path] += 1
        how = self.routes.get(path, Answer({"detail": "Not Found"}, status=404))
        try:
            if isinstance(how, Hang):
                while not how.release.wait(0.05) and not self.closing.is_set():
                    pass
                how = how.then
            if isinstance(how, Answer):
                if how.delay_s and self.closing.wait(how.delay_s):
                    return
                self._send(handler, how.status, json.dumps(how.body).encode())
            elif isinstance(how, Garbage):
                self._send(handler, 200, how.body)
            elif isinstance(how, Trickle):
                handler.send_response(200)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", str(len(how.body)))
                handler.end_headers()
                for i in range(len(how.body)):
                    handler.wfile.write(how.body[i:i + 1])
                    handler.wfile.flush()
                    if self.closing.wait(how.every_s):
                        return
            else:
                raise TypeError(f"unknown behaviour {how!r}")
            self.finished[path] += 1
        except (BrokenPipeError, ConnectionResetError):  # the client gave up: what these tests expect
            pass

    @staticmethod
    def _send(handler, status: int, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
