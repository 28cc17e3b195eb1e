#!/usr/bin/env python
"""The service's lookup of a stored prepare, timed on this machine (wall clock, CPU only).

Method: a :class:`~sgl_speccompact.service.store.SessionStore` holds one
prepared result per session for ``--sessions`` sessions; one lookup is what
``Sessions.resolve`` does for a ``compact`` naming a session: the params
digest of the shaping fields and ``SessionStore.longest`` over the request's
messages (SHA-256 of their canonical JSON).  Messages are tool-call rounds of
``--output-chars`` characters.  It prints the fit ``fixed + per_byte * bytes``
over message lists of several sizes (median of ``--repeats`` lookups each),
the figures ``emulator/cost.py`` uses as ``STORE_LOOKUP_S_*``.

Usage::

    python -m bench.store_lookup
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def messages(n_rounds: int, chars: int) -> list[dict]:
    out = [{"role": "user", "content": "fix the failing test"}]
    for i in range(n_rounds):
        out += [{"role": "assistant", "content": "", "tool_calls": [
                    {"id": f"c{i}", "type": "function", "function": {"name": "read_file",
                                                                     "arguments": json.dumps({"path": f"m{i}.py"})}}]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": f"{i}:" + "y" * chars}]
    return out


def one_lookup(store, ms: list[dict], fields: dict) -> float:
    from sgl_speccompact.service.store import params_digest

    t0 = time.perf_counter()
    params = params_digest(fields)
    hit = store.longest("key:x", "s0", params, ms)
    took = time.perf_counter() - t0
    assert hit is not None
    return took


def main(argv: list[str] | None = None) -> int:
    from sgl_speccompact.service.store import SessionStore, Stored, message_keys, params_digest, prefix_digests

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10, 40, 160], help="tool rounds per message list")
    p.add_argument("--output-chars", type=int, default=4000)
    p.add_argument("--sessions", type=int, default=64)
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args(argv)
    print(f"Method: SessionStore.longest + params_digest per compact naming a session; {args.sessions} sessions "
          f"stored; tool rounds {args.sizes} of {args.output_chars} chars; median of {args.repeats}; wall clock "
          "on this machine (CPU)")
    fields = {"method": "speccompact", "previous_summary": "## Goal\n- g\n" * 50, "config": None, "focus": None,
              "tools": [{"type": "function", "function": {"name": "read_file"}}] * 20}
    points = []
    for n in args.sizes:
        ms = messages(n, args.output_chars)
        store = SessionStore()
        params = params_digest(fields)
        for s in range(args.sessions):
            k = len(ms) - 2
            store.put("key:x", f"s{s}", params, Stored(None, k, prefix_digests(ms, {k})[k], 1000, 1.0,
                                                        time.monotonic(), *message_keys(ms[:k])))
        took = statistics.median(one_lookup(store, ms, fields) for _ in range(args.repeats))
        size = len(json.dumps(ms).encode())
        points.append((size, took))
        print(f"{n} rounds, {size} bytes: {took * 1e3:.3f} ms")
    (x0, y0), (x1, y1) = points[0], points[-1]
    per_byte = (y1 - y0) / (x1 - x0)
    print(f"fit: fixed {max(0.0, y0 - per_byte * x0):.2e} s + {per_byte:.2e} s/byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())
