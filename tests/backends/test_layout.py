"""Agent-aligned layout: the target prefix is the agent's own chat rendering.

Checked here:
* the prefix's token ids equal what sglang 0.5.23's chat code path
  (``OpenAIServingTokenize`` -> ``OpenAIServingChat._process_messages``)
  builds for the same messages and tools;
* a replayed agent session on the emulator's chat endpoint, then
  ``compact(layout="agent")`` on the same emulator: the first target request
  finds the agent's history cached, up to the point the template cannot
  reproduce;
* the emulator's ``/v1/chat/completions``, layout choice and input errors.
"""

import copy
import shutil
import types
from pathlib import Path

import pytest
import requests

from sgl_speccompact.methods.request import AgentLayout, MethodRequest
from sgl_speccompact.backends.chat_render import render_chat
from sgl_speccompact.errors import ConfigError, InvalidHistoryError
from sgl_speccompact.backends.layout import agent_instruction, agent_prefix, common_prefix, first_divergence, plan_layout
from sgl_speccompact.schema import OPENCLAW_SLOTS

TRAJECTORIES = Path(__file__).resolve().parents[3] / "shared" / "data" / "trajectories"
FUNCTION_CALLING = TRAJECTORIES / "princeton-nlp__SWE-agent__trajectories__demonstrations__function_calling_simple.traj"

TOOLS = [{"type": "function", "function": {
    "name": "find_file", "description": "Find a file by name.",
    "parameters": {"type": "object", "properties": {"file_name": {"type": "string"}}, "required": ["file_name"]}}}]

MESSAGES = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "Fix the SyntaxError in missing_colon.py."},
    {"role": "assistant", "content": "Let me find it.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "find_file",
                                                          "arguments": "{\"file_name\": \"missing_colon.py\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Found: /repo/missing_colon.py"},
    {"role": "assistant", "content": "I will add the colon."},
    {"role": "user", "content": "Go on."},
]


def trajectory():
    if not FUNCTION_CALLING.exists():
        pytest.skip(f"shared trajectories absent: {FUNCTION_CALLING}")
    from sgl_speccompact.history.formats import load_history

    return load_history(FUNCTION_CALLING)


# ------------------------------------------------------------------ sglang's own chat path


@pytest.fixture(scope="module")
def sglang_chat_ids(emulator_tokenizer_path, tmp_path_factory):
    """``(messages, tools, add_generation_prompt) -> ids`` through sglang's chat tokenization.

    sglang reads its process config (``publish``) and a model config, so the
    test tokenizer is copied next to a tiny Qwen3 ``config.json``.
    """
    from sglang.srt import runtime_context
    from sglang.srt.entrypoints.openai.protocol import TokenizeRequest
    from sglang.srt.entrypoints.openai.serving_tokenize import OpenAIServingTokenize
    from sglang.srt.parser.template_manager import TemplateManager
    from sglang.srt.server_args import ServerArgs
    from transformers import Qwen3Config

    from sgl_speccompact.emulator import load_tokenizer

    model_dir = tmp_path_factory.mktemp("tok-model")
    for f in Path(emulator_tokenizer_path).iterdir():
        shutil.copy(f, model_dir / f.name)
    cfg = Qwen3Config(vocab_size=8192, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    cfg.architectures = ["Qwen3ForCausalLM"]
    cfg.save_pretrained(model_dir)
    runtime_context.publish(ServerArgs(model_path=str(model_dir), device="cpu"), role="tokenizer")
    tokenizer = load_tokenizer(str(model_dir))
    model_config = types.SimpleNamespace(hf_config=cfg, get_default_sampling_params=lambda: {},
                                         is_multimodal=False, context_len=131072)
    manager = types.SimpleNamespace(tokenizer=tokenizer, processor=None, model_config=model_config,
                                    server_args=None, config_value=lambda name: None,
                                    served_model_name=str(model_dir))
    templates = TemplateManager()
    templates.initialize_templates(manager, model_path=str(model_dir))
    serving = OpenAIServingTokenize(manager, templates)

    def ids(messages, tools=None, add_generation_prompt=None):
        req = TokenizeRequest(messages=copy.deepcopy(messages), tools=tools,
                              add_generation_prompt=add_generation_prompt)
        return list(serving._tokenize_chat_request(req))

    return ids


@pytest.mark.slow
def test_agent_prefix_ids_equal_sglang_chat_path(sglang_chat_ids, emulator_tokenizer):
    tok = emulator_tokenizer
    instruction = agent_instruction(OPENCLAW_SLOTS)
    before = copy.deepcopy(MESSAGES)
    prefix = agent_prefix(tok, MESSAGES, instruction, TOOLS)
    assert MESSAGES == before  # read only

    def enc(text):  # what /generate does with text
        return tok.encode(text, add_special_tokens=True)

    turns = MESSAGES + [{"role": "user", "content": instruction}]
    # the prefix up to the instruction turn's end is sglang's rendering of those turns, as given
    opening = prefix.text[len(render_chat(tok, turns, TOOLS, add_generation_prompt=False)):]
    assert opening == "<|im_start|>user\n"
    assert enc(prefix.text[: -len(opening)]) == sglang_chat_ids(turns, TOOLS, add_generation_prompt=False)
    # the agent's own request (a chat completion) is a prefix of ours up to its generation prompt
    agent_ids = sglang_chat_ids(MESSAGES[:4], TOOLS)
    ours = enc(prefix.text)
    gen_prompt = enc("<|im_start|>assistant\n")
    assert agent_ids[-len(gen_prompt):] == gen_prompt
    assert common_prefix(agent_ids, ours) == len(agent_ids)
    # the conversation alone, as a chat completion would render it without generation prompt
    assert enc(prefix.conversation_text) == sglang_chat_ids(MESSAGES, TOOLS, add_generation_prompt=False)


def test_render_chat_reads_the_messages_without_changing_them(emulator_tokenizer):
    from sgl_speccompact.backends.chat_render import content_format_of

    parts = {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "two"}]}
    messages, tools = MESSAGES + [parts], copy.deepcopy(TOOLS)
    before = copy.deepcopy((messages, tools))
    hits = content_format_of.cache_info().hits
    text = render_chat(emulator_tokenizer, messages, tools)
    assert (messages, tools) == before  # the tool call's arguments are still the caller's JSON string
    assert text == render_chat(emulator_tokenizer, *copy.deepcopy(before))
    assert content_format_of.cache_info().hits > hits  # the template's content format was parsed once


