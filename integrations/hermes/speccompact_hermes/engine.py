"""``SpecCompactEngine``: a Hermes Agent context engine backed by the sgl_speccompact service.

Hermes calls :meth:`compress` when the prompt crosses the trigger (Hermes's
own, from its ``compression.*`` settings).  The engine prunes old tool
outputs to one-line stubs as Hermes's built-in does (head and tail
included), keeps Hermes's head and tail, sends the middle (redacted, with
the previous summary, the ``/compress`` topic or Hermes's auto-focus from the
recent user turns, and the agent's tools) to the service, and returns the
list Hermes continues with, the summary under Hermes's headings.  A middle
with nothing to send is a local no-op: the pruned list, no request.

A failure -- service down, killed mid-answer, slow, 401, 5xx, a cut-off or
empty summary -- never raises into the agent loop and sets a cooldown like
Hermes's own compressor (no request to the service until it ends).  What
the agent continues with follows Hermes's ``compression.abort_on_summary_failure``:
by default (False) the pruned list with the middle replaced by a
deterministic hand-off (``fallback.py``), so the prompt still shrinks; with
True the messages unchanged.  During the cooldown an automatic compaction
makes the same local hand-off without asking the service (or, with True,
keeps the messages).  A call over the window -- Hermes's recovery after the
model refused the prompt for length -- is never held back by the cooldown.
Automatic compaction stops after two compactions in a row that did not
bring the prompt under the trigger (Hermes applies no such guard to plugin
engines); ``/compress`` (``force=True``) always runs.

Ahead of time: once a usage report reaches ``prepare_ratio`` of the trigger,
the engine sends the middle it can already fix as ``"mode": "prepare"`` with
the session id, in a background thread, and again each time that prefix
grew by ``prepare_step`` of the trigger, so the compaction at the trigger
finds a prefix at most a few turns old already summarized.  A service that
refuses the fields (422) is not asked again; compactions name the session
only once a prepare was accepted.

Every field is plain data, so ``copy.deepcopy`` (Hermes copies the engine
for each agent) always works.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from typing import Any

from . import client, fallback, hermes_body, messages as msgs, policy
from .framing import hermes_markers, redact
from .seen import (AGENT_HISTORY, AGENT_TOOLS, PREPARES, SUMMARY_GUESS, _fingerprint, carry_over,  # noqa: F401 - re-exported for the tests
                   remember_tools)
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

class SpecCompactEngine(_Base):
    """Hermes context engine: compaction by the sgl_speccompact service."""

    def __init__(self, settings: Settings | None = None):
        self.settings = settings or Settings()  # service URL, method, Hermes's compression settings
        self.threshold_percent = self.settings.threshold_percent  # trigger share (Hermes's floors applied later)
        self.protect_first_n = self.settings.protect_first_n
        self.protect_last_n = self.settings.protect_last_n
        self.summary_target_ratio = max(0.10, min(self.settings.target_ratio, 0.80))  # Hermes's clamp
        self.tail_token_budget = 0  # kept tail and never-pruned recent outputs (tokens); set by update_model
        self.max_tokens: int | None = None  # output reservation Hermes subtracts from the window (tokens)
        self.session_id = ""  # Hermes's current session id
        self._previous_summary: str | None = None  # last summary body as the service wrote it (incremental)
        self._cooldown_until = 0.0  # time.monotonic() before which automatic compaction waits
        self._timeouts_in_a_row = 0  # consecutive timeout failures (cooldown ladder step)
        self._failures_in_a_row = 0  # consecutive failed compactions of any kind
        self._ineffective_compression_count = 0  # compactions in a row that left the prompt over the trigger
        self._verify_compaction_cleared_threshold = False  # judge the next usage report
        self._last_compress_aborted = False  # read by Hermes: the last compress() failed, messages kept
        self._last_summary_error: str | None = None  # read by Hermes for its warning
        self._last_summary_fallback_used = False  # read by Hermes: the last compress() inserted the local hand-off
        self._last_compression_made_progress = False  # read by Hermes after compress()
        self._prepare_supported: bool | None = None  # the service took (True) or refused (False) a prepare
        self._prepared_key = ""  # digest of the last prepared request: one prepare per prefix
        self._prepared_n = 0  # messages the last prepare covered, from the first summarized one
        self._prepared_digest = ""  # fingerprint of those messages as sent
        self._prepared_params = ""  # digest of the last prepare's fields other than its messages
        self._prepared_tokens = 0  # rough tokens of the last prepare's messages before pruning
        self.prepares_sent = 0  # ahead-of-time compactions sent
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
        try:
            self._maybe_prepare()
        except Exception:  # an ahead-of-time compaction is an optimisation: never into the agent loop
            log.debug("speccompact: prepare skipped", exc_info=True)

    def record_completed_compaction(self, *, used_fallback: bool = False) -> None:
        """Hermes: a compaction crossed the session boundary; judge it on the next usage."""
        self._verify_compaction_cleared_threshold = True

    def _automatic_compression_blocked(self) -> bool:
        """Never: Hermes asks this before every call without ``force``, its recovery from a refused prompt too.

        Automatic compaction is held back in :meth:`should_compress` instead
        (which Hermes's automatic paths ask first and its recovery does not).
        """
        return False

    def _held(self) -> bool:
        """Automatic compaction waits: too many ineffective ones, or a cooldown with the abort key set.

        With ``abort_on_summary_failure`` False a cooldown holds back only the
        requests to the service: compress() hands off locally meanwhile.
        """
        return (self._ineffective_compression_count >= self.settings.max_ineffective
                or (self._cooling_down() and self.settings.abort_on_summary_failure))

    def _cooling_down(self) -> bool:
        return time.monotonic() < self._cooldown_until

    def _over_window(self, current_tokens: int | None) -> bool:
        """Whether a call is Hermes's recovery from a prompt the model refused: the prompt fills the window."""
        window = self.context_length - (self.max_tokens or 0)
        return bool(current_tokens) and 0 < window <= int(current_tokens)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return 0 < self.threshold_tokens <= tokens and not self._held()

    def update_model(self, model: str, context_length: int, base_url: str = "", api_key: str = "",
                     provider: str = "", api_mode: str = "", max_tokens: int | None = None, **_: Any) -> None:
        self.context_length = int(context_length or 0)
        if isinstance(max_tokens, int) and max_tokens > 0:
            self.max_tokens = max_tokens
        self.threshold_percent = policy.effective_percent(self.context_length, self.settings.threshold_percent)
        self.threshold_tokens = policy.hermes_trigger(self.context_length, self.settings.threshold_percent,
                                                      self.max_tokens)
        self.tail_token_budget = int(self.threshold_tokens * self.summary_target_ratio)

    # ------------------------------------------------------------ what a compaction sends

    def _head_n(self) -> int:
        return 0 if self.compression_count or self._previous_summary else self.protect_first_n

    def _plan(self, messages: list[dict]) -> policy.Plan:
        return policy.plan(messages, head_n=self._head_n(), protect_last_n=self.protect_last_n,
                           tail_tokens=self.tail_token_budget or int(self.threshold_tokens * 0.2),
                           markers=hermes_markers())

    def has_content_to_compress(self, messages: list[dict]) -> bool:
        p = self._plan(messages)
        return p.n_pruned > 0 or (p.cut is not None
                                  and bool(client.wire_messages(msgs.middle(p.pruned, p.cut), redact)))

    def _previous_for(self, cut: msgs.Split) -> str | None:
        if not cut.previous_summary:  # the summary it would update is not in this list (another session)
            self._previous_summary = None
            return None
        if self._previous_summary:
            return self._previous_summary
        if self.settings.method != "hermes" and hermes_body.is_hermes_shaped(cut.previous_summary):
            return hermes_body.to_slots(cut.previous_summary) or cut.previous_summary
        return cut.previous_summary

    def _body(self, wire: list[dict], previous: str | None, focus: str | None) -> dict[str, Any]:
        s = self.settings
        body: dict[str, Any] = {"messages": wire, "method": s.method, "source_judge": s.source_judge}
        if previous:
            body["previous_summary"] = redact(previous)
        if focus and focus.strip():
            body["focus"] = redact(focus.strip())
        if AGENT_TOOLS.get(self.session_id):
            body["tools"] = AGENT_TOOLS[self.session_id]
        if self.context_length:
            body["config"] = {"agent_context_tokens": self.context_length}
        return body

    # ------------------------------------------------------------ ahead of time

    def _maybe_prepare(self) -> None:
        s = self.settings
        soft = int(self.threshold_tokens * s.prepare_ratio)
        history = AGENT_HISTORY.get(self.session_id)
        if (not s.prepare or self._prepare_supported is False or not self.session_id or not history
                or not 0 < soft <= self.last_prompt_tokens < self.threshold_tokens
                or self._held() or self._cooling_down()):  # at the trigger compress() runs next: no prepare
            return
        p = self._plan(history)
        split = policy.prepared_split(p)
        wire = client.wire_messages(msgs.middle(p.pruned, split), redact) if split else []
        if not wire:
            return
        body = self._body(wire, self._previous_for(p.cut), hermes_body.auto_focus(history, self._is_summary))
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        params = _fingerprint([{k: v for k, v in body.items() if k != "messages"}])
        tokens = sum(msgs.rough_tokens(m) for m in history[split.summarize_from:split.end])  # as the agent sent them
        running = PREPARES.get(self.session_id)
        if key == self._prepared_key or (running is not None and running.is_alive()):
            return
        if params == self._prepared_params and tokens < self._prepared_tokens + self.threshold_tokens * s.prepare_step:
            return  # rolling: the stored prefix is recent enough; a new prepare would cancel a running one
        self._prepared_key, self._prepared_n = key, split.end - split.summarize_from
        self._prepared_digest, self._prepared_params, self._prepared_tokens = _fingerprint(wire), params, tokens
        self.prepares_sent += 1
        body.update(session=self.session_id, mode="prepare")
        thread = threading.Thread(target=self._send_prepare, args=(body,), daemon=True, name="speccompact-prepare")
        PREPARES[self.session_id] = thread
        thread.start()

    def _send_prepare(self, body: dict) -> None:
        s = self.settings
        answer = client.prepare(s.url, body, api_key=s.api_key, timeout_s=s.prepare_timeout_s)
        if answer != "failed":
            self._prepare_supported = answer == "accepted"

    @staticmethod
    def _is_summary(m: dict) -> bool:
        return msgs.is_summary(m, hermes_markers())

    # ------------------------------------------------------------ compaction

    def compress(self, messages: list[dict], current_tokens: int | None = None, focus_topic: str | None = None,
                 force: bool = False) -> list[dict]:
        """Summarize the middle of ``messages`` on the service; on failure, Hermes's hand-off or the input."""
        self._last_compress_aborted, self._last_summary_error = False, None
        self._last_compression_made_progress = self._last_summary_fallback_used = False
        if force:
            self._cooldown_until, self._ineffective_compression_count = 0.0, 0
        # cooling down: no request, the hand-off Hermes would insert; a call reaching here with the abort
        # key set, or over the window, is Hermes's recovery from a refused prompt (should_compress said no)
        local = (self._cooling_down() and not self.settings.abort_on_summary_failure
                 and not self._over_window(current_tokens))
        try:
            if local:
                return self._fall_back(messages, str(self.last.get("error") or "the service is cooling down"))
            return self._compress(messages, focus_topic)
        except client.Failure as failure:
            self._fail(failure)
        except Exception as exc:  # never into the agent loop
            log.exception("speccompact: compaction failed")
            self._fail(client.Failure("error", f"{exc.__class__.__name__}: {exc}"))
        if not self.settings.abort_on_summary_failure:
            try:
                return self._fall_back(messages, str(self.last.get("error")))
            except Exception:  # the hand-off is local and pure; should it ever fail, keep the messages
                log.exception("speccompact: the local hand-off failed")
        self._last_compress_aborted = True
        return messages

    def _fall_back(self, messages: list[dict], reason: str) -> list[dict]:
        """The pruned list with the middle replaced by a deterministic hand-off (no request)."""
        p = self._plan(messages)
        middle = msgs.middle(p.pruned, p.cut) if p.cut is not None else []
        if not middle:  # nothing to drop: the pruning alone
            return [msgs.kept(m) for m in p.pruned] if p.n_pruned else messages
        body = fallback.handoff(middle, reason, p.cut.previous_summary)
        out = msgs.assemble(p.pruned, p.cut, redact(body), hermes_markers())
        self._previous_summary = None  # the next summary builds on the hand-off now in the list
        self._prepared_key, self._prepared_n, self._prepared_params = "", 0, ""
        self.compression_count += 1
        self._last_compression_made_progress = self._last_summary_fallback_used = True
        self.last = {**self.last, "fallback": True, "messages_dropped": len(middle), "messages_before": len(messages),
                     "messages_after": len(out), "pruned_tool_outputs": p.n_pruned}
        log.warning("speccompact: no summary (%s); %d messages replaced by a local hand-off "
                    "(compression.abort_on_summary_failure: false)", reason, len(middle))
        return out

    def _compress(self, messages: list[dict], focus_topic: str | None) -> list[dict]:
        p = self._plan(messages)
        cut = p.cut
        if self._prepare_supported and self._prepared_n:  # the prepared summary alone may be enough
            soft = int(self.threshold_tokens * self.settings.prepare_ratio)
            cut = policy.apply_prepared(
                p, self._prepared_n, self._prepared_digest,
                lambda split: _fingerprint(client.wire_messages(msgs.middle(p.pruned, split), redact)),
                soft, int(self.last.get("summary_tokens") or SUMMARY_GUESS)) or cut
        middle = msgs.middle(p.pruned, cut) if cut is not None else []
        wire = client.wire_messages(middle, redact)
        if not wire:  # nothing to summarize: a local no-op (the pruned list), counted as Hermes counts it
            self._ineffective_compression_count += 1
            self.last = {"pruned_tool_outputs": p.n_pruned, "messages_summarized": 0}
            return [msgs.kept(m) for m in p.pruned] if p.n_pruned else messages
        previous = self._previous_for(cut)
        focus = focus_topic if focus_topic and focus_topic.strip() else hermes_body.auto_focus(messages,
                                                                                              self._is_summary)
        body = self._body(wire, previous, focus)
        pending = PREPARES.pop(self.session_id, None)
        if pending is not None:  # the service must have seen the prepare before this compaction
            pending.join(min(self.settings.prepare_timeout_s, self.settings.timeout_s))
        if self._prepare_supported:
            body["session"] = self.session_id
        s = self.settings
        reply = client.compact(s.url, body, api_key=s.api_key, timeout_s=s.timeout_s)
        ledger = reply.result.get("ledger") if isinstance(reply.result.get("ledger"), dict) else {}
        rendered = hermes_body.to_hermes(reply.summary, hermes_body.task_snapshot(middle, self._is_summary),
                                         cut.previous_summary, hermes_body.tool_paths(middle), ledger.get("read_set"))
        out = msgs.assemble(p.pruned, cut, redact(rendered), hermes_markers())
        self._previous_summary = redact(reply.summary)
        self._prepared_key, self._prepared_n, self._prepared_params = "", 0, ""
        self.compression_count += 1
        self._cooldown_until, self._timeouts_in_a_row, self._failures_in_a_row = 0.0, 0, 0
        self._last_compression_made_progress = True
        stats = reply.result.get("stats") or {}
        self.last = {"method": reply.result.get("method"), "summary_tokens": reply.result.get("summary_tokens"),
                     "acceptance_rate": stats.get("acceptance_rate"),
                     "target_cached_ratio": stats.get("target_cached_ratio"),
                     "latency_s": round(reply.latency_s, 3), "service_wall_s": stats.get("total_wall_s"),
                     "messages_summarized": len(wire), "messages_before": len(messages),
                     "messages_after": len(out), "incremental": bool(previous), "focus": "focus" in body,
                     "pruned_tool_outputs": p.n_pruned, "session_sent": "session" in body,
                     "prepared_prefix_alone": cut is not p.cut,
                     "reused_messages": client.reused_messages(reply.result)}
        return out

    def _fail(self, failure: client.Failure) -> None:
        self._timeouts_in_a_row = self._timeouts_in_a_row + 1 if failure.kind == "timeout" else 0
        self._failures_in_a_row += 1
        wait = failure.cooldown(self._timeouts_in_a_row)
        self._cooldown_until = time.monotonic() + wait
        self._last_summary_error = f"speccompact service: {failure}"
        self.last = {"error": str(failure), "cooldown_s": wait}
        log.warning("speccompact: %s; no request to the service for %d s", failure, wait)

    # ------------------------------------------------------------ session and status

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        self.session_id = session_id or ""
        carry_over(kwargs.get("old_session_id"), self.session_id)

    def on_session_reset(self) -> None:
        super().on_session_reset()
        self._previous_summary, self._ineffective_compression_count = None, 0
        self._cooldown_until, self._timeouts_in_a_row, self._failures_in_a_row = 0.0, 0, 0
        self._prepared_key, self._prepared_n, self._prepared_params = "", 0, ""

    def get_status(self) -> dict:
        status = super().get_status()
        status["speccompact"] = {
            "service_url": self.settings.url, "method": self.settings.method,
            "source_judge": self.settings.source_judge, "last_compaction": dict(self.last),
            "cooldown_remaining_s": max(0.0, round(self._cooldown_until - time.monotonic(), 1)),
            "failures_in_a_row": self._failures_in_a_row,
            "ineffective_in_a_row": self._ineffective_compression_count,
            "prepare_supported": self._prepare_supported, "prepares_sent": self.prepares_sent,
        }
        return status
