"""SpecCompact for Hermes Agent: context compaction by the sgl_speccompact service.

Install into Hermes's environment (``pip install ./integrations/hermes``; the
``hermes_agent.plugins`` entry point names it ``speccompact``) or copy this
directory to ``$HERMES_HOME/plugins/speccompact/``.  Then enable and select it
in ``$HERMES_HOME/config.yaml``::

    plugins:
      enabled: [speccompact]
    context:
      engine: speccompact

This package never imports sglang; it reaches the service over HTTP.
"""

from __future__ import annotations

__version__ = "0.1.0"


def register(ctx) -> None:
    """Hermes plugin entry: register the context engine and the hook that sees the agent's tools."""
    from .engine import SpecCompactEngine, remember_tools
    from .settings import load

    ctx.register_context_engine(SpecCompactEngine(load()))
    ctx.register_hook("pre_api_request", remember_tools)
