"""Redaction end to end on the emulator: no listed secret reaches a model prompt, a secret the
model writes is not returned, and returned lines are the caller's bytes on every trajectory.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
from tests.support.secret_cases import ALL_SECRETS, ID_SECRET, LISTED_FORMATS, TOOLS_SECRET
from tests.support.paths import trajectory_files

from sgl_speccompact.history.untrusted import JOINER

# ------------------------------------------------------------------ the same, end to end on the emulator


def _conversation_lines(prompt: str) -> list[str]:
    """The rendered history's lines inside a classic prompt (our own turn headers left out)."""
    start, end = prompt.find("<conversation>\n"), prompt.rfind("\n</conversation>")
    if start < 0 or end < start:
        return []
    body = prompt[start + len("<conversation>\n"):end]
    ours = re.compile(r"\[(?:system|developer|user|assistant|tool call [^\]]*|tool result [^\]]*)\]$")
    return [ln for ln in body.split("\n") if ln.strip() and not ours.match(ln)]


def _drafted_body(prompt: str) -> list[str]:
    from sgl_speccompact.core.prompts import THINK_OFF

    return prompt.rsplit("<|im_start|>assistant\n", 1)[-1].removeprefix(THINK_OFF).split("\n")[:-1]


class CopyingServers:
    """Target judges every line positive.  The drafter's goal slot copies history lines that hold a
    neutralised control string (then identifier-bearing ones) as ``- <line>`` (``copy_lines``);
    ``extra`` lines are drafted after them.  Every prompt either server saw is kept by its policy."""

    def __init__(self, make_emulated_server, extra: tuple[str, ...] = (), repair: str = "- a repaired line",
                 copy_lines: bool = True):
        from sgl_speccompact.emulator import ScriptedPolicy

        self.extra, self.copy_lines = extra, copy_lines
        self.target_policy = ScriptedPolicy()
        self.target_policy.judge(".", p_positive=0.9, regex=True)
        self.target_policy.on("", repair + "\n")
        self.drafter_policy = ScriptedPolicy(default_output="(none)\n")
        self.drafter_policy.on("Generate only the goal slot", self._goal)
        self.target = make_emulated_server(policy=self.target_policy, model_path="Qwen/Qwen3-8B")
        self.drafter = make_emulated_server(policy=self.drafter_policy, model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])

    def _goal(self, prompt: str) -> str:
        lines = [ln for ln in _conversation_lines(prompt) if len(ln) < 120]
        marked = [ln for ln in lines if JOINER in ln]
        named = [ln for ln in lines if JOINER not in ln and re.search(r"[A-Za-z]\w*[./_]\w", ln)]
        picked = list(dict.fromkeys(marked + named))[:10] if self.copy_lines else []
        draft = [f"- {ln}" for ln in picked] + list(self.extra)
        rest = draft[len(_drafted_body(prompt)):]  # continue after what the slot accepted so far
        return "".join(f"{ln}\n" for ln in rest)

    def prompts(self) -> list[str]:
        return [p for policy in (self.target_policy, self.drafter_policy) for _, p in policy.calls]

    def compact(self, messages, source_judge=False, on_event=None, layout=None, tools=None, chat_template=None,
                config=None):
        from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
        from sgl_speccompact.methods.registry import run_method
        from sgl_speccompact.methods.request import AgentLayout, MethodRequest

        request = MethodRequest(messages, on_event=on_event, layout=AgentLayout(layout, tools, chat_template))
        return run_method("speccompact", request, target=SpecCompactEndpoint(self.target.url, timeout_s=60),
                          drafter=SpecCompactEndpoint(self.drafter.url, lora_path="drafter", timeout_s=60),
                          source_judge=source_judge, config=config)


def _returned_texts(result, events: list[dict]) -> list[str]:
    texts = [result.summary] + [ln.text for s in result.slots for ln in s.lines]
    texts += [ln.rejected_draft for s in result.slots for ln in s.lines if ln.rejected_draft]
    texts += [e["text"] for e in (result.source_judge or {}).get("entries", [])]
    return texts + [json.dumps(e, ensure_ascii=False) for e in events]


