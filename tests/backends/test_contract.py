"""Every backend offers the whole contract (``backends/contract.py``); a plain sglang backend is held to it."""

from sglang.lang.backend.base_backend import BaseBackend
from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint
from sglang.lang.chat_template import get_chat_template

from sgl_speccompact.backends.contract import (BACKEND_MEMBERS, PROGRAM_MEMBERS, Backend, BackendDefaults,
                                               PlainBackend, ProgramBackend, runs_on)
from sgl_speccompact.backends.endpoint import SpecCompactEndpoint, connect

from tests.support.endpoint import InProcessEndpoint
from tests.support.scripted import BatchJudgeBackend, ScriptedBackend
from tests.support.train_fixtures import ScriptedTarget


def declared(protocol) -> set[str]:
    """The members a protocol class declares itself: its annotated fields and its methods."""
    own = vars(protocol)
    return set(own.get("__annotations__", {})) | {k for k, v in own.items() if callable(v) and not k.startswith("_")}


def missing(backend) -> list[str]:
    """The contract's members ``backend`` lacks."""
    return [m for m in BACKEND_MEMBERS if not hasattr(backend, m)]


def test_the_static_member_lists_are_the_protocols():
    assert set(PROGRAM_MEMBERS) == declared(ProgramBackend)
    assert set(BACKEND_MEMBERS) == declared(ProgramBackend) | declared(Backend)


def test_the_endpoint_and_the_test_backends_conform():
    for backend in (InProcessEndpoint(), ScriptedBackend(), BatchJudgeBackend(), ScriptedTarget(),
                    PlainBackend(ScriptedBackend())):
        assert isinstance(backend, Backend) and missing(backend) == [], type(backend).__name__
        assert connect(backend) is backend  # nothing to wrap


def test_the_endpoint_on_the_emulator_conforms(make_emulated_server):
    srv = make_emulated_server(model_path="Qwen/Qwen3-8B")
    backend = SpecCompactEndpoint(srv.url, timeout_s=30)
    assert isinstance(backend, Backend) and missing(backend) == []
    assert backend.with_priority(3).priority == 3 and backend.with_routing_key(None) is backend


def test_a_backend_that_lost_a_member_does_not_conform():
    class NoViews(ScriptedBackend):
        with_cancel = None  # the view, taken away

    bare = BaseBackend()  # sglang's frontend backend alone: the program surface, none of the extras
    assert isinstance(bare, ProgramBackend) and not isinstance(bare, Backend)
    assert "judge_batch" in missing(bare) and "with_cancel" in missing(bare)
    assert not isinstance(NoViews(), Backend)


def test_a_plain_sglang_backend_is_held_to_the_contract():
    ep = object.__new__(RuntimeEndpoint)  # sglang's endpoint without a server
    ep.base_url, ep.api_key, ep.model_info = "http://plain", None, {"model_path": "m"}
    ep.chat_template = get_chat_template("default")
    plain = connect(ep)
    assert isinstance(plain, PlainBackend) and runs_on(plain) is ep and missing(plain) == []
    assert plain.base_url == "http://plain" and plain.model_info["model_path"] == "m"
    assert plain.judge_batch(["x"], "positive", "negative", 0.5) is None  # declined: judged one at a time
    assert plain.with_cancel(object()) is plain and plain.with_priority(1) is plain
    assert plain.context_length() is None and plain.label_tokens("positive", "negative") is None


def test_the_defaults_are_no_ops():
    d = BackendDefaults()
    assert d.with_token_ids(True) is d and d.with_routing_key("k") is d and d.with_yield(object()) is d
    assert d.count_tokens(["abcdefgh"]) == [2] and d.base_url is None and dict(d.model_info) == {}
