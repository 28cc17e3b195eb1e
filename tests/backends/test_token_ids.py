"""Prompts sent as token ids: the prompt every request runs on equals the tokenization of its full
text (whole, or rebuilt by the server from a session and the suffix sent), the history is not
tokenized per request, and a tokenizer that cannot be cut keeps getting text."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.errors import ConfigError
from sgl_speccompact.backends.token_ids import PROBES, TokenIdCache, concatenates, segments

from tests.support.endpoint import assert_server_accepts

TRAJECTORIES = Path(__file__).resolve().parents[3] / "shared" / "data" / "trajectories"
FILES = sorted(p for p in TRAJECTORIES.glob("*") if p.suffix in (".json", ".traj")) if TRAJECTORIES.is_dir() else []
needs_data = pytest.mark.skipif(not FILES, reason=f"shared trajectories absent ({TRAJECTORIES})")


class RecordingEndpoint(SpecCompactEndpoint):
    """The real endpoint, recording each request's prompt text beside the body it went in.

    ``sent``: ``(prompt text, input_ids sent)`` of requests sent whole as ids;
    ``by_rid``: ``rid -> prompt text`` of requests that named their rid (a
    session's, whose prompt the server rebuilds).
    """

    def __init__(self, *args, **kw):
        self.sent: list[tuple[str, list[int]]] = []  # (prompt text, input_ids sent for it)
        self.by_rid: dict[str, str] = {}  # rid -> prompt text
        self.bodies: list[dict] = []
        self._rec = threading.Lock()
        self._texts = threading.local()
        super().__init__(*args, **kw)

    def _generate(self, body):
        self._texts.now = body.get("text")
        return super()._generate(body)

    def _post_generate(self, body):
        text = self._texts.now
        texts = text if isinstance(text, list) else [text]
        with self._rec:
            self.bodies.append(body)
            if "input_ids" in body and "session_params" not in body:
                ids = body["input_ids"] if isinstance(text, list) else [body["input_ids"]]
                self.sent.extend(zip(texts, ids))
            if body.get("rid") is not None:
                rids = body["rid"] if isinstance(body["rid"], list) else [body["rid"]]
                self.by_rid.update(zip(rids, texts))
        return super()._post_generate(body)


def ran(server) -> dict[str, list[int]]:
    """``rid -> prompt ids`` of every request ``server`` (an EmulatedServer) runs from now on."""
    seen: dict[str, list[int]] = {}
    submit = server.engine.submit

    def recording(jobs):
        seen.update((j.rid, list(j.input_ids)) for j in jobs)
        return submit(jobs)

    server.engine.submit = recording
    return seen


# ---------------------------------------------------------------- the cut rule, offline


def test_cuts_only_after_a_non_blank_line_before_visible_ascii():
    assert segments("a\nb\n\nc\n d\n-e\n\u00e9") == ["a\n", "b\n\nc\n d\n", "-e\n\u00e9"]
    assert "".join(segments(PROBES[0])) == PROBES[0] and len(segments(PROBES[0])) > 5


def test_cache_tokenizes_each_distinct_segment_once():
    calls = []

    def tokenize(texts):
        calls.append(list(texts))
        return [[ord(c) for c in t] for t in texts]

    cache = TokenIdCache(tokenize, prefix=[1])
    history = "[user]\nfix a.py\n[assistant]\nok\n"
    for line in ("- one\n", "- two\n", "- one\n"):
        text = history + line + "Is it supported?"
        assert cache.ids(text) == [1] + [ord(c) for c in text]
    flat = [t for call in calls for t in call]
    assert len(flat) == len(set(flat)) == cache.tokenized_segments
    assert flat.count("fix a.py\n") == 1


def _marked(texts):
    """A tokenizer whose ids show where each tokenized text began: a cut in the wrong place shows."""
    return [[1000 + len(t)] + [ord(c) for c in t] for t in texts]


PIECES = st.sampled_from(["a", "b.", " ", "\n", "\n\n", "- x\n", "[user]\n", "\u00e9", "def f():\n    ", "(1)"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 400), st.lists(PIECES, max_size=12).map("".join), st.booleans()),
                min_size=1, max_size=8),
       st.lists(PIECES, max_size=120).map("".join))
def test_a_prompt_started_from_a_recent_one_has_the_ids_of_its_own_segments(steps, history):
    """Each prompt is a cut of the one before (or of the history) plus a new tail; its ids are those
    of its own segments, whichever recent prompt its head was taken from."""
    cache = TokenIdCache(_marked, prefix=[1])
    text = history
    for keep, tail, prefix in steps:
        text = text[:keep] + tail
        want = ([1] if prefix else []) + [i for part in _marked(segments(text)) for i in part]
        assert cache.ids(text, prefix=prefix) == want, (text,)


def test_the_ids_handed_out_are_the_callers_own():
    cache = TokenIdCache(_marked)
    history = "[user]\nfix a.py\n[assistant]\nok\n"
    first = cache.ids(history + "Q1")
    first.clear()  # a caller that changes its list changes nothing the cache keeps
    assert cache.ids(history + "Q2") == [i for part in _marked(segments(history + "Q2")) for i in part]


def test_a_call_can_tokenize_through_its_own_connection():
    def dead(texts):  # the connection of a compaction that has been cancelled
        raise AssertionError("the cache's own tokenize was used")

    own = []
    cache = TokenIdCache(dead)
    text = "a\nb\n"
    assert cache.ids(text, lambda ts: own.extend(ts) or [[ord(c) for c in t] for t in ts]) == [ord(c) for c in text]
    assert own == ["a\n", "b\n"]


def test_a_tokenizer_that_marks_each_text_start_is_refused():
    # SentencePiece-style: every encoded text starts with a word-start marker
    def tokenize(texts):
        return [[9999] + [ord(c) for c in t] for t in texts]

    def full(text):
        return tokenize([text])[0]

    assert not concatenates(full, tokenize, [])
    assert concatenates(lambda t: [ord(c) for c in t], lambda ts: [[ord(c) for c in t] for t in ts], [])


class _MarkerServer(SpecCompactEndpoint):
    """In-process server whose tokenizer puts a marker before every text."""

    def __init__(self, **kw):
        self.bodies = []
        super().__init__("http://in-process", **kw)

    def _request(self, method, path, body=None):
        if path == "/get_model_info":
            return {"model_path": "Qwen/Qwen3-8B", "model_type": "qwen3"}
        if path == "/tokenize":
            return {"tokens": [[9999] + [ord(c) for c in p] for p in body["prompt"]]}
        self.bodies.append(body)
        return {"text": "", "meta_info": {"prompt_tokens": 1, "cached_tokens": 0, "completion_tokens": 0}}


def test_endpoint_keeps_text_for_such_a_tokenizer_and_refuses_when_ids_are_required():
    auto = _MarkerServer()
    auto.cache_prefix("line one\nline two\n")
    assert auto.bodies == [{"text": "line one\nline two\n", "sampling_params": {"max_new_tokens": 0}}]
    with pytest.raises(ConfigError, match="token_ids=False"):
        _MarkerServer(token_ids=True).cache_prefix("line one\nline two\n")


# ---------------------------------------------------------------- every shared trajectory, end to end


def _compact_recorded(url_target, url_drafter, path, send_token_ids=True, source_judge=False, sessions=True):
    from sgl_speccompact.errors import SpecCompactError
    from sgl_speccompact.history.formats import load_history
    from sgl_speccompact.methods.registry import run_method

    try:
        messages = load_history(path)
    except SpecCompactError:  # the tau2 task list, which is not a conversation
        return None
    target = RecordingEndpoint(url_target)
    drafter = RecordingEndpoint(url_drafter, lora_path="drafter")
    res = run_method("speccompact", messages, target=target, drafter=drafter, source_judge=source_judge,
                     config={"send_token_ids": send_token_ids, "server_sessions": sessions})
    return res, target, drafter


def _check_sent(endpoint, tokenizer, server_ran: dict[str, list[int]]):
    """Every prompt the server ran is its full text's tokenization; the history was not tokenized per request."""
    for text, ids in endpoint.sent:
        assert ids == tokenizer.encode(text, add_special_tokens=True)
    continued = [b for b in endpoint.bodies if "rid" in (b.get("session_params") or {})]
    assert continued, "no request continued a session"
    for body in continued:
        assert "text" not in body and body["input_ids"]
    for rid, text in endpoint.by_rid.items():
        assert server_ran[rid] == tokenizer.encode(text, add_special_tokens=True), rid
    texts = [t for _, t in endpoint.sent] + list(endpoint.by_rid.values())
    assert endpoint.token_id_cache.tokenized_chars < sum(map(len, texts)) // 5  # the history not per request


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One SpecCompact compaction per shared trajectory over two emulators (test tokenizer), in sessions:
    ``[(name, target endpoint, drafter endpoint, prompts the servers ran)]``; SJC on the first."""
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, EmulatedServer, build_test_tokenizer

    tok = build_test_tokenizer(tmp_path_factory.mktemp("tok-ids"))
    out = []
    with EmulatedServer(tok, ControlledAcceptancePolicy(p_accept=0.7, seed=0), model_path="Qwen/Qwen3-8B") as t, \
            EmulatedServer(tok, ControlledAcceptancePolicy(p_accept=0.7, seed=1), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"]) as d:
        for path in FILES:
            t.flush_cache(), d.flush_cache()
            server_ran = {"target": ran(t), "drafter": ran(d)}
            got = _compact_recorded(t.url, d.url, path, source_judge=not out)
            if got is not None:
                res, target, drafter = got
                assert res.summary
                out.append((path.name, target, drafter, server_ran))
        assert t.stats()["sessions"]["open"] == d.stats()["sessions"]["open"] == 0
    return out


@needs_data
def test_every_prompt_run_equals_the_full_texts_tokenization_on_every_trajectory(recorded, emulator_tokenizer):
    assert len(recorded) >= 8
    for _, target, drafter, server_ran in recorded:
        _check_sent(target, emulator_tokenizer, server_ran["target"])
        _check_sent(drafter, emulator_tokenizer, server_ran["drafter"])
    first_target = recorded[0][1]
    assert any(isinstance(b.get("input_ids", [0])[0], list) for b in first_target.bodies)  # SJC's batch
    for _, target, drafter, _ in recorded[:2]:
        for body in target.bodies + drafter.bodies:
            assert_server_accepts(body)


@needs_data
@pytest.mark.slow
def test_the_same_prompts_cut_exactly_in_qwen3s_tokenizer(recorded, qwen3_tokenizer):
    def tokenize(texts):
        return [qwen3_tokenizer.encode(t, add_special_tokens=False) for t in texts]

    assert qwen3_tokenizer.encode("", add_special_tokens=True) == []  # Qwen3 adds no BOS
    assert concatenates(lambda t: qwen3_tokenizer.encode(t, add_special_tokens=True), tokenize, [])
    checked = 0
    for _, target, drafter, _ in recorded:
        cache = TokenIdCache(tokenize)
        for text in [t for t, _ in target.sent + drafter.sent] + list(target.by_rid.values()) + \
                list(drafter.by_rid.values()):
            assert cache.ids(text) == qwen3_tokenizer.encode(text, add_special_tokens=True)
            checked += 1
    assert checked > 100


@needs_data
def test_without_sessions_every_request_carries_its_whole_prompt_as_ids(emulators, emulator_tokenizer):
    target, drafter = emulators
    res, t, d = _compact_recorded(target.url, drafter.url, FILES[0], sessions=False)
    assert res.summary and t.sent and d.sent
    for endpoint in (t, d):
        for text, ids in endpoint.sent:
            assert ids == emulator_tokenizer.encode(text, add_special_tokens=True)
        for body in endpoint.bodies:
            assert "session_params" not in body and "text" not in body and body["input_ids"]


@needs_data
def test_switch_off_sends_text(emulators):
    target, drafter = emulators
    res, t, d = _compact_recorded(target.url, drafter.url, FILES[0], send_token_ids=False)
    assert res.summary and t.bodies and d.bodies
    assert not t.sent and not d.sent
    for body in t.bodies + d.bodies:
        assert "input_ids" not in body and body["text"]
        assert_server_accepts(body)


@pytest.fixture
def emulators(make_emulated_server):
    from sgl_speccompact.emulator import ControlledAcceptancePolicy

    target = make_emulated_server(ControlledAcceptancePolicy(p_accept=0.7, seed=0), model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(ControlledAcceptancePolicy(p_accept=0.7, seed=1), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    return target, drafter
