"""Helpers the test modules share (``from tests.support.scripted import ScriptedBackend``).

Test modules import these, never each other; fixtures live in the ``conftest.py`` beside the
tests that use them.
"""
