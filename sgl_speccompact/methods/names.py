"""The built-in methods' names, written once.

:data:`METHODS` is the registry's list (:mod:`~sgl_speccompact.methods.registry`
re-exports it as ``methods.METHODS``): what the service accepts by default,
what ``auto`` picks among and what the cost model predicts.  It lives in a
module of its own, importing nothing, because the registry imports sglang
(seconds) and the cost model (:mod:`~sgl_speccompact.methods.auto`), the
launcher's planning and the service's session timing read the list without it.
"""

from __future__ import annotations

METHODS: tuple[str, ...] = ("speccompact", "hermes", "openclaw", "target_self", "target_delta")  # in the registry's order
