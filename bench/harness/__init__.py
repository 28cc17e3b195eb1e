"""The benchmark harness: what the scripts in ``bench/`` share.

``runs`` loads trajectories, talks to the servers, counts per-server numbers
and writes JSON reports; ``tables`` formats the radix-cache tables;
``retention`` the retention report; ``latency``, ``latency_cases`` and
``latency_tables`` run, list and tabulate the latency benchmark's cells.

May import: the product (its emulator included), :mod:`bench.sim` and
:mod:`bench.evaluation`; never a script of ``bench/``.  Nothing in the product
imports it.
"""
