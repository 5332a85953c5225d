"""A local Stripe: the part of the PaymentIntents API the saga uses, with injectable failures.

It speaks Stripe's wire format closely enough that the official ``stripe`` SDK works against it
unchanged (``StripeClient(..., base_addresses={"api": emulator.url})``): ``POST /v1/payment_intents``,
``GET /v1/payment_intents/{id}``, ``POST /v1/payment_intents/{id}/cancel``,
``GET /v1/payment_intents/search``, ``GET /v1/payment_intents`` and ``/v1/webhook_endpoints``, whose
endpoints it then sends every PaymentIntent change to, signed, as Stripe sends webhooks.

What it adds for tests: a ledger of every applied charge, ``dedupe=False`` (ignore
``Idempotency-Key`` entirely, to show that the claim alone prevents double charges), latency, and
faults that fire before or after the charge is applied (see :data:`FAULT_KINDS`), targeted at one
order if wanted, and an account's history put straight into its state (``add_history``: a
hundred thousand PaymentIntents of other orders, to show what the list costs). Everything but
the history is reachable in Python and over HTTP under ``/_emulator/``.

Laid out as moto lays out a service, one room per concern:

* :mod:`.emulator`: :class:`ProviderEmulator`, the one front class: the state, the lock, and the
  order in which a request meets Stripe's layers;
* :mod:`.controls`: the test controls the front class inherits: the ledger and PaymentIntents a
  test reads, the keys, faults, settlements and triggers it steers;
* :mod:`.server`: the HTTP server and which endpoint a request is for;
* :mod:`.responses`: Stripe's wire format: form decoding, authentication, error and answer shapes;
* :mod:`.idempotency`: the ``Idempotency-Key`` store: replay, the 24-hour window, what is saved;
* :mod:`.intents`: PaymentIntents: validate, then create and confirm; test cards and customers;
* :mod:`.currencies`: Stripe's currency rules (decimals, steps, minimums), the emulator's own copy;
* :mod:`.search`: the search (and its lag) and the list;
* :mod:`.admin`: faults and the ``/_emulator/`` routes;
* :mod:`.webhooks`: webhook endpoints, Event objects, signed deliveries, retries and their disorder,
  and the disabling of an endpoint that fails every delivery for the retry window;
* :mod:`.exceptions`: the errors answered in Stripe's shape;
* :mod:`.recording`: what it was asked, answered and sent, kept once ``record()`` is called.

Held to Stripe's published API: ``openapi/stripe_api_subset.json`` is the part of Stripe's OpenAPI
spec it serves (``scripts/stripe_openapi_subset.py`` extracts it and records its source commit), and
``tests/local/test_stripe_contract.py`` validates every answer, Event and accepted request of a run
of the saga's outcomes against it. What it deliberately does otherwise:

* only the operations above: no ``POST /v1/payment_intents/{id}/confirm`` or update (the saga
  creates with ``confirm=true``), no Charge, Event or Customer endpoints (404 as an unknown URL);
  ``latest_charge`` is an id that retrieves nothing, and ``expand[]`` is accepted and ignored;
* answers are in the shape of the version the pinned SDK sends (2026-10-28.endive) whatever
  ``Stripe-Version`` says, but for the one version rule the saga met (``payment_method_types``,
  refused from 2026-09-30 on); Events carry that version, and webhook endpoints have none of their own;
* Events are sent for status changes only (created, processing, requires_action, succeeded,
  payment_failed, canceled), each with the PaymentIntent as it is once the request that changed it
  is done (a create and confirm sends ``payment_intent.created`` with the confirmed state);
* test payment methods only (``pm_card_*`` and the saved card of :data:`TEST_CUSTOMER`); a declined
  card's PaymentMethod is a fixed US test card of the token's brand, expiring 12/2034;
* the search understands the clauses the saga writes (``metadata[...]``, ``status``, ``amount``,
  ``currency``, ``customer``, ``created``), with a lag of its own (``search_lag_seconds``);
* the amount rules are Stripe's currency page (:mod:`.currencies`), the same in test and live mode;
* refunds (``POST /v1/refunds``) and webhook endpoints are outside the vendored spec, checked only
  by the SDK parsing what they answer.

Run it alone with ``python -m saga_local.stripe_emulator --port 12111``.
"""

from __future__ import annotations

from saga_local.stripe_emulator.admin import (
    FAULT_KINDS,
    FailureRate,
    FaultKind,
    ProviderFault,
)
from saga_local.stripe_emulator.emulator import ProviderEmulator
from saga_local.stripe_emulator.exceptions import BadRequest, StripeEmulatorError
from saga_local.stripe_emulator.idempotency import IDEMPOTENCY_TTL_SECONDS
from saga_local.stripe_emulator.intents import (
    FORCEABLE_STATUSES,
    MAX_AMOUNT,
    OTHER_TEST_CUSTOMER,
    SAVED_PAYMENT_METHOD,
    TEST_CUSTOMER,
    LedgerEntry,
)
from saga_local.stripe_emulator.responses import (
    API_KEY_PREFIX,
    API_KEY_PREFIXES,
    STRIPE_VERSION,
    Permission,
)
from saga_local.stripe_emulator.server import ENDPOINTS, Endpoint
from saga_local.stripe_emulator.webhooks import (
    RETRY_SCHEDULE_SECONDS,
    DeliveryAttempt,
    WebhookDisorder,
    WebhookSender,
)

__all__ = [
    "API_KEY_PREFIX",
    "API_KEY_PREFIXES",
    "ENDPOINTS",
    "FAULT_KINDS",
    "FORCEABLE_STATUSES",
    "IDEMPOTENCY_TTL_SECONDS",
    "MAX_AMOUNT",
    "OTHER_TEST_CUSTOMER",
    "RETRY_SCHEDULE_SECONDS",
    "SAVED_PAYMENT_METHOD",
    "STRIPE_VERSION",
    "TEST_CUSTOMER",
    "BadRequest",
    "DeliveryAttempt",
    "Endpoint",
    "FailureRate",
    "FaultKind",
    "LedgerEntry",
    "Permission",
    "ProviderEmulator",
    "ProviderFault",
    "StripeEmulatorError",
    "WebhookDisorder",
    "WebhookSender",
]
