"""Tiny scripted Qwen3 models: a real SGLang server on the CPU that writes known lines.

No model hub is reachable here and a random model writes nothing useful, so
the real-server tests serve a one-layer Qwen3 whose weights are set by hand
to do exactly what a :class:`Script` says:

* **Writing.** Every token of the script's lines has its own residual
  dimension (one-hot embeddings; the MLP's down projection is zero), and the
  LM head maps each token to its successor, so greedy decoding writes the
  lines and then the end-of-sequence token (or, with ``stops=False``, never
  stops).  Line ``i`` of a script ends with its own punctuation+newline token
  (``.\\n``, ``!\\n``, ...) so the line after it is unambiguous.
* **Which lines.** The one attention head reads *markers*: single-token words
  that the test puts in the prompt (in a slot's body format, say).  The query
  is constant, keys are non-zero only on marker tokens, and RoPE is made
  negligible on the dimension used, so attention looks at whichever markers
  the prompt holds, wherever they are.  A script keyed by a marker gets a
  logit bonus while its marker is present; the script with no marker is the
  default.
* **Judging.** The label tokens (``positive``/``negative``) get fixed logits
  from a bias dimension, and a prompt that holds any *reject marker* moves
  the logits towards ``negative``: a judgement that accepts or rejects by a
  marker in the proposed line.

The same weights run in transformers, so :func:`reference_generate` checks a
build without a server.  Nothing here is taken from SGLang.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sgl_speccompact.errors import ConfigError

HIDDEN = 256  # residual width: one dimension per scripted token, plus features
HEAD_DIM = 64  # one attention head; dimension ATTN_DIM carries the marker score
ATTN_DIM = HEAD_DIM // 2 - 1  # lowest RoPE frequency (neox pairs (i, i + d/2))
VOCAB_ROWS = 151936  # Qwen3's embedding rows (151,669 ids are used)
CONTEXT = 40960  # max_position_embeddings, what a real Qwen3-8B config says
ROPE_THETA = 1e12  # with ATTN_DIM, a rotation below 1e-4 rad over the whole context
EOS_ID = 151645  # <|im_end|>, the end of an assistant turn
NEWLINE, TURN_START = "\n", "\n\n"  # a bare line end; the end of "</think>\n\n"
ENDINGS = ".!;:)?"  # line i < last ends with ENDINGS[i] + newline, a single Qwen token each

FOLLOW = 20.0  # logit of a token's scripted successor (before the final norm's scale)
MARKED = 8.0  # bonus of a script's tokens while its marker is in the prompt
DEFAULT = 3.0  # bonus of the default script's tokens (markers outweigh it)
MARKER_SCORE = 24.0  # attention score of a marker token (others score 0)
REJECT_SHIFT = 8.0  # logit moved from positive to negative by a present reject marker


@dataclass(frozen=True)
class Script:
    """What one scripted model writes and how it judges."""

    lines: dict[str, tuple[str, ...]] = field(default_factory=dict)  # marker word -> lines written while it is present
    default: tuple[str, ...] = ()  # lines written when no marker is present
    reject_markers: tuple[str, ...] = ()  # a prompt holding one of these words is judged negative
    positive: tuple[str, float] = ("positive", 4.0)  # label token and its logit
    negative: tuple[str, float] = ("negative", 0.0)  # label token and its logit
    stops: bool = True  # False: the last line loops forever (no newline, no end of sequence)


def _single(tok, text: str) -> int:
    ids = tok.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ConfigError(f"{text!r} is {len(ids)} tokens in Qwen3's vocabulary; a marker or label must be one")
    return ids[0]


def _line_tokens(tok, line: str, index: int, last: bool) -> list[int]:
    """The tokens a line is written as, its closing token included."""
    if index >= len(ENDINGS) and not last:
        raise ConfigError(f"a script has at most {len(ENDINGS) + 1} lines per marker")
    body = line if last else line + ENDINGS[index] + NEWLINE
    ids = tok.encode(body, add_special_tokens=False)
    if not last and tok.decode(ids[-1:]) != ENDINGS[index] + NEWLINE:
        raise ConfigError(f"line {line!r} must end with a letter, so its ending is one token")
    return ids


def transitions(tok, script: Script) -> tuple[dict[int, dict[int, float]], dict[int, str | None]]:
    """The scripted successors ``{previous token: {next token: logit}}`` and each line token's script.

    A token's script is its marker word, or None for the default script.  Line
    starts and ends (``"\\n\\n"``, the endings, a bare newline, end of
    sequence) are shared by every script and have no owner: which line follows
    them is decided by the marker bonus.  Raises ConfigError when a line token
    would need two successors or belongs to two scripts.
    """
    shared = {_single(tok, TURN_START), _single(tok, NEWLINE), EOS_ID,
              *(_single(tok, e + NEWLINE) for e in ENDINGS)}
    follow: dict[int, dict[int, float]] = {}
    owner: dict[int, str | None] = {}
    scripts = list(script.lines.items()) + ([(None, script.default)] if script.default else [])
    for marker, lines in scripts:
        if not lines or any(not ln.strip() or "\n" in ln for ln in lines):
            raise ConfigError(f"script {marker!r}: lines must be non-empty single lines")
        prev_end = _single(tok, TURN_START)
        for i, line in enumerate(lines):
            ids = _line_tokens(tok, line, i, last=i == len(lines) - 1)
            for a, b in zip([prev_end] + ids, ids):
                if a not in shared and follow.get(a, {b: 0}).keys() != {b}:
                    raise ConfigError(f"token {tok.decode([a])!r} in {line!r} would need two successors; "
                                      "scripted lines need distinct tokens")
                if b not in shared:
                    if owner.get(b, marker) != marker:
                        raise ConfigError(f"token {tok.decode([b])!r} of {line!r} is used by two scripts")
                    owner[b] = marker
                follow.setdefault(a, {})[b] = FOLLOW
            prev_end = ids[-1]
        loop_to = EOS_ID if script.stops else _line_tokens(tok, lines[-1], 0, last=True)[0]
        follow.setdefault(prev_end, {})[loop_to] = FOLLOW
        first = _line_tokens(tok, lines[0], 0, last=len(lines) == 1)[0]
        for ending in ENDINGS[len(lines) - 1:]:  # after another model's line: start this script again
            follow.setdefault(_single(tok, ending + NEWLINE), {})[first] = FOLLOW
    follow.setdefault(_single(tok, NEWLINE), {})[EOS_ID] = FOLLOW  # a line closed by a bare newline ends the turn
    return follow, owner


def build_model(out_dir: str | Path, script: Script, tokenizer_dir: str | Path) -> str:
    """Write a Qwen3 checkpoint (config, safetensors, tokenizer) that follows ``script``.

    Parameters
    ----------
    out_dir
        Directory to write; an existing checkpoint there is replaced.
    script
        What the model writes and how it judges.
    tokenizer_dir
        Qwen3's tokenizer (:func:`~sgl_speccompact.emulator.qwen3.cached_qwen3_tokenizer`).

    Returns
    -------
    str
        The directory, servable with ``python -m sglang.launch_server --model-path``.

    Raises
    ------
    ConfigError
        A marker or label is not one token, lines share tokens, or the
        script needs more dimensions than :data:`HIDDEN`.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    follow, owner = transitions(tok, script)
    markers = list(script.lines) + [m for m in script.reject_markers if m not in script.lines]
    marker_ids = {m: _single(tok, m) for m in markers}
    tokens = sorted({*follow, *(b for nxt in follow.values() for b in nxt), *marker_ids.values()})
    dim = {t: 1 + i for i, t in enumerate(tokens)}  # 0 is the bias dimension every token has
    feature = {m: 1 + len(tokens) + i for i, m in enumerate(list(script.lines) + ["<reject>"])}
    if max(feature.values()) >= HIDDEN or len(markers) >= HEAD_DIM:
        raise ConfigError(f"the script needs {max(feature.values()) + 1} dimensions; HIDDEN is {HIDDEN}")

    f32 = torch.float32
    scale = (HIDDEN / 2) ** 0.5  # what RMSNorm makes of a bias + one-hot vector
    embed = torch.zeros(VOCAB_ROWS, HIDDEN, dtype=f32)
    embed[:, 0] = 1.0
    for t, d in dim.items():
        embed[t, d] = 1.0
    q = torch.zeros(HEAD_DIM, HIDDEN, dtype=f32)
    q[ATTN_DIM, 0] = 1.0
    k = torch.zeros(HEAD_DIM, HIDDEN, dtype=f32)
    v = torch.zeros(HEAD_DIM, HIDDEN, dtype=f32)
    o = torch.zeros(HIDDEN, HEAD_DIM, dtype=f32)
    for i, (m, t) in enumerate(marker_ids.items()):
        k[ATTN_DIM, dim[t]] = 1.0
        v[i, dim[t]] = 1.0 / scale
        o[feature[m] if m in script.lines else feature["<reject>"], i] = 1.0
    k_norm = torch.ones(HEAD_DIM, dtype=f32)
    k_norm[ATTN_DIM] = MARKER_SCORE / HEAD_DIM ** 0.5  # q.k / sqrt(d) = MARKER_SCORE on a marker

    head = torch.zeros(VOCAB_ROWS, HIDDEN, dtype=f32)
    for a, nxt in follow.items():
        for b, logit in nxt.items():
            head[b, dim[a]] = logit / scale
    for b, m in owner.items():
        if m is None:
            head[b, 0] = DEFAULT / scale
        else:
            head[b, feature[m]] = MARKED / scale
    (pos, pos_logit), (neg, neg_logit) = script.positive, script.negative
    head[_single(tok, pos), 0] += pos_logit / scale
    head[_single(tok, neg), 0] += neg_logit / scale
    head[_single(tok, pos), feature["<reject>"]] -= REJECT_SHIFT / scale
    head[_single(tok, neg), feature["<reject>"]] += REJECT_SHIFT / scale

    p = "model.layers.0."
    ones = torch.ones(HIDDEN, dtype=f32)
    weights = {
        "model.embed_tokens.weight": embed, "lm_head.weight": head, "model.norm.weight": ones,
        p + "input_layernorm.weight": ones, p + "post_attention_layernorm.weight": ones,
        p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k,
        p + "self_attn.v_proj.weight": v, p + "self_attn.o_proj.weight": o,
        p + "self_attn.q_norm.weight": torch.ones(HEAD_DIM, dtype=f32), p + "self_attn.k_norm.weight": k_norm,
        p + "mlp.gate_proj.weight": torch.zeros(8, HIDDEN, dtype=f32),
        p + "mlp.up_proj.weight": torch.zeros(8, HIDDEN, dtype=f32),
        p + "mlp.down_proj.weight": torch.zeros(HIDDEN, 8, dtype=f32),
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for f in Path(tokenizer_dir).iterdir():
        if f.is_file() and f.name != "built.json":
            shutil.copyfile(f, out / f.name)
    (out / "config.json").write_text(json.dumps(_config(), indent=1))
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": [EOS_ID, 151643]}))
    save_file({n: w.to(torch.bfloat16).contiguous() for n, w in weights.items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "script.json").write_text(json.dumps(script.__dict__, indent=1, default=list))
    return str(out)


def _config() -> dict:
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": HIDDEN,
        "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1, "num_key_value_heads": 1,
        "head_dim": HEAD_DIM, "vocab_size": VOCAB_ROWS, "max_position_embeddings": CONTEXT,
        "rope_theta": ROPE_THETA, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "hidden_act": "silu",
        "attention_bias": False, "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": EOS_ID,
    }


def written_lines(script: Script) -> set[str]:
    """Every line ``script`` writes, as a summary shows it (line ``i`` keeps its ending mark).

    >>> sorted(written_lines(Script(lines={" Oslo": ("Alpha beta", "Gamma delta")})))
    ['Alpha beta.', 'Gamma delta']
    """
    out = set()
    for lines in [*script.lines.values(), script.default]:
        out |= {line + (ENDINGS[i] if i < len(lines) - 1 else "") for i, line in enumerate(lines)}
    return out


def reference_generate(model_dir: str | Path, prompt: str, max_new_tokens: int = 40) -> str:
    """Greedy-decode ``prompt`` with transformers (no server): what a build writes.

    Used to check a build; the real-server tests compare the server with it.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=EOS_ID,
                         pad_token_id=EOS_ID)
    return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
