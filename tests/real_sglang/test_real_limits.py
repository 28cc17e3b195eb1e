"""Limits as the real server enforces them: its context, its 400s, LoRA, a model that never stops."""

import pytest

from tests.real_sglang import scripts
from tests.real_sglang.reading import assert_scripted, history
from sgl_speccompact.methods.request import MethodRequest
from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.errors import BackendError, PromptTooLongError, SpecCompactError
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.result import LineOrigin

pytestmark = pytest.mark.real_sglang


def digits_history(n_messages: int, digits: int) -> list[dict]:
    """A history whose text is digits: Qwen3 splits every digit, so 1 byte is 1 token.

    A byte-based first guess (3 bytes a token) takes it for a third of its
    real size, so only the real server's refusal shows it does not fit.
    """
    out = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(n_messages):
        body = "".join(str((i * 7 + j * 3) % 10) for j in range(digits))
        out.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"reading {i}: {body}"})
    return out


def test_context_length_comes_from_the_real_server(servers):
    # the target was started with --context-length; the drafter reports its config's 40,960
    assert SpecCompactEndpoint(servers.target.url).context_length() == servers.context
    assert SpecCompactEndpoint(servers.drafter.url).context_length() == 40960


def test_the_real_over_context_400_is_a_typed_error(servers):
    target = SpecCompactEndpoint(servers.target.url)
    with pytest.raises(PromptTooLongError) as err:
        run_method("target_self", MethodRequest(digits_history(12, 1000), schema=scripts.SCHEMA), target=target,
                   config={"target_context_tokens": 40960, **scripts.JUDGE})  # told a bigger window than the server has
    assert "context length" in str(err.value).lower()


class RefusalCounter(SpecCompactEndpoint):
    """A target endpoint that counts the real server's over-context refusals (its views share the list)."""

    refusals: list = []

    def _generate(self, body):
        try:
            return super()._generate(body)
        except PromptTooLongError as exc:
            self.refusals.append(exc)
            raise


def test_chunking_replans_on_the_real_context_error(servers):
    messages = digits_history(12, 1000)  # ~12k tokens on an 8k target; the byte guess says ~4k
    target = RefusalCounter(servers.target.url)
    target.refusals = []
    res = run_method("target_self", MethodRequest(messages, schema=scripts.SCHEMA), target=target,
                     config=scripts.JUDGE)
    # the byte guess planned one block, the real server refused it, and the re-plan by exact counts chunked
    assert len(target.refusals) >= 1 and "context length" in str(target.refusals[0]).lower()
    assert res.chunks >= 2
    assert assert_scripted(res.summary, {scripts.REPAIRS[s] for s in scripts.MARKERS})


def test_a_lora_drafter_request_gets_the_real_servers_refusal(servers):
    drafter = SpecCompactEndpoint(servers.drafter.url, lora_path="drafter")
    with pytest.raises(BackendError) as err:
        run_method("speccompact", MethodRequest(history(), schema=scripts.SCHEMA),
                   target=SpecCompactEndpoint(servers.target.url), drafter=drafter, config=scripts.JUDGE)
    assert "lora" in str(err.value).lower()


def test_a_repair_that_never_ends_its_line_never_enters_the_summary(servers):
    servers.target.use(scripts.TARGET_NEVER_STOPS, "target-never-stops")
    try:
        res = run_method("speccompact", MethodRequest(history(), schema=scripts.SCHEMA),
                         target=SpecCompactEndpoint(servers.target.url),
                         drafter=SpecCompactEndpoint(servers.drafter.url), config=scripts.JUDGE)
    except SpecCompactError as exc:  # a typed refusal is acceptable; a partial summary is not
        pytest.fail(f"the compaction failed instead of ending the slot: {exc!r}")
    nxt = {s.name: s for s in res.slots}["next_steps"]
    assert [ln.text for ln in nxt.lines] == [scripts.DRAFTS["next_steps"][0] + "."]
    assert nxt.stop_reason != "complete"
    assert all(ln.origin is LineOrigin.DRAFTED for s in res.slots if s.name != "ledger" for ln in s.lines)
    assert_scripted(res.summary, scripts.drafted())
