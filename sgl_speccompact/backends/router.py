"""The sglang-router client side: its routing-key header, its workers, where ``/tokenize`` goes.

The router has no ``/tokenize``, so :func:`tokenize_base` sends our token
counting to one of its workers (``GET /workers``).  Starting a router is the
launcher's job (:mod:`sgl_speccompact.launch.router_process`).
"""

from __future__ import annotations

ROUTING_KEY_HEADER = "X-SMG-Routing-Key"  # manual policy: requests with one key go to one worker


def worker_urls(base_url: str, session, api_key: str | None = None, timeout_s: float = 10.0) -> list[str] | None:
    """The healthy workers behind ``base_url`` if it is an sglang-router (its ``GET /workers``), else None."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        res = session.get(base_url.rstrip("/") + "/workers", headers=headers, timeout=timeout_s)
        data = res.json() if res.status_code == 200 else None
    except Exception:  # noqa: BLE001 - not a router (no such route, not JSON) or unreachable: the caller finds out
        return None
    if not isinstance(data, dict) or not isinstance(data.get("workers"), list):
        return None
    return [w["url"].rstrip("/") for w in data["workers"]
            if isinstance(w, dict) and isinstance(w.get("url"), str) and w.get("is_healthy", True)]


def tokenize_base(base_url: str, session, api_key: str | None = None, timeout_s: float = 10.0) -> str:
    """Where ``/tokenize`` goes: ``base_url``, or the first healthy worker of a router.

    Every worker serves the same model, so any of them tokenizes alike.
    """
    workers = worker_urls(base_url, session, api_key, timeout_s)
    return workers[0] if workers else base_url.rstrip("/")
