"""sgl_speccompact: fast structured compaction of LLM-agent histories on SGLang.

Importing the package starts no server and sends no request.  Names are
loaded on first use, so ``python -m sgl_speccompact.launch --dry-run`` does
not pay for importing sglang.

>>> import sgl_speccompact as sc
>>> sc.CompactConfig().eta
0.7
"""

from importlib import import_module

_EXPORTS = {
    "compact": "methods.speccompact", "MethodRequest": "methods.request", "AgentLayout": "methods.request",
    "CompactConfig": "config", "make_config": "config",
    "SpecCompactEndpoint": "backends.endpoint", "LabelJudgement": "backends.endpoint", "connect": "backends.endpoint",
    "speccompact": "programs.slots", "draft_slot": "programs.steps",
    "CompactionResult": "result", "LineOrigin": "result",
    "OPENCLAW_SLOTS": "schema", "Slot": "schema",
    "SpecCompactError": "errors", "ConfigError": "errors", "LabelTokenError": "errors",
    "InvalidHistoryError": "errors", "BackendError": "errors", "BackendUnavailableError": "errors",
    "BackendTimeoutError": "errors", "SummaryBudgetError": "errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sgl_speccompact' has no attribute {name!r}")
    value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
