"""Fidelity tests: the emulator's /generate and friends behave as SGLang 0.5.23.

Each test names the sglang source it mirrors (paths under the installed
``sglang`` package).  CPU only, no network beyond loopback.
"""

from __future__ import annotations

import json
import math
import threading

import pytest
import requests

IM = "<|im_start|>"
JUDGE_PROMPT = f"{IM}user\nIs the line supported? Reply positive or negative.<|im_end|>\n{IM}assistant\n"


def gen(srv, **body):
    return requests.post(srv.url + "/generate", json=body, timeout=30)


def label_ids(tok):
    forms = ["positive", " positive", "negative", " negative"]
    return [tok.encode(f, add_special_tokens=False)[0] for f in forms]


# --- request validation -------------------------------------------------------------


def test_unknown_sampling_key_is_rejected_with_400(emulated_server):
    # sglang/srt/entrypoints/api_contract.py generate_contract_error -> http_server.py
    # generate_request returns 400 {"error": <serde unknown-field text>}.
    r = gen(emulated_server, text="hi", sampling_params={"max_tokens": 4})
    assert r.status_code == 400
    assert r.json()["error"].startswith("unknown field `max_tokens`, expected one of")


def test_unknown_top_level_key_is_ignored(emulated_server):
    # sglang/api/v1/api_types.py: GenerateRequest is "unknown keys ignored".
    r = gen(emulated_server, text="hi", sampling_params={"max_new_tokens": 1}, not_a_field=1)
    assert r.status_code == 200


def test_bad_type_is_a_400_error_response(emulated_server):
    # http_server.py validation_exception_handler turns FastAPI's 422 into a 400 ErrorResponse.
    r = gen(emulated_server, text=5)
    assert r.status_code == 400
    assert r.json()["object"] == "error" and r.json()["code"] == 400


def test_sampling_params_verify_error_is_400(emulated_server):
    # sglang/srt/sampling/sampling_params.py verify() raises ValueError; http_server.py
    # _create_error_response wraps it as {"error": {"message": ...}}.
    r = gen(emulated_server, text="hi", sampling_params={"top_p": 0.0})
    assert r.status_code == 400
    assert "top_p must be in (0, 1]" in r.json()["error"]["message"]


def test_logprob_start_len_beyond_prompt_is_400(emulated_server):
    # sglang/srt/managers/scheduler.py handle_generate_request aborts with this message.
    r = gen(emulated_server, text="hi", sampling_params={"max_new_tokens": 0},
            return_logprob=True, logprob_start_len=99)
    assert r.status_code == 400
    assert "is higher than the number of input tokens" in r.json()["error"]["message"]


# --- stopping and trimming ----------------------------------------------------------


def test_stop_string_is_trimmed(emulated_server, scripted_policy):
    # sglang/srt/managers/detokenizer_manager.py trim_matched_stop cuts at the stop string;
    # schedule_batch.py FINISH_MATCHED_STR.to_json gives {"type": "stop", "matched": ...}.
    scripted_policy.on("Write", "first line\nsecond line\n")
    r = gen(emulated_server, text="Write", sampling_params={"max_new_tokens": 32, "stop": "\n"})
    out = r.json()
    assert out["text"] == "first line"
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": "\n"}


def test_no_stop_trim_keeps_the_stop_string(emulated_server, scripted_policy):
    # detokenizer_manager.py trim_matched_stop: no_stop_trim keeps output[:pos + len(stop)].
    scripted_policy.on("Write", "first line\nsecond line\n")
    params = {"max_new_tokens": 32, "stop": "\n", "no_stop_trim": True}
    assert gen(emulated_server, text="Write", sampling_params=params).json()["text"] == "first line\n"


def test_length_finish_reason(emulated_server, scripted_policy):
    # schedule_batch.py FINISH_LENGTH.to_json; completion_tokens = len(output_ids_through_stop).
    scripted_policy.on("Write", "one two three four five six seven eight nine ten")
    info = gen(emulated_server, text="Write", sampling_params={"max_new_tokens": 3}).json()["meta_info"]
    assert info["finish_reason"] == {"type": "length", "length": 3}
    assert info["completion_tokens"] == 3


