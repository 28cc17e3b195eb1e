"""sglang sessions on a real sglang 0.5.23 server: the same tokens with and without them, and none left open.

A block's requests share one session per server (``backends/server_session.py``):
each prompt after the first sends only its suffix and the server rebuilds the
rest.  Here the real server does the rebuilding: the requests a session sends
must give the tokens and logprobs the whole prompts give, a compaction must
write the same summary from the same requests with fewer bytes, and after a
cancelled compaction every session it opened must be closed on the server
(probed by opening the same id again: sglang refuses an id still open).
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from tests.real_sglang import scripts
from tests.real_sglang.reading import history
from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.errors import CompactionCancelledError
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.methods.request import MethodRequest
from sgl_speccompact.service.cancel import CancelScope

pytestmark = pytest.mark.real_sglang

POS, NEG = 30487, 42224  # "positive", "negative" in Qwen3's vocabulary
HEAD = ("<|im_start|>system\nYou summarize.<|im_end|>\n<|im_start|>user\n[tool result bash id=c1]\n"
        "Traceback (most recent call last):\n  File \"a.py\", line 3\nValueError: bad\n\n"
        "Answer positive or negative.\n\n")  # ends in a blank line: a continuation backs up one segment


class Recording(SpecCompactEndpoint):
    """The real endpoint, keeping every /generate body and answer, and the sessions it opened."""

    def __init__(self, *args, **kw):
        self.sent: list[tuple[dict, object]] = []
        self.opened: list[str] = []
        self.lock = threading.Lock()
        super().__init__(*args, **kw)

    def _post_generate(self, body):
        out = super()._post_generate(body)
        with self.lock:
            self.sent.append((body, out))
        return out

    def _open_session(self):
        session = super()._open_session()
        if session is not None:
            with self.lock:
                self.opened.append(session.id)
        return session


def requests_of(endpoint: Recording) -> list[dict]:
    """Each request's prompt length and output, order left out (branches run concurrently)."""
    out = []
    for _, answer in endpoint.sent:
        for a in answer if isinstance(answer, list) else [answer]:
            out.append({"prompt_tokens": a["meta_info"]["prompt_tokens"], "output_ids": a["output_ids"]})
    return sorted(out, key=json.dumps)


def test_a_session_continuation_gives_the_tokens_and_logprobs_of_the_whole_prompt(servers):
    url = servers.target.url
    steps = [{"text": HEAD, "sampling_params": {"max_new_tokens": 0}},
             {"text": HEAD + "Slot request: Goal\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
              "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}},
             {"text": HEAD + "Slot request: Goal\n- Fix a.py\nIs the line supported?<|im_end|>\n"
                             "<|im_start|>assistant\n<think>\n\n</think>\n\n",
              "sampling_params": {"max_new_tokens": 0, "temperature": 0}, "return_logprob": True,
              "token_ids_logprob": [POS, NEG], "top_logprobs_num": 5}]
    whole = Recording(url)
    answers = [whole._generate(dict(s)) for s in steps]
    servers.target.use(scripts.TARGET, "target")  # an empty radix cache again
    session = Recording(url)
    with session.prefix_session() as view:
        continued = [view._generate(dict(s)) for s in steps]
    kinds = [("session_params" in b, "input_ids" in b) for b, _ in session.sent]
    assert kinds == [(True, False), (True, True), (True, True)]  # the root as text, then suffixes
    assert session.sent[1][0]["session_params"]["offset"] < answers[0]["meta_info"]["prompt_tokens"]  # backed up
    for a, b in zip(answers, continued):
        assert b["meta_info"]["prompt_tokens"] == a["meta_info"]["prompt_tokens"]
        assert b["output_ids"] == a["output_ids"]
    got = {int(t): lp for lp, t, *_ in continued[2]["meta_info"]["output_token_ids_logprobs"][0]}
    want = {int(t): lp for lp, t, *_ in answers[2]["meta_info"]["output_token_ids_logprobs"][0]}
    assert got.keys() == want.keys() and all(abs(got[t] - want[t]) < 1e-3 for t in want), (got, want)
    assert session.open_sessions() == []


def test_a_compaction_writes_the_same_summary_from_the_same_requests_with_and_without_sessions(servers):
    runs = {}
    for on in (False, True):
        servers.reset()
        target = Recording(servers.target.url)
        drafter = Recording(servers.drafter.url)
        res = run_method("speccompact", MethodRequest(history(), schema=scripts.SCHEMA), target=target,
                         drafter=drafter, config={**scripts.JUDGE, "server_sessions": on})
        sent = sum(len(json.dumps(b)) for ep in (target, drafter) for b, _ in ep.sent)
        runs[on] = (res, requests_of(target), requests_of(drafter), sent, target, drafter)
    (off, t_off, d_off, bytes_off, *_), (on, t_on, d_on, bytes_on, target, drafter) = runs[False], runs[True]
    assert on.summary == off.summary
    assert t_on == t_off and d_on == d_off  # every request's prompt length and output tokens
    assert any("rid" in (b.get("session_params") or {}) for b, _ in target.sent + drafter.sent)
    print(f"bytes of /generate bodies: {bytes_off} whole, {bytes_on} in sessions")
    assert bytes_on < bytes_off / 2
    assert target.open_sessions() == drafter.open_sessions() == []


def test_no_session_is_left_open_after_a_cancelled_compaction(servers):
    scope = CancelScope()

    class CancelsAt(Recording):
        n = 0

        def _post_generate(self, body):
            if "rid" in (body.get("session_params") or {}):
                with self.lock:
                    CancelsAt.n += 1
                    hit = CancelsAt.n == 4
                if hit:
                    scope.cancel("cancelled")  # the client left: this request is not sent, the rest stop
            return super()._post_generate(body)

    target = CancelsAt(servers.target.url)
    drafter = Recording(servers.drafter.url)
    with pytest.raises(CompactionCancelledError):
        run_method("speccompact", MethodRequest(history(), schema=scripts.SCHEMA), target=target.with_cancel(scope),
                   drafter=drafter.with_cancel(scope), config=scripts.JUDGE)
    opened = [(servers.target.url, sid) for sid in target.opened] + \
             [(servers.drafter.url, sid) for sid in drafter.opened]
    assert len(opened) == 2
    for url, sid in opened:  # sglang refuses to open an id that is still open
        r = httpx.post(url + "/open_session", json={"capacity_of_str_len": 0, "session_id": sid}, timeout=60)
        assert r.status_code == 200 and r.json() == sid, (url, r.text)
        assert httpx.post(url + "/close_session", json={"session_id": sid}, timeout=60).status_code == 200
    assert target.open_sessions() == drafter.open_sessions() == []
