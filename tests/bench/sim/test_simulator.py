"""The one-clock simulator: real programs on simulated servers, deterministic, invariants checked.

Timings here are SIMULATED (virtual clock); no assertion depends on real time.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.emulator import CostModel, ScriptedPolicy
from sgl_speccompact.emulator.cost import Scheduling
from bench.sim.quiescence import ThreadWatch
from bench.sim.simulator import SimulationStalled
from bench.sim.timeline import InvariantViolation, PassRecord, RequestRecord, check, critical_path

from tests.support.programs import MESSAGES
from tests.support.sim import make_sim
from tests.support.sim import COSTS


def compaction(sim, method="speccompact"):
    target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
    return sim.run(lambda: run_method(method, MESSAGES, target=target, drafter=drafter))


def log_json(report) -> str:
    return json.dumps({"e2e": report["e2e_s"], "requests": [r.to_json() for r in report["requests"]],
                       "passes": [p.to_json() for p in report["passes"]]}, sort_keys=True)


@pytest.mark.parametrize("deployment", ["two-gpu", "one-gpu"])
def test_same_seed_same_event_log_bit_for_bit(emulator_tokenizer_path, deployment):
    runs = [compaction(make_sim(emulator_tokenizer_path, deployment)) for _ in range(2)]
    (res_a, rep_a), (res_b, rep_b) = runs
    assert log_json(rep_a) == log_json(rep_b)
    assert res_a.summary == res_b.summary
    assert rep_a["e2e_s"] > 0 and len(rep_a["passes"]) > 10


def test_the_real_programs_send_every_request(emulator_tokenizer_path):
    result, report = compaction(make_sim(emulator_tokenizer_path))
    generate = [r for r in report["requests"] if r.path == "/generate"]
    for role in ("target", "drafter"):
        counted = sum(c.requests for c in result.stats.requests[role].values())
        assert sum(r.server == role for r in generate) == counted, role
        prompt = sum(c.prompt_tokens for c in result.stats.requests[role].values())
        assert sum(r.prompt_tokens for r in generate if r.server == role) == prompt
    judged = sum(r.kind == "judge" for r in generate)
    assert judged == result.stats.requests["target"]["verify"].requests > 0
    assert all(r.finished is not None and r.finished >= r.issued for r in report["requests"])


@pytest.mark.parametrize("deployment", ["two-gpu", "one-gpu"])
def test_busy_time_never_exceeds_end_to_end(emulator_tokenizer_path, deployment):
    _, report = compaction(make_sim(emulator_tokenizer_path, deployment))
    for busy in [*report["busy_s"].values(), *report["gpu_busy_s"].values()]:
        assert 0 < busy <= report["e2e_s"]
    if deployment == "one-gpu":  # one GPU: the two servers' passes never overlap
        passes = sorted(report["passes"], key=lambda p: p.start)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(passes, passes[1:]))


def test_critical_path_is_a_gapless_chain_to_the_end(emulator_tokenizer_path):
    _, report = compaction(make_sim(emulator_tokenizer_path))
    chain = critical_path(report["requests"], report["e2e_s"])
    assert chain[0].issued == 0.0 and chain[-1].finished == report["e2e_s"]
    assert all(a.finished == b.issued for a, b in zip(chain, chain[1:]))


def closed_form(report, cost: CostModel, chunk: int) -> float:
    """Prefill + decode steps, phase by phase, from the log's token counts only.

    Requests issued at one instant form a phase: o_req, their prefill (in chunks of ``chunk`` tokens) and
    ``completion_tokens - 1`` decode steps of the whole batch.  Phases add up.
    """
    phases: dict[float, list] = {}
    for r in report["requests"]:
        phases.setdefault(r.issued, []).append(r)
    total = 0.0
    for reqs in phases.values():
        total += cost.request_overhead_s
        gen = [r for r in reqs if r.path == "/generate"]
        if not gen:
            continue
        shapes = [[r.cached_tokens, r.prompt_tokens - r.cached_tokens] for r in gen]
        while any(n for _, n in shapes):
            budget, batch = chunk, []
            for s in shapes:
                take = min(s[1], budget)
                if take:
                    batch.append((s[0], take))
                    s[0], s[1], budget = s[0] + take, s[1] - take, budget - take
            total += cost.forward_s(batch)
        steps = max(r.completion_tokens for r in gen)
        for k in range(max(steps - 1, 0)):
            total += cost.forward_s([(r.prompt_tokens + k, 1) for r in gen if r.completion_tokens > k + 1])
    return total


@pytest.mark.parametrize("method", ["hermes", "target_self"])
def test_calibration_against_the_closed_form(emulator_tokenizer_path, method):
    # small chunks so the prompt is chunked here; the tokenizer is not part of "prefill + decode steps"
    sched = Scheduling(chunked_prefill_size=512, tokenizer_tokens_per_s=0)
    _, report = compaction(make_sim(emulator_tokenizer_path, scheduling=sched), method)
    want = closed_form(report, COSTS["target"], 512)
    assert report["e2e_s"] == pytest.approx(want, rel=0.05)
    assert any(p.kind == "prefill" and p.new_tokens == 512 for p in report["passes"])  # it did chunk


def test_n_samples_and_text_lists_are_served(emulator_tokenizer_path):
    policy = ScriptedPolicy(default_output="- a line\n")
    sim = make_sim(emulator_tokenizer_path, target_policy=policy)
    target = sim.endpoint("target")
    body = {"text": "hello there", "sampling_params": {"max_new_tokens": 8, "n": 2}}
    batch = {"text": ["one", "two", "three"], "sampling_params": {"max_new_tokens": 0}}
    ids = {"input_ids": [5, 6, 7, 8], "sampling_params": {"max_new_tokens": 2}}
    (samples, items, by_ids), report = sim.run(lambda: (target._request("POST", "/generate", body),
                                                        target._request("POST", "/generate", batch),
                                                        target._request("POST", "/generate", ids)))
    assert len(samples) == 2 and all(s["text"] == "- a line\n" for s in samples)
    assert len(items) == 3 and all(i["meta_info"]["completion_tokens"] == 0 for i in items)
    assert by_ids["meta_info"]["prompt_tokens"] == 4
    n_req = next(r for r in report["requests"] if r.items == 3 and r.kind == "generate")  # 2 samples + warm-up
    first = report["passes"][n_req.passes[0]]
    assert first.kind == "prefill" and first.requests == [n_req.seq]


def test_chat_completions_are_served_on_the_same_clock(emulator_tokenizer_path):
    sim = make_sim(emulator_tokenizer_path, target_policy=ScriptedPolicy(default_output="hello"))
    target = sim.endpoint("target")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 4}
    out, report = sim.run(lambda: target._request("POST", "/v1/chat/completions", body))
    assert out["object"] == "chat.completion" and out["choices"][0]["message"]["content"] == "hello"
    assert report["requests"][0].path == "/v1/chat/completions" and report["e2e_s"] > 0


def test_bad_body_is_a_typed_400(emulator_tokenizer_path):
    from sgl_speccompact.errors import BackendError

    sim = make_sim(emulator_tokenizer_path)
    target = sim.endpoint("target")
    with pytest.raises(BackendError, match="400"):
        sim.run(lambda: target._request("POST", "/generate", {"text": "x", "sampling_params": {"bogus": 1}}))


def test_a_client_waiting_on_nothing_is_reported_with_its_stack(emulator_tokenizer_path):
    sim = make_sim(emulator_tokenizer_path)
    never = threading.Event()
    with pytest.raises(SimulationStalled, match="never.wait|sim-client"):
        sim.run(lambda: never.wait())


def test_a_client_blocked_where_quiescence_cannot_see_is_a_stall(emulator_tokenizer_path):
    sim = make_sim(emulator_tokenizer_path, stall_s=0.5)
    held = threading.Lock()
    held.acquire()  # a plain lock is not a wait the quiescence rules know: the client never looks blocked
    try:
        with pytest.raises(SimulationStalled, match="no progress"):
            sim.run(lambda: held.acquire(timeout=120))
    finally:
        held.release()


def test_a_client_slower_than_stall_s_but_working_is_not_a_stall(emulator_tokenizer_path):
    """What a loaded machine looks like: long real-time gaps between quiescent instants, CPU used in each."""
    import time

    sim = make_sim(emulator_tokenizer_path, target_policy=ScriptedPolicy(default_output="ok"), stall_s=0.5)
    target = sim.endpoint("target")

    def slow_client():
        for _ in range(8):  # ~0.4 CPU seconds, spread over more than 0.8 s of real time, never quiescent
            t0 = time.thread_time()
            while time.thread_time() - t0 < 0.05:
                pass
            time.sleep(0.1)
        return target._request("POST", "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}})

    out, report = sim.run(slow_client)
    assert out["text"] == "ok" and len(report["requests"]) == 1


def test_a_client_that_never_stops_computing_is_a_stall(emulator_tokenizer_path):
    import time

    sim = make_sim(emulator_tokenizer_path, stall_s=0.5)
    sim.busy_cpu_s = 1.0
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            t0 = time.thread_time()
            while time.thread_time() - t0 < 0.01:
                pass
            time.sleep(0.001)  # lets the monitor look

    try:
        with pytest.raises(SimulationStalled, match="CPU seconds without quiescence"):
            sim.run(spin)
    finally:
        stop.set()


def test_lpm_defers_in_batch_duplicates_and_fcfs_keeps_order(emulator_tokenizer_path):
    from sgl_speccompact.emulator import load_tokenizer
    from sgl_speccompact.emulator.frontend import Frontend, ServedModel, parse_generate
    from sgl_speccompact.emulator.model import EmulatedModel
    from sgl_speccompact.emulator.radix import RadixTree
    from sgl_speccompact.emulator.scheduler import Scheduler

    model = EmulatedModel(ScriptedPolicy(), load_tokenizer(emulator_tokenizer_path))
    front = Frontend(model, ServedModel("m", "m", "m", 100000, None))
    shared = "the same long shared prefix of this conversation, " * 8

    def jobs(texts):
        out, _ = front.jobs(parse_generate({"text": texts, "sampling_params": {"max_new_tokens": 0}}),
                            lambda i: (lambda o, d: None))
        return out

    texts = [shared + "a", shared + "b", "something else entirely", "cached: " + shared]
    orders = {}
    for policy in ("fcfs", "lpm"):
        tree = RadixTree()
        tree.insert((None, None), model.encode("cached: " + shared, add_special_tokens=True))
        sched = Scheduler(model, tree, schedule_policy=policy, max_prefill_tokens=100000)
        sched.add(jobs(texts))
        orders[policy] = [texts.index(j.prompt) for j in sched.next_batch().jobs]
    assert orders["fcfs"] == [0, 1, 2, 3]
    # lpm: longest cached prefix first; the in-batch duplicate of text 0 goes last
    assert orders["lpm"] == [3, 0, 2, 1]
    # chunked prefill: a prompt longer than the chunk is split over passes
    sched = Scheduler(model, RadixTree(), chunked_prefill_size=16)
    sched.add(jobs([shared]))
    sizes = []
    while sched.busy():
        b = sched.next_batch()
        sched.run(b)
        sched.settle(b)
        sizes.append((b.kind, b.shapes[0][1]))
    n = len(model.encode(shared, add_special_tokens=True))
    assert [s for k, s in sizes if k == "prefill"] == [16] * (n // 16) + ([n % 16] if n % 16 else [])


def test_quiescence_rules():
    with ThreadWatch() as watch:
        ev, go = threading.Event(), threading.Event()
        waiter = threading.Thread(target=ev.wait, name="waiter")
        waiter.start()
        pool = ThreadPoolExecutor(max_workers=1)
        pool.submit(lambda: None).result()  # one idle worker
        spinner = threading.Thread(target=lambda: go.wait(30) or [i for i in range(10**9) if go.is_set()],
                                   name="spinner")
        for _ in range(1000):
            if watch.snapshot():
                break
            threading.Event().wait(0.001)
        assert watch.snapshot().quiescent and watch.quiescent()
        spinner.start()  # blocked in a timed wait: still quiescent
        threading.Event().wait(0.01)
        assert watch.snapshot().quiescent and watch.quiescent()
        ev.set()
        waiter.join()
        pool.shutdown()
        go.set()
        snap = watch.snapshot()  # the spinner now computes
        assert not snap.quiescent and "spinner" in snap.running[0]
        assert not watch.quiescent() and not watch.quiescent()  # found again, first, the second time
        spinner.join(0)


def test_invariant_violations_raise():
    req = [RequestRecord(seq=0, server="target", path="/generate", kind="generate", items=1, issued=0.0, finished=1.0)]
    busy = [PassRecord(0, "target", 0, "decode", 0.0, 2.0, [0], 1, 1)]
    with pytest.raises(InvariantViolation, match="busy"):
        check(req, busy, 1.0, ["target"], [0])
    gap = req + [RequestRecord(seq=1, server="target", path="/generate", kind="generate", items=1, issued=1.5,
                               finished=2.0)]
    with pytest.raises(InvariantViolation, match="no answer"):
        check(gap, [], 2.0, ["target"], [0])
