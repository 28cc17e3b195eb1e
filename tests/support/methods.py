"""Method-level helpers: scripted target/drafter pairs, a whole OpenClaw summary, long tool loops, and the emulator policies of the trajectory compactions."""

from __future__ import annotations

import pytest
from tests.support.scripted import ScriptedBackend, slot_of
from tests.support.paths import TRAJECTORIES as TRAJ
from tests.support.programs import drafter_from, judge_bad, repair_fixed, DRAFTS
from sgl_speccompact.emulator import ScriptedPolicy
from sgl_speccompact.core.prompts import THINK_OFF
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.methods.request import MethodRequest

OPENCLAW_OUT = (
    "## Goal\n- Create /workspace/hello.py printing Hello, World!\n\n"
    "## Constraints & Preferences\n(none)\n\n"
    "## Progress\n### Done\n- [x] created /workspace/hello.py\n\n### In Progress\n- [ ] verify output\n\n"
    "## Key Decisions\n- **Use write tool**: simplest\n\n"
    "## Next Steps\n1. Run python /workspace/hello.py\n\n"
    "## Critical Context\n- /workspace/hello.py\n"
)
FILES = {
    "openai": "All-Hands-AI__agent-sdk__tests__fixtures__llm_data__fncall-llm-message.json",
    "mini_swe": "SWE-agent__mini-swe-agent__tests__test_data__github_issue.traj.json",
}


# the trajectory compactions' drafts: a goal, progress, an invented path to delete, ... (the invented path
# is the one string they name that no trajectory shows: the evidence check refuses it before any judge)
E2E_DRAFTS = {
    "goal": ["- Create a program that prints Hello, World!"],
    "constraints_preferences": ["(none)"],
    "progress": ["### Done", "- [x] Checked the workspace", "", "### In Progress", "- [ ] Finish the task"],
    "key_decisions": ["- **Retry after the error**: the first attempt failed"],
    "next_steps": ["1. Run the program", "2. Delete /etc/INVENTED.conf", "3. Report back"],
    "critical_context": ["- Error seen: [Errno 2] No such file or directory"],
}

def complete(text, sampling_params):
    """Target generations: a slot body for slot requests, else a whole summary."""
    if "write only the" in text:
        return f"- {slot_of(text)} from the target\n"
    return OPENCLAW_OUT


def pair(source_judge=None):
    target = ScriptedBackend(judge=judge_bad, repair=repair_fixed, source_judge=source_judge)
    return target, ScriptedBackend(draft=drafter_from(DRAFTS))


def baseline_target(source_judge=None):
    return ScriptedBackend(complete=complete, source_judge=source_judge)


def tool_loop(n: int, lines: int = 60) -> list[dict]:
    """One user request, then ``n`` read_file calls (two calls in every third assistant turn)."""
    msgs = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Read every module of /repo and report its constants"}]
    for i in range(n):
        ids = [f"c{i}a", f"c{i}b"] if i % 3 == 0 else [f"c{i}a"]
        msgs.append({"role": "assistant", "content": f"Reading part {i}.", "tool_calls": [
            {"id": c, "type": "function", "function": {"name": "read_file", "arguments": f'{{"path": "/repo/m{i}.py"}}'}}
            for c in ids]})
        for c in ids:
            body = "\n".join(f"CONST_{i}_{k} = {k}  # module {i} line {k}" for k in range(lines))
            msgs.append({"role": "tool", "tool_call_id": c, "name": "read_file", "content": body})
    msgs.append({"role": "assistant", "content": "Every module is read."})
    return msgs


def load_trajectory(name):
    path = TRAJ / FILES[name]
    if not path.exists():
        pytest.skip(f"shared trajectories not found at {TRAJ}")
    from sgl_speccompact.history.formats import load_history
    return load_history(path)


def drafter_policy() -> ScriptedPolicy:
    """Continues each slot's draft after whatever the prompt already accepted."""
    policy = ScriptedPolicy()
    for slot, lines in E2E_DRAFTS.items():
        def cont(prompt, lines=lines):
            done = accepted_lines(prompt)
            start = 0
            if done and done[0].startswith("### "):  # a sub-section branch opens with its heading
                if done[0] not in lines:
                    return ""
                start = lines.index(done[0])
            rest = lines[start + len(done):]  # continue after the accepted (possibly repaired) prefix
            return "\n".join(rest) + ("\n" if rest else "")
        policy.on(f"Generate only the {slot} slot", cont)
    return policy


def target_policy() -> ScriptedPolicy:
    policy = ScriptedPolicy()
    policy.judge("INVENTED", p_positive=0.05, after="<|im_start|>user")
    policy.judge("<line>", p_positive=0.95, after="<|im_start|>user")
    policy.on("write only the next_steps", "2. Check the output matches\n3. more text never decoded")
    return policy


def accepted_lines(prompt: str) -> list[str]:
    body = prompt.rsplit("<|im_start|>assistant\n", 1)[-1].removeprefix(THINK_OFF)
    return body.split("\n")[:-1]


def baseline(method: str, messages: list[dict], *, target, config=None, schema=None, previous_summary=None,
             source_judge: bool = False, on_event=None, focus=None):
    """``run_method(method, ...)`` with the request options as keywords (hermes, openclaw, target_self)."""
    request = MethodRequest(messages, previous_summary, focus, schema, source_judge, on_event=on_event)
    return run_method(method, request, target=target, config=config)
