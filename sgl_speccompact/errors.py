"""One error hierarchy for the whole package.

Every error a caller can see derives from :class:`SpecCompactError`, so a
service or agent can catch one type.  The HTTP service maps each class to a
status code (see ``HTTP_STATUS``); nothing here does I/O.
"""

from __future__ import annotations


class SpecCompactError(Exception):
    """Base class of every error raised by sgl_speccompact.

    A compaction runs its slots concurrently; when several fail, the first
    (in slot order) is raised and carries the others in ``others``, each also
    named in a note of its traceback (``programs.states.run_concurrently``).
    """

    code = "speccompact_error"
    others: tuple[BaseException, ...] = ()  # failures of the same concurrent run besides this one, in job order

    def to_dict(self) -> dict:
        """The typed error body the service returns."""
        return {"type": self.code, "message": str(self)}


class _FieldError(SpecCompactError):
    """An error about one named input field; the body always carries ``field``."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field  # the offending input, e.g. ``messages[3].role`` or ``config.eta``
        self.message = message  # what is wrong with it, without the field

    def to_dict(self) -> dict:
        return {**super().to_dict(), "field": self.field}


class ConfigError(_FieldError, ValueError):
    """A configuration value is invalid (bad budget, unusable label word, ...)."""

    code = "config_error"


class LabelTokenError(ConfigError):
    """A judge label has no single-token variant in the target tokenizer."""

    code = "label_token_error"


class ChatTemplateError(ConfigError):
    """The chat template of a served model cannot be decided, or the given name is unknown."""

    code = "chat_template_error"


class InvalidHistoryError(_FieldError, ValueError):
    """The history is malformed: names the offending field, e.g. ``messages[3].role``."""

    code = "invalid_history"


class HistoryTooLongError(InvalidHistoryError):
    """The history exceeds a configured size limit (messages or characters)."""

    code = "history_too_long"


class PromptTooLongError(HistoryTooLongError):
    """A server refused a prompt longer than its model's context (chunked compaction then cuts smaller)."""


class HistoryFormatError(InvalidHistoryError):
    """A history file or object is not in any supported format."""

    code = "unknown_history_format"


class UnknownMethodError(SpecCompactError, ValueError):
    """A compaction method name that is not registered."""

    code = "unknown_method"


class SummaryBudgetError(SpecCompactError):
    """The assembled summary exceeds its token budget; no summary is returned."""

    code = "summary_over_budget"

    def __init__(self, tokens: int, budget: int):
        super().__init__(f"summary has {tokens} tokens, budget is {budget}")
        self.tokens = tokens
        self.budget = budget


class BackendError(SpecCompactError):
    """An SGLang server failed or returned something unusable."""

    code = "backend_error"


class BackendUnavailableError(BackendError):
    """An SGLang server could not be reached (connection refused, reset, 5xx)."""

    code = "backend_unavailable"


class BackendTimeoutError(BackendError):
    """An SGLang server did not answer within the configured timeout."""

    code = "backend_timeout"


class LabelLogprobError(BackendError):
    """A judge request came back without a logprob for a label and without top-k logprobs
    to apply the missing-label rule: e.g. a server that ignores ``token_ids_logprob``."""

    code = "label_logprob_missing"


class InvalidRequestError(_FieldError, ValueError):
    """A service request body is malformed (wrong type, unknown field)."""

    code = "invalid_request"


class MalformedJSONError(InvalidRequestError):
    """A service request body is not valid JSON."""

    code = "malformed_json"


class RequestTooLargeError(InvalidRequestError):
    """A service request body exceeds the byte limit."""

    code = "request_too_large"


class UnsupportedMediaTypeError(InvalidRequestError):
    """A service request body is not declared as ``application/json``."""

    code = "unsupported_media_type"


class CompactionCancelledError(SpecCompactError):
    """The compaction was cancelled (the client went away, or the service is stopping)."""

    code = "cancelled"


class ServiceStoppingError(CompactionCancelledError):
    """The service is shutting down; the compaction was cancelled."""

    code = "service_stopping"


class CompactionTimeoutError(BackendTimeoutError):
    """The whole compaction ran past its deadline; no summary is returned."""

    code = "compaction_timeout"


class ServiceBusyError(SpecCompactError):
    """The service holds as much queued work of this kind as it may; retry after ``retry_after_s``."""

    code = "busy"

    def __init__(self, message: str, *, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s  # sent as Retry-After (whole seconds, at least 1)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "retry_after_s": self.retry_after_s}


class UnauthorizedError(SpecCompactError):
    """Missing or wrong bearer token."""

    code = "unauthorized"


class NotFoundError(SpecCompactError):
    """No route of the service has this path."""

    code = "not_found"


class MethodNotAllowedError(SpecCompactError):
    """The path exists, but not with this HTTP method."""

    code = "method_not_allowed"


class LaunchError(SpecCompactError):
    """An SGLang server could not be started or never became healthy."""

    code = "launch_error"


# Service status for each error class; the most specific class wins.
HTTP_STATUS: dict[type[SpecCompactError], int] = {
    MalformedJSONError: 400,
    UnauthorizedError: 401,
    NotFoundError: 404,
    MethodNotAllowedError: 405,
    RequestTooLargeError: 413,
    UnsupportedMediaTypeError: 415,
    InvalidRequestError: 422,
    HistoryTooLongError: 413,
    InvalidHistoryError: 422,
    ConfigError: 422,
    UnknownMethodError: 422,
    SummaryBudgetError: 422,
    ServiceStoppingError: 503,
    ServiceBusyError: 429,
    CompactionCancelledError: 499,  # client closed the request (nginx's code)
    BackendTimeoutError: 504,
    BackendError: 502,
    SpecCompactError: 500,
}


def http_status(err: SpecCompactError) -> int:
    """Status code for ``err``: the entry of its nearest class in ``HTTP_STATUS``.

    >>> http_status(BackendTimeoutError("slow"))
    504
    """
    for cls in type(err).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500
