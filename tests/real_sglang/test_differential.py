"""The emulator held to the real server: one request set, the same answers in shape.

Every request below goes to the real sglang 0.5.23 server and to the
SGLang-API emulator serving the same tokenizer and context length.  Status
codes, top-level and ``meta_info`` keys, ``finish_reason`` forms, logprob
layouts and error texts must agree; what may differ is listed in
:data:`KNOWN` with the reason, and the test fails when a listed difference
goes away too (so the list stays true).
"""

from __future__ import annotations

import httpx
import pytest

from sgl_speccompact.emulator import EmulatedServer, ScriptedPolicy

pytestmark = pytest.mark.real_sglang

THINK = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
PROMPT = "<|im_start|>user\nSay something.<|im_end|>\n" + THINK
POS, NEG = 30487, 42224  # "positive", "negative" in Qwen3's vocabulary

# name -> (method, path, body)
REQUESTS = {
    "generate_length": ("POST", "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 3,
                                                                               "temperature": 0, "ignore_eos": True}}),
    "generate_stop_string": ("POST", "/generate", {"text": PROMPT, "sampling_params": {
        "max_new_tokens": 40, "temperature": 0, "stop": ["\n"]}}),
    "generate_input_ids": ("POST", "/generate", {"input_ids": [151644, 872, 198, 9707, 13, 151645, 198],
                                                 "sampling_params": {"max_new_tokens": 2, "temperature": 0,
                                                                     "ignore_eos": True}}),
    "judgement": ("POST", "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 0},
                                        "return_logprob": True, "token_ids_logprob": [POS, NEG],
                                        "logprob_start_len": -1}),
    "top_logprobs": ("POST", "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 1,
                                                                            "temperature": 0},
                                           "return_logprob": True, "top_logprobs_num": 5,
                                           "logprob_start_len": -1}),
    "batch": ("POST", "/generate", {"text": [PROMPT, PROMPT + "A"], "sampling_params": {"max_new_tokens": 1,
                                                                                      "temperature": 0}}),
    "unknown_sampling_param": ("POST", "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 1,
                                                                                      "no_such_knob": 1}}),
    "lora_without_lora": ("POST", "/generate", {"text": PROMPT, "lora_path": "drafter",
                                                "sampling_params": {"max_new_tokens": 1}}),
    "over_context": ("POST", "/generate", {"input_ids": [15] * 9000, "sampling_params": {"max_new_tokens": 1}}),
    "input_plus_output_over_context": ("POST", "/generate", {"input_ids": [15] * 8000,
                                                             "sampling_params": {"max_new_tokens": 500}}),
    "decisions": ("POST", "/v1/decisions", {"input": "The tests passed.", "return_prompt_token_ids": True,
                                             "questions": [{"id": "q", "type": "yes_no", "question": "Tests ran."}]}),
    "decisions_choice": ("POST", "/v1/decisions", {"input": "x", "questions": [
        {"id": "c", "type": "choice", "question": "Which?", "options": [{"name": "a"}, {"name": "b"}]}]}),
    "decisions_thinking_on": ("POST", "/v1/decisions", {"input": "x", "chat_template_kwargs": {"enable_thinking": True},
                                                        "questions": [{"id": "q", "type": "yes_no", "question": "y"}]}),
    "decisions_no_questions": ("POST", "/v1/decisions", {"input": "x", "questions": []}),
    "decisions_version_2": ("POST", "/v1/decisions", {"input": "x", "prompt_format_version": 2,
                                                      "questions": [{"id": "q", "type": "yes_no", "question": "y"}]}),
    "tokenize": ("POST", "/tokenize", {"prompt": "hello world"}),
    "model_info": ("GET", "/model_info", None),
    "v1_models": ("GET", "/v1/models", None),
    "flush_cache": ("POST", "/flush_cache", None),
    "health": ("GET", "/health", None),
    "v1_loads": ("GET", "/v1/loads?include=core", None),  # the service's yield check reads its request counts
}

# (request, what) -> why the emulator answers differently
KNOWN: dict[tuple[str, str], str] = {
    ("model_info", "embedding"): "0.5.23's description of embedding support; no client of this project reads it",
    ("model_info", "emulated"): "the emulator says it is one, so its SIMULATED timings are never taken for a server's",
    ("v1_loads", "loads[0].decode_moments"): "the real scheduler's decode-step timing sums (a list once a decode "
                                             "ran); the emulator keeps no step timings (null)",
    ("decisions_no_questions", "error text"): "pydantic's validation error as FastAPI words it; the emulator "
                                              "validates with the same DecisionRequest and words it as pydantic does",
}


