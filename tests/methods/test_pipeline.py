"""The one pipeline: every method validated and rendered once, assembled and checked the same way."""

import copy

import pytest

from sgl_speccompact.methods.request import MethodRequest
from sgl_speccompact.history import messages as history
from sgl_speccompact.methods import chunking, pipeline, request, source_judge
from sgl_speccompact.methods.assembly import OneShot
from sgl_speccompact.errors import ConfigError, SummaryBudgetError, UnknownMethodError
from sgl_speccompact.methods.registry import METHODS, run_method
from sgl_speccompact.methods.pipeline import REGISTRY, register

from tests.support.scripted import ScriptedBackend
from tests.support.methods import baseline_target, pair, tool_loop
from tests.support.programs import MESSAGES


@pytest.fixture
def counted_parsing(monkeypatch):
    """Count every parse and render of a history, wherever the package does it."""
    calls = {"parse": 0, "render": 0}

    def parse(*args, **kwargs):
        calls["parse"] += 1
        return history.parse_messages(*args, **kwargs)

    def render(*args, **kwargs):
        calls["render"] += 1
        return history.render_history(*args, **kwargs)

    for module in (pipeline, request, chunking, source_judge):
        if hasattr(module, "parse_messages"):
            monkeypatch.setattr(module, "parse_messages", parse)
        if hasattr(module, "render_history"):
            monkeypatch.setattr(module, "render_history", render)
    return calls


@pytest.fixture
def echo_method():
    """A method registered for one test: the rendered history as a one-section summary."""
    seen = []

    @register("echo", fixed_sections="one Summary section")
    def echo(job):
        seen.append(job)
        return OneShot("## Summary\n- " + job.history.splitlines()[0] + "\n- " + job.method + "\n")

    yield seen
    REGISTRY.pop("echo")


def test_every_built_in_method_is_registered():
    assert set(METHODS) <= set(REGISTRY)
    assert REGISTRY["speccompact"].needs_drafter and not REGISTRY["hermes"].needs_drafter
    assert REGISTRY["hermes"].fixed_sections and not REGISTRY["openclaw"].fixed_sections


@pytest.mark.parametrize("method", METHODS)
def test_history_parsed_and_rendered_once_even_with_source_judge(method, counted_parsing):
    sjc = lambda entry, section: 0.9
    if method == "speccompact":
        target, drafter = pair(source_judge=sjc)
    else:
        target, drafter = baseline_target(source_judge=sjc), None
    res = run_method(method, MESSAGES, target=target, drafter=drafter, source_judge=True)
    assert res.method == method and res.source_judge is not None
    assert counted_parsing == {"parse": 1, "render": 1}


SECRET = "token=ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
PRUNE_CHUNK_REDACT = {"prune_tool_outputs": True, "keep_tool_outputs": 2, "target_context_tokens": 6000,
                      "redact_secrets": True, "max_summary_tokens": 512, "monolithic_max_tokens": 512}


def pruned_chunked_history() -> list[dict]:
    """Old tool outputs to prune, the two newest too long for one block (stubbed), a secret at the end."""
    msgs = tool_loop(4, lines=2000)
    msgs[-1] = {**msgs[-1], "content": msgs[-1]["content"] + " " + SECRET}
    return msgs


def test_pruning_chunking_stubbing_and_redaction_parse_the_history_once(counted_parsing):
    msgs = pruned_chunked_history()
    res = run_method("openclaw", msgs, target=baseline_target(), config=PRUNE_CHUNK_REDACT)
    assert res.pruning["messages_pruned"] > 0 and res.chunks >= 2  # pruned, then cut into blocks
    assert res.redactions.get("github_token")  # the secret was found (in the turns, not a second parse)
    assert counted_parsing["parse"] == 1


def test_a_request_parsed_at_the_edge_is_not_parsed_again(counted_parsing):
    from sgl_speccompact.config import make_config

    request = MethodRequest(pruned_chunked_history()).parsed(make_config(PRUNE_CHUNK_REDACT))
    counted_parsing["parse"] = 0  # the edge's parse (the service's) is done
    res = run_method("openclaw", request, target=baseline_target(), config=PRUNE_CHUNK_REDACT)
    assert res.chunks >= 2 and counted_parsing["parse"] == 0


def test_a_registered_method_gets_the_whole_path(echo_method):
    target = ScriptedBackend(source_judge=lambda entry, section: 0.1 if "echo" in entry else 0.9)
    original = copy.deepcopy(MESSAGES)
    events = []
    res = run_method("echo", MethodRequest(MESSAGES, on_event=events.append), target=target, source_judge=True)
    job = echo_method[0]
    assert job.method == "echo" and job.drafter is None and job.history.startswith("[system]")
    # assembled as a one-shot text: its section reported as a slot, events sent after it
    assert [s.title for s in res.slots] == ["Summary", "Exact Ledger"] and res.method == "echo"
    assert [e["type"] for e in events][:3] == ["line", "line", "slot_written"] and events[2]["lines"] == 2
    assert events[-1]["type"] == "slot_done" and events[-1]["slot"] == "ledger"  # the ledger comes last
    retracted = [e for e in events if e["type"] == "retract"]  # the stream takes back what SJC deleted
    assert [(e["text"], e["reason"]) for e in retracted] == [("- echo", "unsupported")]
    # then SJC: the entry naming the method has no source and is gone
    assert res.source_judge["deleted"] == 1 and "- echo" not in res.summary
    assert res.summary.startswith("## Summary\n- [system]")
    assert MESSAGES == original


def test_the_pipeline_refuses_before_any_request(echo_method):
    target = ScriptedBackend()
    with pytest.raises(UnknownMethodError, match="echo"):
        run_method("nope", MESSAGES, target=target)
    with pytest.raises(ConfigError, match="one Summary section"):
        run_method("echo", MethodRequest(MESSAGES, schema=()), target=target)
    with pytest.raises(ConfigError, match="needs a drafter"):
        run_method("speccompact", MESSAGES, target=target)
    assert target.requests == [] and echo_method == []


def test_the_budget_is_checked_for_registered_methods_too(echo_method):
    with pytest.raises(SummaryBudgetError):
        run_method("echo", MESSAGES, target=ScriptedBackend(), config={"max_summary_tokens": 3})
    with pytest.raises(SummaryBudgetError):  # a generation cut off by its cap is never a summary
        @register("cut")
        def cut(job):
            return OneShot("## Summary\n- a", {"finish_reason": {"type": "length"}, "completion_tokens": 9})
        try:
            run_method("cut", MESSAGES, target=ScriptedBackend())
        finally:
            REGISTRY.pop("cut")