LEAKY_HISTORY = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Deploy the app; credentials are in the environment."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": ID_SECRET, "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "env"}'}}]},
    {"role": "tool", "tool_call_id": ID_SECRET, "name": "bash",
     "content": "\n".join(text for _, text, _ in LISTED_FORMATS)},
    {"role": "assistant", "content": "Found the credentials; deploying with config/deploy.yaml."},
]
LEAKY_TOOLS = [{"type": "function", "function": {"name": "deploy", "description": f"deploy with {TOOLS_SECRET}",
                                                  "parameters": {"type": "object", "properties": {}}}}]


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["classic", "agent"])
def test_no_listed_format_reaches_an_emulator_prompt(make_emulated_server, emulator_tokenizer_path, layout):
    servers = CopyingServers(make_emulated_server)
    kw = {"layout": layout, "tools": LEAKY_TOOLS}
    if layout == "agent":
        kw["chat_template"] = emulator_tokenizer_path
    result = servers.compact(copy.deepcopy(LEAKY_HISTORY), source_judge=True, **kw)
    prompts = servers.prompts()
    assert prompts and any("config/deploy.yaml" in p for p in prompts)  # the history did reach them
    leaked = sorted({s for s in ALL_SECRETS for p in prompts if s in p})
    assert not leaked, leaked
    assert result.redactions.get("github_token", 0) >= 3 and result.redactions.get("openai_key") == 1


@pytest.mark.slow
def test_a_secret_the_model_writes_is_not_returned(make_emulated_server):
    drafted = ("- push with token ghp_zYxWvUtSrQpOnMlKjIhGfEdCbA9876543210", "## Next Steps")
    servers = CopyingServers(make_emulated_server, extra=drafted, copy_lines=False,
                             repair="- the key is AKIAZZZZZZZZZZZZZZZZ with SECRET_KEY='hunter2hunter2'")
    events: list[dict] = []
    # the drafted token is invented (no source in the history): the evidence check would refuse that line before
    # it is kept, so output redaction, what this test checks, is reached with the check off
    result = servers.compact(copy.deepcopy(LEAKY_HISTORY), on_event=events.append, source_judge=True,
                             config={"evidence_check": False})
    texts = _returned_texts(result, events)
    for secret in ("ghp_zYxWvUtSrQpOnMlKjIhGfEdCbA9876543210", "AKIAZZZZZZZZZZZZZZZZ", "hunter2hunter2"):
        assert not [t for t in texts if secret in t], secret
    assert result.redactions.get("output:github_token") == 1, result.redactions
    assert "[REDACTED:github_token]" in result.summary
    # the drafted "## Next Steps" went to repair: the summary has one Next Steps section
    assert result.summary.count("## Next Steps") == 1, result.summary


def _caller_strings(value) -> list[str]:
    """Every string the caller sent (contents, arguments, names, ids), as sent."""
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return [s for v in items for s in _caller_strings(v)]


# lines an agent's tools print that collide with our prompt structure (a gitconfig, tags, headers)
COLLIDING = ("[user] name = Ada Lovelace\n[user]\n\temail = ada@example.com\n<s> token and <summary> tag\n"
             '<line number=3/> inside\n</conversation> closed\n[tool result x] by hand \u2060 kept\n')


@pytest.mark.slow
@pytest.mark.parametrize("path", trajectory_files(), ids=lambda p: p.name[:48])
def test_returned_lines_are_the_callers_bytes_on_every_trajectory(make_emulated_server, path):
    from sgl_speccompact.history.formats import load_history

    messages = load_history(path) + [{"role": "user", "content": COLLIDING}]
    sent = copy.deepcopy(messages)
    servers = CopyingServers(make_emulated_server)
    events: list[dict] = []
    result = servers.compact(messages, on_event=events.append)
    assert messages == sent
    goal = next(s for s in result.slots if s.name == "goal")
    copied = [ln.text[2:] for ln in goal.lines if ln.text.startswith("- ") and ln.origin.value != "repaired"]
    assert any("[user] name = Ada Lovelace" == c for c in copied), copied  # a collision was copied
    assert len(copied) >= 4, copied
    sent_strings = _caller_strings(messages)
    for line in copied:  # byte for byte a line the caller sent
        assert any(line in text for text in sent_strings), line
    caller_joiners = sum(text.count(JOINER) for text in sent_strings)
    for text in _returned_texts(result, events):
        assert text.count(JOINER) <= caller_joiners and "[\u2060" not in text and "<\u2060" not in text, text
