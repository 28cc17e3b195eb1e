"""The input edge, pure: an agent's history in, canonical turns and text out.

``formats`` reads the agent frameworks' files, ``convert`` turns their
messages into OpenAI messages, ``messages`` validates and renders them,
``untrusted`` keeps untrusted text data, ``redaction`` removes secrets
(its patterns in ``secret_patterns``, each linear in its input; what it
found before in ``redaction_cache``),
``pruning`` replaces old tool outputs by one-line stubs, ``identifiers``
finds the exact strings a summary must keep, ``prefilter`` scans a text
once for many patterns (hyperscan, when installed) so redaction and the
identifier extractor run their patterns only where they can match.

May import: the vocabulary (``config``, ``errors``, ``schema``, ``result``).
Must not import: any other layer; nothing here sends a request.
"""

from .formats import list_trials, load_history
from .messages import ROLES, ToolCall, Turn, environment_outputs, parse_messages, render_history

__all__ = ["ROLES", "ToolCall", "Turn", "environment_outputs", "list_trials", "load_history", "parse_messages",
           "render_history"]
