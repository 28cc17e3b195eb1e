"""SGLang speculative decoding per server: the launch TOML table and ``--*-speculative`` flags.

A ``[target.speculative]`` or ``[drafter.speculative]`` table (or
``--target-speculative ALGO[:DRAFT_PATH]``) becomes sglang 0.5.23's own
``--speculative-*`` server flags (``sglang/srt/arg_groups/fields/spec.py``).
Pure: nothing here reads a file or starts a process.

What sglang 0.5.23 refuses, and what this module therefore refuses first
with one line (sources under ``sglang/srt/``):

* LoRA adapters (``--enable-lora``) with ``STANDALONE`` (and ``UNO``,
  ``FROZEN_KV_MTP``): ``arg_groups/lora_hook.py``
  ``check_lora_speculative_compatibility``.  NGRAM, EAGLE, EAGLE3 and DFLASH
  accept LoRA; the adapter then applies to the target model only, the draft
  head runs unadapted.  LoRA also refuses ``speculative_adaptive``.
* A draft model for ``EAGLE``/``EAGLE3``/``STANDALONE``/``DFLASH``: DFLASH
  raises without one (``arg_groups/speculative_hook.py`` ``_handle_dflash``);
  the EAGLE family reads the draft head from it.  NGRAM drafts from a token
  trie of the context and takes no draft model.
* ``eagle_topk``/``num_draft_tokens`` without ``num_steps`` on the EAGLE
  family: sglang asserts all three are unset before choosing its own
  (``_handle_eagle_family``).
* DFLASH with ``num_draft_tokens`` differing from ``dflash_block_size``
  (``_handle_dflash`` raises); DFLASH forces ``num_steps`` and ``eagle_topk``
  to 1, so other values are refused here rather than silently changed.
* Pipeline parallelism with any algorithm (``arg_groups/validation_hook.py``).

What stays allowed, checked in the same sources: ``return_logprob`` and
``token_ids_logprob`` (the judge's label logprobs) are computed on verified
tokens by EAGLE, NGRAM and DFLASH (``layers/logprob_processor.py``
``compute_spec_logprobs``; only UNO refuses them), the radix cache stays on
(only disaggregated decode with a radix cache is refused, for NGRAM, DFLASH
and STANDALONE), and overlap scheduling stays on except on CPU.  Every
EAGLE-family and NGRAM server has ``--max-running-requests`` lowered to 48
unless it is set (``_handle_eagle_family``, ``_handle_ngram``); NGRAM and
STANDALONE turn mixed chunked prefill off.

Outputs.  Verified speculative decoding keeps the target's distribution:
every emitted token is the target's own choice (greedy) or a rejection-sampled
draw from it, whatever the draft proposed.  At temperature 0 it is therefore
designed to be lossless, up to numerics: the verify pass scores several
tokens in one batched forward, whose floating-point sums differ from
one-token decoding, so a near-tie can flip a token.  This holds for all five
algorithms here (:data:`LOSSLESS`).  Only a lossy setting changes outputs by
design: ``speculative_accept_threshold_single``/``_acc`` below 1.0 accept
draft tokens the target would not have chosen; this module never sets them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..errors import ConfigError

ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "DFLASH")  # the ones the simulator models
NEEDS_DRAFT_MODEL = frozenset({"EAGLE", "EAGLE3", "STANDALONE", "DFLASH"})
LORA_REFUSED = frozenset({"STANDALONE"})  # lora_hook.check_lora_speculative_compatibility, of ALGORITHMS
LOSSLESS = {a: "lossless at temperature 0 up to numerics (verified decoding)" for a in ALGORITHMS}
NGRAM_KEYS = ("min_bfs_breadth", "max_bfs_breadth", "match_type", "max_trie_depth", "capacity")


@dataclass(frozen=True)
class SpecSettings:
    """One server's speculative decoding, as sglang's ``--speculative-*`` flags name it."""

    algorithm: str  # one of ALGORITHMS, upper case
    draft_model_path: str | None = None  # draft head / model (HF id or directory); None for NGRAM
    num_steps: int | None = None  # draft steps per verify (sglang picks when None)
    eagle_topk: int | None = None  # branches per draft step (EAGLE family)
    num_draft_tokens: int | None = None  # tokens verified per step
    dflash_block_size: int | None = None  # DFLASH verify window (its checkpoint's block size when None)
    ngram: tuple[tuple[str, object], ...] = ()  # NGRAM options as (NGRAM_KEYS name, value)
    draft_extra: tuple[str, ...] = ()  # further --speculative-* flags, verbatim

    @property
    def lossless(self) -> str:
        """Whether outputs match plain decoding (see the module doc)."""
        return LOSSLESS[self.algorithm]


TABLE_KEYS = {f.name for f in fields(SpecSettings)} - {"ngram", "draft_extra"} | {"ngram", "extra_args"}


def parse_spec_flag(value: str) -> SpecSettings | None:
    """``ALGO[:DRAFT_PATH]`` from ``--target-speculative``; ``none`` turns a config's table off.

    >>> parse_spec_flag("eagle3:AngelSlim/Qwen3-32B_eagle3")
    SpecSettings(algorithm='EAGLE3', draft_model_path='AngelSlim/Qwen3-32B_eagle3', num_steps=None, \
eagle_topk=None, num_draft_tokens=None, dflash_block_size=None, ngram=(), draft_extra=())
    >>> parse_spec_flag("none") is None
    True
    """
    algo, _, path = value.strip().partition(":")
    if algo.lower() in ("none", "off", ""):
        return None
    return check_settings(SpecSettings(algorithm=_algorithm(algo), draft_model_path=path or None))


def spec_from_table(table: dict, role: str) -> SpecSettings | None:
    """A ``[role.speculative]`` table as :class:`SpecSettings` (``algorithm = "none"``: off).

    Raises
    ------
    ConfigError
        An unknown key, a bad value, or a combination sglang refuses.
    """
    if not isinstance(table, dict):
        raise ConfigError(f"[{role}.speculative] must be a table")
    unknown = sorted(set(table) - TABLE_KEYS)
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in [{role}.speculative]; known: {sorted(TABLE_KEYS)}")
    if str(table.get("algorithm", "")).lower() in ("none", "off"):
        return None
    if "algorithm" not in table:
        raise ConfigError(f"[{role}.speculative] needs algorithm = one of {list(ALGORITHMS)} (or \"none\")")
    ngram = table.get("ngram") or {}
    if not isinstance(ngram, dict) or set(ngram) - set(NGRAM_KEYS):
        raise ConfigError(f"[{role}.speculative.ngram] keys must be among {list(NGRAM_KEYS)}")
    try:
        settings = SpecSettings(
            algorithm=_algorithm(str(table["algorithm"])),
            draft_model_path=str(table["draft_model_path"]) if table.get("draft_model_path") else None,
            **{k: _pos_int(table[k], k) for k in ("num_steps", "eagle_topk", "num_draft_tokens",
                                                   "dflash_block_size") if table.get(k) is not None},
            ngram=tuple(sorted(ngram.items())),
            draft_extra=tuple(str(a) for a in table.get("extra_args") or ()),
        )
    except ConfigError as exc:
        raise ConfigError(f"[{role}.speculative]: {exc}") from exc
    return check_settings(settings, role)


def check_settings(s: SpecSettings, role: str = "server") -> SpecSettings:
    """Refuse what sglang 0.5.23 would refuse for these settings alone (see the module doc).

    >>> check_settings(SpecSettings("DFLASH"))
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: [server.speculative] DFLASH needs draft_model_path (a draft model or head)
    """
    where = f"[{role}.speculative]"
    if s.algorithm in NEEDS_DRAFT_MODEL and not s.draft_model_path:
        raise ConfigError(f"{where} {s.algorithm} needs draft_model_path (a draft model or head)")
    if s.algorithm == "NGRAM" and s.draft_model_path:
        raise ConfigError(f"{where} NGRAM drafts from the context and takes no draft_model_path")
    if s.ngram and s.algorithm != "NGRAM":
        raise ConfigError(f"{where} ngram options apply to NGRAM only, not {s.algorithm}")
    if s.dflash_block_size is not None and s.algorithm != "DFLASH":
        raise ConfigError(f"{where} dflash_block_size applies to DFLASH only, not {s.algorithm}")
    if s.algorithm in ("EAGLE", "EAGLE3", "STANDALONE") and s.num_steps is None and (
            s.eagle_topk is not None or s.num_draft_tokens is not None):
        raise ConfigError(f"{where} {s.algorithm}: set num_steps with eagle_topk/num_draft_tokens "
                          "(sglang chooses all three only when none is set)")
    if s.algorithm == "DFLASH":
        if (s.num_steps or 1) != 1 or (s.eagle_topk or 1) != 1:
            raise ConfigError(f"{where} DFLASH drafts one block per step: num_steps and eagle_topk must be 1")
        if s.dflash_block_size and s.num_draft_tokens and s.dflash_block_size != s.num_draft_tokens:
            raise ConfigError(f"{where} DFLASH: num_draft_tokens {s.num_draft_tokens} differs from "
                              f"dflash_block_size {s.dflash_block_size}; sglang requires them equal")
    return s


def check_server(s: SpecSettings, role: str, *, lora: bool, server_args: tuple[str, ...] = ()) -> None:
    """Refuse combinations of these settings with the server they run on.

    ``lora`` says whether the server serves a LoRA adapter; ``server_args``
    are its other launch_server flags.

    >>> check_server(SpecSettings("STANDALONE", "Qwen/Qwen3-0.6B"), "drafter", lora=True)
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: [drafter.speculative] sglang 0.5.23 refuses STANDALONE speculative \
decoding on a server with a LoRA adapter; use NGRAM, EAGLE, EAGLE3 or DFLASH there
    """
    where = f"[{role}.speculative]"
    if lora and s.algorithm in LORA_REFUSED:
        raise ConfigError(f"{where} sglang 0.5.23 refuses {s.algorithm} speculative decoding on a server with a "
                          "LoRA adapter; use NGRAM, EAGLE, EAGLE3 or DFLASH there")
    if lora and "--speculative-adaptive" in s.draft_extra:
        raise ConfigError(f"{where} sglang 0.5.23 refuses --speculative-adaptive on a server with a LoRA adapter")
    flags = {a.split("=")[0] for a in server_args}
    if flags & {"--pp-size", "--pipeline-parallel-size"}:
        raise ConfigError(f"{where} sglang 0.5.23 refuses speculative decoding with pipeline parallelism")
    if flags & {"--speculative-algorithm"}:
        raise ConfigError(f"{where} and an extra --speculative-algorithm flag both set the algorithm; keep one")


def spec_flags(s: SpecSettings | None) -> list[str]:
    """sglang's ``--speculative-*`` launch_server flags for ``s`` (none for ``None``).

    >>> spec_flags(SpecSettings("EAGLE3", "AngelSlim/Qwen3-8B_eagle3", 3, 1, 4))
    ['--speculative-algorithm', 'EAGLE3', '--speculative-draft-model-path', 'AngelSlim/Qwen3-8B_eagle3', \
'--speculative-num-steps', '3', '--speculative-eagle-topk', '1', '--speculative-num-draft-tokens', '4']
    """
    if s is None:
        return []
    out = ["--speculative-algorithm", s.algorithm]
    for flag, value in (("--speculative-draft-model-path", s.draft_model_path),
                        ("--speculative-num-steps", s.num_steps), ("--speculative-eagle-topk", s.eagle_topk),
                        ("--speculative-num-draft-tokens", s.num_draft_tokens),
                        ("--speculative-dflash-block-size", s.dflash_block_size)):
        if value is not None:
            out += [flag, str(value)]
    for key, value in s.ngram:
        out += [f"--speculative-ngram-{key.replace('_', '-')}", str(value)]
    return out + list(s.draft_extra)


def describe(s: SpecSettings | None) -> dict | None:
    """JSON-ready summary for ``--dry-run`` and the service config."""
    if s is None:
        return None
    return {"algorithm": s.algorithm, "draft_model_path": s.draft_model_path, "num_steps": s.num_steps,
            "eagle_topk": s.eagle_topk, "num_draft_tokens": s.num_draft_tokens,
            "dflash_block_size": s.dflash_block_size, "ngram": dict(s.ngram), "outputs": s.lossless}


def _algorithm(name: str) -> str:
    algo = name.strip().upper()
    if algo == "NEXTN":  # sglang's alias
        algo = "EAGLE"
    if algo not in ALGORITHMS:
        raise ConfigError(f"speculative algorithm must be one of {list(ALGORITHMS)} or none, got {name!r}")
    return algo


def _pos_int(value, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} must be a positive integer, got {value!r}")
    return value
