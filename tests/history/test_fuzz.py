"""Fuzzing as a test layer, bounded to seconds-to-minutes on two cores.

* ``schemathesis`` generates request bodies from the service's OpenAPI
  schema, valid and invalid (negative testing), and sends them to the app
  around the real methods on emulated SGLang servers: no 500, no hang, the
  runner never sees (or leaves) a mutated history.
* ``hypothesis`` property tests of the history parser and of every history
  format the loaders accept: they return messages or raise a typed error,
  never anything else, and never change their input.
"""

from __future__ import annotations

import copy
import json
import threading

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgl_speccompact.errors import SpecCompactError
from sgl_speccompact.history.formats import load_history
from sgl_speccompact.history.messages import parse_messages, render_history

FUZZ_EXAMPLES = 25  # cases per generation phase; each valid one runs a real compaction on the emulator


class Unmutated:
    """Wraps run_method: the history it gets is left exactly as it was."""

    def __init__(self, run_method):
        self.run_method = run_method
        self.mutated: list = []
        self._lock = threading.Lock()

    def __call__(self, method, request, **kw):
        # The runner gets a MethodRequest; its callbacks compare by identity, so only the history is compared.
        before = copy.deepcopy(request.messages)
        try:
            return self.run_method(method, request, **kw)
        finally:
            if request.messages != before:
                with self._lock:
                    self.mutated.append(before)


@pytest.fixture(scope="module")
def fuzz_app(emulator_tokenizer_path):
    from sgl_speccompact import methods
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.service.app import ServiceSettings, create_app
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, EmulatedServer

    servers = [EmulatedServer(emulator_tokenizer_path, policy=ControlledAcceptancePolicy(seed=i), model_path=path,
                              lora_paths=lora).start()
               for i, (path, lora) in enumerate((("Qwen/Qwen3-8B", None), ("Qwen/Qwen3-0.6B", ["drafter"])))]
    runner = Unmutated(methods.run_method)
    app = create_app(SpecCompactEndpoint(servers[0].url, timeout_s=30),
                     SpecCompactEndpoint(servers[1].url, lora_path="drafter", timeout_s=30),
                     runner=runner, methods=methods.METHODS,
                     settings=ServiceSettings(compaction_timeout_s=60, max_body_mb=1.0),
                     default_config={"max_history_messages": 50, "max_history_chars": 20_000})
    app.state.fuzz_runner = runner
    yield app
    for s in servers:
        s.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_service_openapi_fuzz(fuzz_app, mode):
    from schemathesis.generation.modes import GenerationMode

    api = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)
    strategy = api["/v1/compact"]["POST"].as_strategy(generation_mode=GenerationMode(mode))

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=strategy)
    def one(case):
        response = case.call(timeout=90)  # a hang fails here
        assert response.status_code < 500, response.text  # healthy emulated upstreams: no 5xx at all
        assert not fuzz_app.state.fuzz_runner.mutated
        if response.status_code >= 400:
            body = response.json()
            assert set(body) == {"error"} and body["error"]["type"]  # typed, never a partial summary

    one()


# ------------------------------------------------------------------ history parser and formats

TEXT = st.text(max_size=40)
JSON_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT)
JSON = st.recursive(JSON_SCALAR, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                       st.dictionaries(TEXT, kids, max_size=4)), max_leaves=12)
ROLE = st.sampled_from(["system", "developer", "user", "assistant", "tool", "bot", ""])
CALL = st.fixed_dictionaries({"id": st.sampled_from(["c1", "c2", ""]), "type": st.just("function"),
                              "function": st.fixed_dictionaries({"name": st.sampled_from(["bash", "", "read"]),
                                                                 "arguments": st.one_of(TEXT, JSON)})})
MESSAGE = st.fixed_dictionaries(
    {"role": ROLE},
    optional={"content": st.one_of(TEXT, st.none(), st.lists(st.fixed_dictionaries({"type": st.just("text"),
                                                                                    "text": TEXT}), max_size=3),
                                   JSON),
              "tool_calls": st.one_of(st.lists(CALL, max_size=2), JSON),
              "tool_call_id": st.one_of(st.sampled_from(["c1", "c2", "zz"]), JSON),
              "name": st.one_of(TEXT, JSON)},
)
MESSAGES = st.one_of(st.lists(MESSAGE, max_size=6), JSON)


@settings(max_examples=300, deadline=None)
@given(MESSAGES)
def test_parse_messages_is_typed_and_read_only(messages):
    before = copy.deepcopy(messages)
    try:
        turns = parse_messages(messages, max_messages=5, max_chars=200)
    except SpecCompactError as err:
        assert err.to_dict()["type"]
    else:
        assert len(turns) == len(messages) and isinstance(render_history(turns), str)
    assert messages == before


def _openai(msgs):
    return msgs


def _swe_agent(msgs):
    return {"history": msgs, "trajectory": []}


def _mini_swe(msgs):
    return {"messages": msgs, "info": {}}


def _tau2(msgs):
    return {"simulations": [{"id": "s", "task_id": "t", "trial": 0, "messages": msgs}]}


@pytest.mark.parametrize("wrap", [_openai, _swe_agent, _mini_swe, _tau2])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msgs=MESSAGES)
def test_every_history_format_loads_or_fails_typed(wrap, msgs, tmp_path):
    obj = wrap(msgs)
    before = copy.deepcopy(obj)
    path = tmp_path / "h.json"
    path.write_text(json.dumps(obj))
    for source in (obj, path):
        try:
            out = load_history(source)
        except SpecCompactError as err:
            assert err.to_dict()["type"]
        else:
            assert isinstance(out, list)
    assert obj == before


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200))
def test_any_file_bytes_load_or_fail_typed(data, tmp_path):
    f = tmp_path / "h.json"
    f.write_bytes(data)
    try:
        load_history(f)
    except SpecCompactError:
        pass
