"""The benchmark lab: scripts, their harness, the simulator and the retention evaluation.

A package of the repository, not of the wheel.  Run a script as a module from
the repository root (``python -m bench.latency ...``); the scripts share
:mod:`bench.harness` (trajectories, servers, cells, tables, reports), run their
SIMULATED figures on :mod:`bench.sim` (the one-clock simulator) and score
summaries with :mod:`bench.evaluation`.

May import: the product (``sgl_speccompact``, its emulator included).  Nothing
in the product imports it.
"""