def test_eos_is_a_matched_token_and_not_in_text(emulated_server, scripted_policy, emulator_tokenizer):
    # schedule_batch.py _check_token_based_finish -> FINISH_MATCHED_TOKEN(matched=token_id);
    # the detokenizer drops the matched token from the text, completion_tokens counts it.
    scripted_policy.on("Write", "done")
    out = gen(emulated_server, text="Write", sampling_params={"max_new_tokens": 32}).json()
    eos = emulator_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": eos}
    assert out["text"] == "done"
    assert out["output_ids"][-1] == eos
    assert out["meta_info"]["completion_tokens"] == len(out["output_ids"])


def test_stop_token_ids(emulated_server, scripted_policy, emulator_tokenizer):
    # schedule_batch.py _check_token_based_finish checks sampling_params.stop_token_ids.
    scripted_policy.on("Write", "alpha beta gamma")
    beta = emulator_tokenizer.encode(" beta", add_special_tokens=False)[0]
    out = gen(emulated_server, text="Write",
              sampling_params={"max_new_tokens": 32, "stop_token_ids": [beta]}).json()
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": beta}
    assert out["text"] == "alpha"


def test_prefill_only_request_returns_no_text(emulated_server, scripted_policy):
    # schedule_batch.py Req.is_prefill_only: max_new_tokens == 0 finishes with length 0
    # after one dummy token; output_ids_through_stop is empty.
    scripted_policy.on("Write", "should never be decoded")
    out = gen(emulated_server, text="Write", sampling_params={"max_new_tokens": 0}).json()
    assert out["text"] == ""
    assert out["output_ids"] == []
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    assert out["meta_info"]["completion_tokens"] == 0


# --- radix cache --------------------------------------------------------------------


def test_repeated_prompt_hits_all_but_one_token(emulated_server):
    # schedule_batch.py Req._compute_max_prefix_len: max_prefix_len = input_len - 1.
    body = {"text": "a fairly long prompt about the build and the tests", "sampling_params": {"max_new_tokens": 0}}
    first = gen(emulated_server, **body).json()["meta_info"]
    second = gen(emulated_server, **body).json()["meta_info"]
    assert first["cached_tokens"] == 0
    assert second["cached_tokens"] == second["prompt_tokens"] - 1
    assert second["cached_tokens_details"] == {"device": second["cached_tokens"], "host": 0}


def test_flush_cache_empties_the_tree(emulated_server):
    # http_server.py flush_cache -> scheduler.py Scheduler.flush_cache -> tree_cache.reset().
    body = {"text": "a prompt to be cached and flushed", "sampling_params": {"max_new_tokens": 0}}
    gen(emulated_server, **body)
    r = requests.post(emulated_server.url + "/flush_cache", timeout=10)
    assert r.status_code == 200 and r.text.startswith("Cache flushed.")
    assert gen(emulated_server, **body).json()["meta_info"]["cached_tokens"] == 0


def test_flush_cache_refused_while_a_request_runs(make_emulated_server, scripted_policy):
    # scheduler.py Scheduler.flush_cache succeeds only when is_fully_idle(); http_server.py
    # answers 400 with "Flush cache failed." otherwise.
    entered, release = threading.Event(), threading.Event()

    def slow(prompt):
        entered.set()
        release.wait(10)
        return "ok"

    scripted_policy.on("Write", slow)
    srv = make_emulated_server(policy=scripted_policy)
    worker = threading.Thread(target=gen, args=(srv,), kwargs={"text": "Write"})
    worker.start()
    try:
        assert entered.wait(10)
        r = requests.get(srv.url + "/flush_cache", timeout=10)
        assert r.status_code == 400 and r.text == "Flush cache failed.\n"
    finally:
        release.set()
        worker.join(10)
    assert requests.post(srv.url + "/flush_cache", timeout=10).status_code == 200


