"""What the model explores: small scopes in CI, bigger ones with ``make model`` (``SAGA_MODEL_SCOPE=full``).

Each scope is one order and a few deliveries of it. Which deliveries, and which faults, are chosen so
that each known hole of the claim protocol is within reach of some scope:

* ``duplicates``: the same message delivered twice (a duplicate producer), any fault;
* ``declined-then-retry``: the card is declined, the customer retries with another ``paymentAttempt``
  (a lost answer on the re-claim made it a duplicate that kept the claim);
* ``declined-twice-then-late-redelivery``: two declined attempts, then a late redelivery of the first
  (it was charged again under a fresh key);
* ``claim-in-flight``: a Claim Lambda killed with its write in flight, and the Claim step failing (the
  release read the row before the write landed);
* ``takeover-then-redrive``: a Claim Lambda that dies after its write, a takeover, and a redrive of
  the first execution (it kept ownership of the attempt and released what the other had charged);
* ``not-charged-requeued``: a charge refused before the provider ran it (released ``NOT_CHARGED``), the
  relay failing on any of its calls, and the re-queued delivery (a retried relay re-queued again);
* ``claim-failed-requeued``: a Claim step that fails (the fence's tombstone, which only the relay
  re-queues), then the relay or the re-queued delivery failing too, or a poison record in the way
  (a re-queued order whose Claim failed was never tried again);
* ``declined-then-charged``: a decline then the customer's charged retry, the relay failing once
  (one failed PutEvents published the decline after the charge).

With a Stripe webhook endpoint registered (``webhooks``: every PaymentIntent change is an event
delivered to the real consumer any number of times, in any order, or lost):

* ``debit-settled-by-webhook``: a bank debit, answered ``processing``, settling later as succeeded or
  failed, its events racing the execution's Await Settlement (a webhook that settled the debit
  before it made the execution page);
* ``debit-answer-lost``: the same debit with the Charge's answer lost, or a Lambda dying after its
  write, or the step's last try lost, the ``processing`` event delivered inside the try or after it
  (a Charge retried after the webhook closed the claim paged);
* ``declined-then-charged-webhooks``: a decline and the charged retry, their ``payment_failed`` and
  ``succeeded`` events racing Release Claim and Mark Complete, redelivered or lost;
* ``authentication-canceled``: a card that needs authentication: ``requires_action``, then the
  provider client's cancel (``canceled``), a decline;
* ``webhook-during-last-try``: a card whose ``succeeded`` event is delivered inside the Charge step's
  last try, between the provider applying the create and the step learning its answer lost (the
  execution paged for an order the webhook had charged), and a forged ``succeeded`` planted on the
  webhook queue at any point (the consumer believed a queued body);
* ``debit-redrive-after-key-expiry``: a debit whose answer is lost, its ``processing`` event
  recorded, a day passing (the provider forgets the idempotency key) and the timed-out execution
  redriven (its Charge created a second debit).

Their full versions put the clock (and the sweeper mid-schedule) back, a fault of any kind on the
debit, a duplicate debit delivery, a retry after the canceled card, more redeliveries, and a decline
and a debit during the last try.

The relay runs in every scope (each closing write's events, each re-queue); its faults
(``relay.RELAY_FAULTS``) only in the last three, which the full scopes widen with the clock and the
sweeper, more re-sends or lost charges.

The full scopes turn the clock, the sweeper and every fault kind back on, and add deliveries,
faults, re-sends and redrives to the same shapes.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from tests.model.relay import RELAY_FAULTS
from tests.model.state import ALL_FAULTS, DECLINED_CARD, Delivery, Scope
from tests.model.webhooks import DEBIT, NEEDS_ACTION

if TYPE_CHECKING:
    from collections.abc import Iterable

D = Delivery
RELAY_CALLS = RELAY_FAULTS - {"poison"}

#: Small enough for ``make test`` (the clock, the sweeper or some fault kinds left out where a scope's
#: hole does not need them); every one of them is also in ``FULL_SCOPES`` with everything on.
CI_SCOPES: tuple[Scope, ...] = (
    Scope("duplicates", (D("d1"), D("d2")), max_faults=0, requeues=0),
    Scope(
        "declined-then-retry",
        (D("d1", "initial", DECLINED_CARD), D("d2", "retry-1")),
        max_faults=1,
        requeues=0,
        clock=False,
        fault_kinds=frozenset({"lost_resend", "lost_raise", "late"}),
    ),
    Scope(
        "declined-twice-then-late-redelivery",
        (
            D("d1", "initial", DECLINED_CARD),
            D("d2", "retry-1", DECLINED_CARD),
            D("d3", "initial", DECLINED_CARD),
        ),
        max_faults=0,
        requeues=0,
        sweeper=False,
    ),
    Scope(
        "claim-in-flight",
        (D("d1"),),
        max_faults=2,
        requeues=0,
        fault_kinds=frozenset({"late", "outage", "die_after", "lost_resend"}),
    ),
    Scope(
        "takeover-then-redrive",
        (D("d1"), D("d2")),
        max_faults=3,
        redrives=1,
        requeues=0,
        sweeper=False,
        fault_kinds=frozenset({"die_after", "outage"}),
    ),
    Scope(
        "not-charged-requeued",
        (D("d1"),),
        max_faults=3,
        requeues=1,
        clock=False,
        sweeper=False,
        fault_kinds=frozenset({"refused", *RELAY_CALLS}),
    ),
    Scope(
        "claim-failed-requeued",
        (D("d1"),),
        max_faults=3,
        requeues=1,
        clock=False,
        sweeper=False,
        fault_kinds=frozenset({"outage", *RELAY_FAULTS}),
    ),
    Scope(
        "declined-then-charged",
        (D("d1", "initial", DECLINED_CARD), D("d2", "retry-1")),
        max_faults=2,
        requeues=0,
        clock=False,
        sweeper=False,
        fault_kinds=RELAY_FAULTS,
        relay_lags=True,
    ),
    # The webhook scopes leave the clock out during the schedule (the sweeper still ends every one
    # whose claim is left open): with it, a debit alone has ten times the states.
    Scope(
        "debit-settled-by-webhook",
        (D("d1", "initial", DEBIT),),
        max_faults=0,
        requeues=0,
        clock=False,
        webhooks=True,
    ),
    Scope(
        "debit-answer-lost",
        (D("d1", "initial", DEBIT),),
        max_faults=1,
        requeues=0,
        clock=False,
        fault_kinds=frozenset({"lost", "die_after", "last_try"}),
        webhooks=True,
    ),
    Scope(
        "declined-then-charged-webhooks",
        (D("d1", "initial", DECLINED_CARD), D("d2", "retry-1")),
        max_faults=0,
        requeues=0,
        clock=False,
        sweeper=False,
        webhooks=True,
    ),
    Scope(
        "authentication-canceled",
        (D("d1", "initial", NEEDS_ACTION),),
        max_faults=0,
        requeues=0,
        clock=False,
        webhooks=True,
    ),
    Scope(
        "webhook-during-last-try",
        (D("d1"),),
        max_faults=1,
        requeues=0,
        clock=False,
        fault_kinds=frozenset({"lost", "last_try"}),
        webhooks=True,
        forged_events=1,
    ),
    Scope(
        "debit-redrive-after-key-expiry",
        (D("d1", "initial", DEBIT),),
        max_faults=1,
        redrives=1,
        requeues=0,
        clock=False,
        fault_kinds=frozenset({"lost"}),
        webhooks=True,
        webhook_repeats=0,
        webhook_losses=0,
        key_expiry=True,
    ),
)

#: The CI scopes by name, for their full twins.
_CI = {scope.name: scope for scope in CI_SCOPES}


def full_twin(name: str, *, more_faults: Iterable[str] | None = None) -> Scope:
    """The CI scope NAME for ``make model``: its deliveries and bounds, the clock and the sweeper on, and
    every fault kind, or, where MORE_FAULTS is given (even empty), the CI scope's own kinds and those.
    Built from the CI scope, the two cannot drift apart where they are meant to be the same."""
    ci = _CI[name]
    kinds = ALL_FAULTS if more_faults is None else ci.fault_kinds | frozenset(more_faults)
    return replace(ci, clock=True, sweeper=True, fault_kinds=kinds)


#: ``make model``: the same shapes with the clock, the sweeper and every fault kind on, more faults
#: and deliveries. Minutes to tens of minutes.
FULL_SCOPES: tuple[Scope, ...] = (
    replace(full_twin("duplicates"), max_faults=1),
    Scope("duplicates-two-faults", (D("d1"), D("d2")), max_faults=2, requeues=0),
    Scope("three-duplicates", (D("d1"), D("d2"), D("d3")), max_faults=0, requeues=0),
    Scope("duplicates-redrive-resend", (D("d1"), D("d2")), max_faults=1, redrives=1, requeues=1),
    full_twin("declined-then-retry"),
    full_twin("declined-twice-then-late-redelivery"),
    replace(full_twin("claim-in-flight"), deliveries=(D("d1"), D("d2"))),
    full_twin("takeover-then-redrive", more_faults={"late"}),
    replace(full_twin("not-charged-requeued", more_faults={"lost", *RELAY_FAULTS}), max_faults=2),
    replace(
        full_twin("claim-failed-requeued", more_faults={"die_after"}), requeues=2, clock=False, sweeper=False
    ),
    full_twin("declined-then-charged", more_faults=()),
    replace(full_twin("debit-settled-by-webhook"), max_faults=1),
    Scope(
        "debit-duplicates-webhooks",
        (D("d1", "initial", DEBIT), D("d2", "initial", DEBIT)),
        max_faults=0,
        requeues=0,
        clock=False,
        webhooks=True,
        webhook_repeats=2,
    ),
    full_twin("declined-then-charged-webhooks"),
    replace(
        full_twin("authentication-canceled"),
        deliveries=(D("d1", "initial", NEEDS_ACTION), D("d2", "retry-1")),
    ),
    replace(full_twin("webhook-during-last-try", more_faults={"die_after"}), max_faults=2, forged_events=0),
    Scope(
        "declined-during-last-try",
        (D("d1", "initial", DECLINED_CARD), D("d2", "retry-1")),
        max_faults=1,
        requeues=0,
        clock=False,
        fault_kinds=frozenset({"last_try"}),
        webhooks=True,
    ),
    Scope(
        "debit-during-last-try",
        (D("d1", "initial", DEBIT),),
        max_faults=1,
        requeues=0,
        fault_kinds=frozenset({"lost", "last_try", "die_after"}),
        webhooks=True,
    ),
    replace(
        full_twin("debit-redrive-after-key-expiry", more_faults={"last_try", "die_after"}),
        clock=False,
        webhook_repeats=1,
        webhook_losses=1,
    ),
)


def selected() -> tuple[Scope, ...]:
    """``SAGA_MODEL_SCOPE``: ``ci`` (the default) or ``full``."""
    name = os.environ.get("SAGA_MODEL_SCOPE", "ci")
    if name not in ("ci", "full"):
        raise ValueError(f"SAGA_MODEL_SCOPE must be ci or full, not {name!r}")
    return CI_SCOPES if name == "ci" else FULL_SCOPES
