"""``python -m sgl_speccompact.launch``: SGLang servers, an optional sglang-router, and the service.

``cli`` parses the flags, ``plan`` turns defaults, a config file and flags
into a :class:`~sgl_speccompact.launch.plan.LaunchPlan`, ``run`` starts,
serves and stops it, ``servers`` starts SGLang servers, ``router`` starts
sglang-router.

May import: ``service`` and every layer below it.  One exception,
``launch --emulate``: ``run`` imports the SGLang-API emulator of
``sgl_speccompact.emulator`` lazily, only when asked to emulate.
"""

from .command_line import build_parser, main

__all__ = ["build_parser", "main"]