def shape(value, depth: int = 0):
    """The JSON shape of ``value``: dict keys and element types, not the values.

    >>> shape({"a": [1, 2.5, None], "b": {"c": "x"}})
    {'a': ['int', 'float', 'NoneType'], 'b': {'c': 'str'}}
    """
    if isinstance(value, dict):
        return {k: shape(v, depth + 1) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(v, depth + 1) for v in value[:3]]
    return type(value).__name__


def answers(url: str) -> dict[str, tuple[int, object]]:
    out = {}
    with httpx.Client(base_url=url, timeout=300) as client:
        for name, (method, path, body) in REQUESTS.items():
            r = client.request(method, path, json=body)
            try:
                payload = r.json()
            except ValueError:
                payload = r.text
            out[name] = (r.status_code, payload)
    return out


def differences(real: dict, emu: dict) -> dict[tuple[str, str], str]:
    """Every disagreement, keyed by (request, what), with both sides."""
    out = {}
    for name in REQUESTS:
        (rs, rp), (es, ep) = real[name], emu[name]
        if rs != es:
            out[(name, "status")] = f"real {rs}, emulator {es}"
            continue
        if rs != 200:
            rm, em = _message(rp), _message(ep)
            if _core(rm) != _core(em):
                out[(name, "error text")] = f"real {rm[:160]!r}, emulator {em[:160]!r}"
            continue
        for key, r_v, e_v in _compare(rp, ep):
            out[(name, key)] = f"real {r_v}, emulator {e_v}"
    return out


def _message(payload) -> str:
    if isinstance(payload, dict):
        return str(payload.get("message") or payload.get("error") or payload.get("detail") or payload)
    return str(payload)


def _core(message: str) -> str:
    """The first line of an error, the part a client matches on."""
    return message.strip().splitlines()[0] if message.strip() else ""


def _compare(real, emu, where: str = ""):
    if isinstance(real, list) and isinstance(emu, list):
        if not real or not emu:
            if bool(real) != bool(emu):
                yield where or "list", f"{len(real)} items", f"{len(emu)} items"
            return
        yield from _compare(real[0], emu[0], where + "[0]")
        return
    if isinstance(real, dict) and isinstance(emu, dict):
        for k in sorted(set(real) | set(emu)):
            key = f"{where}.{k}" if where else k
            if k not in emu:
                yield key, "present", "missing"
            elif k not in real:
                yield key, "missing", "present"
            else:
                yield from _compare(real[k], emu[k], key)
        return
    if shape(real) != shape(emu) and not (isinstance(real, (int, float)) and isinstance(emu, (int, float))):
        yield where or "value", shape(real), shape(emu)


@pytest.fixture
def emulator(servers, qwen3_tokenizer_path):
    """The emulator as a user starts it for this model: same tokenizer, same context length."""
    with EmulatedServer(qwen3_tokenizer_path, policy=ScriptedPolicy(default_output="Hello there"),
                        model_path=servers.target.model, context_length=servers.context) as srv:
        yield srv


def test_the_emulator_answers_like_the_real_server(servers, emulator):
    real, emu = answers(servers.target.url), answers(emulator.url)
    found = differences(real, emu)
    unexplained = {k: v for k, v in found.items() if k not in KNOWN}
    gone = sorted(set(KNOWN) - set(found))
    assert not unexplained, "emulator differs from sglang 0.5.23:\n" + "\n".join(
        f"  {k}: {v}" for k, v in sorted(unexplained.items()))
    assert not gone, f"listed differences that no longer exist (remove them from KNOWN): {gone}"


def test_the_decision_route_renders_the_same_prompt_and_labels(servers, emulator):
    """The emulator's /v1/decisions wording, chat template and label ids are the real server's, token for token."""
    def asked(url):
        body = REQUESTS["decisions"][2]
        a = httpx.post(f"{url}/v1/decisions", json=body, timeout=300).json()["answers"]["q"]
        return a["prompt_token_ids"], a["label_token_ids"]

    assert asked(servers.target.url) == asked(emulator.url)


def test_server_info_and_v1_models_report_the_context_length_alike(servers, emulator, qwen3_tokenizer_path):
    # /server_info is a dump of the server's arguments (hundreds of keys the emulator does not mirror),
    # so only the field this project reads is compared: the --context-length given, else null there,
    # while /v1/models always has the window (the model config's 40,960 when none was given)
    def window(url):
        info = httpx.get(f"{url}/server_info", timeout=60).json().get("context_length", "absent")
        return info, httpx.get(f"{url}/v1/models", timeout=60).json()["data"][0].get("max_model_len")

    assert window(servers.target.url) == window(emulator.url) == (servers.context, servers.context)
    with EmulatedServer(qwen3_tokenizer_path, policy=ScriptedPolicy(default_output="Hello there"),
                        model_path=servers.drafter.model) as default:
        assert window(servers.drafter.url) == window(default.url) == (None, 40960)
