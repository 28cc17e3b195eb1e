"""The benchmark harness: what the scripts in ``bench/`` share.

``runs`` loads trajectories, talks to the servers, counts per-server numbers
and writes JSON reports; ``tables`` formats the radix-cache tables.

May import: the product, ``testing.emulator`` and ``testing.sim``.  Nothing
in the product imports it.
"""
