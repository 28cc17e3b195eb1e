"""Token ids on the one-clock simulator: no lock is held across /tokenize (waiting threads count as
blocked), /tokenize is served on the virtual clock, and the server's tokenizer pays only for text.

Timings are SIMULATED; no assertion depends on real time.
"""

from __future__ import annotations

import threading

import pytest

from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.emulator import ControlledAcceptancePolicy, CostModel
from sgl_speccompact.emulator.cost import DEPLOYMENTS, Scheduling
from bench.sim.quiescence import ThreadWatch
from bench.sim.simulator import build_simulation
from sgl_speccompact.backends.token_ids import TokenIdCache

from tests.support.endpoint import assert_server_accepts
from tests.support.programs import MESSAGES

COSTS = {"target": CostModel.for_model("qwen3-8b"), "drafter": CostModel.for_model("qwen3-0.6b")}
TEXT = "[user]\nfix a.py\n[assistant]\nok\n"


def _wait_until(predicate, what: str) -> None:
    for _ in range(20_000):  # a bound so a broken rule fails instead of hanging; not a timing check
        if predicate():
            return
        threading.Event().wait(0.001)
    raise AssertionError(f"never: {what}")


def test_threads_waiting_for_a_segment_count_as_blocked_while_one_tokenizes():
    release, calls = threading.Event(), []

    def tokenize(texts):
        calls.append(list(texts))
        release.wait()  # a request in flight: the simulator's client wait is a condition wait too
        return [[ord(c) for c in t] for t in texts]

    cache = TokenIdCache(tokenize)
    out = []
    with ThreadWatch() as watch:
        threads = [threading.Thread(target=lambda: out.append(cache.ids(TEXT)), name=f"t{i}") for i in range(4)]
        for t in threads:
            t.start()
        _wait_until(lambda: calls and watch.snapshot().threads == 4 and watch.snapshot().quiescent,
                    "four threads, one tokenizing, all blocked")
        release.set()
        for t in threads:
            t.join()
    assert len(calls) == 1 and out == [[ord(c) for c in TEXT]] * 4


def test_a_failed_tokenization_lets_the_waiters_claim_it_again():
    release, calls = threading.Event(), []

    def tokenize(texts):
        calls.append(list(texts))
        if len(calls) == 1:
            release.wait()
            raise ConnectionError("server went away")
        return [[ord(c) for c in t] for t in texts]

    cache = TokenIdCache(tokenize)
    errors, out = [], []

    def first():
        try:
            cache.ids(TEXT)
        except ConnectionError as exc:
            errors.append(exc)

    with ThreadWatch() as watch:
        a = threading.Thread(target=first)
        a.start()
        _wait_until(lambda: calls, "the first call started")
        b = threading.Thread(target=lambda: out.append(cache.ids(TEXT)))
        b.start()
        _wait_until(lambda: watch.snapshot().threads == 2 and watch.snapshot().quiescent,
                    "the second thread waits on the first one's claim")
        release.set()
        a.join(), b.join()
    assert len(errors) == 1 and out == [[ord(c) for c in TEXT]] and len(calls) == 2


def _compaction(tok, send_token_ids: bool, deployment="two-gpu", p_accept=None, **config):
    """A SpecCompact + SJC run on the simulator; ``(sim, result, report, bodies sent)``."""
    p = {} if p_accept is None else {"p_accept": p_accept}
    policies = {"target": ControlledAcceptancePolicy(seed=0, **p), "drafter": ControlledAcceptancePolicy(seed=1, **p)}
    sim = build_simulation(tok, policies, COSTS, DEPLOYMENTS[deployment], Scheduling())
    target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
    bodies = []
    for ep in (target, drafter):
        ep._request = _recording(ep._request, bodies)
    result, report = sim.run(lambda: run_method("speccompact", MESSAGES, target=target, drafter=drafter,
                                                source_judge=True,
                                                config={"send_token_ids": send_token_ids, **config}))
    return sim, result, report, bodies


def _recording(request, bodies):
    def call(method, path, body=None, base=None):
        if path == "/generate":
            bodies.append(body)
        return request(method, path, body, base)
    return call


@pytest.fixture(scope="module")
def both(emulator_tokenizer_path):
    return {on: _compaction(emulator_tokenizer_path, on) for on in (True, False)}


def test_the_model_sees_the_same_tokens_and_decides_the_same(both):
    (_, res_on, rep_on, _), (_, res_off, rep_off, _) = both[True], both[False]
    assert res_on.summary == res_off.summary
    gen_on = [r for r in rep_on["requests"] if r.path == "/generate"]
    gen_off = [r for r in rep_off["requests"] if r.path == "/generate"]
    assert len(gen_on) == len(gen_off)
    for role in ("target", "drafter"):  # the ids the server was given tokenize to the same counts
        assert (sum(r.prompt_tokens for r in gen_on if r.server == role)
                == sum(r.prompt_tokens for r in gen_off if r.server == role))
    assert [r.lane for r in gen_on] == [r.lane for r in gen_off]  # the labeler still reads the slot


def test_tokenize_is_served_on_the_clock_and_generate_given_ids_costs_the_tokenizer_nothing(both):
    sim, _, rep, bodies = both[True]
    tok = [r for r in rep["requests"] if r.path == "/tokenize"]
    gen = [r for r in rep["requests"] if r.path == "/generate"]
    assert tok and all(r.finished > r.issued for r in tok)  # o_req plus the tokenizer's time
    assert all(r.tokenized == 0 for r in gen)
    assert all("input_ids" in b and "text" not in b for b in bodies)
    for body in bodies:
        assert_server_accepts(body)
    # per server: what its tokenizer encoded is far less than the prompts it served
    _, _, off, _ = both[False]
    for role in ("target", "drafter"):
        on_tok = sum(r.tokenized for r in rep["requests"] if r.server == role)
        off_gen = sum(r.tokenized for r in off["requests"] if r.server == role and r.path == "/generate")
        off_tok = sum(r.tokenized for r in off["requests"] if r.server == role)
        served = sum(r.prompt_tokens for r in gen if r.server == role)
        assert off_gen == served and 0 < on_tok < off_tok / 3, role


def test_each_run_starts_cold_and_is_deterministic(emulator_tokenizer_path, both):
    sim, _, first, _ = both[True]
    _, _, again, _ = _compaction(emulator_tokenizer_path, True)
    assert [r.to_json() for r in again["requests"]] == [r.to_json() for r in first["requests"]]
    assert again["e2e_s"] == first["e2e_s"]


def test_batched_judges_and_prefills_go_as_ids_and_validate(emulator_tokenizer_path):
    _, result, _, bodies = _compaction(emulator_tokenizer_path, True, "one-gpu", p_accept=0.3)
    assert result.summary
    batched = [b for b in bodies if isinstance(b["input_ids"][0], list)]
    assert batched  # SJC's entries in one request
    for body in bodies:
        assert "text" not in body
        assert_server_accepts(body)
