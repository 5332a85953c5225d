"""The webhook receiver's decisions: what Stripe is answered for one request, and what is queued.

Stripe expects a 2xx within seconds, retries anything else for up to three days, and disables an
endpoint that keeps failing. So the receiver decides only what must be decided before the answer,
in this order (the first that applies answers):

==================================================  ========  =====================================
The request                                         Answer    What happens
==================================================  ========  =====================================
not a POST                                          405       rejected (``method``)
a base64 body that is not UTF-8                     400       rejected (``malformed``)
a ``Stripe-Signature`` that does not verify with    400       rejected (``signature``): nothing is
any signing secret held, recently                             read from it
not a JSON event with a string ``id`` and ``type``  400       rejected (``malformed``)
an event type the saga does not act on              200       dropped: what Stripe would retry is
                                                              nothing the saga needs
another Stripe account's event (``account`` set)    200       dropped: the saga charges on its own
                                                              account only
a PaymentIntent event that names no PaymentIntent   400       rejected (``malformed``)
a PaymentIntent event                               200       queued: its :class:`Doorbell` only,
                                                              answered once SQS has it
==================================================  ========  =====================================

The signature is the endpoint's only authentication (the function URL's AuthType is NONE), so
nobody but Stripe can move a claim through it. The consumer reads the PaymentIntent a doorbell
names from Stripe with the stack's own key: the event's own body is believed for nothing but its
identifiers.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from payment_saga.webhooks import (
    PAYMENT_INTENT_EVENTS,
    MalformedEvent,
    doorbell_of_event,
    signature_valid,
    signing_secrets_from_string,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from payment_saga.clock import Clock
    from payment_saga.webhooks import Doorbell


@dataclass(frozen=True)
class Request:
    """What the receiver reads of a function URL request."""

    method: str
    body: str
    #: The function URL hands a body that is not text over base64-encoded.
    base64_encoded: bool
    #: The ``Stripe-Signature`` header, if any.
    signature: str | None

    @property
    def payload(self) -> str | None:
        """The body as text; ``None`` when it came base64-encoded and does not decode to UTF-8."""
        if not self.base64_encoded:
            return self.body
        try:
            return base64.b64decode(self.body, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None


@dataclass(frozen=True)
class Rejected:
    """Answered ``status`` with ``message``: nothing is queued (``reason`` is the metric's)."""

    reason: str
    message: str
    status: int = 400
    #: A signature was sent but does not verify: what Stripe's own deliveries look like after the
    #: endpoint's secret was rolled and not updated here (alarmed apart from unsigned noise).
    signed: bool = False


@dataclass(frozen=True)
class Dropped:
    """Answered 200 so that Stripe stops sending it, and never queued."""

    event_id: str
    event_type: str
    reason: str
    status: int = 200
    message: str = "ignored"


@dataclass(frozen=True)
class Queued:
    """A verified PaymentIntent event: its doorbell is queued, then Stripe is answered 200."""

    bell: Doorbell
    event_id: str
    event_type: str
    #: The orderId the event's PaymentIntent metadata names, for the log line only (never queued: the
    #: consumer reads it from Stripe).
    claimed_order_id: str | None
    status: int = 200
    message: str = "queued"

    def queue_message(self) -> dict[str, Any]:
        """The queue message: the doorbell, its event's id and type as attributes."""
        return {
            "MessageBody": json.dumps(self.bell.to_message(), sort_keys=True),
            "MessageAttributes": {
                "eventId": {"DataType": "String", "StringValue": self.event_id},
                "eventType": {"DataType": "String", "StringValue": self.event_type},
            },
        }


Verdict = Rejected | Dropped | Queued


def receive(request: Request, verified: Callable[[str, str | None], bool]) -> Verdict:
    """What one request is answered (the table above); ``verified(payload, header)`` checks the
    signature against the signing secrets held."""
    if request.method != "POST":
        return Rejected("method", "POST only", 405)
    payload = request.payload
    if payload is None:
        return Rejected("malformed", "the body is not UTF-8")
    if not verified(payload, request.signature):
        # Stale, forged, unsigned or signed with a secret we do not hold: nothing is read from it.
        return Rejected(
            "signature", "the Stripe-Signature header does not verify", signed=bool(request.signature)
        )
    return admit(payload)


def admit(payload: str) -> Verdict:
    """What a verified body is answered: dropped, rejected as malformed, or its doorbell queued."""
    event = _event(payload)
    if event is None:
        return Rejected("malformed", "the body is not a Stripe event")
    data, event_id, event_type = event
    if event_type not in PAYMENT_INTENT_EVENTS:
        return Dropped(event_id, event_type, "an event type the saga does not act on")
    if data.get("account"):
        # A connected account's event (a Connect endpoint, or its secret configured here): its
        # PaymentIntents are not this account's, and the consumer's read with our key would not find
        # them. Answered 200 so that Stripe stops sending it; counted, so a person sees the setup.
        return Dropped(event_id, event_type, "an event of another Stripe account")
    try:
        bell = doorbell_of_event(data)
    except MalformedEvent:
        return Rejected("malformed", "the event does not name a PaymentIntent")
    return Queued(bell, event_id, event_type, _claimed_order_id(data))


def _event(payload: str) -> tuple[dict[str, Any], str, str] | None:
    """The event's JSON, ``id`` and ``type``; ``None`` when it is not JSON with a string id and type."""
    try:
        data = json.loads(payload)
        event_id, event_type = data["id"], data["type"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(event_id, str) or not isinstance(event_type, str):
        return None
    return data, event_id, event_type


def _claimed_order_id(data: dict[str, Any]) -> str | None:
    intent = (data.get("data") or {}).get("object") or {}
    metadata = intent.get("metadata") if isinstance(intent, dict) else None
    value = metadata.get("orderId") if isinstance(metadata, dict) else None
    return value if isinstance(value, str) and value else None


class SigningSecrets:
    """The endpoint's signing secrets as one container keeps them, read by ``read(source)``.

    Read once, then again whatever happens at least every ``max_age_seconds`` (a secret taken out of
    the secret, at the end of a rotation or after a leak, stops verifying within that time), and on a
    signed request that fails to verify at most every ``refresh_seconds`` (a rotation takes effect
    without a deploy, and a flood of forged requests cannot turn into a flood of secret reads).
    """

    def __init__(self, read: Callable[[str], str], clock: Clock) -> None:
        self.read = read
        self.clock = clock
        self.source = ""
        self.secrets: tuple[str, ...] = ()
        self.read_at = 0.0

    def forget(self) -> None:
        """Drop what was read (a new container starts this way)."""
        self.source, self.secrets, self.read_at = "", (), 0.0

    def verify(
        self,
        payload: str,
        header: str | None,
        *,
        source: str,
        tolerance: int,
        refresh_seconds: float,
        max_age_seconds: float,
    ) -> bool:
        """Whether ``header`` signs ``payload`` (:func:`~payment_saga.webhooks.signature_valid`) with a
        secret held, read again once when it does not and the secret may have been rotated since."""
        if signature_valid(payload, header, self._held(source, max_age_seconds), tolerance=tolerance):
            return True
        if not header or self.clock() - self.read_at < refresh_seconds:
            return False
        # Perhaps the secret was rotated since this container read it: read it again, once.
        secrets = self._held(source, max_age_seconds, refresh=True)
        return signature_valid(payload, header, secrets, tolerance=tolerance)

    def _held(self, source: str, max_age: float, *, refresh: bool = False) -> tuple[str, ...]:
        if self.secrets and self.source == source and not refresh and self.clock() - self.read_at < max_age:
            return self.secrets
        self.source = source
        self.secrets = signing_secrets_from_string(self.read(source))
        self.read_at = self.clock()
        return self.secrets
