"""SpecCompactEndpoint: one request per judgement, LoRA, typed transport errors,
and every /generate body valid for sglang 0.5.23's own server classes."""

import math
import socket
import threading

import pytest

from sgl_speccompact.methods.speccompact import compact
from sgl_speccompact.backends.endpoint import LabelJudgement, SpecCompactEndpoint
from sgl_speccompact.errors import BackendTimeoutError, BackendUnavailableError, LabelLogprobError, LabelTokenError
from sgl_speccompact.core.judge import label_choices
from sgl_speccompact.core.prompts import THINK_OFF

from tests.support.scripted import ScriptedBackend
from tests.support.programs import DRAFTS, MESSAGES, drafter_from
from tests.support.endpoint import InProcessEndpoint, assert_server_accepts, body_text


def test_one_generate_request_per_verification_and_valid_bodies():
    target = InProcessEndpoint(judge=lambda line: 0.05 if "BAD" in line else 0.9)
    drafter = ScriptedBackend(draft=drafter_from(DRAFTS))
    res = compact(MESSAGES, target=target, drafter=drafter)
    judge_bodies = [b for b in target.bodies if "token_ids_logprob" in b]
    assert len(judge_bodies) == res.stats.proposed_lines == res.stats.requests["target"]["verify"].requests
    for b in judge_bodies:
        assert b["sampling_params"]["max_new_tokens"] == 0 and b["return_logprob"] is True
        assert b["token_ids_logprob"] == [101, 102, 103, 201, 202]
    prefills = [b for b in target.bodies if "token_ids_logprob" not in b and b["sampling_params"]["max_new_tokens"] == 0]
    assert len(prefills) == 1
    for b in target.bodies:
        assert_server_accepts(b)
    assert "2. repaired" not in res.summary and "- repaired" in res.summary  # BAD line replaced
    assert res.stats.requests["target"]["verify"].prompt_tokens > 0


def test_qwen3_gets_chatml_and_thinking_disabled():
    target = InProcessEndpoint()
    assert target.chat_template.name == "qwen" and target.assistant_prefix == THINK_OFF
    compact(MESSAGES, target=target, drafter=ScriptedBackend(draft=drafter_from(DRAFTS)))
    judge = body_text(next(b for b in target.bodies if "token_ids_logprob" in b))
    assert judge.startswith("<|im_start|>system\n") and judge.endswith("<|im_start|>assistant\n" + THINK_OFF)
    other = InProcessEndpoint(model="meta-llama/Llama-3.1-8B-Instruct", model_type="llama",
                              chat_template="llama-3-instruct")
    assert other.chat_template.name == "llama-3-instruct" and other.assistant_prefix == ""


def test_lora_path_sent_on_every_drafter_request():
    drafter = InProcessEndpoint(lora_path="drafter", repair="- a\n- b")
    from sgl_speccompact.programs.steps import draft_slot
    state = draft_slot.run(context="ctx ", slot_request="req", accepted="", assistant_prefix="",
                           sampling={"max_tokens": 64, "temperature": 0.0}, backend=drafter)
    assert state["draft"] == "- a\n- b"
    assert drafter.bodies and all(b["lora_path"] == "drafter" for b in drafter.bodies)
    for b in drafter.bodies:
        assert_server_accepts(b)


def test_label_words_without_single_token_fail_at_startup():
    target = InProcessEndpoint()
    with pytest.raises(LabelTokenError):
        compact(MESSAGES, target=target, drafter=ScriptedBackend(draft=drafter_from(DRAFTS)),
                config={"positive_label": "supported", "negative_label": "negative"})
    assert target.bodies == []  # nothing was sent before the check


def test_plain_endpoint_select_scores_choices_by_their_tokens():
    # RuntimeEndpoint.select hands the choices method each choice's token logprobs;
    # the shared prefix token cancels in r.
    from sgl_speccompact.core.judge import label_choices

    choices, n = label_choices("positive", "negative")
    single = {"positive": (math.log(0.6), 101), "negative": (math.log(0.2), 201)}
    entries = [[(-1.0, 5, "\n"), (*single[c], c)] if c in single else [(-1.0, 5, "\n"), (-3.0, 300 + i, c[:2]),
                                                                          (-0.1, 400 + i, c[2:])]
               for i, c in enumerate(choices)]  # the other variants are two tokens here: skipped
    method = LabelJudgement(eta=0.7, n_positive=n)
    d = method(choices=choices, normalized_prompt_logprobs=[0] * len(choices), input_token_logprobs=entries,
               output_token_logprobs=[[]] * len(choices))
    assert d.decision == "positive" and d.meta_info["verdict"].score == pytest.approx(0.75)
    assert d.meta_info["requests"] == 2
    # called with the two label words alone: the same rule over the choices it was given (no caller's
    # frames are read to score more)
    bare = LabelJudgement(eta=0.7)(choices=["positive", "negative"], normalized_prompt_logprobs=[0, 0],
                                   input_token_logprobs=[entries[0], entries[n]], output_token_logprobs=[[], []])
    assert bare.meta_info["verdict"].score == pytest.approx(0.75) and bare.meta_info["requests"] == 2


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_down_is_a_typed_error():
    with pytest.raises(BackendUnavailableError):
        SpecCompactEndpoint(f"http://127.0.0.1:{_free_port()}", timeout_s=2)


