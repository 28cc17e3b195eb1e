"""What differs per API key in one service: the acceptance and label-mass estimates ``auto`` picks with.

``method="auto"`` predicts each method's time from the acceptance rate
observed so far (:class:`~sgl_speccompact.methods.autopick.AcceptanceEstimate`),
and leaves out the judging methods while the target's observed label mass
is below ``min_label_mass``.  A client's own ``config.eta`` moves its
acceptance, and its own ``positive_label``/``negative_label`` move its
label mass (a word the model never writes carries almost none), so
service-wide estimates would let one client's settings change every other
client's picks.  :class:`KeyedPickers` gives each caller scope (a hash of
the bearer token it presented, :func:`~sgl_speccompact.service.store.auth_scope`)
a picker of its own: the same deployment and cost model, its own
acceptance estimate starting from the prior, and its own label-mass
observations (:class:`OwnLabelMass`) read before the service's.

The service's label mass (the base picker's) is fed only by judgements made
with the operator's configured labels: the launcher's probe and compactions
that did not choose other words (:func:`operator_labels`).  The
service-wide acceptance estimate is kept for the
``speccompact_observed_acceptance`` gauge only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from ..config import CompactConfig
from ..methods.autopick import AcceptanceEstimate

MAX_KEYS = 4096  # scopes with an estimate of their own, at most (the least recently used is forgotten)


class OwnLabelMass:
    """A scope's label-mass estimate: its own observations where it has some, else the service's.

    It offers what :class:`~sgl_speccompact.methods.autopick.AutoPicker` reads
    (``get``, ``count``, ``observe``); observations go to the scope's own only.

    >>> shared = AcceptanceEstimate(prior=1.0, weight=1.0); _ = shared.observe("t", 0.9)
    >>> own = OwnLabelMass(shared); own.get("t"), own.observe("t", 1e-6), own.get("t"), shared.get("t")
    (0.9, 1e-06, 1e-06, 0.9)
    """

    def __init__(self, shared: AcceptanceEstimate):
        self.shared = shared  # the service's: fed by the operator's labels only
        self.own = AcceptanceEstimate(prior=shared.prior, weight=shared.weight)  # this scope's compactions

    def get(self, target: str) -> float:
        return self.own.get(target) if self.own.count(target) else self.shared.get(target)

    def count(self, target: str) -> int:
        return self.own.count(target) or self.shared.count(target)

    def observe(self, target: str, mass: float) -> float:
        return self.own.observe(target, mass)


def operator_labels(cfg: CompactConfig, operator: CompactConfig) -> bool:
    """Whether a compaction's config judges with the operator's label words (its mass may feed the service's).

    >>> operator_labels(CompactConfig(positive_label="yes", negative_label="no"), CompactConfig())
    False
    """
    return (cfg.positive_label, cfg.negative_label) == (operator.positive_label, operator.negative_label)


class KeyedPickers:
    """One :class:`~sgl_speccompact.methods.autopick.AutoPicker` per caller scope.

    >>> from sgl_speccompact.methods.autopick import default_picker
    >>> keyed = KeyedPickers(default_picker())
    >>> _ = keyed.get("key:a").observe("speccompact", 0.1)
    >>> keyed.get("key:a").acceptance.get(keyed.base.pair) < 0.7 == keyed.get("key:b").acceptance.get(keyed.base.pair)
    True
    >>> _ = keyed.get("key:a").observe("hermes", None, 1e-6)  # key a judged with words of its own
    >>> keyed.get("key:a").low_label_mass(0.1), keyed.get("key:b").low_label_mass(0.1)
    (1e-06, None)
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
                picker = self._pickers[scope] = replace(self.base, acceptance=own,
                                                        label_mass=OwnLabelMass(self.base.label_mass))
                while len(self._pickers) > self.max_keys:
                    self._pickers.popitem(last=False)
            self._pickers.move_to_end(scope)
            return picker