def test_lora_namespaces_do_not_share(make_emulated_server):
    # schedule_batch.py Req.__init__ appends the LoRA id to extra_key, and
    # mem_cache/radix_cache.py keeps different extra_keys disjoint.
    srv = make_emulated_server(lora_paths=["drafter", "other"])
    text = "the same prompt sent to two adapters and the base model"
    params = {"max_new_tokens": 0}
    gen(srv, text=text, sampling_params=params, lora_path="drafter")
    other = gen(srv, text=text, sampling_params=params, lora_path="other").json()
    base = gen(srv, text=text, sampling_params=params).json()
    again = gen(srv, text=text, sampling_params=params, lora_path="drafter").json()
    assert other["meta_info"]["cached_tokens"] == 0
    assert base["meta_info"]["cached_tokens"] == 0
    assert again["meta_info"]["cached_tokens"] == again["meta_info"]["prompt_tokens"] - 1
    per_lora = srv.stats()["per_lora"]
    assert set(per_lora) == {"drafter", "other", "base"}
    assert per_lora["drafter"]["requests"] == 2


def test_lora_without_enable_lora_is_the_servers_400(emulated_server):
    # tokenizer_manager.py _validate_and_resolve_lora: before tokenization, one 400 for the request
    # (a batch names its first adapter), whatever else is wrong with it.
    r = gen(emulated_server, text="x", sampling_params={"max_new_tokens": 0}, lora_path="drafter")
    assert r.status_code == 400
    assert r.json() == {"error": {"message": (
        "LoRA adapter 'drafter' was requested, but LoRA is not enabled. Please launch the server with "
        "--enable-lora flag and preload adapters using --lora-paths or /load_lora_adapter endpoint.")}}
    batch = gen(emulated_server, text=["a", "b" * 10], sampling_params={"max_new_tokens": 0},
                lora_path=[None, "second"])
    assert batch.status_code == 400 and "LoRA adapter 'second' was requested" in batch.json()["error"]["message"]
    assert emulated_server.stats()["total"]["requests"] == 0


def test_unknown_lora_is_rejected_when_adapters_are_declared(make_emulated_server):
    # tokenizer_manager.py _resolve_lora_path: "Got LoRA adapter that has never been loaded".
    srv = make_emulated_server(lora_paths=["drafter"])
    r = gen(srv, text="x", sampling_params={"max_new_tokens": 0}, lora_path="nope")
    assert r.status_code == 400
    assert "never been loaded: nope" in r.json()["error"]["message"]


def test_logprob_start_len_caps_the_match(emulated_server, emulator_tokenizer):
    # schedule_batch.py Req._compute_max_prefix_len: min(input_len - 1, logprob_start_len).
    text = "one two three four five six seven eight nine ten"
    n = len(emulator_tokenizer.encode(text))
    gen(emulated_server, text=text, sampling_params={"max_new_tokens": 0})
    out = gen(emulated_server, text=text, sampling_params={"max_new_tokens": 0},
              return_logprob=True, logprob_start_len=n - 3).json()["meta_info"]
    assert out["cached_tokens"] == n - 3
    # logprob_result_processor.py _process_input_token_logprobs: [None] + values, from start.
    assert len(out["input_token_logprobs"]) == 3
    assert out["input_token_logprobs"][0][0] is None


def test_output_tokens_are_cached_after_finish(emulated_server, scripted_policy, emulator_tokenizer):
    # mem_cache/common.py release_kv_cache inserts (input + output)[:owned_kv_len]:
    # the prompt and every output token but the last (here the EOS).
    scripted_policy.on("Question:", "Answer text")
    prompt = "Question:\n"
    out = gen(emulated_server, text=prompt, sampling_params={"max_new_tokens": 16}).json()
    follow = prompt + out["text"] + "\nmore words after it"
    info = gen(emulated_server, text=follow, sampling_params={"max_new_tokens": 0}).json()["meta_info"]
    expect = len(emulator_tokenizer.encode(prompt)) + len(out["output_ids"]) - 1
    assert info["cached_tokens"] == expect


def test_one_prefill_batch_does_not_share_an_uncached_prefix(emulated_server):
    # scheduler.py + schedule_policy.py: with the default "fcfs" policy there is no
    # in-batch prefix caching; prompts are inserted only after their prefill batch.
    shared = "a shared prefix that nobody has sent before, long enough to matter. "
    out = gen(emulated_server, text=[shared + "first", shared + "second"],
              sampling_params={"max_new_tokens": 0}).json()
    assert [o["meta_info"]["cached_tokens"] for o in out] == [0, 0]
    later = gen(emulated_server, text=shared + "third", sampling_params={"max_new_tokens": 0}).json()
    assert later["meta_info"]["cached_tokens"] > 0


