"""A record of what the emulator was asked and what it answered and sent: for its contract test.

Off by default (nothing is kept, nothing is copied). :meth:`ProviderEmulator.record
<saga_local.stripe_emulator.ProviderEmulator.record>` switches it on; from then on every Stripe API
request (not the ``/_emulator/`` admin routes) is kept with its answer, and every Event the emulator
makes with its payload as sent. ``tests/local/test_stripe_contract.py`` validates them against the
part of Stripe's OpenAPI spec vendored beside the emulator (``openapi/``).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Exchange:
    """One Stripe API request and what the emulator did with it."""

    method: str
    #: The path without its query string.
    path: str
    query: str
    body: bytes
    status: int
    #: The JSON answered (a copy, as it was then), or None when the connection was reset instead.
    reply: dict[str, Any] | None


class Recording:
    """The exchanges and Events of an emulator since :meth:`~ProviderEmulator.record` (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        self._events: list[dict[str, Any]] = []

    def exchange(
        self, method: str, path: str, query: str, body: bytes, status: int, reply: dict[str, Any] | None
    ) -> None:
        """Keep one request and its answer (the answer copied as it is serialized)."""
        kept = Exchange(method, path, query, body, status, json.loads(json.dumps(reply)) if reply else reply)
        with self._lock:
            self._exchanges.append(kept)

    def event(self, event: dict[str, Any]) -> None:
        """Keep one Event as its deliveries carry it."""
        kept = json.loads(json.dumps(event))
        with self._lock:
            self._events.append(kept)

    @property
    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._events)
