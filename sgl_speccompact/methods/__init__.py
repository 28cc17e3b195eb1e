"""Where methods are chosen: one pipeline, its registry, SpecCompact, the baselines and SJC.

``request`` holds one compaction's inputs (:class:`~.request.MethodRequest`,
built once at the edge); ``pipeline`` parses and renders once, runs the
method's program and assembles the summary; ``registry`` selects a method by
name (:func:`run_method`) and ``resolve`` resolves ``auto``; ``speccompact`` and ``baselines`` are the registered
methods; ``assembly`` checks budgets and builds the result; ``chunking``
compacts a history longer than the target's context block by block;
``source_judge`` is the SJC post-filter; ``auto`` predicts the fastest
method for a deployment from the cost model.

May import: ``programs``, ``backends``, ``core``, ``history`` and the
vocabulary.  Must not import: service, launch, cli.
"""

from .request import AgentLayout, MethodRequest

__all__ = ["METHODS", "AgentLayout", "MethodRequest", "run_method"]


def __getattr__(name: str):
    # the registry imports sglang (seconds); the launcher's planning and the cost model need neither
    if name in ("METHODS", "run_method"):
        from . import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