# --- logprobs -----------------------------------------------------------------------


def test_token_ids_logprob_shape_for_prefill_only(emulated_server, scripted_policy, emulator_tokenizer):
    # scheduler_components/logprob_result_processor.py add_logprob_return_values: a
    # prefill-only request returns next-token logprobs of the requested ids in
    # output_token_ids_logprobs[0]; tokenizer_manager.py detokenize_logprob_tokens gives
    # (logprob, token_id, text) triples.
    scripted_policy.judge("Is the line supported", p_positive=0.8, after=f"{IM}user")
    ids = label_ids(emulator_tokenizer)
    out = gen(emulated_server, text=JUDGE_PROMPT, sampling_params={"max_new_tokens": 0},
              return_logprob=True, token_ids_logprob=ids, return_text_in_logprobs=True).json()
    info = out["meta_info"]
    assert out["text"] == ""
    assert info["input_token_logprobs"] == [] and info["output_token_logprobs"] == []
    assert info["input_token_ids_logprobs"] == []
    (row,) = info["output_token_ids_logprobs"]
    assert [e[1] for e in row] == ids
    assert [e[2] for e in row] == ["positive", " positive", "negative", " negative"]
    p = {e[2]: math.exp(e[0]) for e in row}
    assert p["positive"] / (p["positive"] + p["negative"]) == pytest.approx(0.8)


def test_output_logprobs_per_token_with_top_k(emulated_server, scripted_policy):
    # tokenizer_manager.py add_logprob_to_meta_info: output_token_logprobs per output token,
    # output_top_logprobs a list per position, output_token_logprobs_length.
    scripted_policy.on("Write", "alpha beta")
    info = gen(emulated_server, text="Write", sampling_params={"max_new_tokens": 8},
               return_logprob=True, top_logprobs_num=3).json()["meta_info"]
    n = info["completion_tokens"]
    assert info["output_token_logprobs_length"] == n == len(info["output_token_logprobs"])
    assert len(info["output_top_logprobs"]) == n
    assert all(len(row) == 3 for row in info["output_top_logprobs"])
    assert all(e[2] is None for e in info["output_token_logprobs"])  # no return_text_in_logprobs
    chosen = [e[1] for e in info["output_token_logprobs"]]
    assert [row[0][1] for row in info["output_top_logprobs"]] == chosen


# --- shapes -------------------------------------------------------------------------


def test_batch_text_returns_a_list(emulated_server, scripted_policy):
    # io_struct.py GenerateReqInput.normalize_batch_and_arguments; tokenizer_manager.py
    # _handle_batch_request yields one list.
    scripted_policy.on("A", "from a")
    scripted_policy.on("B", "from b")
    out = gen(emulated_server, text=["A", "B"], sampling_params={"max_new_tokens": 8}).json()
    assert isinstance(out, list) and [o["text"] for o in out] == ["from a", "from b"]
    assert out[0]["meta_info"]["id"] != out[1]["meta_info"]["id"]


def test_meta_info_keys(emulated_server):
    # tokenizer_manager.py _handle_batch_output builds these keys for a finished request.
    info = gen(emulated_server, text="x", sampling_params={"max_new_tokens": 1}).json()["meta_info"]
    for key in ("id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency"):
        assert key in info
    assert "simulated_latency_s" not in info  # only with a cost model


def test_stream_sends_cumulative_text_then_done(emulated_server, scripted_policy):
    # http_server.py serve_generate_request: "data: {...}\n\n" chunks, "data: [DONE]";
    # tokenizer_manager.py non-incremental streaming sends the cumulative text.
    scripted_policy.on("Write", "one two three")
    r = requests.post(emulated_server.url + "/generate", stream=True, timeout=30,
                      json={"text": "Write", "sampling_params": {"max_new_tokens": 16}, "stream": True})
    lines = [ln.decode() for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(ln[len("data: "):]) for ln in lines[:-1]]
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    assert texts[-1] == "one two three"
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "stop"
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])


