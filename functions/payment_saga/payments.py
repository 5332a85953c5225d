"""The payment provider: one confirmed Stripe PaymentIntent per order attempt.

Everything that can move money goes through :meth:`StripeProvider.charge`, which sends an
``Idempotency-Key`` derived from the order and the attempt number (invariant 5), so that a retry
after an unknown outcome is applied by Stripe at most once. Every provider answer is mapped to
exactly one of four results, chosen so that a wrong guess can only ever *keep* a claim, never
release one whose charge landed (invariant 6):

==========================================================  ==============================
What the provider said                                      Result
==========================================================  ==============================
PaymentIntent ``succeeded``                                 :class:`Charge`
402 ``card_error`` (issuer decline, ``authentication_       :class:`PaymentDeclined`
required`` because we confirm ``off_session``)
``requires_payment_method`` / ``canceled`` after confirm     :class:`PaymentDeclined`
``requires_action`` that we then provably cancel             :class:`PaymentDeclined`
401 (bad, revoked key), 403 (restricted key without the     :class:`ChargeNotAttempted`
``rak_payment_intent_write`` permission)
400/404 ``invalid_request_error`` with no PaymentIntent      :class:`ChargeNotAttempted`
(parameter validation, or a saved 400 from execution)
400 ``idempotency_error`` (key reused, other parameters)     :class:`PaymentOutcomeUnknown`
429 ``rate_limit`` / ``lock_timeout``                       :class:`PaymentOutcomeUnknown`
``processing`` (a debit that settles later: SEPA, ACH)        :class:`PaymentProcessing`
400 carrying a PaymentIntent, 409 (same key in flight),      :class:`PaymentOutcomeUnknown`
5xx, connection errors, timeouts,
``requires_capture``, anything unexpected
==========================================================  ==============================

Why the "not attempted" rows are safe: Stripe authenticates and authorises a request, and
validates its parameters, before the endpoint begins executing; Stripe only saves an idempotent
result once execution has begun, and nothing is created or charged before that. So a 401, a 403
or a parameter error that carries no PaymentIntent proves the create was never applied. A 400
raised once execution had begun (a PaymentMethod or Customer that does not exist, an amount under
the currency's minimum) is saved under the key and replayed to every retry: the create failed
before creating anything, and it carries no PaymentIntent either. A 400 ``idempotency_error`` is
the opposite: it proves an earlier request with the same key *did* execute (with other
parameters), and that one may have charged.

Why a 429 is *not* in those rows, although Stripe answers ``rate_limit`` before its idempotency
layer: it is a request to slow down, not a verdict, and ``lock_timeout`` means another request or
Stripe process holds the PaymentIntent, possibly one of ours with this key. The charge is retried
with the same key (which Stripe then applies at most once), never released on a 429.

What :class:`ChargeNotAttempted` does *not* prove: it is about this request only. Authentication
and rate limiting run before Stripe's idempotency layer, so if an earlier request of the same
attempt may have reached Stripe (a retry after :class:`PaymentOutcomeUnknown`, or a lease takeover
that kept the attempt), a 401 after a key rotation says nothing about that earlier request. The
caller may release the claim on it only when this was the attempt's first charge request;
otherwise the claim is kept and the attempt reconciled (:meth:`StripeProvider.search_attempt`, and
:meth:`StripeProvider.list_attempt` before anything is released).

The 24-hour window: Stripe keeps an idempotency key for at least 24 hours and may forget it after
that, when a request with the same key is applied anew. Retrying :meth:`StripeProvider.charge` is
therefore only safe within 24 hours of the first request with that key; after that the caller
must learn the outcome by reconciliation (search and list), never re-charge.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from payment_saga.api_keys import check_api_base, check_key_mode
from payment_saga.errors import ChargeNotAttempted, PaymentDeclined, PaymentOutcomeUnknown, PaymentProcessing
from payment_saga.intents import IntentReading, reading_of

if TYPE_CHECKING:
    from collections.abc import Callable

    import stripe
    from stripe.params import PaymentIntentCreateParams, PaymentIntentListParams

    from payment_saga.orders import Order
else:

    class _StripeOnFirstUse:
        """The Stripe SDK, imported when this module first uses it, not when it is imported.

        Claim, Mark Complete, Release, Start and the outcome relay import this module (for
        :func:`idempotency_key`, or through ``handlers.runtime``) but never call Stripe: importing
        the SDK (and requests, urllib3...) would add about a fifth of their cold start for nothing
        (bench/cold_start.py). The first attribute read imports it and puts the module itself in
        this module's globals, so every later ``stripe.X`` is a plain module attribute.
        """

        def __getattr__(self, name: str) -> Any:
            import stripe as sdk

            globals()["stripe"] = sdk
            return getattr(sdk, name)

    stripe = _StripeOnFirstUse()

#: How long Stripe replays a saved response for an idempotency key (at least; it may keep longer).
IDEMPOTENCY_WINDOW_SECONDS = 24 * 60 * 60
#: The SDK's own default is 80 s, longer than the Charge Lambda should ever wait on one call.
DEFAULT_TIMEOUT_SECONDS = 10.0

#: The most Stripe's list returns in one page.
_LIST_PAGE_SIZE = 100

#: Statuses in which a PaymentIntent has not charged and cannot without our own further call.
_FAILED_STATUSES = frozenset({"requires_payment_method", "canceled"})

_SECRET_PATTERN = re.compile(r"\b(?:sk|rk|pk)_(?:test|live)_[A-Za-z0-9_]+")


class ListTooLong(PaymentOutcomeUnknown):
    """The list window holds more PaymentIntents than the caller's page cap: nothing is concluded.

    Not an error the state machine sees (only the sweeper lists). ``pages`` is how many were read.
    """

    def __init__(self, message: str, *, pages: int) -> None:
        super().__init__(message)
        self.pages = pages


def idempotency_key(order_id: str, attempt: int) -> str:
    """The provider idempotency key of one charge attempt of an order.

    Deterministic on purpose (invariant 5): whoever retries the charge of this attempt (a retried
    step, a redelivered message, an execution that took over an expired lease) sends the same key,
    so Stripe applies the charge at most once. It is derived from the producer's ``orderId`` (the
    business key, invariant 4), never from a message id or an execution id, which change between
    deliveries. The attempt number changes only after a release proved that nothing was charged,
    which is exactly when a new charge is allowed.
    """
    if not order_id:
        raise ValueError("order_id must be a non-empty string")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise ValueError(f"attempt must be a non-negative integer, got {attempt!r}")
    return f"payment-saga/{order_id}/attempt-{attempt}"


@dataclass(frozen=True)
class Charge:
    """A payment the provider accepted.

    ``charge_id`` is the PaymentIntent id (``pi_...``): the object that is refunded, looked up and
    shown in the Stripe dashboard. ``replayed`` is true when Stripe answered from its idempotency
    store (the charge had already been applied by an earlier request with the same key).
    """

    charge_id: str
    status: str
    amount: int
    currency: str
    replayed: bool


@dataclass(frozen=True)
class AttemptRecord:
    """What the provider shows for one attempt of an order, for reconciliation.

    ``charge`` is the attempt's succeeded PaymentIntent (the oldest, if there are several);
    ``extra_charge_ids`` the other succeeded ones, oldest first: each is a double charge (invariant 1
    broken) that someone must refund. ``failed_ids`` are the attempt's PaymentIntents that failed
    for good (declined after the confirm, or canceled): they charged nothing and never will.
    ``source`` is ``"search"`` (eventually consistent) or ``"list"`` (not).
    """

    source: str
    charge: Charge | None = None
    extra_charge_ids: tuple[str, ...] = ()
    failed_ids: tuple[str, ...] = ()

    @property
    def declined(self) -> bool:
        """No charge, and at least one PaymentIntent of the attempt failed: the provider declined it."""
        return self.charge is None and bool(self.failed_ids)


class AttemptReader(Protocol):
    """What reconciliation asks the provider (``StripeProvider`` answers it): nothing here can charge."""

    def search_attempt(self, order: Order, *, attempt: int, idempotency_key: str) -> AttemptRecord:
        """The attempt's PaymentIntents as the provider's search shows them (fast, may lag)."""
        ...

    def list_attempt(
        self,
        order: Order,
        *,
        attempt: int,
        idempotency_key: str,
        created_from: int,
        created_to: int,
        customer: str | None = None,
        max_pages: int | None = None,
        keep_going: Callable[[], bool] | None = None,
    ) -> AttemptRecord:
        """The attempt's PaymentIntents created in [created_from, created_to] (of ``customer``, if set),
        from the list (never lags); raises :class:`ListTooLong` past ``max_pages`` pages."""
        ...


class PaymentProvider(AttemptReader, Protocol):
    """What the saga needs from a payment provider: a charge, and what reconciliation reads."""

    def charge(self, order: Order, *, attempt: int, idempotency_key: str) -> Charge:
        """Charge the order once, or raise PaymentDeclined, ChargeNotAttempted or PaymentOutcomeUnknown."""
        ...

    def find_charge(self, order: Order, *, attempt: int, idempotency_key: str) -> Charge | None:
        """The landed charge of this attempt, None if there is none, or raise PaymentOutcomeUnknown."""
        ...


class StripeProvider:
    """:class:`PaymentProvider` on Stripe's PaymentIntents API, through the official SDK.

    The SDK never retries (``max_network_retries=0``): the state machine retries with the same
    idempotency key, where every attempt is visible. Each HTTP call is bounded by
    ``timeout_seconds`` (connect and read). ``api_base`` points the client at another host (the
    local provider emulator); it must pass :func:`check_api_base` with the key, so a live key goes to
    Stripe's host only. ``client`` replaces the SDK client altogether (and ``api_base`` with it).
    ``mode``, when given, is the stack's ``PaymentApiMode``: the key must be of that mode
    (:func:`check_key_mode`), checked before any client exists.

    Raises:
        UnsafeApiBase: ``api_base`` is not a place this key may be sent to.
        KeyModeMismatch: the key is not of ``mode``.
    """

    def __init__(
        self,
        api_key: str,
        *,
        api_base: str | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        client: stripe.StripeClient | None = None,
        mode: str | None = None,
    ) -> None:
        if not api_key:
            raise ValueError("api_key must be a non-empty string")
        if timeout_seconds <= 0:
            raise ValueError("timeout_seconds must be positive")
        if mode is not None:
            check_key_mode(api_key, mode)
        self._api_key = api_key
        self._http_client: stripe.HTTPClient | None = None
        if client is None:
            check_api_base(api_base, api_key=api_key)  # a given client is its maker's to point
            self._http_client = stripe.RequestsClient(timeout=timeout_seconds)
            client = stripe.StripeClient(
                api_key,
                base_addresses={"api": api_base} if api_base else None,
                max_network_retries=0,
                http_client=self._http_client,
            )
        self._client = client

    def __repr__(self) -> str:
        # Never the key, not even in a debugger or a log line that prints the provider.
        return f"{type(self).__name__}()"

    def close(self) -> None:
        """Close the HTTP connection the calling thread holds (if this provider created the client)."""
        if self._http_client is not None:
            self._http_client.close()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated

    def charge(self, order: Order, *, attempt: int, idempotency_key: str) -> Charge:
        """Create and confirm a PaymentIntent for the order, applied at most once per ``idempotency_key``.

        Returns the :class:`Charge` when the payment succeeded (``replayed`` tells whether an earlier
        request with the same key had already applied it). Raises :class:`PaymentDeclined` when the
        payment provably did not and will not happen, :class:`ChargeNotAttempted` when Stripe
        rejected the request before executing it, and :class:`PaymentOutcomeUnknown` otherwise; see
        the module docstring for the full mapping. Retrying with the same key is safe only within
        :data:`IDEMPOTENCY_WINDOW_SECONDS` of the first request.

        A saved payment method (one attached to a Stripe Customer) is charged in the name of
        ``order.provider_customer_id``: Stripe refuses it without its customer (400, so
        :class:`ChargeNotAttempted`), and refuses a customer it does not belong to as well.
        """
        params: PaymentIntentCreateParams = {
            "amount": order.amount,
            "currency": order.currency.lower(),
            "payment_method": order.payment_method,
            # A server-side confirm needs either a return_url or a promise of no redirect.
            # payment_method_types=[card] was the other way, but the API version this SDK
            # pins (2026-10-28.endive) no longer accepts it on create (400
            # payment_method_types_no_longer_supported, since 2026-09-30.endive). With
            # allow_redirects=never Stripe offers only methods that complete without sending
            # the customer to another page, which no one could follow from an SQS-driven
            # saga anyway. A card answers synchronously (succeeded, or a 402); any
            # delayed-notification method (SEPA, ACH) ends in `processing`: the claim is kept
            # awaiting settlement, never released on it.
            "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
            "confirm": True,
            # No customer is present in an SQS-driven saga to complete 3-D Secure. With
            # off_session, a card that needs authentication fails the confirm with a 402
            # `authentication_required` (PaymentIntent back in requires_payment_method,
            # nothing charged) instead of parking in requires_action.
            "off_session": True,
            # Our customerId is not a Stripe Customer id (Stripe would answer 400 "No such
            # customer"), so it travels as metadata, with what find_charge searches on. The Stripe
            # Customer, when the order names one, goes in `customer` below.
            "metadata": {
                "orderId": order.order_id,
                "attempt": str(attempt),
                "customerId": order.customer_id,
            },
        }
        if order.provider_customer_id is not None:
            params["customer"] = order.provider_customer_id
        try:
            intent = self._client.v1.payment_intents.create(params, {"idempotency_key": idempotency_key})
        except stripe.StripeError as exc:
            raise self._charge_error(exc, order, idempotency_key) from exc
        return self._outcome(intent, order, idempotency_key, replayed=_was_replayed(intent))

    def retrieve_intent(self, payment_intent_id: str) -> IntentReading | None:
        """One PaymentIntent, read by id with this provider's key: :class:`IntentReading`.

        A read, never a write: it cannot charge. Stripe answers 404 ``resource_missing`` for an id
        this account does not have (forged, mistyped, or another account's, Connect included): that
        is None, "not ours". Any other failure (429, 5xx, a timeout, a refused key) says nothing
        about the PaymentIntent and raises :class:`PaymentOutcomeUnknown`: the caller decides
        nothing on it and tries again later.
        """
        if not payment_intent_id.startswith("pi_"):
            return None  # not a PaymentIntent id: nothing to ask
        try:
            # The SDK's raw request: the same GET, key, retries, timeout and typed errors as
            # ``payment_intents.retrieve``, answered as Stripe's JSON rather than a PaymentIntent
            # object, whose nested objects would each import their own module: the webhook
            # consumer's first invocation is this read (bench/cold_start.py).
            response = self._client.raw_request(
                "get", f"/v1/payment_intents/{quote(payment_intent_id, safe='')}"
            )
        except stripe.InvalidRequestError as exc:
            if exc.http_status == 404:
                return None
            raise PaymentOutcomeUnknown(
                f"could not read PaymentIntent {payment_intent_id}: {self._describe(exc)}"
            ) from exc
        except stripe.StripeError as exc:
            raise PaymentOutcomeUnknown(
                f"could not read PaymentIntent {payment_intent_id}: {self._describe(exc)}"
            ) from exc
        intent: dict[str, Any] = response.data
        return reading_of(
            intent["id"],
            intent["status"],
            intent["amount"],
            intent["currency"],
            intent.get("livemode"),
            intent["created"],
            intent.get("metadata") or {},
            failed=intent.get("last_payment_error") is not None,
        )

    def follow(self, order: Order, *, attempt: int, idempotency_key: str, payment_intent_id: str) -> Charge:
        """What the attempt's known PaymentIntent says now, mapped as :meth:`charge` maps an answer.

        The charge step follows a PaymentIntent its claim already records for the attempt (a debit
        awaiting settlement, a charge completed by another writer) instead of creating one: a create
        after Stripe forgot the idempotency key (24 hours) would be a second payment. A read by id
        cannot charge. The PaymentIntent must be this order's and this attempt's (its metadata) and
        of its amount and currency; otherwise nothing is concluded (:class:`PaymentOutcomeUnknown`).

        Returns the :class:`Charge` (``replayed``: the money moved before this call); raises
        :class:`PaymentDeclined` (failed for good), :class:`PaymentProcessing` (still settling) or
        :class:`PaymentOutcomeUnknown` (anything else, a failed read, a PaymentIntent not of this attempt).
        """
        where = f"order {order.order_id} ({idempotency_key})"
        try:
            intent = self._client.v1.payment_intents.retrieve(payment_intent_id)
        except stripe.StripeError as exc:
            raise PaymentOutcomeUnknown(
                f"could not read PaymentIntent {payment_intent_id} of {where}: {self._describe(exc)}"
            ) from exc
        if not _of_attempt(intent, order, attempt):
            raise PaymentOutcomeUnknown(
                f"PaymentIntent {payment_intent_id} recorded for {where} is not of this order and attempt"
            )
        return self._outcome(intent, order, idempotency_key, replayed=True)

    def find_charge(self, order: Order, *, attempt: int, idempotency_key: str) -> Charge | None:
        """The attempt's succeeded charge as the search shows it (see :meth:`search_attempt`).

        A ``None`` here is *not* proof that nothing was charged (the search may lag); releasing a
        claim needs :meth:`list_attempt`.
        """
        return self.search_attempt(order, attempt=attempt, idempotency_key=idempotency_key).charge

    def search_attempt(self, order: Order, *, attempt: int, idempotency_key: str) -> AttemptRecord:
        """What happened to an attempt whose outcome is unknown, from the search, without risking a charge.

        Replaying the create with the same key would answer too, but it would *apply* the charge if
        the first request never landed (or if its key is older than 24 hours), so this searches
        instead, on the metadata every charge carries. Returns the :class:`AttemptRecord`, and raises
        :class:`PaymentOutcomeUnknown` when a PaymentIntent of the attempt is still in flight
        (``processing``, ``requires_action``, ...) or the search itself failed.

        Stripe's search is eventually consistent: a PaymentIntent usually becomes searchable within
        a minute of being created or updated, "up to an hour" behind during incidents, and Stripe's
        current guide gives no bound at all. So a charge found here is proof, but a record without
        one is only a hint: the fast path. Proof that nothing was charged comes from
        :meth:`list_attempt`. ``idempotency_key`` identifies the attempt in error messages; Stripe
        cannot search by it.
        """
        query = (
            f"metadata['orderId']:'{_search_literal(order.order_id)}'"
            f" AND metadata['attempt']:'{_search_literal(str(attempt))}'"
        )
        try:
            result = self._client.v1.payment_intents.search({"query": query, "limit": 100})
            # Search matching is the provider's; check the exact values ourselves too.
            intents = [i for i in result.auto_paging_iter() if _of_attempt(i, order, attempt)]
        except stripe.StripeError as exc:
            raise PaymentOutcomeUnknown(
                f"could not search the provider for order {order.order_id} ({idempotency_key}): "
                f"{self._describe(exc)}"
            ) from exc
        return self._record(intents, order, idempotency_key, source="search")

    def list_attempt(
        self,
        order: Order,
        *,
        attempt: int,
        idempotency_key: str,
        created_from: int,
        created_to: int,
        customer: str | None = None,
        max_pages: int | None = None,
        keep_going: Callable[[], bool] | None = None,
    ) -> AttemptRecord:
        """What happened to an attempt, from ``GET /v1/payment_intents``: the proof search cannot give.

        Stripe's list endpoints are not subject to the search's indexing delay: a PaymentIntent is
        listed as soon as it exists, in its current state. The list cannot filter on metadata, only
        on ``created`` and ``customer``, so this pages (100 a page, newest first) through every
        PaymentIntent created in ``[created_from, created_to]`` (Unix seconds, Stripe's clock: give
        the caller's window a margin for clock skew) -- of the Stripe Customer ``customer`` when one
        is given, of the whole account otherwise -- and keeps those whose ``metadata`` names this
        order and attempt. With ``customer``, what is read is bounded by that customer's own
        PaymentIntents, not the account's volume; it proves "nothing of the attempt" only if every
        request of the attempt was sent with that ``customer`` (the caller's to know).

        Nothing is concluded from a part of the list. :class:`ListTooLong` (a
        :class:`PaymentOutcomeUnknown`) when the window holds more than ``max_pages`` pages;
        :class:`PaymentOutcomeUnknown` when ``keep_going`` (asked before each further page) says
        stop, when a PaymentIntent of the attempt is still in flight, or when a request failed.
        Returns the :class:`AttemptRecord` otherwise.
        """
        if created_from > created_to:
            raise ValueError("created_from must not be after created_to")
        if max_pages is not None and max_pages < 1:
            raise ValueError("max_pages must be at least 1")
        params: PaymentIntentListParams = {
            "created": {"gte": created_from, "lte": created_to},
            "limit": _LIST_PAGE_SIZE,
        }
        if customer is not None:
            params["customer"] = customer
        where = f"order {order.order_id} ({idempotency_key})"
        intents: list[stripe.PaymentIntent] = []
        pages = 0
        try:
            page = self._client.v1.payment_intents.list(params)
            while True:
                pages += 1
                intents += [i for i in page.data if _of_attempt(i, order, attempt)]
                if not page.has_more:
                    break
                if not page.data:  # has_more with nothing to continue from: not a list to trust
                    raise PaymentOutcomeUnknown(f"the list for {where} broke off: has_more and no data")
                if max_pages is not None and pages >= max_pages:
                    raise ListTooLong(
                        f"more than {max_pages} pages ({max_pages * _LIST_PAGE_SIZE} PaymentIntents) were"
                        f" created {'for ' + customer + ' ' if customer else ''}in the attempt's window"
                        f" [{created_from}, {created_to}]; not read further",
                        pages=pages,
                    )
                if keep_going is not None and not keep_going():
                    raise PaymentOutcomeUnknown(
                        f"stopped listing for {where} after {pages} page(s): the time budget ran out"
                    )
                page = self._client.v1.payment_intents.list({**params, "starting_after": page.data[-1].id})
        except stripe.StripeError as exc:
            raise PaymentOutcomeUnknown(
                f"could not list the provider's PaymentIntents for {where}: {self._describe(exc)}"
            ) from exc
        return self._record(intents, order, idempotency_key, source="list")

    def _record(
        self, intents: list[stripe.PaymentIntent], order: Order, key: str, *, source: str
    ) -> AttemptRecord:
        succeeded = sorted((i for i in intents if i.status == "succeeded"), key=lambda i: (i.created, i.id))
        if succeeded:
            # More than one is a double charge: the caller reports the others (it alone can log
            # and count them with the order's id; this module has no logger of its own).
            return AttemptRecord(
                source=source,
                charge=self._charge_from(succeeded[0], order, key, replayed=False),
                extra_charge_ids=tuple(i.id for i in succeeded[1:]),
            )
        pending = [i for i in intents if i.status not in _FAILED_STATUSES]
        if pending:
            raise PaymentOutcomeUnknown(
                f"order {order.order_id} ({key}) has a PaymentIntent still in flight: "
                + ", ".join(f"{i.id} is {i.status}" for i in pending)
            )
        return AttemptRecord(source=source, failed_ids=tuple(sorted(i.id for i in intents)))

    # -- outcome mapping -----------------------------------------------------------------------

    def _outcome(self, intent: stripe.PaymentIntent, order: Order, key: str, *, replayed: bool) -> Charge:
        status = intent.status
        if status == "succeeded":
            return self._charge_from(intent, order, key, replayed=replayed)
        if status in _FAILED_STATUSES:
            # After a confirm, requires_payment_method means the payment failed; a PaymentIntent in
            # it (or canceled) charges nothing unless confirmed again, which only we could do, and a
            # retry of this attempt replays this very answer.
            error = intent.last_payment_error
            decline_code = (error.decline_code or error.code) if error else None
            raise PaymentDeclined(
                f"payment for order {order.order_id} failed: PaymentIntent {intent.id} is {status}"
                + (f" ({decline_code})" if decline_code else ""),
                decline_code=decline_code,
                charge_id=intent.id,
            )
        if status == "requires_action":
            return self._abandon_unauthenticated(intent, order, key)
        if status == "processing":
            # The payment method settles later (a SEPA or ACH debit): it may yet succeed or fail, and
            # the provider says which in a webhook. Not a release, not a retry: a wait on the claim.
            raise PaymentProcessing(
                json.dumps(
                    {
                        "paymentIntentId": intent.id,
                        "status": status,
                        "reason": f"payment for order {order.order_id} ({key}) settles later",
                    },
                    sort_keys=True,
                ),
                payment_intent_id=intent.id,
            )
        # requires_capture: the funds are held; anything else is unexpected. None of these proves
        # nothing will be charged.
        raise PaymentOutcomeUnknown(
            f"payment for order {order.order_id} ({key}) is not final: PaymentIntent {intent.id} is {status}"
        )

    def _abandon_unauthenticated(self, intent: stripe.PaymentIntent, order: Order, key: str) -> Charge:
        """A PaymentIntent waiting for customer authentication that no customer will ever perform.

        It has not charged yet, but it could if it were authenticated later, so it is not released
        on its status alone: it is canceled first, and only a canceled PaymentIntent (which can never
        be confirmed again) counts as proof that nothing will be charged. The cancel carries a key
        derived from the charge's, so a retried step replays it instead of failing on it.
        """
        try:
            status = self._client.v1.payment_intents.cancel(
                intent.id, {"cancellation_reason": "abandoned"}, {"idempotency_key": f"{key}/cancel"}
            ).status
        except stripe.StripeError:
            # Already canceled by an earlier try (a replayed create still says requires_action),
            # or the cancel failed: the PaymentIntent itself says which.
            try:
                current = self._client.v1.payment_intents.retrieve(intent.id)
            except stripe.StripeError as exc:
                raise PaymentOutcomeUnknown(
                    f"payment for order {order.order_id} ({key}) requires authentication and "
                    f"PaymentIntent {intent.id} could not be canceled: {self._describe(exc)}"
                ) from exc
            if current.status == "succeeded":
                return self._charge_from(current, order, key, replayed=False)
            status = current.status
        if status == "canceled":
            raise PaymentDeclined(
                f"payment for order {order.order_id} requires customer authentication; "
                f"PaymentIntent {intent.id} was canceled, nothing was charged",
                decline_code="authentication_required",
                charge_id=intent.id,
            )
        raise PaymentOutcomeUnknown(
            f"payment for order {order.order_id} ({key}) requires authentication and "
            f"PaymentIntent {intent.id} is {status} after the cancel"
        )

    def _charge_from(self, intent: stripe.PaymentIntent, order: Order, key: str, *, replayed: bool) -> Charge:
        # Stripe compares a replayed request's parameters with the first, so this cannot differ;
        # if it ever did, money moved for something else than this order: keep the claim.
        if intent.amount != order.amount or intent.currency.upper() != order.currency:
            raise PaymentOutcomeUnknown(
                f"the provider returned PaymentIntent {intent.id} for {intent.amount} "
                f"{intent.currency.upper()}, but order {order.order_id} ({key}) is for "
                f"{order.amount} {order.currency}"
            )
        return Charge(
            charge_id=intent.id,
            status=intent.status,
            amount=intent.amount,
            currency=intent.currency.upper(),
            replayed=replayed,
        )

    def _charge_error(self, exc: stripe.StripeError, order: Order, key: str) -> Exception:
        where = f"order {order.order_id} ({key})"
        if isinstance(exc, stripe.CardError):
            return self._declined(exc, order, key)
        if isinstance(exc, (stripe.AuthenticationError, stripe.PermissionError)):
            # Rejected before the endpoint runs. Stripe's own message quotes part of the key, so
            # it is not repeated here.
            return ChargeNotAttempted(
                f"the provider rejected our credentials for {where} "
                f"(HTTP {exc.http_status}, request {exc.request_id}); nothing was charged"
            )
        if isinstance(exc, stripe.IdempotencyError):
            return PaymentOutcomeUnknown(
                f"the provider already executed {key} with other parameters, and that request may "
                f"have charged: {self._describe(exc)}"
            )
        if isinstance(exc, stripe.InvalidRequestError) and exc.http_status in (400, 404):
            if _error_payment_intent(exc) is None:
                return ChargeNotAttempted(
                    f"the provider refused the charge request for {where}: {self._describe(exc)}"
                )
            # Something was created before the error: let reconciliation look at it.
            return PaymentOutcomeUnknown(f"the provider failed the charge for {where}: {self._describe(exc)}")
        # APIConnectionError (timeouts, resets), RateLimitError (429), APIError (409, 5xx, bodies
        # that are not Stripe's): the request may have been applied. Retry with the same key.
        return PaymentOutcomeUnknown(
            f"the outcome of the charge for {where} is unknown: {self._describe(exc)}"
        )

    def _declined(self, exc: stripe.CardError, order: Order, key: str) -> Exception:
        error = exc.error
        intent = _error_payment_intent(exc)
        intent_status = intent.status if intent is not None else None
        if (
            error is None
            or error.type != "card_error"
            or (intent_status is not None and intent_status not in _FAILED_STATUSES)
        ):
            # A 402 that is not a plain card decline, or one whose PaymentIntent did not fail.
            return PaymentOutcomeUnknown(
                f"unexpected 402 for order {order.order_id} ({key}), PaymentIntent status "
                f"{intent_status}: {self._describe(exc)}"
            )
        decline_code = error.decline_code or error.code
        return PaymentDeclined(
            f"payment for order {order.order_id} declined ({decline_code}): "
            + self._redact(error.message or ""),
            decline_code=decline_code,
            charge_id=intent.id if intent is not None else None,
        )

    def _describe(self, exc: stripe.StripeError) -> str:
        status = f"HTTP {exc.http_status}" if exc.http_status else "no HTTP response"
        request = f", request {exc.request_id}" if exc.request_id else ""
        return f"{type(exc).__name__} ({status}{request}): {self._redact(exc.user_message or '')}"

    def _redact(self, text: str) -> str:
        return _SECRET_PATTERN.sub("<redacted>", text.replace(self._api_key, "<redacted>"))


def _was_replayed(obj: stripe.StripeObject) -> bool:
    response = obj.last_response
    headers: Mapping[str, str] = response.headers if response is not None else {}
    value = next((v for k, v in headers.items() if k.lower() == "idempotent-replayed"), "")
    return value.lower() == "true"


def _metadata(intent: stripe.PaymentIntent) -> dict[str, Any]:
    # A StripeObject is not a dict (no .get): convert it.
    return intent.metadata.to_dict() if intent.metadata is not None else {}


def _of_attempt(intent: stripe.PaymentIntent, order: Order, attempt: int) -> bool:
    metadata = _metadata(intent)
    return metadata.get("orderId") == order.order_id and metadata.get("attempt") == str(attempt)


def _error_payment_intent(exc: stripe.StripeError) -> stripe.PaymentIntent | None:
    error = exc.error
    intent: Any = error.payment_intent if error is not None else None
    return intent if isinstance(intent, stripe.PaymentIntent) else None


def _search_literal(value: str) -> str:
    # Stripe's search query language quotes strings in single quotes and escapes with a backslash.
    return value.replace("\\", "\\\\").replace("'", "\\'")
