"""Webhooks as Stripe sends them: endpoints, Event objects, signed deliveries, retries, disorder.

An endpoint is registered through Stripe's own API (``POST /v1/webhook_endpoints`` with ``url`` and
``enabled_events[]``, as ``stripe.WebhookEndpoint.create`` sends it), which answers the endpoint with
its ``whsec_`` signing secret, made up at that moment. From then on every change of a PaymentIntent
(``succeeded``, ``payment_failed``, ``processing``, ``requires_action``, ``canceled``, and
``created``) becomes an Event object in Stripe's wire format (``id evt_...``, ``type``, ``created``,
``data.object``, ``livemode``, ``api_version``, ``pending_webhooks``, ``request``), POSTed to each
endpoint of the event's mode that enabled its type, with a ``Stripe-Signature: t=...,v1=...``
header: HMAC-SHA256 of ``"{t}.{body}"`` with the endpoint's secret, signed anew for each attempt,
as Stripe signs each retry, so the ``stripe`` SDK's ``Webhook.construct_event`` verifies it.

An attempt that gets no 2xx (another status, no answer within :attr:`WebhookSender.timeout_seconds`,
a refused connection, or the endpoint taken down by :meth:`WebhookSender.take_down`) is retried on
:data:`RETRY_SCHEDULE_SECONDS`, an exponential back-off over three days as Stripe's live mode
retries, multiplied by :attr:`WebhookSender.time_scale` (the local stack compresses it as it does
its other waits). After the last attempt the event is given up for that endpoint, as Stripe does.

An endpoint that keeps failing is **disabled**, as Stripe disables one after days of failures: when
an event is given up on an endpoint that has answered nothing with a 2xx since that event's first
attempt (so every delivery to it failed for the whole retry window), its ``status`` becomes
``disabled``, its pending deliveries are dropped, and it is sent nothing more: an event made while it
is disabled is not queued for it, and is never delivered to it. ``POST /v1/webhook_endpoints/{id}``
with ``disabled=false`` (``stripe.WebhookEndpoint.modify``) enables it again, for the events made
from then on.

:class:`WebhookDisorder` is the delivery's misbehaviour, all off by default and drawn from a seeded
generator: duplicates, reordering, delays and events never delivered; one object, so that a chaos
run or a property test turns all of it on at once (``emulator.webhooks.disorder = WebhookDisorder(...)``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import heapq
import hmac
import itertools
import json
import logging
import random
import secrets
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from saga_local.stripe_emulator.responses import STRIPE_VERSION, new_id

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga_local.stripe_emulator.recording import Recording

logger = logging.getLogger(__name__)

#: Stripe's back-off between attempts, in seconds: live mode retries for up to three days, first
#: within minutes, then hours apart (the exact times are Stripe's; this is their shape). Fifteen
#: attempts in all; each wait is multiplied by ``WebhookSender.time_scale``.
RETRY_SCHEDULE_SECONDS: tuple[int, ...] = (60, 300, 1800, 3600, 7200, 14400, *(28800,) * 8)
#: PaymentIntent status -> the event its change to that status sends (``requires_payment_method``
#: after a confirm is the failure: the PaymentIntent carries ``last_payment_error``).
STATUS_EVENTS = {
    "succeeded": "payment_intent.succeeded",
    "processing": "payment_intent.processing",
    "requires_action": "payment_intent.requires_action",
    "canceled": "payment_intent.canceled",
    "requires_payment_method": "payment_intent.payment_failed",
}
#: Every event type the emulator sends (what ``enabled_events`` may name, besides ``*``).
EVENT_TYPES = frozenset({"payment_intent.created", *STATUS_EVENTS.values()})
#: The status each event type's PaymentIntent is in (what the admin trigger settles it to).
EVENT_STATUSES = {event: status for status, event in STATUS_EVENTS.items()}
#: The header Stripe signs deliveries in.
SIGNATURE_HEADER = "Stripe-Signature"


@dataclass(frozen=True)
class WebhookDisorder:
    """How deliveries misbehave: each a probability per event and endpoint, drawn from ``seed``.

    * ``duplicate``: the event is delivered twice (two independent deliveries, as Stripe's at-least-once
      delivery does), the second up to ``delay_seconds`` after the first;
    * ``reorder``: the event is held back ``reorder_seconds``, so events sent after it arrive first
      (a ``processing`` after its ``succeeded``);
    * ``delay``: the first attempt waits a uniform time up to ``delay_seconds``;
    * ``lose``: the event is never delivered to that endpoint (every attempt lost on the way);
    * ``down_seconds``: when the disorder is set, the endpoint is taken down for this long (every
      attempt meanwhile gets no answer and is retried on Stripe's schedule).

    Delays are real seconds, not scaled by ``time_scale``: they are the disorder, not Stripe's waits.
    """

    duplicate: float = 0.0
    reorder: float = 0.0
    reorder_seconds: float = 0.5
    delay: float = 0.0
    delay_seconds: float = 1.0
    lose: float = 0.0
    down_seconds: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("duplicate", "reorder", "delay", "lose"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a probability between 0 and 1")
        if min(self.reorder_seconds, self.delay_seconds, self.down_seconds) < 0:
            raise ValueError("the disorder's seconds must not be negative")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WebhookDisorder:
        """From the admin route's camelCase body (``{"duplicate": 0.2, "reorderSeconds": 1}``)."""
        names = {f.name: f.name for f in dataclasses.fields(cls)}
        names.update(
            reorderSeconds="reorder_seconds", delaySeconds="delay_seconds", downSeconds="down_seconds"
        )
        unknown = set(data) - set(names)
        if unknown:
            raise ValueError(f"unknown webhook disorder settings: {sorted(unknown)}")
        return cls(**{names[key]: value for key, value in data.items()})


@dataclass
class DeliveryAttempt:
    """One attempt to deliver one event to one endpoint, as the dashboard's event log lists it."""

    event_id: str
    event_type: str
    payment_intent_id: str
    order_id: str | None
    endpoint_id: str
    attempt: int
    at: float
    #: The HTTP status answered, or None (no answer: refused, timed out, endpoint down).
    status: int | None
    error: str | None = None

    @property
    def delivered(self) -> bool:
        """Whether the endpoint answered 2xx."""
        return self.status is not None and 200 <= self.status < 300

    def to_json(self) -> dict[str, Any]:
        """The attempt in the admin routes' camelCase."""
        return {
            "eventId": self.event_id,
            "eventType": self.event_type,
            "paymentIntentId": self.payment_intent_id,
            "orderId": self.order_id,
            "endpointId": self.endpoint_id,
            "attempt": self.attempt,
            "at": self.at,
            "status": self.status,
            "error": self.error,
            "delivered": self.delivered,
        }


@dataclass(order=True)
class _Delivery:
    due: float
    seq: int
    endpoint_id: str = field(compare=False)
    event: dict[str, Any] = field(compare=False)
    attempt: int = field(default=1, compare=False)
    #: When the first attempt was made (None before it): what the endpoint's successes are compared to.
    first_at: float | None = field(default=None, compare=False)


class WebhookSender:
    """The endpoints, the events sent, and the background thread that delivers them.

    ``clock`` is the emulator's (events' ``created`` and signatures' ``t``). Nothing runs until the
    first endpoint is registered: an emulator without endpoints sends nothing, as a Stripe account
    without any does.
    """

    def __init__(
        self, clock: Callable[[], float], *, time_scale: float = 1.0, timeout_seconds: float = 10.0
    ) -> None:
        self._clock = clock
        self.time_scale = time_scale
        self.timeout_seconds = timeout_seconds
        self._disorder = WebhookDisorder()
        self._random = random.Random()
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._queue: list[_Delivery] = []
        self._in_flight = 0
        self._endpoints: dict[str, dict[str, Any]] = {}
        self._events: dict[str, dict[str, Any]] = {}
        #: PaymentIntent id -> its last status an event was sent for (a status change sends one).
        self._sent_status: dict[str, str] = {}
        self._attempts: list[DeliveryAttempt] = []
        #: Endpoint id -> when it last answered a delivery with a 2xx (what keeps it enabled).
        self._delivered_at: dict[str, float] = {}
        self._down_until = 0.0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        #: Where every Event made is kept, when the emulator records (``ProviderEmulator.record``).
        self.recording: Recording | None = None

    # -- settings ------------------------------------------------------------------------------

    @property
    def disorder(self) -> WebhookDisorder:
        """The delivery disorder in force (off by default)."""
        return self._disorder

    @disorder.setter
    def disorder(self, disorder: WebhookDisorder) -> None:
        with self._cond:
            self._disorder = disorder
            self._random = random.Random(disorder.seed)
        if disorder.down_seconds > 0:
            self.take_down(disorder.down_seconds)

    def take_down(self, seconds: float) -> None:
        """Make every endpoint answer nothing for ``seconds`` (real seconds) from now."""
        with self._cond:
            self._down_until = max(self._down_until, self._clock() + seconds)
            self._cond.notify_all()

    # -- endpoints (the API's /v1/webhook_endpoints) ----------------------------------------------

    def register(
        self,
        url: str,
        enabled_events: list[str],
        *,
        livemode: bool = False,
        description: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """A new endpoint in the API's shape, with its ``secret`` (shown at creation, as Stripe does)."""
        _check_events(enabled_events)
        endpoint_id = new_id("we_1", 24)
        endpoint: dict[str, Any] = {
            "id": endpoint_id,
            "object": "webhook_endpoint",
            "api_version": None,
            "application": None,
            "created": int(self._clock()),
            "description": description,
            "enabled_events": list(enabled_events),
            "livemode": livemode,
            "metadata": dict(metadata or {}),
            "secret": f"whsec_{secrets.token_hex(16)}",
            "status": "enabled",
            "url": url,
        }
        with self._cond:
            self._endpoints[endpoint_id] = endpoint
        self._start()
        return copy.deepcopy(endpoint)

    def endpoints(self) -> list[dict[str, Any]]:
        """The endpoints as the list endpoint answers them (without their secrets)."""
        with self._cond:
            return [{k: v for k, v in e.items() if k != "secret"} for e in self._endpoints.values()]

    def retrieve(self, endpoint_id: str) -> dict[str, Any]:
        """One endpoint as ``GET /v1/webhook_endpoints/{id}`` answers it (without its secret);
        ``KeyError`` if there is none."""
        with self._cond:
            endpoint = self._endpoints[endpoint_id]
            return {k: copy.deepcopy(v) for k, v in endpoint.items() if k != "secret"}

    def update(
        self,
        endpoint_id: str,
        *,
        disabled: bool | None = None,
        url: str | None = None,
        enabled_events: list[str] | None = None,
        description: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """``POST /v1/webhook_endpoints/{id}``: change what is given (``disabled=False`` enables an
        endpoint Stripe disabled, for the events made from then on). The endpoint as
        :meth:`retrieve` answers it; ``KeyError`` if there is none, ``ValueError`` for events unknown."""
        if enabled_events is not None:
            _check_events(enabled_events)
        with self._cond:
            endpoint = self._endpoints[endpoint_id]
            if url is not None:
                endpoint["url"] = url
            if enabled_events is not None:
                endpoint["enabled_events"] = list(enabled_events)
            if description is not None:
                endpoint["description"] = description
            if metadata is not None:
                endpoint["metadata"].update(metadata)
            if disabled is True:
                self._disable(endpoint_id, "by request")
            elif disabled is False:
                endpoint["status"] = "enabled"
        return self.retrieve(endpoint_id)

    def delete(self, endpoint_id: str) -> dict[str, Any]:
        """Remove an endpoint (its pending deliveries are dropped); Stripe's ``deleted`` answer."""
        with self._cond:
            if self._endpoints.pop(endpoint_id, None) is None:
                raise KeyError(endpoint_id)
            self._queue = [d for d in self._queue if d.endpoint_id != endpoint_id]
            heapq.heapify(self._queue)
        return {"id": endpoint_id, "object": "webhook_endpoint", "deleted": True}

    # -- events -----------------------------------------------------------------------------------

    def changed(self, intent: dict[str, Any], *, request: dict[str, Any] | None = None) -> None:
        """The emulator's hook on every PaymentIntent write: an event if its status changed.

        Called with the emulator's lock held: only builds the event and queues its deliveries.
        """
        with self._cond:
            if not self._endpoints:
                return
            previous = self._sent_status.get(intent["id"])
            status = intent["status"]
            if previous == status:
                return
            self._sent_status[intent["id"]] = status
        if previous is None and request is not None:
            # Its create (only a create names its request): not a PaymentIntent first seen by a
            # settlement after the endpoint was registered, which was created before any existed.
            self.send("payment_intent.created", intent, request=request)
        event_type = STATUS_EVENTS.get(status)
        if event_type == "payment_intent.payment_failed" and not intent.get("last_payment_error"):
            return  # created without a payment method: nothing failed
        if event_type is not None:
            self.send(event_type, intent, request=request)

    def send(
        self,
        event_type: str,
        intent: dict[str, Any],
        *,
        request: dict[str, Any] | None = None,
        livemode: bool | None = None,
    ) -> dict[str, Any]:
        """Make the Event for ``intent`` (its snapshot now) and queue it for every endpoint of its
        mode that enabled ``event_type``. Returns the event."""
        mode = intent.get("livemode") is True if livemode is None else livemode
        with self._cond:
            targets = [
                e["id"]
                for e in self._endpoints.values()
                if e["livemode"] == mode
                and e["status"] == "enabled"
                and ("*" in e["enabled_events"] or event_type in e["enabled_events"])
            ]
            event_id = new_id("evt_3", 24)
            event: dict[str, Any] = {
                "id": event_id,
                "object": "event",
                "api_version": STRIPE_VERSION,
                "created": int(self._clock()),
                "data": {"object": copy.deepcopy(intent)},
                "livemode": mode,
                "pending_webhooks": len(targets),
                "request": request or {"id": None, "idempotency_key": None},
                "type": event_type,
            }
            self._events[event_id] = event
            if self.recording is not None:
                self.recording.event(event)
            for endpoint_id in targets:
                self._schedule(endpoint_id, event)
            self._cond.notify_all()
        return copy.deepcopy(event)

    def resend(self, event_id: str) -> dict[str, Any]:
        """Send an event again, as it was (the dashboard's "Resend"): a late or duplicate delivery.
        A disabled endpoint is sent nothing."""
        with self._cond:
            event = self._events[event_id]
            for endpoint in self._endpoints.values():
                if endpoint["livemode"] == event["livemode"] and endpoint["status"] == "enabled":
                    heapq.heappush(
                        self._queue, _Delivery(self._clock(), next(self._seq), endpoint["id"], event)
                    )
            self._cond.notify_all()
            return copy.deepcopy(event)

    def events(self, payment_intent_id: str | None = None) -> list[dict[str, Any]]:
        """Every event made (of one PaymentIntent, if given), oldest first."""
        with self._cond:
            return [
                copy.deepcopy(e)
                for e in self._events.values()
                if payment_intent_id in (None, e["data"]["object"]["id"])
            ]

    def attempts(self, order_id: str | None = None) -> list[DeliveryAttempt]:
        """Every delivery attempt so far (for one order, if given), oldest first."""
        with self._cond:
            return [a for a in self._attempts if order_id in (None, a.order_id)]

    def idle(self) -> bool:
        """Whether no delivery is queued or in flight."""
        with self._cond:
            return not self._queue and self._in_flight == 0

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued delivery was attempted to its end (delivered or given up)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and self._in_flight == 0, timeout)

    def reset(self) -> None:
        """Forget the events, the attempts, and the deliveries not yet made; keep the endpoints."""
        with self._cond:
            self._queue.clear()
            self._events.clear()
            self._sent_status.clear()
            self._attempts.clear()
            self._delivered_at.clear()
            self._down_until = 0.0

    # -- delivery ---------------------------------------------------------------------------------

    def _schedule(self, endpoint_id: str, event: dict[str, Any]) -> None:
        # Called with the condition held: the disorder draws once per event and endpoint.
        disorder, draw, now = self._disorder, self._random, self._clock()
        if draw.random() < disorder.lose:
            return  # never delivered: Stripe's delivery to this endpoint was lost for good
        due = now
        if draw.random() < disorder.delay:
            due += draw.uniform(0, disorder.delay_seconds)
        if draw.random() < disorder.reorder:
            due += disorder.reorder_seconds
        heapq.heappush(self._queue, _Delivery(due, next(self._seq), endpoint_id, event))
        if draw.random() < disorder.duplicate:
            again = due + draw.uniform(0, disorder.delay_seconds)
            heapq.heappush(self._queue, _Delivery(again, next(self._seq), endpoint_id, event))

    def _start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._stopping.clear()
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="stripe-webhooks")
            self._thread = threading.Thread(target=self._run, name="stripe-webhooks", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop delivering (what is queued stays queued) and wait for the attempts in flight."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
            thread, self._thread = self._thread, None
            pool, self._pool = self._pool, None
        if thread is not None:
            thread.join(timeout=5)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _run(self) -> None:
        while not self._stopping.is_set():
            with self._cond:
                now = self._clock()
                if not self._queue or self._queue[0].due > now:
                    wait = self._queue[0].due - now if self._queue else None
                    self._cond.wait(timeout=min(wait, 0.5) if wait is not None else 0.5)
                    continue
                delivery = heapq.heappop(self._queue)
                endpoint = self._endpoints.get(delivery.endpoint_id)
                if endpoint is None or endpoint["status"] != "enabled":
                    continue
                self._in_flight += 1
                down = now < self._down_until
                pool = self._pool
            if pool is None:
                break
            pool.submit(self._attempt, delivery, dict(endpoint), down)

    def _attempt(self, delivery: _Delivery, endpoint: dict[str, Any], down: bool) -> None:
        try:
            status, problem = (None, "the endpoint is down") if down else self._post(endpoint, delivery.event)
            intent = delivery.event["data"]["object"]
            record = DeliveryAttempt(
                event_id=delivery.event["id"],
                event_type=delivery.event["type"],
                payment_intent_id=intent["id"],
                order_id=(intent.get("metadata") or {}).get("orderId"),
                endpoint_id=endpoint["id"],
                attempt=delivery.attempt,
                at=self._clock(),
                status=status,
                error=problem,
            )
            first_at = record.at if delivery.first_at is None else delivery.first_at
            with self._cond:
                self._attempts.append(record)
                if record.delivered:
                    self._delivered_at[endpoint["id"]] = record.at
                elif delivery.attempt <= len(RETRY_SCHEDULE_SECONDS):
                    wait = RETRY_SCHEDULE_SECONDS[delivery.attempt - 1] * self.time_scale
                    retry = dataclasses.replace(
                        delivery,
                        due=self._clock() + wait,
                        seq=next(self._seq),
                        attempt=delivery.attempt + 1,
                        first_at=first_at,
                    )
                    heapq.heappush(self._queue, retry)
                elif self._delivered_at.get(endpoint["id"], float("-inf")) < first_at:
                    # Given up, and nothing reached the endpoint since this event's first attempt:
                    # every delivery failed for the whole retry window.
                    self._disable(endpoint["id"], "every delivery failed for the retry window")
        finally:
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()

    def _disable(self, endpoint_id: str, why: str) -> None:
        # Called with the condition held: Stripe stops sending to it, and queues nothing for it.
        endpoint = self._endpoints.get(endpoint_id)
        if endpoint is None or endpoint["status"] == "disabled":
            return
        endpoint["status"] = "disabled"
        self._queue = [d for d in self._queue if d.endpoint_id != endpoint_id]
        heapq.heapify(self._queue)
        logger.warning("webhook endpoint %s (%s) disabled: %s", endpoint_id, endpoint["url"], why)

    def _post(self, endpoint: dict[str, Any], event: dict[str, Any]) -> tuple[int | None, str | None]:
        body = json.dumps(event, indent=2)
        request = urllib.request.Request(  # noqa: S310 - the URL the test or `saga up` registered
            endpoint["url"],
            data=body.encode(),
            method="POST",
            headers={
                "Content-Type": "application/json; charset=utf-8",
                "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
                SIGNATURE_HEADER: signature_header(body, endpoint["secret"], int(self._clock())),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as answer:  # noqa: S310
                return int(answer.status), None
        except urllib.error.HTTPError as exc:
            with contextlib.suppress(OSError):
                exc.close()
            return int(exc.code), None
        except (OSError, ValueError) as exc:
            return None, f"{type(exc).__name__}: {exc}"


def signature_header(payload: str, secret: str, timestamp: int) -> str:
    """Stripe's ``Stripe-Signature`` for ``payload``: ``t=<timestamp>,v1=<HMAC-SHA256 hex>``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.{payload}".encode(), hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def _check_events(enabled_events: list[str]) -> None:
    """``ValueError`` unless ``enabled_events`` names events the emulator sends (or ``*``)."""
    unknown = set(enabled_events) - EVENT_TYPES - {"*"}
    if not enabled_events or unknown:
        raise ValueError(f"enabled_events must name events among {sorted(EVENT_TYPES)} or '*'")
