"""Fixtures of the service tests: emulated servers whose drafts wait at a gate."""

from __future__ import annotations

import pytest
from tests.support.live_service import GatedServers


@pytest.fixture
def gated(make_emulated_server):
    servers = GatedServers(make_emulated_server)
    yield servers
    servers.gate.set()