@pytest.mark.slow
def test_agent_prefix_ids_equal_sglang_on_a_shared_trajectory(sglang_chat_ids, emulator_tokenizer):
    messages = trajectory()
    tok = emulator_tokenizer
    instruction = agent_instruction(OPENCLAW_SLOTS, previous_summary="## Goal\n- fix it")
    prefix = agent_prefix(tok, messages, instruction)
    turns = messages + [{"role": "user", "content": instruction}]
    head = prefix.text[: -len("<|im_start|>user\n")]
    assert tok.encode(head) == sglang_chat_ids(turns, None, add_generation_prompt=False)


# ------------------------------------------------------------------ agent session, then compaction


@pytest.mark.slow
def test_replayed_session_then_agent_layout_compaction_reuses_its_cache(make_emulated_server,
                                                                       emulator_tokenizer_path,
                                                                       emulator_tokenizer):
    from sgl_speccompact.methods.speccompact import compact
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, ScriptedPolicy

    messages = trajectory()
    tok = emulator_tokenizer
    srv = make_emulated_server(policy=ScriptedPolicy())
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    for i in turns:  # the agent's session: every assistant turn is one chat completion
        srv.set_policy(ScriptedPolicy(default_output=messages[i].get("content") or ""))
        r = requests.post(srv.url + "/v1/chat/completions",
                          json={"model": "agent", "messages": messages[:i], "max_tokens": 4096}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == (messages[i].get("content") or "")
    srv.set_policy(ControlledAcceptancePolicy())
    srv.reset_stats()
    result = compact(MethodRequest(messages, layout=AgentLayout("agent", chat_template=emulator_tokenizer_path)),
                     target=srv.url, drafter=srv.url)

    # What the agent's server holds: its last request's prompt plus the reply it generated
    # (without the final EOS, which is sampled but never forwarded).
    last = turns[-1]
    last_prompt = tok.encode(render_chat(tok, messages[:last], None))
    reply = tok.encode(messages[last]["content"], add_special_tokens=False)
    prefix = tok.encode(agent_prefix(tok, messages, agent_instruction(OPENCLAW_SLOTS)).text)
    point = common_prefix(last_prompt + reply, prefix)
    # The point the template cannot reproduce: the end of the agent's last reply.  The
    # reply's closing <|im_end|> was the EOS (not cached) and the messages after it
    # (the last tool result) were never sent to the agent's server.
    assert point == len(last_prompt) + len(reply)
    assert tok.convert_ids_to_tokens(prefix[point]) == "<|im_end|>"
    stats = result.stats
    assert stats.layout == "agent"
    assert stats.requests["target"]["prefill"].requests == 1
    assert stats.requests["target"]["prefill"].cached_tokens == point
    assert stats.agent_cached_tokens == point
    assert stats.agent_tokens == len(tok.encode(render_chat(tok, messages, None, add_generation_prompt=False)))
    assert first_divergence(tok, messages)["message_index"] is None  # this template reproduces every turn


def test_classic_layout_reuses_nothing_of_the_agent_session(make_emulated_server):
    from sgl_speccompact.methods.registry import run_method
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, ScriptedPolicy

    srv = make_emulated_server(policy=ScriptedPolicy(default_output="I will add the colon."))
    r = requests.post(srv.url + "/v1/chat/completions", json={"model": "agent", "messages": MESSAGES[:4]}, timeout=60)
    assert r.status_code == 200
    srv.set_policy(ControlledAcceptancePolicy())
    result = run_method("target_self", MESSAGES, target=srv.url)
    assert result.stats.layout == "classic" and result.stats.agent_cached_tokens is None
    # both prompts are ChatML (the template follows the model_type the server reports): they share the
    # system turn's opening "<|im_start|>system\nYou" and nothing of the session
    opening = len(srv.tokenizer.encode("<|im_start|>system\nYou", add_special_tokens=False))
    assert result.stats.requests["target"]["prefill"].cached_tokens <= opening


# ------------------------------------------------------------------ the emulator's chat endpoint


def test_chat_endpoint_shares_the_radix_tree_with_generate(emulated_server, emulator_tokenizer):
    emulated_server.policy.default_output = "ok"
    url = emulated_server.url
    r = requests.post(url + "/v1/chat/completions", json={"model": "m", "messages": MESSAGES[:2]}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"] == "ok"
    prompt = render_chat(emulator_tokenizer, MESSAGES[:2])
    assert body["usage"]["prompt_tokens"] == len(emulator_tokenizer.encode(prompt))
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    g = requests.post(url + "/generate", json={"text": prompt + "ok<|im_end|>\nmore",
                                               "sampling_params": {"max_new_tokens": 1}}, timeout=60).json()
    assert g["meta_info"]["cached_tokens"] == body["usage"]["prompt_tokens"] + 1  # prompt + the reply's token


def test_chat_endpoint_rejects_what_sglang_rejects(emulated_server):
    url = emulated_server.url + "/v1/chat/completions"
    assert requests.post(url, json={"model": "m"}, timeout=30).status_code == 400
    bad_args = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "y"}]
    assert requests.post(url, json={"model": "m", "messages": bad_args}, timeout=30).status_code == 400


