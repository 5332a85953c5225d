"""The provider for the model: the real ``StripeProvider`` and ``stripe`` SDK, the emulator in-process.

The SDK talks to :class:`~saga_local.stripe_emulator.ProviderEmulator` through :class:`InProcessLink`,
an ``stripe.HTTPClient`` that hands each request to the emulator's request handler directly instead
of over a socket: same wire format, same idempotency layer and faults, no thread and no network, so
one step of the model is deterministic and takes a millisecond, not a round trip.

The emulator's state (PaymentIntents, saved idempotent answers, ledger, queued faults) is plain data;
:func:`emulator_snapshot` and :func:`emulator_restore` copy it out and back so that the explorer can
return to a state. :func:`emulator_summary` is the part of it that decides what happens next, with
the random ids (``pi_...``, ``req_...``) left for the explorer to rename.

The emulator has no public in-process entry point or snapshot yet, so this reaches its internals
(``_dispatch`` and the attributes ``_reset_state`` creates); ``tests/model/test_protocol_model.py``
fails loudly if they move.
"""

from __future__ import annotations

import json
import pickle
import threading
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import stripe

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from saga_local.stripe_emulator import ProviderEmulator

    Reply = tuple[str, int, dict[str, str]]
    Send = Callable[[], Reply]
    LinkInterceptor = Callable[[str, str, dict[str, str], bytes, Send], Reply]

#: Instance attributes of the emulator that are machinery, not state: the lock, the server, and the
#: webhook sender and settlement timers (threads; the model registers no webhook endpoint and sets no
#: settlement delay, so they never act).
_MACHINERY = frozenset(
    {"_lock", "_stopping", "_server", "_thread", "_connections", "_clock", "webhooks", "_settlements"}
)
_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()), threading.Event, threading.Thread)


class InProcessLink(stripe.HTTPClient):
    """``stripe.HTTPClient`` answered by the emulator in this thread.

    ``interceptor`` (the model's fault layer) sees each request with a function that sends it.
    """

    name = "in-process-emulator"

    def __init__(self, emulator: ProviderEmulator) -> None:
        super().__init__()
        self.emulator = emulator
        self.interceptor: LinkInterceptor | None = None

    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        post_data: Any = None,
        *,
        _usage: list[str] | None = None,
    ) -> Reply:
        method = method.upper()
        split = urlsplit(url)
        target = split.path + (f"?{split.query}" if split.query else "")
        canonical = {name.title(): value for name, value in (headers or {}).items()}
        body = post_data.encode() if isinstance(post_data, str) else (post_data or b"")

        def send() -> Reply:
            return self.send(method, target, canonical, body)

        if self.interceptor is None:
            return send()
        return self.interceptor(method, target, canonical, body, send)

    def send(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Reply:
        reply = self.emulator._dispatch(method, target, headers, body)
        if reply.action != "respond":
            raise stripe.APIConnectionError(  # type: ignore[no-untyped-call]
                "the provider reset the connection without an answer"
            )
        return json.dumps(reply.body), reply.status, dict(reply.headers)

    def close(self) -> None:
        """Nothing to close: there is no connection."""


def _is_state(name: str, value: Any) -> bool:
    return name not in _MACHINERY and not callable(value) and not isinstance(value, _LOCK_TYPES)


def emulator_snapshot(emulator: ProviderEmulator) -> bytes:
    """Everything the emulator remembers, pickled (restore it with :func:`emulator_restore`)."""
    return pickle.dumps({name: value for name, value in vars(emulator).items() if _is_state(name, value)})


def emulator_restore(emulator: ProviderEmulator, snapshot: bytes) -> None:
    for name, value in pickle.loads(snapshot).items():  # noqa: S301 - bytes this module pickled
        setattr(emulator, name, value)


def emulator_summary(emulator: ProviderEmulator) -> Any:
    """What the emulator holds that decides its next answers, as plain data (ids not renamed)."""
    intents = [
        (
            intent["id"],
            intent["status"],
            intent["amount"],
            intent["currency"],
            intent.get("payment_method"),
            dict(intent.get("metadata") or {}),
            intent.get("created"),
        )
        for intent in vars(emulator)["_intents"].values()
    ]
    saved = sorted(
        (key, entry.status, _plain(entry.body).get("id") or json.dumps(_plain(entry.body).get("error")))
        for (*_, key), entry in vars(emulator)["_saved"].items()
    )
    ledger = [entry.charge_id for entry in vars(emulator)["_ledger"]]
    faults = [_plain(fault) for fault in vars(emulator)["_faults"]]
    return {"intents": intents, "saved": saved, "ledger": ledger, "faults": faults}


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value
