"""Chaos's webhooks: Stripe's deliveries in disorder, bank debits that settle later, and what they closed.

With :attr:`~saga_local.harness.chaos_plan.ChaosConfig.webhooks` on, the stack serves the webhook
receiver and runs its consumer (``EmbeddedStack(webhooks=True)``), and :func:`arm` sets the provider
up before the orders flow:

* the delivery's disorder (:class:`~saga_local.stripe_emulator.WebhookDisorder`): events delivered
  twice, held back so that a later one overtakes them, delayed, or never delivered;
* the endpoint down for a window of wall time (:class:`EndpointDown`): every attempt meanwhile gets
  no answer and Stripe retries it on its schedule (compressed by ``webhook_time_scale``);
* a share of the orders paid by bank debit: their confirm answers ``processing``, the execution
  ends in Awaiting Settlement, and the bank answers ``settle_seconds`` later, succeeded or failed.

What the run must show, and :mod:`saga_local.harness.chaos_report` checks: a webhook that proved an
order's outcome leaves no claim open (:func:`left_open_by_webhook`); no order is paged for a payment
that was only settling, nor after a webhook had closed it (:func:`paged_needlessly`); a settlement
whose webhook was lost is closed by the sweeper's hourly settlement check, not paged. The
disorder is reported as the delivery log shows it (:func:`summarize`), counted from the emulator's
events and delivery attempts, as Stripe's dashboard would show them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from payment_saga.outcomes import SETTLEMENT_CHECK_MARK
from saga_local.stack.outcome_log import deduplicated, in_outcome_order
from saga_local.stripe_emulator import WebhookDisorder

if TYPE_CHECKING:
    from collections.abc import Iterable

    from saga_local.harness.chaos_plan import ChaosConfig
    from saga_local.stack.embedded import EmbeddedStack
    from saga_local.stack.outcome_log import OutcomeEvent
    from saga_local.stripe_emulator import DeliveryAttempt, ProviderEmulator

#: The events whose delivery proves how a payment ended (what the consumer closes a claim on).
SETTLING_EVENTS = frozenset(
    {"payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.canceled"}
)
#: A first delivery this much later than its event counts as delayed (events carry whole seconds).
DELAYED_AFTER_SECONDS = 1.0
#: How a final outcome event's ``resolvedBy`` reads in the report.
CLOSERS = {
    "saga": "their own execution",
    "webhook": "a webhook",
    "sweeper": "the sweeper",
    "settlement check": "the settlement check",
}


def arm(stack: EmbeddedStack, config: ChaosConfig, debits: dict[str, str]) -> EndpointDown:
    """Set the provider up for the run: the disorder, the bank debits and how each settles. Returns
    the endpoint's down window, to :meth:`EndpointDown.start` with the run."""
    if stack.webhook_url is None:
        raise ValueError("chaos with webhooks needs a stack that serves them: EmbeddedStack(webhooks=True)")
    provider = stack.provider
    provider.settle_seconds = config.settle_seconds
    for order_id, outcome in debits.items():
        provider.settle_as(order_id, outcome)
        # One confirm: the attempt's retries replay it by its idempotency key; a later attempt (after
        # a release) pays by card.
        provider.force_outcome("processing", order_id=order_id, times=1)
    provider.webhooks.disorder = WebhookDisorder(
        duplicate=config.webhook_duplicate_rate,
        reorder=config.webhook_reorder_rate,
        reorder_seconds=config.webhook_reorder_seconds,
        delay=config.webhook_delay_rate,
        delay_seconds=config.webhook_delay_seconds,
        lose=config.webhook_lose_rate,
        seed=config.seed + 3,
    )
    return EndpointDown(
        provider, after_events=config.webhook_down_after_events, seconds=config.webhook_down_seconds
    )