def test_stream_validation_error_is_an_sse_event(emulated_server):
    # http_server.py stream_results: a ValueError becomes a "data: {"error": ...}" event.
    r = requests.post(emulated_server.url + "/generate", stream=True, timeout=30,
                      json={"text": "x", "sampling_params": {"top_p": 0.0}, "stream": True})
    lines = [ln.decode() for ln in r.iter_lines() if ln]
    assert r.status_code == 200 and lines[-1] == "data: [DONE]"
    assert "top_p" in json.loads(lines[0][6:])["error"]["message"]


def test_tokenize_endpoint(emulated_server, emulator_tokenizer):
    # entrypoints/openai/serving_tokenize.py + protocol.py TokenizeResponse.
    for route in ("/tokenize", "/v1/tokenize"):
        r = requests.post(emulated_server.url + route, json={"prompt": ["positive", "a b"]}, timeout=10)
        body = r.json()
        assert body["tokens"][0] == emulator_tokenizer.encode("positive")
        assert body["count"] == [len(t) for t in body["tokens"]]
        assert body["max_model_len"] == emulator_tokenizer.model_max_length


def test_model_and_server_info(emulated_server, emulator_tokenizer_path):
    # http_server.py model_info / server_info.
    info = requests.get(emulated_server.url + "/get_model_info", timeout=10).json()
    assert info["model_path"] == emulator_tokenizer_path and info["is_generation"] is True
    server = requests.get(emulated_server.url + "/server_info", timeout=10).json()
    assert server["version"] == "0.5.23" and server["emulated"] is True
    # server_info is the launch arguments: no --context-length given, so null
    assert server["context_length"] is None and server["enable_lora"] is False
    assert requests.get(emulated_server.url + "/health", timeout=10).status_code == 200


def test_v1_models_reports_the_context_window(emulated_server, emulator_tokenizer_path):
    # http_server.py available_models: one ModelCard, max_model_len = model_config.context_len
    # (Qwen3's max_position_embeddings, 40960, without --context-length).
    body = requests.get(emulated_server.url + "/v1/models", timeout=10).json()
    assert body["object"] == "list"
    (card,) = body["data"]
    assert {k: card[k] for k in ("id", "object", "owned_by", "root", "parent", "max_model_len")} == {
        "id": emulator_tokenizer_path, "object": "model", "owned_by": "sglang", "root": emulator_tokenizer_path,
        "parent": None, "max_model_len": 40960}
    assert isinstance(card["created"], int)
    one = requests.get(emulated_server.url + "/v1/models/" + emulator_tokenizer_path, timeout=10)
    assert one.status_code == 200 and one.json()["max_model_len"] == 40960
    missing = requests.get(emulated_server.url + "/v1/models/nope", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_context_length_given_at_launch_is_reported_by_both(make_emulated_server):
    # --context-length sets server_args.context_length and model_config.context_len alike;
    # adapters get their own cards with max_model_len null.
    srv = make_emulated_server(context_length=2048, lora_paths=["drafter"], model_path="Qwen/Qwen3-8B")
    assert requests.get(srv.url + "/server_info", timeout=10).json()["context_length"] == 2048
    cards = requests.get(srv.url + "/v1/models", timeout=10).json()["data"]
    assert [(c["id"], c["parent"], c["max_model_len"]) for c in cards] == [
        ("Qwen/Qwen3-8B", None, 2048), ("drafter", "Qwen/Qwen3-8B", None)]


def test_client_reads_the_context_window_from_v1_models(make_emulated_server):
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    assert SpecCompactEndpoint(make_emulated_server(model_path="Qwen/Qwen3-8B").url).context_length() == 40960
    srv = make_emulated_server(model_path="Qwen/Qwen3-8B", context_length=4096)
    assert SpecCompactEndpoint(srv.url).context_length() == 4096


def test_stats_endpoint_counts_tokens(emulated_server):
    body = {"text": "count these prompt tokens please", "sampling_params": {"max_new_tokens": 0}}
    a = gen(emulated_server, **body).json()["meta_info"]
    b = gen(emulated_server, **body).json()["meta_info"]
    stats = requests.get(emulated_server.url + "/emulator/stats", timeout=10).json()
    assert stats["total"]["prompt_tokens"] == a["prompt_tokens"] + b["prompt_tokens"]
    assert stats["total"]["cached_tokens"] == b["cached_tokens"]


def test_cost_model_reports_simulated_latency(make_emulated_server):
    from sgl_speccompact.emulator import CostModel

    srv = make_emulated_server(cost_model=CostModel.for_model("qwen3-8b", time_scale=0.0))
    info = gen(srv, text="x y z", sampling_params={"max_new_tokens": 4}).json()["meta_info"]
    assert info["simulated_latency_s"] > 0
    assert srv.stats()["simulated_busy_s"] > 0


def test_concurrent_requests_all_complete(emulated_server, scripted_policy, emulator_tokenizer):
    # The scheduler batches whatever is waiting; every request still gets its own answer.
    from concurrent.futures import ThreadPoolExecutor

    scripted_policy.on("slot", lambda prompt: f"line for {prompt.split()[-1]}\nrest\n")
    scripted_policy.judge("judge", p_positive=0.7)
    ids = label_ids(emulator_tokenizer)

    def one(i):
        if i % 2:
            body = {"text": f"shared history judge {i}", "sampling_params": {"max_new_tokens": 0},
                    "return_logprob": True, "token_ids_logprob": ids}
            return len(gen(emulated_server, **body).json()["meta_info"]["output_token_ids_logprobs"])
        body = {"text": f"shared history slot {i}", "sampling_params": {"max_new_tokens": 16, "stop": "\n"}}
        return gen(emulated_server, **body).json()["text"]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(24)))
    assert results == [1 if i % 2 else f"line for {i}" for i in range(24)]
    assert emulated_server.stats()["total"]["requests"] == 24


