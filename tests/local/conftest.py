"""Fixtures for the local tooling's tests: the state machine's stack, reused (fixtures in
tests/statemachine/conftest.py are only visible under that directory)."""

from __future__ import annotations

from tests.statemachine.conftest import provider_dedupe, saga  # noqa: F401
