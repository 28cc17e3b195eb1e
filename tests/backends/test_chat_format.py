"""The chat template comes from the served model (its model_type, else its tokenizer) or an
explicit setting, never from the model path; undecidable -> ChatTemplateError."""

from __future__ import annotations

import pytest

from sgl_speccompact.backends.chat_format import decide
from sgl_speccompact.errors import ChatTemplateError, ConfigError
from sgl_speccompact.core.prompts import THINK_OFF

from tests.support.endpoint import InProcessEndpoint

CHATML = {"<|im_start|>", "<|im_end|>"}
THINK = {"<think>", "</think>"}


def tokens(*groups):
    single = set().union(*groups) if groups else set()
    return lambda text: text in single


def test_merged_drafter_path_gets_qwen3_format_from_its_model_type():
    drafter = InProcessEndpoint(model="runs/drafter-lora/merged", model_type="qwen3")
    assert drafter.chat_template.name == "qwen" and drafter.assistant_prefix == THINK_OFF
    assert "model_type" in drafter.chat_format.source


def test_the_path_alone_decides_nothing():
    # a Qwen3-looking path serving another model type: no silent ChatML
    with pytest.raises(ChatTemplateError, match="llama"):
        InProcessEndpoint(model="Qwen/Qwen3-8B", model_type="llama")
    # the model type wins over a path that names another family
    fmt = decide({"model_path": "meta-llama/whatever", "model_type": "qwen2"}, tokens(CHATML, THINK))
    assert (fmt.template, fmt.disable_thinking) == ("qwen", False)


def test_qwen2_model_type_needs_a_chatml_tokenizer():
    # Qwen2-architecture checkpoints include distilled models with other chat formats
    with pytest.raises(ChatTemplateError, match="cannot decide"):
        decide({"model_path": "x", "model_type": "qwen2"}, tokens())
    assert decide({"model_path": "x", "model_type": "qwen2"}, tokens(CHATML)).template == "qwen"


def test_without_model_type_the_tokenizer_decides():
    fmt = decide({"model_path": "runs/merged"}, tokens(CHATML, THINK))
    assert (fmt.template, fmt.disable_thinking) == ("qwen", True) and "tokenizer" in fmt.source
    assert decide({"model_path": "runs/merged"}, tokens(CHATML)).disable_thinking is False
    with pytest.raises(ChatTemplateError, match="no model_type"):
        decide({"model_path": "runs/merged"}, tokens())


def test_explicit_template_wins_and_unknown_names_are_refused():
    fmt = decide({"model_path": "x", "model_type": "llama"}, tokens(), name="llama-3-instruct")
    assert (fmt.template, fmt.disable_thinking) == ("llama-3-instruct", False)
    fmt = decide({"model_path": "x", "model_type": "qwen3"}, tokens(CHATML), name="qwen", disable_thinking=False)
    assert fmt.disable_thinking is False
    with pytest.raises(ChatTemplateError, match="unknown chat template"):
        decide({"model_path": "x", "model_type": "qwen3"}, tokens(CHATML), name="no-such-template")
    assert issubclass(ChatTemplateError, ConfigError)


def test_endpoint_error_names_the_setting():
    with pytest.raises(ChatTemplateError, match="chat_template"):
        InProcessEndpoint(model="mistralai/Mistral-7B-Instruct-v0.3", model_type="mistral")
    ok = InProcessEndpoint(model="mistralai/Mistral-7B-Instruct-v0.3", model_type="mistral",
                           chat_template="mistral")
    assert ok.chat_template.name == "mistral" and ok.assistant_prefix == ""


def test_emulated_qwen3_server_reports_its_model_type(emulated_server):
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    ep = SpecCompactEndpoint(emulated_server.url)
    assert ep.chat_format.template == "qwen" and ep.assistant_prefix == THINK_OFF
    assert ep.chat_format.source == "model_type 'qwen3'"


def test_launcher_and_cli_take_a_template_per_role():
    from sgl_speccompact.cli import build_parser
    from sgl_speccompact.launch.command_line import build_parser as launch_parser
    from sgl_speccompact.launch.command_line import build_plan

    plan = build_plan(launch_parser().parse_args(["--target-url", "http://t:1", "--drafter-url", "http://d:2",
                                  "--chat-template", "qwen", "--drafter-chat-template", "chatml"]))
    assert (plan.target_chat_template, plan.drafter_chat_template) == ("qwen", "chatml")
    args = build_parser().parse_args(["f.json", "--target-chat-template", "qwen"])
    assert (args.target_chat_template, args.drafter_chat_template, args.chat_template) == ("qwen", None, None)
