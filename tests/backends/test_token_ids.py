"""Prompts sent as token ids: the ids equal the tokenization of the full text, the history is
tokenized once per compaction, and a tokenizer that cannot be cut keeps getting text."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.errors import ConfigError
from sgl_speccompact.backends.token_ids import PROBES, TokenIdCache, concatenates, segments

from tests.support.endpoint import assert_server_accepts

TRAJECTORIES = Path(__file__).resolve().parents[3] / "shared" / "data" / "trajectories"
FILES = sorted(p for p in TRAJECTORIES.glob("*") if p.suffix in (".json", ".traj")) if TRAJECTORIES.is_dir() else []
needs_data = pytest.mark.skipif(not FILES, reason=f"shared trajectories absent ({TRAJECTORIES})")


class RecordingEndpoint(SpecCompactEndpoint):
    """The real endpoint, recording each prompt text beside the ids it sent, and every body."""

    def __init__(self, *args, **kw):
        self.sent: list[tuple[str, list[int]]] = []  # (prompt text, input_ids sent for it)
        self.bodies: list[dict] = []
        self._rec = threading.Lock()
        super().__init__(*args, **kw)

    def as_token_ids(self, body):
        out = super().as_token_ids(body)
        if "input_ids" in out:
            texts = body["text"] if isinstance(body["text"], list) else [body["text"]]
            ids = out["input_ids"] if isinstance(body["text"], list) else [out["input_ids"]]
            with self._rec:
                self.sent.extend(zip(texts, ids))
        return out

    def _request(self, method, path, body=None):
        if path == "/generate":
            with self._rec:
                self.bodies.append(body)
        return super()._request(method, path, body)


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


def _compact_recorded(url_target, url_drafter, path, send_token_ids=True, source_judge=False):
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
                     config={"send_token_ids": send_token_ids})
    return res, target, drafter


def _check_sent(endpoint, tokenizer):
    """Every prompt's ids are the full text's tokenization; the history went to /tokenize once."""
    assert endpoint.sent, "nothing was sent as token ids"
    for text, ids in endpoint.sent:
        assert ids == tokenizer.encode(text, add_special_tokens=True)
    for body in endpoint.bodies:
        assert "text" not in body and body["input_ids"]
    # each distinct segment of every prompt went to /tokenize exactly once
    distinct = {seg for text, _ in endpoint.sent for seg in segments(text)}
    assert endpoint.token_id_cache.tokenized_segments == len(distinct)
    longest = max(len(text) for text, _ in endpoint.sent)
    total = sum(len(text) for text, _ in endpoint.sent)
    assert endpoint.token_id_cache.tokenized_chars < longest + total // 5  # the history once, not per request


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One SpecCompact compaction per shared trajectory over two emulators (test tokenizer):
    ``[(name, target endpoint, drafter endpoint, emulator prompt tokens)]``; SJC on the first."""
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, EmulatedServer, build_test_tokenizer

    tok = build_test_tokenizer(tmp_path_factory.mktemp("tok-ids"))
    out = []
    with EmulatedServer(tok, ControlledAcceptancePolicy(p_accept=0.7, seed=0), model_path="Qwen/Qwen3-8B") as t, \
            EmulatedServer(tok, ControlledAcceptancePolicy(p_accept=0.7, seed=1), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"]) as d:
        for path in FILES:
            t.flush_cache(), d.flush_cache(), t.reset_stats()
            got = _compact_recorded(t.url, d.url, path, source_judge=not out)
            if got is not None:
                res, target, drafter = got
                assert res.summary
                out.append((path.name, target, drafter, t.stats()["total"]["prompt_tokens"]))
    return out


@needs_data
def test_ids_sent_equal_the_full_texts_tokenization_on_every_trajectory(recorded, emulator_tokenizer):
    assert len(recorded) >= 8
    for name, target, drafter, emulator_prompt_tokens in recorded:
        _check_sent(target, emulator_tokenizer)
        _check_sent(drafter, emulator_tokenizer)
        # the emulator counted the prompt tokens the ids carry
        assert emulator_prompt_tokens == sum(len(ids) for _, ids in target.sent), name
    first_target = recorded[0][1]
    assert any(isinstance(b["input_ids"][0], list) for b in first_target.bodies)  # SJC's batch
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
        for text, _ in target.sent + drafter.sent:
            assert cache.ids(text) == qwen3_tokenizer.encode(text, add_special_tokens=True)
            checked += 1
    assert checked > 100


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
