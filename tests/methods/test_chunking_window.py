"""Every method inside a 40,960-token window, on histories up to four windows long.

The target here refuses, as sglang does, any request whose prompt plus
``max_new_tokens`` exceeds its context (``PromptTooLongError``), and reports
that context like a server.  Tokens are counted as the scripted backends
count them (words plus newlines).
"""

import pytest

from sgl_speccompact.methods.request import MethodRequest
from sgl_speccompact.errors import PromptTooLongError
from sgl_speccompact.methods.registry import run_method

from tests.support.stream_replay import assert_stream_shows_the_result
from tests.support.scripted import ScriptedBackend, count_tokens, slot_of

WINDOW = 40_960


class Windowed(ScriptedBackend):
    """A scripted target that enforces its context window on every request."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.largest = 0  # the largest prompt + max_new_tokens it was sent

    def context_length(self):
        return WINDOW

    def check(self, text, new_tokens):
        need = count_tokens([text])[0] + (new_tokens or 0)
        self.largest = max(self.largest, need)
        if need > WINDOW:
            raise PromptTooLongError(f"{need} tokens requested, context is {WINDOW}", field="messages")

    def commit_lazy_operations(self, s):
        self.check(s.text_, 0)
        super().commit_lazy_operations(s)

    def generate(self, s, sampling_params):
        self.check(s.text_, sampling_params.max_new_tokens)
        return super().generate(s, sampling_params)

    def select(self, s, choices, temperature, choices_method=None):
        self.check(s.text_, 1)
        return super().select(s, choices, temperature, choices_method)


def summary_of(text, params):
    """A one-shot answer: a small summary in the sections the prompt asks for."""
    if "## Goal" in text and "Active Task" not in text:
        return "## Goal\n- read the modules\n\n## Next Steps\n1. report\n"
    return "## Active Task\nread the modules\n\n## Goal\n- read the modules\n"


def history(tokens: int) -> list[dict]:
    """A system prompt, then tool loops of about 1,000 tokens each, up to ``tokens`` tokens."""
    msgs = [{"role": "system", "content": "You are a coding agent. Keep exact paths."},
            {"role": "user", "content": "Read every module of /repo"}]
    i = 0
    while sum(count_tokens([m["content"] for m in msgs])) < tokens:
        msgs.append({"role": "assistant", "content": f"Reading m{i}.", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": f'{{"p": "/repo/m{i}.py"}}'}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "name": "read",
                     "content": "\n".join(f"X_{i}_{k} = {k} # v" for k in range(160))})
        i += 1
    return msgs


def backends():
    target = Windowed(judge=lambda slot, line: 0.9, repair=lambda slot, acc: "- fixed\n", complete=None)
    drafter = ScriptedBackend(draft=lambda slot, acc, text: ("" if acc else f"- {slot} line", "stop"))
    one_shot = Windowed(complete=summary_of)
    return target, drafter, one_shot


@pytest.mark.parametrize("tokens", [30_000, 120_000, 4 * WINDOW])
@pytest.mark.parametrize("method", ["speccompact", "target_self", "openclaw", "hermes"])
def test_no_method_overflows_the_window(method, tokens):
    target, drafter, one_shot = backends()
    if method in ("openclaw", "hermes"):
        target = one_shot
    if method == "target_self":
        target = Windowed(complete=lambda text, params: f"- {slot_of(text)} line\n")
    msgs = history(tokens)
    events = []
    res = run_method(method, MethodRequest(msgs, on_event=events.append), target=target,
                     drafter=drafter if method == "speccompact" else None)
    assert res.summary.strip() and target.largest <= WINDOW
    if tokens > WINDOW:
        assert res.chunks >= tokens // WINDOW
    # every block's prompt opens with the agent's system prompt
    prompts = [t for k, t in target.requests if k in ("generate", "prefill", "repair")]
    if res.chunks > 1:
        assert sum("You are a coding agent. Keep exact paths." in t for t in prompts) >= res.chunks
    # progress from every block, not only the last one
    done = [e for e in events if e["type"] == "slot_written"]
    assert len(done) >= res.chunks * (6 if method in ("speccompact", "target_self") else 1)
    # what earlier blocks showed is retracted (replaced by the next block's summary): the stream shows the result
    assert_stream_shows_the_result(events, res.slots)
    if res.chunks > 1:
        assert any(e["type"] == "retract" and e["reason"] == "replaced" for e in events)


def test_stats_add_up_over_blocks():
    target, drafter, _ = backends()
    res = run_method("speccompact", history(120_000), target=target, drafter=drafter)
    assert res.chunks >= 3
    verifies = sum(1 for k, _ in target.requests if k == "verify")
    judged = res.stats.requests["target"]
    # every block's judgements: drafted lines as "verify", carried ones as "verify_carried" (one per line here,
    # since this target has no batched judge)
    assert judged["verify"].requests + judged["verify_carried"].requests == verifies
    assert res.stats.proposed_lines + res.stats.carried_proposed == verifies and res.stats.carried_proposed > 0
