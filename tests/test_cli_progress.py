"""The ``compact`` command on a terminal: it speaks at once, and a server that is down fails at once."""

from __future__ import annotations

import json
import os
import pty
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.procs import READY_S

from sgl_speccompact import cli
from sgl_speccompact.errors import BackendUnavailableError

REPO = Path(__file__).resolve().parents[1]
# runs the command in a child and says, on stdout, whether sglang was ever imported
CHILD = ("import sys; from sgl_speccompact.cli import main; rc = main(sys.argv[1:]); "
         "print('sglang' in sys.modules, flush=True); sys.exit(rc)")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_on_a_terminal(args: list[str]) -> tuple[int, str, str]:
    """The CLI in a child whose stderr is a pseudo-terminal: (exit status, stdout, what the terminal showed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=slave, text=True)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    out, _ = proc.communicate(timeout=READY_S)  # a hang guard
    os.close(master)
    return proc.returncode, out, shown.decode(errors="replace")


def test_a_server_that_is_down_fails_at_once_without_loading_sglang(tmp_path):
    f = tmp_path / "h.json"
    f.write_text(json.dumps([{"role": "user", "content": "fix the bug"}]))
    url = f"http://127.0.0.1:{closed_port()}"
    rc, out, shown = run_on_a_terminal([str(f), "--target-url", url, "--method", "hermes"])
    assert rc == 1, shown
    assert out.strip() == "False"  # failed before sglang's frontend (seconds of imports) was loaded
    assert shown.index(f"[compact] reading {f}") < shown.index("error: backend_unavailable: ")
    error = shown[shown.index("error: "):].strip()
    assert f"the target server at {url} is not reachable" in error and "--target-url" in error
    assert error.count("\n") == 0  # one line, below the progress line


def test_reachable_accepts_a_listening_server_and_names_a_dead_one():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        cli.reachable(f"http://127.0.0.1:{s.getsockname()[1]}", "target")
    with pytest.raises(BackendUnavailableError, match=r"the drafter server at http://127\.0\.0\.1:\d+ is not "
                                                      r"reachable \(.*\); start it, or pass --drafter-url"):
        cli.reachable(f"http://127.0.0.1:{closed_port()}", "drafter")
    cli.reachable("not a url", "target")  # left to the endpoint, which names what is wrong


def test_a_compaction_on_a_terminal_ends_on_its_totals(monkeypatch, tmp_path, make_emulated_server):
    """The last progress line drawn holds the numbers of the result's stats."""
    import io

    from sgl_speccompact.emulator import ControlledAcceptancePolicy

    class Tty(io.StringIO):
        def isatty(self):
            return True

    target = make_emulated_server(policy=ControlledAcceptancePolicy(seed=1), model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(policy=ControlledAcceptancePolicy(seed=2), model_path="Qwen/Qwen3-0.6B",
                                   lora_paths=["drafter"])
    f = REPO / "examples" / "history.json"
    shown = Tty()
    monkeypatch.setattr(sys, "stderr", shown)
    results = []
    real = cli._default_runner()

    def runner(*args, **kw):
        results.append(real(*args, **kw))
        return results[-1]
    assert cli.main([str(f), "--target-url", target.url, "--drafter-url", drafter.url, "--drafter-lora-name",
                     "drafter", "--method", "speccompact"], runner=runner) == 0
    st = results[0].stats
    used = sum(st.totals(s).prompt_tokens + st.totals(s).completion_tokens for s in st.requests)
    last = shown.getvalue().rstrip("\n").rsplit("\r\x1b[K", 1)[1]
    assert last == (f"[compact] block 1 of 1: 6 of 6 slots, {st.accepted_lines} of {st.proposed_lines} judged lines "
                    f"accepted, {used:,} tokens")


def test_a_server_behind_a_proxy_is_left_to_the_endpoint(monkeypatch):
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    monkeypatch.setenv("no_proxy", "")
    cli.reachable(f"http://10.255.255.1:{closed_port()}", "target", timeout_s=0.001)  # no direct connection tried
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    with pytest.raises(BackendUnavailableError):
        cli.reachable(f"http://127.0.0.1:{closed_port()}", "target")
