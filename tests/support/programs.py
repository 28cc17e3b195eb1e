"""Fixtures of the program and method tests: a small coding-agent history, the drafts of each slot, and scripted backends built from them."""

from __future__ import annotations

from tests.support.scripted import ScriptedBackend


MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Create hello.py that prints Hello, World!"},
    {"role": "assistant", "content": "Creating it.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write", "arguments": '{"path": "/workspace/hello.py"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "write", "content": "File created at /workspace/hello.py"},
]


DRAFTS = {
    "goal": ["- Create /workspace/hello.py printing Hello, World!"],
    "constraints_preferences": ["(none)"],
    "progress": ["### Done", "- [x] created /workspace/hello.py", "", "### In Progress", "- [ ] verify output"],
    "key_decisions": ["- **Use write tool**: simplest way to create the file"],
    "next_steps": ["1. Run python /workspace/hello.py", "2. BAD deploy to production"],
    "critical_context": ["- /workspace/hello.py"],
}


def drafter_from(drafts, per_call=None):
    """Drafter that continues ``drafts[slot]`` after the accepted prefix.

    A sub-section branch (its prefix opens with a ``### `` heading) continues
    after that heading in ``drafts[slot]``, or writes nothing if it is absent.
    """
    def draft(slot, accepted, text):
        lines = drafts[slot]
        start = 0
        if accepted and accepted[0].startswith("### "):
            if accepted[0] not in lines:
                return "", "stop"
            start = lines.index(accepted[0])
        rest = lines[start + len(accepted):]
        if per_call is not None and len(rest) > per_call:
            return "\n".join(rest[:per_call]) + "\n- partial li", "length"
        return "\n".join(rest), "stop"
    return draft


def judge_bad(slot, line):
    return 0.05 if "BAD" in line else 0.95


def repair_fixed(slot, accepted):
    return "2. Run pytest\n3. extra line never decoded"


def backends(drafts=DRAFTS, per_call=None, judge=judge_bad, repair=repair_fixed, before=None):
    return (ScriptedBackend(judge=judge, repair=repair, before=before),
            ScriptedBackend(draft=drafter_from(drafts, per_call), before=before))
