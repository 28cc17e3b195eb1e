"""Hermes's summary framing and secret redaction: Hermes's own inside Hermes, look-alikes outside it."""

from __future__ import annotations

import re

from . import messages as msgs


def hermes_markers() -> msgs.Markers:
    """Hermes's summary framing; a look-alike outside Hermes (tests of the logic)."""
    try:
        from agent import context_compressor as cc

        return msgs.Markers(cc.SUMMARY_PREFIX, cc._SUMMARY_END_MARKER, cc._MERGED_PRIOR_CONTEXT_HEADER,
                            cc._MERGED_SUMMARY_DELIMITER)
    except (ImportError, AttributeError):
        return msgs.Markers("[CONTEXT COMPACTION — REFERENCE ONLY] The summary below replaces earlier turns.",
                            "--- END OF CONTEXT SUMMARY ---", "[PRIOR CONTEXT]", "[COMPACTION SUMMARY BELOW]")


_SECRET = re.compile(r"(sk-[A-Za-z0-9_-]{16,}|ghp_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|xox[baprs]-[A-Za-z0-9-]{10,}"
                     r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"
                     r"|(?i:bearer)\s+[A-Za-z0-9._~+/-]{16,}=*)")


def redact(text: str) -> str:
    """Hermes's secret redaction (forced, URL credentials too); a small pattern set outside Hermes."""
    try:
        from agent.redact import redact_sensitive_text
    except ImportError:
        return _SECRET.sub("[REDACTED]", text)
    return redact_sensitive_text(text, force=True, redact_url_credentials=True)
