"""Every tunable number in one place, with the SpecCompact paper's defaults.

Budgets and the acceptance threshold come from the paper's "Experiments"
section: eta 0.7, 12 lines and 320 tokens per slot, 64 new tokens per draft
or repair request, one judgement token per verification, and a 2,048-token
summary for every method.  Token counts are in the target tokenizer.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError

# Ablation switches: CompactConfig bool field -> what turning it on does.  Each
# default is the recommended setting; bench/ablation.py flips them one at a time.
# Only switches the committed ablation keeps are here (docs/benchmarks/ablation.md
# gives each one's figure, and what was removed and why).
OPTIMIZATIONS: dict[str, str] = {
    "line_aware_stopping": "repairs stop at the newline; off: a repair decodes up to max_new_tokens "
                           "and keeps its first line",
    "one_request_judging": "a judgement is one prefill-only request on SpecCompactEndpoint; off: "
                           "sglang's plain two-request select (the same verdict rule on both)",
    "source_judge_on_prefix": "SJC after a slot method branches its judgements from the compaction's "
                              "cached shared prefix, the agent's prose shown; off: it prefills the "
                              "environment record (no assistant prose) on its own",
    "short_judge_suffix": "the judge rubric and label words sit once in the cached shared prefix, so a "
                          "judgement's suffix is the line (or SJC entry) in tags; off: the whole question "
                          "after every line",
    "send_token_ids": "SpecCompactEndpoint sends prompts as input_ids, so the server tokenizes the "
                      "history once per compaction; off: every request carries text the server tokenizes",
    "server_sessions": "each block's requests share one SGLang session per server (/open_session): the shared "
                       "prefix goes upstream once and every later request sends only its suffix (needs "
                       "send_token_ids); off: every request carries its whole prompt",
    "evidence_check": "a judged line (drafted, carried, repaired) or SJC entry naming a path, id, command or other "
                      "exact string its source never shows is refused before any judge request; off: it goes to "
                      "its judge",
}


MAX_TOKENS = 2**20  # upper bound of every token budget: finite, above any model's context (tokens)
MAX_TEMPERATURE = 2.0  # upper bound of every sampling temperature
# What each switch may change besides the requests.  A switch in PROMPT_CHANGING
# changes the text the target reads (so a real model's verdicts may differ).  Every
# other switch changes the requests only: the same prompts, so the same verdicts and
# the same summary (tests/methods/test_switches.py), but those of DECISION_CHANGING.
PROMPT_CHANGING: frozenset[str] = frozenset({
    "short_judge_suffix",  # off: the whole judge question follows every line
    "source_judge_on_prefix",  # on: SJC reads the whole conversation, not the environment record
})
# A switch in DECISION_CHANGING changes what the engine decides with the same prompts: which
# lines reach a judge at all (so its summaries differ from the defaults' by design).
DECISION_CHANGING: frozenset[str] = frozenset({
    "evidence_check",  # off: a line naming an unsourced string is judged (and may be accepted)
})
JUDGES = ("program", "decisions")  # config.judge: who turns a question into a verdict (programs/judges.py)


class CompactConfig(BaseModel):
    """Configuration of one compaction.  Unknown fields are rejected; every number has finite bounds.

    Types are strict, however the config is made (here, :func:`make_config`,
    a launcher config file, ``--set``, a request body): no bool or numeric
    string for a number, no number for a bool.  A bad value is a
    :class:`~sgl_speccompact.errors.ConfigError` naming the field
    (:func:`check_config`).

    >>> CompactConfig(min_label_mass=True)
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: min_label_mass: Input should be a valid number
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    eta: float = Field(0.7, gt=0.0, le=1.0)  # accept a line iff r >= eta (probability ratio)
    max_lines_per_slot: int = Field(12, ge=1, le=1_000)  # lines kept per slot (lines)
    max_tokens_per_slot: int = Field(320, ge=1, le=MAX_TOKENS)  # tokens kept per slot (target tokens)
    max_new_tokens: int = Field(64, ge=1, le=MAX_TOKENS)  # new tokens per draft or repair request (tokens)
    max_summary_tokens: int = Field(2048, ge=1, le=MAX_TOKENS)  # assembled summary budget (target tokens)
    max_line_chars: int = Field(400, ge=8, le=1_000_000)  # longer lines skip the judge and go to repair (chars)
    min_label_mass: float = Field(0.1, ge=0.0, le=1.0)  # p+ + p- below this: an unreliable verdict, acting on nothing (probability)
    # who judges: "program" reads the label words' logprobs after the program's own question (the paper's
    # protocol, sharing the slot's radix prefix); "decisions" asks sglang's POST /v1/decisions (yes/no, the
    # server's wording and chat template).  The launcher's probe may pick "decisions" (methods/judge_probe.py)
    judge: Literal[JUDGES] = "program"  # type: ignore[valid-type] - Literal of the JUDGES tuple
    positive_label: str = Field("positive", min_length=1)  # judge word meaning "supported"
    negative_label: str = Field("negative", min_length=1)  # judge word meaning "unsupported"
    empty_markers: tuple[str, ...] = ("(none)", "none", "(n/a)", "n/a", "- (none)")  # accepted unjudged
    draft_temperature: float = Field(0.0, ge=0.0, le=MAX_TEMPERATURE)  # drafter sampling temperature (1 = model dist.)
    repair_temperature: float = Field(0.0, ge=0.0, le=MAX_TEMPERATURE)  # target sampling temperature for every line it writes: repairs, and Target-self's and Target-delta's slots
    monolithic_max_tokens: int = Field(2048, ge=1, le=MAX_TOKENS)  # one-shot baselines' generation cap (tokens)
    agent_context_tokens: int = Field(131_072, ge=1, le=2**24)  # the agent's context window: Hermes's summary target (tokens)
    hermes_cap_ratio: float = Field(2.0, gt=0.0, le=16.0)  # Hermes's generation cap, in multiples of its length target (< 1: below it, for slow CPU servers)
    report_cut_off: bool = False  # a one-shot summary cut by its cap returns truncated=True, not SummaryBudgetError
    source_judge_threshold: float = Field(0.5, gt=0.0, le=1.0)  # SJC keeps entries with p >= this
    max_history_messages: int = Field(10_000, ge=1, le=10_000_000)  # longer histories are refused (messages)
    max_history_chars: int = Field(4_000_000, ge=1, le=2**31)  # longer rendered histories are refused (chars)
    prune_tool_outputs: bool = False  # replace old tool outputs by one-line stubs before compacting (pruning.py)
    keep_tool_outputs: int = Field(4, ge=0, le=1_000_000)  # with prune_tool_outputs: the newest tool outputs kept whole (messages)
    target_context_tokens: int | None = Field(None, ge=1, le=2**24)  # target's context window for chunking; None: ask the server
    carry_previous_lines: bool = True  # incremental: a slot's first proposals are the previous summary's lines
    max_carried_share: float = Field(1.0, ge=0.0, le=1.0)  # upper bound on the judged share carried lines may take of a slot's lines and tokens; 0: nothing carried, nothing judged (ratio; core/carried.py)
    max_blank_lines_per_slot: int = Field(4, ge=0, le=1_000)  # blank lines (paragraph breaks) kept per slot (lines)
    ledger: bool = True  # append the exact ledger: files, commands, errors, identifiers and side effects copied from the history, no model (docs/concepts/ledger.md)
    max_ledger_tokens: int = Field(1024, ge=1, le=MAX_TOKENS)  # the ledger's budget, inside the room the sections leave of the summary budget (target tokens)
    evidence_check: bool = True  # a judged line naming a path, id, error, hash, URL, command, code or number its source never shows is refused before the judge is asked (core/evidence.py; docs/concepts/evidence.md)
    # ablation switches (see OPTIMIZATIONS)
    line_aware_stopping: bool = True  # repairs stop at the newline
    one_request_judging: bool = True  # one prefill-only request per judgement
    redact_secrets: bool = True  # replace secrets in the history with [REDACTED:<kind>] before any prompt
    source_judge_on_prefix: bool = False  # SJC after a slot method reuses the compaction's prefix (shows prose)
    short_judge_suffix: bool = True  # judge rubric in the shared prefix; per-judgement suffix = line + tags
    send_token_ids: bool = True  # prompts go to SpecCompactEndpoint servers as input_ids
    server_sessions: bool = True  # one SGLang session per block and server: each prompt sent once (backends/server_session.py)

    def __init__(self, **values: Any):
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise config_error(exc) from None

    @field_validator("empty_markers", mode="before")
    @classmethod
    def _list_is_a_tuple(cls, value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value  # a JSON or TOML array

    @model_validator(mode="after")
    def _labels_differ(self) -> "CompactConfig":
        if self.positive_label.strip().lower() == self.negative_label.strip().lower():
            raise ValueError("positive_label and negative_label must differ")
        return self


def field_path(loc: tuple) -> str:
    """A pydantic error location as a field path: ``("empty_markers", 0)`` -> ``empty_markers[0]``.

    >>> field_path(("empty_markers", 0)), field_path(())
    ('empty_markers[0]', '')
    """
    out = ""
    for part in loc:
        out = f"{out}[{part}]" if isinstance(part, int) else f"{out}.{part}" if out else str(part)
    return out


def error_message(error: dict, valid: Any = ()) -> str:
    """One pydantic error as our message; an unknown field lists the ``valid`` ones.

    >>> error_message({"type": "extra_forbidden", "msg": "x"}, ["eta", "max_lines_per_slot"])
    'unknown field; valid: eta, max_lines_per_slot'
    """
    if error["type"] == "extra_forbidden":
        return "unknown field" + (f"; valid: {', '.join(valid)}" if valid else "")
    return error["msg"].removeprefix("Value error, ")


def config_error(exc: ValidationError) -> ConfigError:
    """The first error of a config validation, naming its field (None: the config as a whole)."""
    e = exc.errors()[0]
    return ConfigError(error_message(e, CompactConfig.model_fields), field=field_path(e["loc"]) or None)


def check_config(values: dict, base: CompactConfig | None = None, *, where: str = "", sep: str = "",
                 error: type = ConfigError) -> CompactConfig:
    """``base`` (the defaults when None) with ``values``: the one validation of every way a config is set.

    The Python API (:class:`CompactConfig`, :func:`make_config`), a launcher
    config file's ``[compact]`` table, the ``compact`` command's ``--set`` and
    a request body's ``config`` all come here: strict types, and the same
    message, naming the field as that caller spells it (``where`` and
    ``sep``: ``config`` and ``.``, ``--set`` and a space, ``[compact]`` and a
    space); an unknown field lists the valid ones.  ``error`` is the error
    class raised (:class:`~sgl_speccompact.errors.ConfigError` by default).

    >>> check_config({"eta": "0.8"}, where="[compact]", sep=" ")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: [compact] eta: Input should be a valid number
    """
    merged = {**(base.model_dump() if base is not None else {}), **values}
    try:
        return CompactConfig(**merged)
    except ConfigError as exc:  # CompactConfig's own, naming the field as the Python API spells it
        if not where and error is ConfigError:
            raise
        field = f"{where}{sep}{exc.field}" if exc.field else where or None
        raise error(exc.message, field=field) from None


def make_config(config: CompactConfig | dict | None = None, **overrides) -> CompactConfig:
    """Build a config from ``None``, a dict or a config, applying overrides.

    Invalid values raise :class:`~sgl_speccompact.errors.ConfigError` naming the
    field (:func:`check_config`).  A config given without overrides is
    returned as it is: it was validated when it was made (it is frozen), so
    the layers below the edge that made it never validate it again.

    >>> make_config(None, eta=0.8).eta
    0.8
    >>> cfg = make_config(None); make_config(cfg) is cfg
    True
    >>> make_config({"min_label_mass": "0.5"})
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: min_label_mass: Input should be a valid number
    """
    if isinstance(config, CompactConfig) and not overrides:
        return config
    if isinstance(config, CompactConfig):
        return check_config(overrides, config)
    return check_config({**dict(config or {}), **overrides})
