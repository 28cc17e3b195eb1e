"""The plugin's settings: defaults, then ``speccompact:`` in config.yaml, then the environment.

``$HERMES_HOME/config.yaml``::

    context:
      engine: speccompact
    plugins:
      enabled: [speccompact]
    speccompact:
      url: http://127.0.0.1:8000
      method: speccompact        # or hermes, openclaw, target_self
      source_judge: false
      timeout_s: 120

Environment (wins over the file): ``SPECCOMPACT_URL``, ``SPECCOMPACT_API_KEY``
(else ``SGL_SPECCOMPACT_API_KEY``), ``SPECCOMPACT_METHOD``,
``SPECCOMPACT_SOURCE_JUDGE`` (1/true/yes), ``SPECCOMPACT_TIMEOUT_S``.
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
    method: str = "speccompact"  # speccompact | hermes | openclaw | target_self
    source_judge: bool = False  # run Source-Judged Compaction on the summary
    timeout_s: float = 120.0  # one compaction request, end to end (s)
    threshold_percent: float = 0.75  # compact when the prompt reaches this share of the context window
    protect_first_n: int = 3  # messages after the system prompt kept on the first compaction
    protect_last_n: int = 20  # Hermes's tail floor setting (the floor itself is capped at 8 messages)
    tail_ratio: float = 0.20  # tail token budget as a share of the threshold
    max_ineffective: int = 2  # automatic compaction stops after this many ineffective ones in a row


ENV = {"url": "SPECCOMPACT_URL", "api_key": "SPECCOMPACT_API_KEY", "method": "SPECCOMPACT_METHOD",
       "source_judge": "SPECCOMPACT_SOURCE_JUDGE", "timeout_s": "SPECCOMPACT_TIMEOUT_S"}


def _coerce(name: str, value: Any) -> Any:
    kind = {f.name: f.type for f in fields(Settings)}[name]
    if kind == "bool":
        return value if isinstance(value, bool) else str(value).strip().lower() in TRUE
    if kind == "float":
        return float(value)
    if kind == "int":
        return int(value)
    return None if value in (None, "") else str(value)


def from_sources(section: dict | None, environ: dict | None = None) -> Settings:
    """Settings from a config.yaml ``speccompact`` section and an environment.

    Unknown keys are ignored; values that do not parse keep the default.

    >>> s = from_sources({"method": "hermes", "timeout_s": "30"}, {"SPECCOMPACT_URL": "http://x:1"})
    >>> s.url, s.method, s.timeout_s
    ('http://x:1', 'hermes', 30.0)
    """
    environ = os.environ if environ is None else environ
    out = Settings()
    known = {f.name for f in fields(Settings)}
    merged = {k: v for k, v in (section or {}).items() if k in known}
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
    try:
        from hermes_cli.config import load_config

        section = (load_config() or {}).get("speccompact") or {}
    except Exception:  # outside Hermes, or an unreadable config: defaults and environment
        section = {}
    return from_sources(section if isinstance(section, dict) else {})
