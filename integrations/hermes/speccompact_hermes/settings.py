"""The plugin's settings: defaults, Hermes's ``compression:``, ``speccompact:``, then the environment.

``$HERMES_HOME/config.yaml``::

    context:
      engine: speccompact
    plugins:
      enabled: [speccompact]
    compression:                 # Hermes's own keys, read as its built-in compressor reads them
      threshold: 0.50            # trigger share of the window (raised to 0.75 under 512K, floored at 64K tokens)
      target_ratio: 0.20         # the kept tail, as a share of the trigger
      protect_first_n: 3
      protect_last_n: 20
      abort_on_summary_failure: false   # true: a failed summary keeps the messages unchanged
    speccompact:
      url: http://127.0.0.1:8000
      method: speccompact        # or hermes, openclaw, target_self, target_delta
      source_judge: false
      timeout_s: 120
      prepare: true              # ahead-of-time compaction, when the service offers it
      prepare_ratio: 0.5         # ... sent once the prompt reaches this share of the trigger
      prepare_step: 0.1          # ... and again each time the preparable prefix grows by this share of it

A key under ``speccompact:`` (``threshold_percent``, ``target_ratio``,
``protect_first_n``, ``protect_last_n``, ``abort_on_summary_failure``) wins
over Hermes's ``compression:``.
Environment (wins over the file): ``SPECCOMPACT_URL``, ``SPECCOMPACT_API_KEY``
(else ``SGL_SPECCOMPACT_API_KEY``), ``SPECCOMPACT_METHOD``,
``SPECCOMPACT_SOURCE_JUDGE`` (1/true/yes), ``SPECCOMPACT_TIMEOUT_S``,
``SPECCOMPACT_PREPARE`` (1/true/yes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any

TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Settings:
    """How the engine reaches the service and when it compacts."""

    url: str = "http://127.0.0.1:8000"  # sgl_speccompact service base URL
    api_key: str | None = None  # the service's bearer token
    method: str = "speccompact"  # speccompact | hermes | openclaw | target_self | target_delta
    source_judge: bool = False  # run Source-Judged Compaction on the summary
    timeout_s: float = 120.0  # one compaction request, end to end (s)
    threshold_percent: float = 0.50  # Hermes's compression.threshold: trigger share of the window (before its floors)
    target_ratio: float = 0.20  # Hermes's compression.target_ratio: tail token budget as a share of the trigger
    protect_first_n: int = 3  # Hermes's compression.protect_first_n: messages kept on the first compaction
    protect_last_n: int = 20  # Hermes's compression.protect_last_n: recent messages never pruned (tail floor <= 8)
    abort_on_summary_failure: bool = False  # Hermes's key: True keeps the messages when no summary comes back
    max_ineffective: int = 2  # automatic compaction stops after this many ineffective ones in a row
    prepare: bool = True  # send ahead-of-time compactions when the service accepts them
    prepare_ratio: float = 0.50  # ... once the prompt reaches this share of the trigger (ratio)
    prepare_step: float = 0.10  # ... again once the preparable prefix grew by this share of the trigger (ratio)
    prepare_timeout_s: float = 10.0  # one prepare request (answered 202 at once) (s)


ENV = {"url": "SPECCOMPACT_URL", "api_key": "SPECCOMPACT_API_KEY", "method": "SPECCOMPACT_METHOD",
       "source_judge": "SPECCOMPACT_SOURCE_JUDGE", "timeout_s": "SPECCOMPACT_TIMEOUT_S",
       "prepare": "SPECCOMPACT_PREPARE"}
HERMES_KEYS = {"threshold": "threshold_percent", "target_ratio": "target_ratio", "protect_first_n": "protect_first_n",
               "protect_last_n": "protect_last_n",
               "abort_on_summary_failure": "abort_on_summary_failure"}  # Hermes's compression.* -> our field


def _coerce(name: str, value: Any) -> Any:
    kind = {f.name: f.type for f in fields(Settings)}[name]
    if kind == "bool":
        return value if isinstance(value, bool) else str(value).strip().lower() in TRUE
    if kind == "float":
        return float(value)
    if kind == "int":
        return int(value)
    return None if value in (None, "") else str(value)


def from_sources(section: dict | None, environ: dict | None = None, compression: dict | None = None) -> Settings:
    """Settings from config.yaml's ``speccompact`` and ``compression`` sections and an environment.

    Unknown keys are ignored; values that do not parse keep the default.

    >>> s = from_sources({"method": "hermes", "timeout_s": "30"}, {"SPECCOMPACT_URL": "http://x:1"},
    ...                  {"threshold": 0.6, "protect_last_n": 10})
    >>> s.url, s.method, s.timeout_s, s.threshold_percent, s.protect_last_n
    ('http://x:1', 'hermes', 30.0, 0.6, 10)
    """
    environ = os.environ if environ is None else environ
    out = Settings()
    known = {f.name for f in fields(Settings)}
    merged = {HERMES_KEYS[k]: v for k, v in (compression or {}).items() if k in HERMES_KEYS}
    merged.update({k: v for k, v in (section or {}).items() if k in known})
    merged.update({k: environ[v] for k, v in ENV.items() if environ.get(v) not in (None, "")})
    if "api_key" not in merged and environ.get("SGL_SPECCOMPACT_API_KEY"):
        merged["api_key"] = environ["SGL_SPECCOMPACT_API_KEY"]
    for name, value in merged.items():
        try:
            out = replace(out, **{name: _coerce(name, value)})
        except (TypeError, ValueError):
            continue
    return out


def load() -> Settings:
    """Settings from Hermes's config (when Hermes is importable) and ``os.environ``."""
    section: dict = {}
    compression: dict = {}
    try:
        from hermes_cli.config import load_config

        config = load_config() or {}
        section, compression = config.get("speccompact") or {}, config.get("compression") or {}
    except Exception:  # noqa: BLE001 - outside Hermes, or an unreadable config: defaults and environment
        section = {}
    return from_sources(section if isinstance(section, dict) else {}, None,
                        compression if isinstance(compression, dict) else {})
