"""sglang's own frontend (``RuntimeEndpoint``) runs programs against the emulator.

Mirrors ``sglang/lang/backend/runtime_endpoint.py``: the constructor calls
``/get_model_info``; ``generate`` sends ``sgl.gen``'s sampling params;
``select`` sends a prefill, then a batch of prefix+choice with
``logprob_start_len = prompt_len - 2`` and reads ``input_token_logprobs``.
"""

from __future__ import annotations

import sglang as sgl
from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint


@sgl.function
def line_and_verdict(s):
    s += sgl.user("Write the goal line.")
    s += sgl.assistant(sgl.gen("line", max_tokens=32, stop="\n"))
    s += sgl.user("Is that line supported? Answer positive or negative.")
    s += sgl.assistant(sgl.select("verdict", choices=["positive", "negative"]))


def run(srv):
    backend = RuntimeEndpoint(srv.url, chat_template_name="chatml")
    state = line_and_verdict.run(backend=backend)
    state.sync()  # the program runs in the interpreter's thread
    assert state.error() is None, state.error()
    return state


def test_gen_with_stop_and_plain_select(emulated_server, scripted_policy):
    scripted_policy.on("Write the goal line.", "- Make the build green\n- never reached\n")
    scripted_policy.judge("Is that line supported", p_positive=0.9, after="<|im_start|>user")
    state = run(emulated_server)
    assert state["line"] == "- Make the build green"
    assert state["verdict"] == "positive"
    # The select's second request is one batch of two prefill-only requests.
    meta = state.get_meta_info("verdict")
    assert len(meta["input_token_logprobs"]) == 2


def test_select_follows_the_judge(emulated_server, scripted_policy):
    scripted_policy.on("Write the goal line.", "- Something unsupported\n")
    scripted_policy.judge("Is that line supported", p_positive=0.05, after="<|im_start|>user")
    assert run(emulated_server)["verdict"] == "negative"


def test_program_requests_reuse_the_radix_cache(emulated_server, scripted_policy):
    scripted_policy.on("Write the goal line.", "- Make the build green\n")
    run(emulated_server)
    stats = emulated_server.stats()["total"]
    # gen, select prefill, two select choices: the last three hit the cached history.
    assert stats["requests"] == 4
    assert stats["cached_tokens"] > 0