# ------------------------------------------------------------------ choosing the layout


def test_layout_is_agent_when_a_chat_template_is_given(emulator_tokenizer):
    assert plan_layout(None, MESSAGES).name == "classic"
    assert plan_layout(None, MESSAGES, chat_template=emulator_tokenizer).name == "agent"
    assert plan_layout("classic", MESSAGES, chat_template=emulator_tokenizer).name == "classic"
    with pytest.raises(ConfigError, match="unknown layout"):
        plan_layout("agentic", MESSAGES)
    with pytest.raises(ConfigError, match="chat template"):
        plan_layout("agent", MESSAGES)  # no template, and no target to ask
    with pytest.raises(InvalidHistoryError):
        plan_layout("agent", MESSAGES, tools="find_file", chat_template=emulator_tokenizer)


def test_bad_tool_arguments_are_a_typed_error(emulator_tokenizer):
    bad = copy.deepcopy(MESSAGES)
    bad[2]["tool_calls"][0]["function"]["arguments"] = "{not json"
    with pytest.raises(InvalidHistoryError):
        agent_prefix(emulator_tokenizer, bad, "x")


# ------------------------------------------------------------------ where Qwen3's template breaks reuse


@pytest.mark.slow
def test_qwen3_template_ends_reuse_at_the_first_turn_with_reasoning(qwen3_tokenizer):
    messages = trajectory()
    tok = qwen3_tokenizer
    full = first_divergence(tok, messages, TOOLS)
    assert full["message_index"] is None and full["matched_tokens"] == full["agent_tokens"]  # no reasoning: all
    with_reasoning = copy.deepcopy(messages)
    turns = [i for i, m in enumerate(with_reasoning) if m["role"] == "assistant"]
    for i in turns:
        with_reasoning[i]["reasoning_content"] = f"Step {i}: check the file first."
    cut = first_divergence(tok, with_reasoning, TOOLS)
    # the agent's requests render reasoning after its last user query; the instruction turn becomes
    # the last query, so Qwen3's template drops it: the match ends where the first assistant turn starts
    assert cut["message_index"] == turns[0]
    upto = tok.encode(render_chat(tok, with_reasoning[:turns[0]], TOOLS), add_special_tokens=False)
    assert cut["matched_tokens"] == len(upto)  # ... + "<|im_start|>assistant\n" of that turn
    assert 0 < cut["matched_tokens"] < cut["agent_tokens"]
