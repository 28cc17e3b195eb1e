"""Client-side cost of one request through the project's endpoint (MEASURED on this machine's CPU).

What the simulator charges on its virtual clock per request
(``CLIENT_S_PER_REQUEST`` + ``CLIENT_S_PER_TOKEN`` * prompt tokens in
``sgl_speccompact/emulator/cost.py``): the real ``SpecCompactEndpoint._request``
builds the body, JSON-encodes it, posts it through its pooled ``requests``
session over loopback and parses the answer.  The server here is a minimal
HTTP handler that reads the body and returns a canned ``/generate`` answer, so
what is timed is the client's work plus loopback; the server's own cost is
charged separately (``o_req``).

Method: for each prompt size, ``--repeats`` requests one after another; the
per-size figure is the fastest quarter's mean (the least disturbed runs on a
shared machine); a least-squares line through the sizes gives the fixed and
per-token parts.

Usage:
    python -m bench.client_cost                 # sizes 64, 2048, 8192, 17000; 40 repeats
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


ANSWER = json.dumps({"text": "x", "output_ids": [1], "meta_info": {
    "id": "0", "finish_reason": {"type": "length", "length": 1}, "prompt_tokens": 1, "completion_tokens": 1,
    "cached_tokens": 0, "e2e_latency": 0.0}}).encode()


class Canned(BaseHTTPRequestHandler):
    """Reads the body, answers a fixed ``/generate`` output."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as uvicorn (SGLang's server) sets TCP_NODELAY

    def do_POST(self):  # http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def do_GET(self):  # /get_model_info at construction
        info = json.dumps({"model_path": "canned", "tokenizer_path": None, "is_generation": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(info)))
        self.end_headers()
        self.wfile.write(info)

    def log_message(self, *args):
        pass


def measure(sizes: list[int], repeats: int) -> dict:
    """Seconds per request for each prompt size (fastest quarter's mean) and the fitted line."""
    from sgl_speccompact.backends.http import HttpEndpoint

    server = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = HttpEndpoint(f"http://127.0.0.1:{server.server_address[1]}")
        per = {}
        for n in sizes:
            body = {"input_ids": list(range(1000, 1000 + n)), "sampling_params": {"max_new_tokens": 1},
                    "return_logprob": True, "token_ids_logprob": [1, 2], "logprob_start_len": -1}
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                client._request("POST", "/generate", body)
                times.append(time.perf_counter() - t0)
            times.sort()
            per[n] = statistics.fmean(times[: max(1, repeats // 4)])
    finally:
        server.shutdown()
    slope, intercept = statistics.linear_regression(list(per), list(per.values()))
    return {"per_size_s": per, "fixed_s": intercept, "per_token_s": slope}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[64, 2048, 8192, 17000])
    p.add_argument("--repeats", type=int, default=40)
    args = p.parse_args(argv)
    got = measure(args.sizes, args.repeats)
    print("MEASURED client-side cost per request (SpecCompactEndpoint over loopback to a canned server, "
          f"this machine's CPU, fastest quarter of {args.repeats})")
    for n, s in got["per_size_s"].items():
        print(f"  {n:6d} prompt tokens: {s * 1e3:.3f} ms")
    print(f"fit: {got['fixed_s'] * 1e3:.3f} ms + {got['per_token_s'] * 1e6:.4f} us/token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