class EndpointDown:
    """The webhook endpoint answering nothing for ``seconds`` (``take_down``), once the run has sent
    ``after_events`` webhook events: counted in events rather than in seconds from :meth:`start`,
    because the run's other windows (Lambda throttled, the provider down) leave long spells in
    which nothing is charged and no event is sent, and a window in one of them would meet no
    delivery. A window that has not begun when the run is over never happens."""

    def __init__(self, provider: ProviderEmulator, *, after_events: int, seconds: float) -> None:
        self.provider = provider
        self.after_events = after_events
        self.seconds = seconds
        self.began: float | None = None
        self._stop = threading.Event()
        self._clock = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="chaos-webhook-endpoint-down", daemon=True)

    def start(self) -> None:
        if self.seconds > 0:
            self._clock = time.monotonic()
            self._thread.start()

    def finish(self) -> None:
        """Call off a window that has not begun; one under way runs out by itself (its retries with it)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def wait_out(self) -> None:
        """Until a window under way has run out (one that never began is over already)."""
        if self.began is not None:
            time.sleep(max(0.0, self._clock + self.began + self.seconds - time.monotonic()))

    def _run(self) -> None:
        while len(self.provider.webhooks.events()) < self.after_events:
            if self._stop.wait(0.2):
                return
        self.began = time.monotonic() - self._clock
        self.provider.webhooks.take_down(self.seconds)


@dataclass
class WebhookSummary:
    """The webhooks of a run as the delivery log shows them, and the endpoint's down window."""

    #: Events sent to the endpoint (each change of a PaymentIntent the endpoint subscribed to).
    events: int = 0
    #: Delivery attempts, and those that got a 2xx.
    attempts: int = 0
    delivered: int = 0
    #: Events whose first attempt was made twice (two deliveries of one event).
    duplicated: int = 0
    #: Events first delivered after a later event of the same PaymentIntent.
    reordered: int = 0
    #: Events whose first attempt came more than :data:`DELAYED_AFTER_SECONDS` after the event.
    delayed: int = 0
    #: Events never attempted at all: lost for good.
    lost: int = 0
    #: The endpoint's down window: when (seconds into the run), how long, and the attempts it refused.
    down_began: float | None = None
    down_seconds: float = 0.0
    refused_while_down: int = 0
    #: Orders paid by bank debit, by how the bank settled them.
    debits: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "attempts": self.attempts,
            "delivered": self.delivered,
            "duplicated": self.duplicated,
            "reordered": self.reordered,
            "delayed": self.delayed,
            "lost": self.lost,
            "downBegan": None if self.down_began is None else round(self.down_began, 1),
            "downSeconds": self.down_seconds,
            "refusedWhileDown": self.refused_while_down,
            "debits": self.debits,
        }

    def lines(self) -> list[str]:
        """The report's lines: the disorder drawn, the down window, the debits."""
        down = (
            "never down"
            if self.down_began is None
            else f"down {self.down_seconds:.0f} s from {self.down_began:.0f} s into the run,"
            f" {self.refused_while_down} attempts refused and retried on Stripe's schedule"
        )
        debits = ", ".join(f"{outcome} {n}" for outcome, n in sorted(self.debits.items())) or "none"
        return [
            f"webhooks             {self.events} events, {self.attempts} delivery attempts,"
            f" {self.delivered} delivered",
            f"  disorder: {self.duplicated} delivered twice, {self.reordered} overtaken by a later event,"
            f" {self.delayed} delayed, {self.lost} never delivered; the endpoint {down}",
            f"bank debits          {sum(self.debits.values())} orders settling later: {debits}",
        ]


def summarize(provider: ProviderEmulator, down: EndpointDown, debits: dict[str, str]) -> WebhookSummary:
    """Count the disorder in the emulator's events and delivery attempts (see :class:`WebhookSummary`)."""
    events = [e for e in provider.webhooks.events() if e.get("pending_webhooks", 0) > 0]
    attempts = provider.webhooks.attempts()
    firsts: dict[str, list[DeliveryAttempt]] = defaultdict(list)
    for attempt in attempts:
        if attempt.attempt == 1:
            firsts[attempt.event_id].append(attempt)
    by_intent: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        by_intent[event["data"]["object"]["id"]].append(event)
    reordered = 0
    for sent in by_intent.values():  # in the order they were made
        arrived = [min(a.at for a in firsts[e["id"]]) if firsts.get(e["id"]) else None for e in sent]
        for i, at in enumerate(arrived):
            later = [t for t in arrived[i + 1 :] if t is not None]
            if at is not None and later and min(later) < at:
                reordered += 1
    return WebhookSummary(
        events=len(events),
        attempts=len(attempts),
        delivered=sum(1 for a in attempts if a.delivered),
        duplicated=sum(1 for made in firsts.values() if len(made) > 1),
        reordered=reordered,
        delayed=sum(
            1
            for e in events
            if firsts.get(e["id"])
            and min(a.at for a in firsts[e["id"]]) - e["created"] > DELAYED_AFTER_SECONDS
        ),
        lost=sum(1 for e in events if not firsts.get(e["id"])),
        down_began=down.began,
        down_seconds=down.seconds if down.began is not None else 0.0,
        refused_while_down=sum(1 for a in attempts if a.error == "the endpoint is down"),
        debits=dict(Counter(debits.values())),
    )


