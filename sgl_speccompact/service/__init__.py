"""The compaction HTTP service: app, request body, runtime, metrics, cancellation.

``app`` is the FastAPI application (:func:`create_app`), ``body`` reads and
validates a request, ``stream`` sends a compaction as Server-Sent Events, ``sessions`` and ``store`` keep ahead-of-time (prepared)
compactions (``redis_store``: in Redis, shared by replicas; ``keyed``: per-API-key
acceptance estimates), ``runtime`` runs compactions on worker threads with
deadlines, ``metrics`` counts them for Prometheus, ``cancel`` stops a
compaction's upstream requests.  ``logs`` sets what the launcher, the service
and the emulator log (``--log-level``), ``compaction_log`` writes the line of
each compaction and the progress of long ones, and ``ready`` is
``python -m sgl_speccompact wait``.

May import: ``methods`` and every layer below it.  Must not import: launch,
cli, emulator.
"""
