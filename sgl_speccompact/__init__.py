"""sgl_speccompact: fast structured compaction of LLM-agent histories on SGLang.

Importing the package starts no server and sends no request.

>>> import sgl_speccompact as sc
>>> sc.CompactConfig().eta
0.7
"""

from .compactor import compact
from .config import CompactConfig, make_config
from .endpoint import LabelJudgement, SpecCompactEndpoint, connect
from .errors import (BackendError, BackendTimeoutError, BackendUnavailableError, ConfigError,
                     InvalidHistoryError, LabelTokenError, SpecCompactError, SummaryBudgetError)
from .programs import draft_slot, speccompact
from .result import CompactionResult, LineOrigin
from .schema import OPENCLAW_SLOTS, Slot

__all__ = [
    "compact", "CompactConfig", "make_config", "SpecCompactEndpoint", "LabelJudgement", "connect",
    "speccompact", "draft_slot", "CompactionResult", "LineOrigin", "OPENCLAW_SLOTS", "Slot",
    "SpecCompactError", "ConfigError", "LabelTokenError", "InvalidHistoryError", "BackendError",
    "BackendUnavailableError", "BackendTimeoutError", "SummaryBudgetError",
]
