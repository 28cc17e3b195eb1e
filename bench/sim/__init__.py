"""The one-clock simulator: the real programs on sglang's interpreter, emulated servers on a virtual clock.

``simulator`` runs a compaction and detects quiescence (``quiescence``),
``servers`` holds the simulated servers and :class:`SimulatedEndpoint`,
``events`` the events on the clock, ``timeline`` the event log and its
invariants, ``workload`` the benchmark summaries and verdicts, ``session``
an agent's session replayed before a compaction.  Every time it reports is
SIMULATED.

Outside the wheel: only the benchmarks and the tests run it.

May import: the product and its emulator (:mod:`sgl_speccompact.emulator`),
which it builds on.  Nothing in the product imports it.
"""
