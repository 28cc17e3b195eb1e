"""A local checkpoint's chat template, decided when the launch is planned, before any server starts.

The compaction endpoints decide the frontend template from the model type a
server reports (:mod:`sgl_speccompact.backends.chat_format`), which knows
Qwen's ChatML and nothing else.  A checkpoint of another type (SmolLM2's
``llama``, say) that this launch starts from a local folder carries its own
template in its tokenizer files: ChatML there (``<|im_start|>`` and
``<|im_end|>``) selects sglang's ``chatml`` frontend template.  Anything else
is an error that names the flag, raised while planning, so ``--dry-run``
shows it and no server starts only to be stopped.

Reads files; starts nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..backends.chat_format import CHATML_MODEL_TYPES
from ..errors import ConfigError
from .packaged import PACKAGED, converted_name

CHATML_MARKERS = ("<|im_start|>", "<|im_end|>")  # a tokenizer template holding both is ChatML
CHATML_TEMPLATE = "chatml"  # sglang's frontend template for it


def tokenizer_template(folder: Path) -> str | None:
    """The Jinja chat template a checkpoint folder's tokenizer carries, or None.

    ``chat_template.jinja`` (what transformers writes), else the
    ``chat_template`` of ``tokenizer_config.json`` (a string, or named
    templates, of which ``default`` is used).
    """
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(errors="replace")
    cfg = _json(folder / "tokenizer_config.json").get("chat_template")
    if isinstance(cfg, list):
        cfg = next((t.get("template") for t in cfg if isinstance(t, dict) and t.get("name") == "default"), None)
    return cfg if isinstance(cfg, str) else None


def checkpoint_template(model_path: str, role: str) -> str | None:
    """The frontend template of the checkpoint a ``role`` server starts from, or None.

    None leaves the decision to the endpoint (a model type it knows, or a
    hub name this launch cannot read before the server has it).

    Raises
    ------
    ConfigError
        A local checkpoint of an unknown model type whose tokenizer has no
        ChatML template; the message names ``--chat-template``.

    >>> checkpoint_template("Qwen/Qwen3-8B", "target") is None
    True
    """
    folder = Path(model_path)
    name = converted_name(folder)
    if not folder.is_dir():
        return PACKAGED[name].chat_template if name else None  # a packaged model not converted yet
    model_type = _json(folder / "config.json").get("model_type")
    if model_type in CHATML_MODEL_TYPES:
        return None
    template = tokenizer_template(folder)
    if template and all(m in template for m in CHATML_MARKERS):
        return CHATML_TEMPLATE
    why = "has no chat template" if not template else "has a chat template that is not ChatML"
    raise ConfigError(f"cannot decide the chat template of {model_path!r}: model_type {model_type!r} is not one "
                      f"the endpoints know and its tokenizer {why}; set --chat-template (or --{role}-chat-template) "
                      "to an sglang frontend template, e.g. chatml or llama-3-instruct")


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
