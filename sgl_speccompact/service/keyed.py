"""What differs per API key in one service: the acceptance estimate ``auto`` picks with.

``method="auto"`` predicts each method's time from the acceptance rate
observed so far (:class:`~sgl_speccompact.methods.autopick.AcceptanceEstimate`).
A client's own ``config.eta`` moves its acceptance, so a service-wide
estimate would let one client's threshold change every other client's
picks.  :class:`KeyedPickers` gives each caller scope (a hash of the bearer
token it presented, :func:`~sgl_speccompact.service.store.auth_scope`) a
picker of its own: the same deployment and cost model, its own estimate,
starting from the prior.  The service-wide estimate is still kept, for the
``speccompact_observed_acceptance`` gauge only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from ..methods.autopick import AcceptanceEstimate

MAX_KEYS = 4096  # scopes with an estimate of their own, at most (the least recently used is forgotten)


class KeyedPickers:
    """One :class:`~sgl_speccompact.methods.autopick.AutoPicker` per caller scope.

    >>> from sgl_speccompact.methods.autopick import default_picker
    >>> keyed = KeyedPickers(default_picker())
    >>> _ = keyed.get("key:a").observe("speccompact", 0.1)
    >>> keyed.get("key:a").acceptance.get(keyed.base.pair) < 0.7 == keyed.get("key:b").acceptance.get(keyed.base.pair)
    True
    """

    def __init__(self, base: Any, max_keys: int = MAX_KEYS):
        self.base = base  # the service's picker: deployment, cost model, prior, service-wide estimate
        self.max_keys = max_keys  # scopes remembered, at most
        self._pickers: OrderedDict[str, Any] = OrderedDict()  # scope -> its picker
        self._lock = threading.Lock()  # picks run on parse threads, observations on compaction threads

    def get(self, scope: str) -> Any:
        """The picker of ``scope``, made on first use."""
        with self._lock:
            picker = self._pickers.get(scope)
            if picker is None:
                own = AcceptanceEstimate(prior=self.base.acceptance.prior, weight=self.base.acceptance.weight)
                picker = self._pickers[scope] = replace(self.base, acceptance=own)
                while len(self._pickers) > self.max_keys:
                    self._pickers.popitem(last=False)
            self._pickers.move_to_end(scope)
            return picker
