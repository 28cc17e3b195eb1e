"""A block's requests in one sglang session: each prompt sent once, the same prompts run, every session closed.

The tree (which node a prompt continues, at which restart point) is checked
offline; the rest runs against the SGLang-API emulator, whose sessions follow
sglang 0.5.23's ``Session.create_req``: the prompt each request runs on is
compared with its full text's tokenization, and the sessions the emulator
holds are counted after success, failure, cancel and deadline.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.backends.server_session import ServerSession
from sgl_speccompact.emulator import ControlledAcceptancePolicy
from sgl_speccompact.errors import BackendError, CompactionCancelledError, CompactionTimeoutError
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.result import HostCpu
from sgl_speccompact.service.cancel import CancelScope

HISTORY = json.loads((Path(__file__).resolve().parents[2] / "examples" / "history.json").read_text())
NO_SESSIONS = {"server_sessions": False}


def ran(server) -> dict[str, list[int]]:
    """``rid -> prompt ids`` of every request ``server`` (an EmulatedServer) runs from now on."""
    seen: dict[str, list[int]] = {}
    submit = server.engine.submit

    def recording(jobs):
        seen.update((j.rid, list(j.input_ids)) for j in jobs)
        return submit(jobs)

    server.engine.submit = recording
    return seen


# ---------------------------------------------------------------- the tree, offline


def chars(text: str) -> int:
    return len(text)  # a toy tokenizer: one token per character


def grown(session: ServerSession, texts: list[str], tokens=chars):
    """Continue the session with each prompt in turn, as answered requests; the continuations."""
    out = []
    for text in texts:
        cont = session.continuation([text], tokens)
        out.append(cont)
        session.add(cont, [text], session.rids(1), [tokens(text)])
    return out


def test_a_prompt_continues_the_deepest_earlier_prompt_it_starts_with_at_a_restart_point():
    s = ServerSession("s")
    prefix = "[history]\nline one\nSlot contracts.\n"
    a = prefix + "Slot A.\n- a1\n"
    first, branch, line = grown(s, [prefix, a, a + "- a2\n"])
    assert first.node is s.root and first.at == 0  # nothing to continue: the prompt goes whole
    assert branch.node.end == len(prefix) and (branch.at, branch.offset) == (len(prefix), len(prefix))
    assert line.node.end == len(a) and line.at == len(a)
    other = s.continuation([prefix + "Slot B.\n- b1\n"], chars)  # a sibling branch continues the prefix
    assert other.node.end == len(prefix)


def test_where_the_end_is_no_restart_point_the_continuation_starts_at_the_nodes_last_segment():
    s = ServerSession("s")
    prefix = "[history]\nline one\nAnswer positive or negative.\n\n"  # ends in a blank line: no restart there
    grown(s, [prefix])
    cont = s.continuation([prefix + "Slot request: Goal\n"], lambda tail: {"Answer positive or negative.\n\n": 7}[tail])
    start = prefix.index("Answer")
    assert (cont.at, cont.offset) == (start, len(prefix) - 7)


def test_a_batch_continues_the_node_every_prompt_starts_with():
    s = ServerSession("s")
    prefix = "[h]\nx\n"
    grown(s, [prefix, prefix + "A\n"])
    cont = s.continuation([prefix + "A\n- q1", prefix + "B\n- q2"], chars)
    assert cont.node.end == len(prefix)
    assert s.continuation([prefix + "A\n- q1", prefix + "A\n- q2"], chars).node.end == len(prefix) + 2


def test_rids_are_unique_and_none_is_the_start_of_another():
    rids = ServerSession("abc").rids(12)
    assert len(set(rids)) == 12
    assert not any(a != b and b.startswith(a) for a in rids for b in rids)


# ---------------------------------------------------------------- on the emulator


@pytest.fixture
def pair(make_emulated_server):
    target = make_emulated_server(ControlledAcceptancePolicy(p_accept=0.7, seed=0), model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(ControlledAcceptancePolicy(p_accept=0.7, seed=1), model_path="Qwen/Qwen3-0.6B",
                                   lora_paths=["drafter"])
    return target, drafter


def endpoints(pair):
    target, drafter = pair
    return SpecCompactEndpoint(target.url), SpecCompactEndpoint(drafter.url, lora_path="drafter")


def open_on(pair) -> list[int]:
    return [srv.stats()["sessions"]["open"] for srv in pair]


def compaction(pair, config=None, target=None, **kw):
    t, d = endpoints(pair)
    res = run_method("speccompact", HISTORY, target=target or t, drafter=d, config=config or {}, **kw)
    return res, t, d


def test_same_summary_and_tokens_with_and_without_sessions_and_every_prompt_sent_once(pair):
    bodies: list[dict] = []

    class Counting(SpecCompactEndpoint):
        def _post_generate(self, body):
            bodies.append(body)
            return super()._post_generate(body)

    def run(config):
        for srv in pair:
            srv.flush_cache()
        bodies.clear()
        res = run_method("speccompact", HISTORY, target=Counting(pair[0].url), drafter=endpoints(pair)[1],
                         source_judge=True, config=config, previous_summary="## Goal\n- Fix the failing test\n")
        return res, len(json.dumps(bodies))

    whole, whole_bytes = run(NO_SESSIONS)
    sessions, session_bytes = run({})
    assert sessions.summary == whole.summary
    def counted(res):  # cached tokens depend on which concurrent branch arrives first, sessions or not
        return {server: {kind: (c.requests, c.prompt_tokens, c.completion_tokens) for kind, c in kinds.items()}
                for server, kinds in res.stats.requests.items()}

    assert counted(sessions) == counted(whole)  # the same requests, prompts and outputs
    assert session_bytes < whole_bytes / 3
    roots = [b["text"] for b in bodies if "text" in b]  # the shared prefix; SJC's environment record
    continued = [b["input_ids"] for b in bodies if "rid" in (b.get("session_params") or {})]
    assert len(roots) <= 2 and len(continued) >= len(bodies) - 2
    assert open_on(pair) == [0, 0]


def test_the_session_is_closed_after_success_failure_cancel_and_deadline(pair):
    res, t, d = compaction(pair)
    assert res.summary and open_on(pair) == [0, 0] and t.open_sessions() == d.open_sessions() == []

    class FailsAt(SpecCompactEndpoint):
        """The target answers its k-th continuation with an error."""

        def __init__(self, url, k, fail):
            super().__init__(url)
            self.k, self.fail, self.n = k, fail, 0
            self.lock = threading.Lock()

        def _post_generate(self, body):
            if "rid" in (body.get("session_params") or {}):
                with self.lock:
                    self.n += 1
                    hit = self.n == self.k
                if hit:
                    self.fail()
            return super()._post_generate(body)

    def boom():
        raise BackendError("the target failed")

    with pytest.raises(BackendError, match="the target failed"):
        compaction(pair, target=FailsAt(pair[0].url, 5, boom))
    assert open_on(pair) == [0, 0]

    for reason, error in (("cancelled", CompactionCancelledError), ("timeout", CompactionTimeoutError)):
        scope = CancelScope(deadline_s=3600)  # "timeout": what the scope does when its deadline passes
        ep = FailsAt(pair[0].url, 5, lambda reason=reason, scope=scope: scope.cancel(reason))
        with pytest.raises(error):
            compaction(pair, target=ep.with_cancel(scope))
        assert open_on(pair) == [0, 0], reason
        assert ep.open_sessions() == []


def test_a_server_without_sessions_gets_whole_prompts_and_is_asked_once(pair, emulator_tokenizer_path):
    from starlette.responses import JSONResponse

    from sgl_speccompact.emulator import EmulatedServer

    asked = []
    srv = EmulatedServer(emulator_tokenizer_path, ControlledAcceptancePolicy(p_accept=0.7, seed=0),
                         model_path="Qwen/Qwen3-8B")
    app = srv.app

    async def no_sessions(scope, receive, send):  # an sglang older than sessions, or sglang-router 0.3.2
        if scope["type"] == "http" and scope["path"] == "/open_session":
            asked.append(1)
            return await JSONResponse({"detail": "Not Found"}, 404)(scope, receive, send)
        return await app(scope, receive, send)

    srv.app = no_sessions
    with srv:
        t, d = SpecCompactEndpoint(srv.url), endpoints(pair)[1]
        first = run_method("speccompact", HISTORY, target=t, drafter=d)
        second = run_method("speccompact", HISTORY, target=t, drafter=d)
    assert first.summary == second.summary == compaction(pair, NO_SESSIONS)[0].summary
    assert len(asked) == 1  # remembered for the endpoint
    assert open_on(pair) == [0, 0]


def test_a_server_that_strips_a_leading_bos_from_a_continuation_gets_the_prompt_whole(make_emulated_server,
                                                                                      emulator_tokenizer):
    srv = make_emulated_server(ControlledAcceptancePolicy(seed=0), model_path="Qwen/Qwen3-8B")
    im_start = emulator_tokenizer.convert_tokens_to_ids("<|im_start|>")
    srv.frontend.sessions.bos_token_id = im_start  # SmolLM2's bos_token is <|im_start|>
    server_ran = ran(srv)
    head = "<|im_start|>user\nfix a.py\n<|im_end|>\n"
    sent = []

    class Recording(SpecCompactEndpoint):
        def _post_generate(self, body):
            sent.append(body)
            return super()._post_generate(body)

    with Recording(srv.url).prefix_session() as view:
        view._generate({"text": head, "sampling_params": {"max_new_tokens": 0}})
        for k in range(2):
            text = head + f"<|im_start|>assistant\nline {k}\n"
            out = view._generate({"text": text, "sampling_params": {"max_new_tokens": 0}})
            assert out["meta_info"]["prompt_tokens"] == len(emulator_tokenizer.encode(text))
            assert server_ran[out["meta_info"]["id"]] == emulator_tokenizer.encode(text)
        assert view._sessions.strips == {im_start}
    kinds = ["root" if "text" in b else "continued" if "session_params" in b else "whole" for b in sent]
    assert kinds == ["root", "continued", "whole", "whole"]  # one answer dropped, then no more tries
    assert srv.stats()["sessions"]["open"] == 0


def test_a_session_the_server_lost_sends_the_rest_whole(pair):
    whole = compaction(pair, NO_SESSIONS)[0]

    class Loses(SpecCompactEndpoint):
        """Closes its own session on the server after the third continuation (a restart, an idle timeout)."""

        n, lost, whole_after = 0, False, 0

        def _post_generate(self, body):
            if Loses.lost and "session_params" not in body:
                Loses.whole_after += 1
            out = super()._post_generate(body)
            if "rid" in (body.get("session_params") or {}):
                Loses.n += 1
                if Loses.n == 3:
                    pair[0].frontend.sessions.close(body["session_params"]["id"])
                    Loses.lost = True
            return out

    res = compaction(pair, target=Loses(pair[0].url))[0]
    assert res.summary == whole.summary
    assert Loses.whole_after > 0  # the requests after the loss went whole


def test_a_continuation_too_long_for_the_context_goes_whole_and_is_refused_as_before(make_emulated_server,
                                                                                    emulator_tokenizer):
    from sgl_speccompact.errors import PromptTooLongError

    srv = make_emulated_server(ControlledAcceptancePolicy(seed=0), model_path="Qwen/Qwen3-8B", context_length=64)
    head = "".join(f"line {k}\n" for k in range(8))
    with SpecCompactEndpoint(srv.url).prefix_session() as view:
        view._generate({"text": head, "sampling_params": {"max_new_tokens": 0}})
        with pytest.raises(PromptTooLongError, match="maximum context length"):
            view._generate({"text": head + "- more\n", "sampling_params": {"max_new_tokens": 60}})


def test_host_cpu_counts_the_compactions_threads(pair):
    import time

    t0 = time.process_time()
    res = compaction(pair)[0]
    spent = time.process_time() - t0  # the emulators run in this process too: an upper bound
    assert 0 < res.stats.host_cpu_s <= spent


def test_host_cpu_counts_a_request_thread_whole_and_a_pipeline_thread_from_its_begin():
    import time

    cpu = HostCpu()
    before = time.thread_time()
    cpu.begin()
    cpu.begin()  # again: no effect
    seen = {}

    def request_thread():
        sum(i * i for i in range(200_000))  # work before its first request counts too
        seen["own"] = time.thread_time()
        cpu.touch()

    t = threading.Thread(target=request_thread)
    t.start()
    t.join()
    cpu.touch()
    after = time.thread_time()
    assert seen["own"] <= cpu.seconds <= seen["own"] + (after - before) + 0.05