def _read_request(conn) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    while len(rest) < length:
        rest += conn.recv(65536)
    return head


def _answer(conn, payload: bytes) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(payload), payload))


def test_a_kept_alive_connection_closed_under_a_request_is_sent_again():
    """The server's idle timeout closes a pooled connection just as a request goes out on it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(2)
    seen = []

    def serve():
        first, _ = srv.accept()
        seen.append(_read_request(first).split(b" ")[1])
        _answer(first, b'{"model_path": "Qwen/Qwen3-8B", "model_type": "qwen3"}')  # kept alive
        seen.append(_read_request(first).split(b" ")[1])
        first.close()  # ... and closed before any answer to the next request
        second, _ = srv.accept()
        seen.append(_read_request(second).split(b" ")[1])
        _answer(second, b'{"tokens": [[7, 8]], "count": [2], "max_model_len": 100}')
        second.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        ep = SpecCompactEndpoint(f"http://127.0.0.1:{srv.getsockname()[1]}", timeout_s=60)
        assert ep.tokenize(["a b"]) == [[7, 8]]
        assert seen == [b"/get_model_info", b"/tokenize", b"/tokenize"]  # sent once more, on a new connection
    finally:
        server.join(timeout=60)
        srv.close()


def test_server_not_answering_is_a_timeout_error():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)  # accepts the connection, never answers
    try:
        with pytest.raises(BackendTimeoutError):
            SpecCompactEndpoint(f"http://127.0.0.1:{srv.getsockname()[1]}", timeout_s=0.5)
    finally:
        srv.close()


# ---------------------------------------------------------------- one verdict rule on both paths


class State:
    """What ``select`` reads of a program state: its text."""

    def __init__(self, text: str):
        self.text_ = text


JUDGE_PROMPT = "<|im_start|>user\n<line>\n- a line\n</line>\nAnswer.<|im_end|>\n<|im_start|>assistant\n"
# the exact words give r = 0.4 / (0.4 + 0.1) = 0.800, the best variants 0.4 / (0.4 + 0.3) = 0.571
SPLIT = {101: 0.4, 201: 0.1, 202: 0.3}


def judged(ep, one_request: bool):
    choices, n = label_choices("positive", "negative")
    d = ep.select(State(JUDGE_PROMPT), choices, 0.0, LabelJudgement(0.7, one_request=one_request, n_positive=n))
    return d.decision, d.meta_info["verdict"]


def test_one_request_and_plain_select_agree_where_the_old_rules_differed():
    ep = InProcessEndpoint(dist=lambda line: SPLIT, token_ids=False)
    (one, j1), (plain, j2) = judged(ep, True), judged(ep, False)
    assert j1.score == pytest.approx(0.4 / 0.7) == pytest.approx(j2.score)
    assert one == plain == "negative" and not j1.accepted and not j2.accepted
    # the two bare label words, as a pipeline may pass them: the same verdict on both paths (the
    # old plain rule scored only the exact words and accepted)
    for one_request in (True, False):
        bare = ep.select(State(JUDGE_PROMPT), ["positive", "negative"], 0.0,
                         LabelJudgement(0.7, one_request=one_request))
        assert bare.decision == "negative" and bare.meta_info["verdict"].score == pytest.approx(j1.score)
    for b in ep.bodies:
        assert_server_accepts(b)


def test_plain_select_scores_every_variant_and_skips_multi_token_ones():
    ep = InProcessEndpoint(dist=lambda line: SPLIT, token_ids=False)
    judged(ep, False)
    (batch,) = [b for b in ep.bodies if isinstance(body_text(b), list)]
    assert [t[len(JUDGE_PROMPT):] for t in body_text(batch)] == label_choices("positive", "negative")[0]
    # "POSITIVE" is eight char tokens here: skipped, as the one-request judge skips it
    assert judged(ep, False)[1].p_pos == pytest.approx(0.4)


def test_a_server_ignoring_token_ids_logprob_falls_back_to_top_k_or_fails():
    ep = InProcessEndpoint(dist=lambda line: {101: 0.6, 999: 0.3}, honours_ids=False, token_ids=False)
    decision_, j = judged(ep, True)
    # negative absent from the top-k: min(1 - 0.9, 0.3) = 0.1, so r = 0.6 / 0.7
    assert tuple(j.substituted) == ("negative",)
    assert j.score == pytest.approx(0.6 / 0.7) and decision_ == "positive"
    bare = InProcessEndpoint(dist=lambda line: SPLIT, honours_ids=False, top_k=False, token_ids=False)
    with pytest.raises(LabelLogprobError, match="token_ids_logprob"):
        judged(bare, True)
    with pytest.raises(LabelLogprobError):
        bare.judge_batch([JUDGE_PROMPT], "positive", "negative", 0.7)
