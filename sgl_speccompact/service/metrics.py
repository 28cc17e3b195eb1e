"""Prometheus metrics of the compaction service, in a registry owned by one app.

Outcomes counted in ``speccompact_compactions_total``: ``ok``,
``rejected`` (refused before it started), ``client_error``,
``upstream_error`` (502), ``upstream_timeout`` (504 from one request),
``timeout`` (the whole-compaction deadline), ``cancelled`` (the client went
away or the service stopped) and ``error``.  ``speccompact_in_flight`` is
raised when a compaction's thread starts and lowered when that thread
returns, so it counts work that is really running, abandoned or not.
``speccompact_host_cpu_seconds`` is the service process's own CPU per
finished compaction (``CompactionStats.host_cpu_s``: the pipeline's thread
and the threads of its requests), beside the device time the latency holds.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..errors import CompactionCancelledError, CompactionTimeoutError, SpecCompactError, http_status


def outcome(err: SpecCompactError) -> str:
    """The ``outcome`` label of a failed compaction.

    >>> outcome(CompactionTimeoutError("late")), outcome(CompactionCancelledError("gone"))
    ('timeout', 'cancelled')
    """
    if isinstance(err, CompactionTimeoutError):
        return "timeout"
    if isinstance(err, CompactionCancelledError):
        return "cancelled"
    status = http_status(err)
    return {502: "upstream_error", 504: "upstream_timeout"}.get(status, "client_error" if status < 500 else "error")


class Metrics:
    """The service's metrics."""

    def __init__(self):
        self.registry = CollectorRegistry()  # private to one app
        r = self.registry
        self.compactions = Counter("speccompact_compactions_total", "Compactions by method and outcome",
                                   ["method", "outcome"], registry=r)
        self.latency = Histogram("speccompact_compaction_seconds", "End-to-end compaction latency",
                                 ["method"], registry=r,
                                 buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300))
        ratio_buckets = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
        self.acceptance = Histogram("speccompact_acceptance_rate", "Judged draft lines accepted per compaction",
                                    ["method"], registry=r, buckets=ratio_buckets)
        self.cached = Histogram("speccompact_target_cached_ratio", "Target cached/prompt tokens per compaction",
                                ["method"], registry=r, buckets=ratio_buckets)
        self.host_cpu = Histogram("speccompact_host_cpu_seconds",
                                  "CPU seconds the service process spent on one finished compaction",
                                  ["method"], registry=r,
                                  buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30))
        self.in_flight = Gauge("speccompact_in_flight", "Compactions whose thread is running now", registry=r)
        self.prepares = Counter("speccompact_prepares_total", "Ahead-of-time compactions started", registry=r)
        self.prepares_stored = Counter("speccompact_prepares_stored_total",
                                       "Ahead-of-time compactions finished with their result stored", registry=r)
        self.prepares_joined = Counter("speccompact_prepares_joined_total",
                                       "Prepares identical to one running or waiting for their session: joined it",
                                       registry=r)
        self.prepares_refused = Counter("speccompact_prepares_refused_total",
                                        "Prepares refused with 429: the prepare queue was full", registry=r)
        self.prepares_waiting = Gauge("speccompact_prepares_waiting", "Prepares accepted and waiting to start",
                                      registry=r)
        self.session_lookups = Counter("speccompact_session_lookups_total",
                                       "Compacts of a session that reused a prepared prefix (hit) or not (miss)",
                                       ["result"], registry=r)
        self.session_store_faults = Counter(
            "speccompact_session_store_faults_total",
            "Session-store calls that failed (error), ran past their deadline (deadline), were answered at once "
            "by the open circuit breaker (skipped), or values found malformed and deleted (malformed)",
            ["kind", "what"], registry=r)
        self.prepare_wasted = Counter("speccompact_prepare_wasted_seconds_total",
                                      "Seconds of prepares cancelled, failed, or stored and never reused",
                                      registry=r)
        self.prepare_yields = Counter("speccompact_prepare_yields_total",
                                      "Prepare target requests held while the target served foreground work",
                                      registry=r)
        self.prepare_yield_s = Counter("speccompact_prepare_yield_seconds_total",
                                       "Seconds prepare target requests were held for foreground work", registry=r)
        self.cost_model = Gauge("speccompact_cost_model_param",
                                "Cost-model parameter per server (s, s/token or FLOP/s); source: calibrated or "
                                "profile:<GPU>", ["role", "param", "source", "gpu"], registry=r)
        self.auto_picks = Counter("speccompact_auto_picks_total", "method=auto requests by the method picked",
                                  ["method"], registry=r)
        self.observed_acceptance = Gauge("speccompact_observed_acceptance",
                                         "Running acceptance estimate method=auto picks with, per target|drafter "
                                         "model pair (the prior until a SpecCompact compaction finishes)",
                                         ["pair"], registry=r)

    def set_cost_models(self, fits: dict) -> None:
        """Publish each server's cost-model parameters (role -> CostFit)."""
        for role, fit in fits.items():
            for param in ("o_req_s", "a_s", "weight_s", "kv_s", "flop_rate"):
                self.cost_model.labels(role, param, fit.source, fit.gpu).set(getattr(fit, param))

    def observe(self, method: str, result_outcome: str, seconds: float, result: Any = None) -> None:
        """Count one finished compaction."""
        self.compactions.labels(method, result_outcome).inc()
        self.latency.labels(method).observe(seconds)
        if result is None:
            return
        self.host_cpu.labels(method).observe(result.stats.host_cpu_s)
        if result.stats.acceptance_rate is not None:
            self.acceptance.labels(method).observe(result.stats.acceptance_rate)
        cached = result.stats.cached_ratio("target")
        if cached is not None:
            self.cached.labels(method).observe(cached)
