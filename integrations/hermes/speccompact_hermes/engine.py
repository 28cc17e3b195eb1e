"""``SpecCompactEngine``: a Hermes Agent context engine backed by the sgl_speccompact service.

Hermes calls :meth:`compress` when the prompt crosses the threshold.  The
engine keeps Hermes's head and tail, sends the middle (redacted, with the
previous summary, the focus topic and the agent's tools) to the service, and
returns the list Hermes continues with.  A failure -- service down, slow,
5xx, a cut-off or empty summary -- returns the messages unchanged, sets a
cooldown like Hermes's own compressor, and never raises into the agent loop.
Automatic compaction stops after two compactions in a row that did not bring
the prompt under the threshold (Hermes applies no such guard to plugin
engines); ``/compress`` (``force=True``) always runs.

Every field is plain data, so ``copy.deepcopy`` (Hermes copies the engine
for each agent) always works.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from . import client, messages as msgs
from .settings import Settings

log = logging.getLogger(__name__)

try:  # inside Hermes
    from agent.context_engine import ContextEngine as _Base
except ImportError:  # outside Hermes: the same attributes, so the logic runs and is testable
    class _Base:  # type: ignore[no-redef]
        last_prompt_tokens = last_completion_tokens = last_total_tokens = 0
        threshold_tokens = context_length = compression_count = 0
        threshold_percent, protect_first_n, protect_last_n = 0.75, 3, 6

        def get_status(self) -> dict:
            return {"last_prompt_tokens": max(self.last_prompt_tokens, 0), "threshold_tokens": self.threshold_tokens,
                    "context_length": self.context_length, "compression_count": self.compression_count}

        def on_session_reset(self) -> None:
            self.last_prompt_tokens = self.last_completion_tokens = self.last_total_tokens = 0
            self.compression_count = 0

# session id -> the tool schemas of the agent's latest request (filled by the pre_api_request hook;
# module level, so it is shared by every copy of the engine and never deep-copied)
AGENT_TOOLS: dict[str, list] = {}
MAX_SESSIONS = 64  # sessions whose tools are remembered


def remember_tools(session_id: str = "", request: dict | None = None, **_: Any) -> None:
    """``pre_api_request`` hook: keep the tools the agent is sending."""
    tools = ((request or {}).get("body") or {}).get("tools")
    if session_id and isinstance(tools, list):
        AGENT_TOOLS[session_id] = tools
        while len(AGENT_TOOLS) > MAX_SESSIONS:
            AGENT_TOOLS.pop(next(iter(AGENT_TOOLS)))


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


class SpecCompactEngine(_Base):
    """Hermes context engine: compaction by the sgl_speccompact service."""

    def __init__(self, settings: Settings | None = None):
        self.settings = settings or Settings()  # service URL, method, thresholds
        self.threshold_percent = self.settings.threshold_percent
        self.protect_first_n = self.settings.protect_first_n
        self.protect_last_n = self.settings.protect_last_n
        self.session_id = ""  # Hermes's current session id
        self._previous_summary: str | None = None  # last summary body, for incremental compaction
        self._cooldown_until = 0.0  # time.monotonic() before which automatic compaction waits
        self._timeouts_in_a_row = 0  # consecutive timeout failures (cooldown ladder step)
        self._failures_in_a_row = 0  # consecutive failed compactions of any kind
        self._ineffective_compression_count = 0  # compactions in a row that left the prompt over the threshold
        self._verify_compaction_cleared_threshold = False  # judge the next usage report
        self._last_compress_aborted = False  # read by Hermes: the last compress() failed, messages kept
        self._last_summary_error: str | None = None  # read by Hermes for its warning
        self._last_summary_fallback_used = False  # read by Hermes; never a fallback summary here
        self._last_compression_made_progress = False  # read by Hermes after compress()
        self.last: dict = {}  # stats of the last compaction (get_status)

    @property
    def name(self) -> str:
        return "speccompact"

    # ------------------------------------------------------------ usage and triggering

    def update_from_response(self, usage: dict) -> None:
        self.last_prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self.last_completion_tokens = int(usage.get("completion_tokens") or 0)
        self.last_total_tokens = int(usage.get("total_tokens") or self.last_prompt_tokens + self.last_completion_tokens)
        if self.last_prompt_tokens <= 0:
            return
        if self.last_prompt_tokens < self.threshold_tokens:
            self._ineffective_compression_count = 0
        elif self._verify_compaction_cleared_threshold:
            self._ineffective_compression_count += 1
            log.warning("speccompact: the prompt is still %d tokens after compaction (threshold %d); "
                        "ineffective compactions in a row: %d", self.last_prompt_tokens, self.threshold_tokens,
                        self._ineffective_compression_count)
        self._verify_compaction_cleared_threshold = False

    def record_completed_compaction(self, *, used_fallback: bool = False) -> None:
        """Hermes: a compaction crossed the session boundary; judge it on the next usage."""
        self._verify_compaction_cleared_threshold = True

    def _automatic_compression_blocked(self) -> bool:
        """In cooldown, or too many ineffective compactions (Hermes reads this too)."""
        return (time.monotonic() < self._cooldown_until
                or self._ineffective_compression_count >= self.settings.max_ineffective)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return 0 < self.threshold_tokens <= tokens and not self._automatic_compression_blocked()

    def update_model(self, model: str, context_length: int, base_url: str = "", api_key: str = "",
                     provider: str = "", api_mode: str = "", **_: Any) -> None:
        self.context_length = int(context_length or 0)
        self.threshold_tokens = int(self.context_length * self.threshold_percent)

    # ------------------------------------------------------------ compaction

    def _head_n(self) -> int:
        return 0 if self.compression_count or self._previous_summary else self.protect_first_n

    def has_content_to_compress(self, messages: list[dict]) -> bool:
        cut = self._split(messages)
        return cut is not None and cut.summarize_from < cut.end

    def _split(self, messages: list[dict]) -> msgs.Split | None:
        head = 1 if messages and messages[0].get("role") == "system" else 0
        if len(messages) <= head + self._head_n() + 4:
            return None
        budget = max(1, int(self.threshold_tokens * self.settings.tail_ratio))
        return msgs.split(messages, protect_first_n=self._head_n(), protect_last_n=self.protect_last_n,
                          tail_budget_tokens=budget, markers=hermes_markers())

    def compress(self, messages: list[dict], current_tokens: int | None = None, focus_topic: str | None = None,
                 force: bool = False) -> list[dict]:
        """Summarize the middle of ``messages`` on the service; the input unchanged on any failure."""
        self._last_compress_aborted, self._last_summary_error = False, None
        self._last_compression_made_progress = False
        if force:
            self._cooldown_until, self._ineffective_compression_count = 0.0, 0
        elif self._automatic_compression_blocked():
            return messages
        try:
            return self._compress(messages, focus_topic)
        except client.Failure as failure:
            self._fail(failure)
        except Exception as exc:  # never into the agent loop
            log.exception("speccompact: compaction failed")
            self._fail(client.Failure("error", f"{exc.__class__.__name__}: {exc}"))
        return messages

    def _compress(self, messages: list[dict], focus_topic: str | None) -> list[dict]:
        cut = self._split(messages)
        if cut is None or cut.summarize_from >= cut.end:
            self._ineffective_compression_count += 1  # nothing to summarize: as Hermes, count it
            return messages
        if not cut.previous_summary:  # the summary it would update is not in this list (another session)
            self._previous_summary = None
        previous = self._previous_summary or cut.previous_summary
        s = self.settings
        body: dict[str, Any] = {"messages": client.wire_messages(messages[cut.summarize_from:cut.end], redact),
                                "method": s.method, "source_judge": s.source_judge}
        if previous:
            body["previous_summary"] = redact(previous)
        if focus_topic and focus_topic.strip():
            body["focus"] = redact(focus_topic.strip())
        if AGENT_TOOLS.get(self.session_id):
            body["tools"] = AGENT_TOOLS[self.session_id]
        if self.context_length:
            body["config"] = {"agent_context_tokens": self.context_length}
        reply = client.compact(s.url, body, api_key=s.api_key, timeout_s=s.timeout_s)
        summary = redact(reply.summary)
        out = msgs.assemble(messages, cut, summary, hermes_markers())
        self._previous_summary = summary
        self.compression_count += 1
        self._cooldown_until, self._timeouts_in_a_row, self._failures_in_a_row = 0.0, 0, 0
        self._last_compression_made_progress = True
        stats = reply.result.get("stats") or {}
        self.last = {"method": reply.result.get("method"), "summary_tokens": reply.result.get("summary_tokens"),
                     "acceptance_rate": stats.get("acceptance_rate"),
                     "target_cached_ratio": stats.get("target_cached_ratio"),
                     "latency_s": round(reply.latency_s, 3), "service_wall_s": stats.get("total_wall_s"),
                     "messages_summarized": len(body["messages"]), "messages_before": len(messages),
                     "messages_after": len(out), "incremental": bool(previous), "focus": "focus" in body}
        return out

    def _fail(self, failure: client.Failure) -> None:
        self._timeouts_in_a_row = self._timeouts_in_a_row + 1 if failure.kind == "timeout" else 0
        self._failures_in_a_row += 1
        wait = failure.cooldown(self._timeouts_in_a_row)
        self._cooldown_until = time.monotonic() + wait
        self._last_compress_aborted, self._last_summary_error = True, f"speccompact service: {failure}"
        self.last = {"error": str(failure), "cooldown_s": wait}
        log.warning("speccompact: %s; messages kept unchanged, automatic compaction paused for %d s", failure, wait)

    # ------------------------------------------------------------ session and status

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        self.session_id = session_id or ""
        old = kwargs.get("old_session_id")
        if old and old in AGENT_TOOLS and self.session_id not in AGENT_TOOLS:
            AGENT_TOOLS[self.session_id] = AGENT_TOOLS[old]

    def on_session_reset(self) -> None:
        super().on_session_reset()
        self._previous_summary, self._ineffective_compression_count = None, 0
        self._cooldown_until, self._timeouts_in_a_row, self._failures_in_a_row = 0.0, 0, 0

    def get_status(self) -> dict:
        status = super().get_status()
        status["speccompact"] = {
            "service_url": self.settings.url, "method": self.settings.method,
            "source_judge": self.settings.source_judge, "last_compaction": dict(self.last),
            "cooldown_remaining_s": max(0.0, round(self._cooldown_until - time.monotonic(), 1)),
            "failures_in_a_row": self._failures_in_a_row,
            "ineffective_in_a_row": self._ineffective_compression_count,
        }
        return status