def test_policy_failure_is_a_500_and_the_server_keeps_serving(emulated_server, scripted_policy):
    # tokenizer_manager.py _handle_abort_finish_reason: an abort with status >= 500 becomes
    # an HTTPException, which http_server.py renders as an ErrorResponse.
    def broken(prompt):
        raise RuntimeError("script bug")

    scripted_policy.on("Break", broken)
    r = gen(emulated_server, text="Break")
    assert r.status_code == 500 and "script bug" in r.json()["message"]
    assert gen(emulated_server, text="fine", sampling_params={"max_new_tokens": 1}).status_code == 200


# --- /v1/loads ----------------------------------------------------------------------


def test_v1_loads_has_sglangs_shape_and_counts_a_running_request(emulated_server, scripted_policy):
    # sglang/srt/entrypoints/v1_loads.py get_loads: {timestamp, version, accelerator, num_accelerators,
    # loads: [LoadSnapshot.to_dict(include)]}; an unknown section is HTTPException(400)
    from sglang.srt.managers.load_snapshot import _CORE_KEYS

    url = emulated_server.url + "/v1/loads"
    idle = requests.get(url, params={"include": "core"}, timeout=30).json()
    assert set(idle) == {"timestamp", "version", "accelerator", "num_accelerators", "loads"}
    assert list(idle["loads"][0]) == list(_CORE_KEYS)
    assert (idle["loads"][0]["num_running_reqs"], idle["loads"][0]["num_waiting_reqs"]) == (0, 0)
    entered, done = threading.Event(), threading.Event()
    scripted_policy.on("", lambda prompt: (entered.set(), done.wait(30), "ok")[2])
    turn = threading.Thread(target=gen, args=(emulated_server,), kwargs={"text": "hi"}, daemon=True)
    turn.start()
    try:
        assert entered.wait(30)
        busy = requests.get(url, params={"include": "core"}, timeout=30).json()["loads"][0]
        assert busy["num_running_reqs"] + busy["num_waiting_reqs"] == 1
    finally:
        done.set()
        turn.join(30)
    assert requests.get(url, params={"include": "bogus"}, timeout=30).status_code == 400
    assert requests.get(url, params={"dp_rank": 1}, timeout=30).json()["loads"] == []