def left_open_by_webhook(
    claims: dict[str, dict[str, Any]],
    attempts: Iterable[DeliveryAttempt],
    intents: dict[str, dict[str, Any]],
) -> list[str]:
    """Orders still ``CLAIMED`` although a delivered webhook proved how their claim's attempt ended.

    ``intents`` maps a PaymentIntent id to the PaymentIntent (its ``metadata`` names the order's
    attempt). A ``succeeded`` event of the claim's attempt completes the claim; a failed one releases
    it unless the claim awaits another PaymentIntent (docs/webhooks.md): either left the claim open
    means a page for an order the webhook had resolved. One line per order.
    """
    found: list[str] = []
    for attempt in attempts:
        if not attempt.delivered or attempt.event_type not in SETTLING_EVENTS or attempt.order_id is None:
            continue
        claim = claims.get(attempt.order_id)
        if claim is None or claim.get("status") != "CLAIMED":
            continue
        metadata = (intents.get(attempt.payment_intent_id) or {}).get("metadata") or {}
        if str(metadata.get("attempt")) != str(claim.get("attempt")):
            continue
        awaited = claim.get("settlementIntentId")
        if attempt.event_type != "payment_intent.succeeded" and awaited not in (
            None,
            attempt.payment_intent_id,
        ):
            continue
        found.append(
            f"{attempt.order_id}: {attempt.event_type} of {attempt.payment_intent_id} (attempt"
            f" {claim.get('attempt')}) delivered, the claim still CLAIMED"
        )
    return list(dict.fromkeys(found))


def paged_needlessly(events: Iterable[OutcomeEvent]) -> tuple[list[str], list[str]]:
    """Orders paged (``OrderNeedsReconciliation``) for an attempt after a webhook had closed it, and
    after it had begun to await settlement (``OrderPaymentProcessing``): ``(after a webhook, while
    settling)``, one line per order. Judged by ``occurredAt``; events of one second are not ranked."""
    by_attempt: dict[tuple[str, str], list[OutcomeEvent]] = defaultdict(list)
    for event in events:
        if event.order_id is not None:
            by_attempt[(event.order_id, str(event.detail.get("attempt")))].append(event)
    after_webhook: list[str] = []
    while_settling: list[str] = []
    for (order_id, attempt), mine in by_attempt.items():
        pages = _times(e for e in mine if e.detail_type == "OrderNeedsReconciliation")
        if not pages:
            continue
        last_page = max(pages)
        closed = _times(e for e in mine if e.final and e.detail.get("resolvedBy") == "webhook")
        settling = _times(e for e in mine if e.detail_type == "OrderPaymentProcessing")
        if any(c < last_page for c in closed):
            after_webhook.append(f"{order_id}: paged for attempt {attempt} after a webhook closed it")
        if any(s < last_page for s in settling):
            while_settling.append(f"{order_id}: paged for attempt {attempt} while its payment settled")
    return sorted(after_webhook), sorted(while_settling)


def closed_by(
    events: Iterable[OutcomeEvent],
    final_by_order: dict[str, str],
    claims: dict[str, dict[str, Any]] | None = None,
) -> dict[str, int]:
    """Orders by what closed them: the ``resolvedBy`` of each order's last final outcome event. The
    sweeper's settlement check is told apart from its reconciliation (both ``sweeper``) by the
    claim's ``webhookEventId`` (``claims``)."""
    checked = {
        order_id
        for order_id, claim in (claims or {}).items()
        if str(claim.get("webhookEventId") or "").startswith(SETTLEMENT_CHECK_MARK)
    }
    last: dict[str, str] = {}
    for event in in_outcome_order(deduplicated(events)):
        if (
            event.final
            and event.order_id in final_by_order
            and event.detail_type == final_by_order[event.order_id]
        ):
            by = str(event.detail.get("resolvedBy") or "saga")
            last[event.order_id] = "settlement check" if by == "sweeper" and event.order_id in checked else by
    return dict(Counter(CLOSERS.get(by, by) for by in last.values()))


def awaited_settlement(events: Iterable[OutcomeEvent]) -> int:
    """Orders that waited in Awaiting Settlement (an ``OrderPaymentProcessing`` published for them)."""
    return len({e.order_id for e in events if e.detail_type == "OrderPaymentProcessing" and e.order_id})


def _times(events: Iterable[OutcomeEvent]) -> list[datetime]:
    """When each event happened (``occurredAt``, else the bus's ``time``); those without one left out."""
    times = []
    for event in events:
        text = str(event.detail.get("occurredAt") or event.time or "")
        with contextlib.suppress(ValueError):
            times.append(datetime.fromisoformat(text.replace("Z", "+00:00")))
    return times
