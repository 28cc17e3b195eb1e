"""A small, locally trained Hugging Face tokenizer for the emulator and tests.

``build_test_tokenizer(out_dir)`` trains a byte-level BPE with the
``tokenizers`` library on a built-in English + code corpus (plus any text the
caller passes) and writes a directory that ``transformers.AutoTokenizer``
loads: ``tokenizer.json``, ``tokenizer_config.json`` (with a Qwen3-style chat
template) and ``special_tokens_map.json``.  Nothing is downloaded.

Guarantees the emulator and the judge code rely on:

* special tokens ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` (special,
  skipped when decoding with ``skip_special_tokens``) and ``<think>``,
  ``</think>`` (added but not special, as in Qwen3);
* ``<|im_end|>`` is the EOS token;
* the judge label words ``positive``, `` positive``, ``Positive``,
  `` Positive`` and the same forms of ``negative`` are each one token;
* byte-level, so ``decode(encode(text)) == text`` for any text.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
THINK_TOKENS = ("<think>", "</think>")
LABEL_FORMS = tuple(
    form
    for word in ("positive", "negative")
    for form in (word, " " + word, word.capitalize(), " " + word.capitalize())
)
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
# Large enough for long agent histories in benchmarks; the emulator reads it
# back as the context length.
MODEL_MAX_LENGTH = 131072
VOCAB_SIZE = 4096

# Qwen3-style ChatML; ``enable_thinking=False`` opens the assistant turn with
# an empty reasoning block, exactly what the product appends itself.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

_ENGLISH = """\
The messages below are a conversation to summarize. The user asked the assistant to fix
a failing test in the repository. The assistant read the file, ran the tests, and found
that the function returned the wrong value when the input list was empty. It changed the
code, ran the test suite again, and all tests passed. Next steps: review the change, update
the documentation, and open a pull request. Key decisions: keep the public interface stable,
prefer small functions, and add a regression test. Critical context: the configuration file
lives in the project root and the server listens on port 8000.
Goal: make the build green. Constraints and preferences: no new dependencies, Python 3.11.
Progress: done, in progress, blocked. The line is supported by the conversation.
Answer positive if this line is supported by the conversation and is useful, otherwise
negative. Reply with one word: positive or negative. Positive. Negative.
Summary of the earlier part of the conversation. Proposed next line for the section.
Error: file not found. Traceback (most recent call last): ValueError: invalid literal.
"""

_CODE = """\
def main(argv: list[str] | None = None) -> int:
    \"\"\"Run the command line interface.\"\"\"
    parser = argparse.ArgumentParser(description="compact agent histories")
    parser.add_argument("--port", type=int, default=30000)
    args = parser.parse_args(argv)
    for index, line in enumerate(open(args.path, encoding="utf-8")):
        if not line.strip():
            continue
        result = self.tokenizer.encode(line, add_special_tokens=False)
        print(f"{index}: {len(result)} tokens")
    return 0

class Server:
    def __init__(self, host: str = "127.0.0.1", port: int = 8000) -> None:
        self.host = host
        self.port = port

    async def generate(self, request: dict) -> dict:
        return {"text": "", "meta_info": {"finish_reason": None}}

$ python -m pytest tests/test_api.py -q
FAILED tests/test_api.py::test_generate - AssertionError: assert 1 == 2
{"role": "assistant", "content": "I will run the tests.", "tool_calls": []}
git diff --stat && git commit -m "fix empty list" && ls -la src/ | grep .py
"""


_WORDS = (
    "the a an and or of to in on for with from by as at is are was were be been it this that "
    "these those we you they he she not no yes all any each every some more most other new old "
    "file files path paths test tests code function functions class method module package error "
    "errors value values list dict string number line lines name names type types return result "
    "run runs ran running read write wrote change changed fix fixed add added remove removed "
    "update updated build server client request response cache token tokens model models prompt "
    "summary section slot slots goal constraints preferences progress decisions next steps "
    "critical context user assistant system tool tools call calls output input agent history "
    "conversation message messages repository branch commit pull issue bug feature config option "
    "command shell directory project source target drafter judge accepted rejected repair draft "
    "because when then after before while until if else only also still already again first last "
    "make use keep need want should must can could will would may might do does did done have has "
    "check checked found find search open close start stop wait time data json http port host "
    "python import def self none true false print assert raise except try pass yield async await "
    "positive negative supported unsupported useful correct wrong missing empty failed passed "
    "hello world about above across action actually address again against allow almost alone "
    "along always amount another answer appear apply area argument around ask attempt available "
    "away back base become begin behind believe below best better between both bring business "
    "case cause certain chance clear come common complete consider contain continue control could "
    "create current day deal default define delete describe design detail develop different "
    "document during early easy effect either enough entire environment even event example "
    "exist expect explain fact fail far feel field final follow form format full general get give "
    "good great group hand handle happen hard head help here high hold however idea include "
    "increase information instead interface issue item just kind know large later lead leave "
    "less level like limit little local long look lose low main manage many mean memory might "
    "mind minute mode move much name near never note nothing now object often once operation "
    "order own part pass pattern per performance person place plan point possible present "
    "problem process produce provide public put question quite range rather reach real reason "
    "record reduce reference relate release remain report require resource rest review right "
    "role rule same save second see seem send service set setting show side simple since single "
    "size small so something sort specific state still structure such support sure system take "
    "task term than thing think though through together too toward true try turn under unit "
    "until upon usage user valid version view way well what where which while whole why within "
    "without word work worker yet zero summarize structured checkpoint schema exact preserve "
    "function_name file_path error_message traceback exception module_name variable argument "
    "parameter docstring decorator generator iterator dataclass pydantic fastapi uvicorn pytest "
    "numpy torch tensor batch prefix radix prefill decode latency throughput benchmark compaction"
).split()
_PUNCT = (".", ",", ":", ";", "!", "?", "", "", "", "")


def _sentences(n: int) -> list[str]:
    """Deterministic pseudo-English lines so BPE learns common English merges."""
    rng = random.Random(0)
    lines = []
    for _ in range(n):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 16))]
        if rng.random() < 0.3:
            words[0] = words[0].capitalize()
        lines.append(" ".join(words) + rng.choice(_PUNCT))
    return lines


def _corpus(extra: list[str]) -> list[str]:
    """Training lines: built-in text, pseudo-English, the label forms, extras."""
    labels = " ".join(LABEL_FORMS + ("\npositive\n", "\nnegative\n", "Positive", "Negative"))
    base = (_ENGLISH + _CODE).splitlines() * 20
    return base + _sentences(6000) + [labels] * 400 + list(extra)


def _train(extra: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(extra), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    # Labels the corpus did not merge into one token become added tokens.
    missing = [f for f in LABEL_FORMS if len(tok.encode(f).ids) != 1]
    if missing:
        tok.add_tokens([AddedToken(f, normalized=False) for f in missing])
    return tok


def _config() -> dict:
    added = {}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MODEL_MAX_LENGTH,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "bos_token": None,
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": added,
        "extra_special_tokens": {},
    }


def build_test_tokenizer(out_dir: str | Path, corpus: list[str] | None = None) -> str:
    """Train the test tokenizer and write it to ``out_dir``.

    Parameters
    ----------
    out_dir
        Directory to create (or overwrite files in).
    corpus
        Extra training text, one string per line or document; optional.

    Returns
    -------
    str
        The directory path, loadable with ``AutoTokenizer.from_pretrained``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = _train(list(corpus or []))
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(_config(), indent=2))
    special = {"eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
    return str(out)
