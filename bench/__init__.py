"""The benchmark scripts and their harness: a package of the repository, not of the wheel.

``python bench/<script>.py`` runs a script; the scripts share
:mod:`bench.harness` (trajectories, servers, cells, tables, reports).
May import: the product (``sgl_speccompact``, its ``testing`` emulator and
simulator included).  Nothing in the product imports it.
"""
