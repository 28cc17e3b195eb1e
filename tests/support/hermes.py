"""Running hermes-agent against the service: its home folder, its driver scripts, and a long tool loop."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from tests.support.paths import REPO
from speccompact_hermes import engine as eng
from speccompact_hermes.settings import Settings
import os
import shutil
import subprocess

PLUGIN = REPO / "integrations" / "hermes"
# scripts run inside the hermes-agent virtual environment
DRIVER = Path(__file__).with_name("hermes_driver.py")
PROMPT_PROBE = Path(__file__).with_name("hermes_prompt_probe.py")
CONTEXT = 200_000  # the agent's context window
WINDOW = 100_000  # the agent's window
FILES = 40  # files read in one request (about 4.5k tokens each: 4 compactions)


def make_engine(url, **kw) -> eng.SpecCompactEngine:
    e = eng.SpecCompactEngine(Settings(url=url, **kw))
    e.update_model("fake-model", 200_000)
    e.session_id = "s1"
    return e


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def reads(n, size=4000, start=0):
    """n rounds of an assistant read_file call and its (distinct) result."""
    out = []
    for i in range(start, start + n):
        out += [{"role": "assistant", "content": "",
                 "tool_calls": [call(f"r{i}", "read_file", f'{{"path": "m{i}.py"}}')]},
                {"role": "tool", "tool_call_id": f"r{i}", "content": f"{i}:" + "y" * size, "_db_persisted": True}]
    return out


def tool_pairs(ms):
    calls = sorted(tc["id"] for m in ms if m.get("role") == "assistant" for tc in m.get("tool_calls") or [])
    return calls == sorted(m["tool_call_id"] for m in ms if m.get("role") == "tool")


def hermes_home(tmp_path: Path, directory_plugin: bool, context: int = CONTEXT, engine: str = "speccompact") -> Path:
    home = tmp_path / "hermes-home"
    (home / "plugins").mkdir(parents=True)
    (home / "config.yaml").write_text(
        f"plugins:\n  enabled: [speccompact]\ncontext:\n  engine: {engine}\n"
        f"model:\n  context_length: {context}\nspeccompact:\n  method: speccompact\n")
    if directory_plugin:
        shutil.copytree(PLUGIN / "speccompact_hermes", home / "plugins" / "speccompact")
    return home


def hermes_run(python: Path, site: Path | None, home: Path, *args: str, timeout: int = 600):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HERMES_HOME")}
    env.update(HERMES_HOME=str(home), PYTHONPATH=str(site) if site else "", NO_COLOR="1")
    return subprocess.run([str(python), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def tool_pairs_ok(ms: list[dict]) -> bool:
    calls = [tc["id"] for m in ms if m.get("role") == "assistant" for tc in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in ms if m.get("role") == "tool"]
    return sorted(calls) == sorted(results)


def prompt_tokens(body: dict) -> int:
    """The fake model's prompt size: a quarter of the request's messages and tools as JSON."""
    return (len(json.dumps(body.get("messages") or [])) + len(json.dumps(body.get("tools") or []))) // 4


class ToolLoop:
    """A model that answers one request with FILES ``read_file`` calls, one per step, then "Done."."""

    def __init__(self):
        self.step = 0

    def __call__(self, body: dict) -> tuple[dict, int]:
        if not body.get("tools"):  # the built-in compressor's summarizer call
            return {"content": "## Historical Task Snapshot\nUser asked to read the modules.\n## Goal\n- read"}, 900
        n, self.step = self.step, self.step + 1
        if n >= FILES:
            return {"content": "Done: every module is read."}, prompt_tokens(body)
        call = {"id": f"read_{n:02d}", "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/mod_{n:02d}.py"})}}
        return {"tool_calls": [call]}, prompt_tokens(body)


def write_modules(root: Path) -> None:
    """FILES distinct source files of about 17,000 characters each."""
    (root / "src").mkdir(parents=True)
    for i in range(FILES):
        lines = [f"def step_{i:02d}_{j:03d}(x):  # module {i}, step {j}\n    return x * {j} + {i}  # {'~' * 8}"
                 for j in range(200)]
        (root / "src" / f"mod_{i:02d}.py").write_text("\n".join(lines) + "\n")


def call(cid, name="terminal", args='{"cmd": "ls"}'):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


