"""``/health`` keeps answering while a 1 MB adversarial body is parsed, redacted and rendered.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from tests.support.live_service import LiveService

from sgl_speccompact.service.app import create_app

# ------------------------------------------------------------------ /health while a huge body is processed


@pytest.mark.perf
def test_health_answers_while_a_1mb_adversarial_body_is_processed(make_emulated_server):
    """One unauthenticated 200 KB body used to freeze /health for 20 s.  The body here is parsed,
    redacted and rendered for real (the target server is closed once its endpoint is made, so the
    compaction then fails fast); /health must answer in under 1 s (plus the slowest /health of a
    baseline taken in the same run, so a loaded machine does not fail it) the whole time."""
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    server = make_emulated_server(model_path="Qwen/Qwen3-8B")
    target = SpecCompactEndpoint(server.url, timeout_s=5)
    server.close()
    svc = LiveService(create_app(target, None, default_method="target_self",
                                 health_probe=lambda backend: {"ok": True}))
    try:
        def health_s() -> float:
            t0 = time.perf_counter()
            assert httpx.get(svc.url + "/health", timeout=60).status_code == 200
            return time.perf_counter() - t0

        baseline = max(health_s() for _ in range(5))
        body = {"messages": [{"role": "user", "content": ("a.a." * 250_001)[:1_000_000]},
                             {"role": "assistant", "content": "x://" + "a:" * 100_000}], "method": "target_self"}
        answers: list = []
        poster = threading.Thread(target=lambda: answers.append(
            httpx.post(svc.url + "/v1/compact", json=body, timeout=600)), daemon=True)
        poster.start()
        during = []
        while poster.is_alive():
            during.append(health_s())
        assert answers and answers[0].status_code in (502, 503, 504), answers
        assert len(during) >= 3, "the body was processed too fast to probe /health meanwhile"
        assert max(during) < 1.0 + baseline, (max(during), baseline, len(during))
    finally:
        svc.close()
