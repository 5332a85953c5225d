"""A local Stripe: the part of the PaymentIntents API the saga uses, with injectable failures.

It speaks Stripe's wire format closely enough that the official ``stripe`` SDK works against it
unchanged (``StripeClient(..., base_addresses={"api": emulator.url})``):

* ``POST /v1/payment_intents`` (form-encoded, bracket notation), ``GET /v1/payment_intents/{id}``,
  ``POST /v1/payment_intents/{id}/cancel``, ``GET /v1/payment_intents/search`` (clauses
  ``metadata['k']:'v'``, ``status:``, ``currency:``, ``customer:``, ``amount``/``created`` with
  ``: > < >= <=``, optional ``-`` negation, joined by ``AND`` or by ``OR``), and the list
  ``GET /v1/payment_intents`` (``created`` as an integer or ``created[gt|gte|lt|lte]``, ``limit``
  1-100, cursors ``starting_after`` / ``ending_before``, newest first, ``has_more``);
* search is eventually consistent, the list is not: with ``search_lag_seconds`` the search sees each
  PaymentIntent as it was that long ago (absent if it was created since, its older status if it
  was updated since), while the list and retrieve always show it as it is;
* Bearer (or Basic) auth with secret (``sk_test_``, ``sk_live_``) and restricted (``rk_test_``,
  ``rk_live_``) keys; a revoked key (:meth:`ProviderEmulator.revoke_key`) or anything else is a
  401 in Stripe's error shape; a restricted key without the permission an endpoint needs
  (:meth:`ProviderEmulator.restrict_key`) is a 403 naming the missing ``rak_`` permission;
* the order Stripe checks a request in: authentication (401), rate limiting (429 ``rate_limit``
  or ``lock_timeout``, injected as faults), the key's permissions (403), parameter validation
  (400), then the idempotency layer, then execution. Nothing answered before the idempotency layer
  is saved under the key, so a retry is judged afresh;
* idempotency as Stripe documents it for API v1: a POST's status and body are saved under
  (API key, ``Idempotency-Key``) once the endpoint has begun executing, declines and the 400s raised
  while executing (a PaymentMethod or Customer that does not exist, an amount below the currency's
  minimum) included, and replayed for 24 hours (on the emulator's clock) with
  ``Idempotent-Replayed: true``; the same key with other parameters or on another endpoint is a
  400 ``idempotency_error``; the same key while the first request is still executing is a 409
  (``idempotency_key_in_use``);
* amounts as Stripe takes them: at most 99,999,999 minor units, at least the currency's documented
  minimum (0.50 USD, 0.30 GBP, 175.00 HUF, ...), a multiple of 10 in the three-decimal currencies
  (BHD, JOD, KWD, OMR, TND) and of 100 in ISK and UGX;
* Stripe's test payment methods: ``pm_card_visa``, ``pm_card_mastercard``... succeed;
  ``pm_card_chargeDeclined``, ``pm_card_visa_chargeDeclinedInsufficientFunds``,
  ``pm_card_chargeDeclinedExpiredCard``... decline with a 402 ``card_error`` carrying the
  PaymentIntent in ``error.payment_intent``; ``pm_card_authenticationRequired`` /
  ``pm_card_threeDSecure2Required`` end in ``requires_action``, or decline with
  ``authentication_required`` when confirmed ``off_session``;
* a confirm without ``payment_method_types`` or ``automatic_payment_methods[allow_redirects]=never``
  needs a ``return_url``, as on an account whose API version enables automatic payment methods by
  default;
* Customers and saved cards: :data:`TEST_CUSTOMER` holds :data:`SAVED_PAYMENT_METHOD` (a card that
  succeeds), :data:`OTHER_TEST_CUSTOMER` holds nothing; any other ``customer`` is a 400 "No such
  customer". As on Stripe, a saved payment method is refused (400 ``invalid_request_error``) unless
  the PaymentIntent names the customer it is attached to.

What it adds for tests: a ledger of every applied charge, ``dedupe=False`` (ignore
``Idempotency-Key`` entirely, to show that the claim alone prevents double charges), latency, and
faults that fire before or after the charge is applied (see :data:`FAULT_KINDS`), targeted at one
order if wanted. Everything is reachable in Python and over HTTP under ``/_emulator/``.

Run it alone with ``python -m saga_local.provider_emulator --port 12111``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import copy
import json
import logging
import random
import re
import signal
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any, ClassVar, Literal, get_args
from urllib.parse import parse_qs, parse_qsl, urlsplit

logger = logging.getLogger(__name__)

#: Stripe keeps an idempotency key at least this long; the emulator forgets it exactly then.
IDEMPOTENCY_TTL_SECONDS = 24 * 60 * 60
#: Secret and restricted keys, test and live mode (the emulator has no live mode: both behave alike).
API_KEY_PREFIXES = ("sk_test_", "sk_live_", "rk_test_", "rk_live_")
API_KEY_PREFIX = API_KEY_PREFIXES[0]
#: What a restricted key may do with PaymentIntents (Stripe's dashboard: None, Read, Write).
Permission = Literal["none", "read", "write"]
#: The version stripe==16.1.0 pins; the emulator behaves like it when a request names none.
STRIPE_VERSION = "2026-10-28.endive"
#: From this version on, ``payment_method_types`` is no longer a create parameter.
_PAYMENT_METHOD_TYPES_REMOVED = "2026-09-30"
MAX_AMOUNT = 99_999_999
#: Stripe's documented minimum charge amounts, in minor units (https://docs.stripe.com/currencies,
#: "Minimum and maximum charge amounts"). Other currencies: the equivalent of 0.50 USD in the
#: settlement currency, which the emulator cannot convert; it enforces only these.
MINIMUM_AMOUNTS: Mapping[str, int] = {
    "usd": 50, "aed": 200, "aud": 50, "bgn": 100, "brl": 50, "cad": 50, "chf": 50, "czk": 1500,
    "dkk": 250, "eur": 50, "gbp": 30, "hkd": 400, "huf": 17500, "inr": 50, "jpy": 50, "mxn": 1000,
    "myr": 200, "nok": 300, "nzd": 50, "pln": 200, "ron": 200, "sek": 300, "sgd": 50, "thb": 1000,
}  # fmt: skip
#: Three-decimal currencies: Stripe takes them in thousandths whose last digit must be 0.
THREE_DECIMAL_CURRENCIES = frozenset({"bhd", "jod", "kwd", "omr", "tnd"})
#: Two-decimal on the wire, but only whole units may be charged (the decimals must be 00).
WHOLE_UNIT_CURRENCIES = frozenset({"isk", "ugx"})

FaultKind = Literal[
    "fail_before_apply",
    "fail_after_apply",
    "fail_after_apply_replayed",
    "reset_after_apply",
    "timeout_after_apply",
    "rate_limit",
    "lock_timeout",
]
#: * ``fail_before_apply``: a 500 before the endpoint runs (an edge failure): nothing applied or
#:   saved, so a retry with the same key is applied normally;
#: * ``fail_after_apply``: the request is applied and its real result saved under the key, then the
#:   client gets a 500 (the response was lost on the way back): a retry replays the real result;
#: * ``fail_after_apply_replayed``: applied, and the 500 itself is what is saved under the key, as
#:   Stripe documents for its own 500s: every retry with the key replays the 500 for 24 hours;
#: * ``reset_after_apply``: applied and saved, then the connection is reset without a response;
#: * ``timeout_after_apply``: applied and saved, then the connection is held open without a response
#:   (``seconds``, default :attr:`ProviderEmulator.hang_seconds`) and finally reset;
#: * ``rate_limit``: a 429 ``rate_limit`` (too many requests) before the idempotency layer: nothing
#:   applied or saved, a retry with the same key is applied normally;
#: * ``lock_timeout``: a 429 ``lock_timeout`` (another request holds the object's lock), also
#:   answered before the idempotency layer and not saved.
FAULT_KINDS: frozenset[str] = frozenset(get_args(FaultKind))
#: Faults answered before the idempotency layer (and never saved under a key).
_EDGE_FAULTS = frozenset({"rate_limit", "lock_timeout"})
Endpoint = Literal["create", "retrieve", "search", "cancel", "list"]
ENDPOINTS: frozenset[str] = frozenset(get_args(Endpoint))
#: Outcomes a test can force on the next confirm (no Stripe test card produces them here).
FORCEABLE_STATUSES = frozenset({"processing", "requires_action"})

_SUCCEEDING_METHODS = frozenset(
    {
        "pm_card_visa",
        "pm_card_visa_debit",
        "pm_card_mastercard",
        "pm_card_mastercard_debit",
        "pm_card_mastercard_prepaid",
        "pm_card_amex",
        "pm_card_discover",
        "pm_card_diners",
        "pm_card_jcb",
        "pm_card_unionpay",
    }
)
#: Country test cards: pm_card_br, pm_card_us, ...
_COUNTRY_METHOD = re.compile(r"^pm_card_[a-z]{2}$")
#: Stripe has no built-in test Customers, so the emulator has its own: one with a saved card, one
#: with none. Names say where they come from; they exist on no Stripe account.
TEST_CUSTOMER = "cus_emulatorSavedCards"
OTHER_TEST_CUSTOMER = "cus_emulatorNoCards"
#: A card saved (attached) to TEST_CUSTOMER; it succeeds like pm_card_visa when used with it.
SAVED_PAYMENT_METHOD = "pm_emulatorSavedVisa"
#: saved payment method -> the Customer it is attached to
_SAVED_METHODS: Mapping[str, str] = {SAVED_PAYMENT_METHOD: TEST_CUSTOMER}
_CUSTOMERS = frozenset({TEST_CUSTOMER, OTHER_TEST_CUSTOMER})
_DECLINED = "Your card was declined."
#: payment method -> (error code, decline code, message), as Stripe's test payment methods decline.
_DECLINING_METHODS: dict[str, tuple[str, str, str]] = {}
for _suffix, _outcome in {
    "chargeDeclined": ("card_declined", "generic_decline", _DECLINED),
    "chargeDeclinedInsufficientFunds": (
        "card_declined",
        "insufficient_funds",
        "Your card has insufficient funds.",
    ),
    "chargeDeclinedLostCard": ("card_declined", "lost_card", _DECLINED),
    "chargeDeclinedStolenCard": ("card_declined", "stolen_card", _DECLINED),
    "chargeDeclinedFraudulent": ("card_declined", "fraudulent", _DECLINED),
    "chargeDeclinedVelocityLimitExceeded": ("card_declined", "card_velocity_exceeded", _DECLINED),
    "chargeDeclinedExpiredCard": ("expired_card", "expired_card", "Your card has expired."),
    "chargeDeclinedIncorrectCvc": (
        "incorrect_cvc",
        "incorrect_cvc",
        "Your card's security code is incorrect.",
    ),
    "chargeDeclinedProcessingError": (
        "processing_error",
        "processing_error",
        "An error occurred while processing your card. Try again in a little bit.",
    ),
}.items():
    _DECLINING_METHODS[f"pm_card_{_suffix}"] = _outcome
    _DECLINING_METHODS[f"pm_card_visa_{_suffix}"] = _outcome
_AUTHENTICATING_METHODS = frozenset(
    {"pm_card_authenticationRequired", "pm_card_threeDSecure2Required", "pm_card_threeDSecureRequired"}
)
_CANCELABLE = frozenset(
    {"requires_payment_method", "requires_capture", "requires_confirmation", "requires_action", "processing"}
)
_CANCELLATION_REASONS = frozenset({"duplicate", "fraudulent", "requested_by_customer", "abandoned"})
_CREATE_PARAMS = frozenset(
    {
        "amount",
        "currency",
        "payment_method",
        "payment_method_types",
        "allowed_payment_method_types",
        "excluded_payment_method_types",
        "automatic_payment_methods",
        "error_on_requires_action",
        "confirm",
        "off_session",
        "metadata",
        "return_url",
        "description",
        "customer",
        "capture_method",
        "confirmation_method",
        "receipt_email",
        "statement_descriptor",
        "statement_descriptor_suffix",
        "setup_future_usage",
        "payment_method_options",
        "expand",
    }
)


@dataclass(frozen=True)
class LedgerEntry:
    """One charge the emulator applied (a PaymentIntent that reached ``succeeded``)."""

    charge_id: str
    order_id: str | None
    attempt: str | None
    amount: int
    currency: str
    idempotency_key: str | None
    time: float
    payment_method: str
    customer_id: str | None

    def to_json(self) -> dict[str, Any]:
        """The entry as ``/_emulator/charges`` shows it."""
        return {
            "chargeId": self.charge_id,
            "orderId": self.order_id,
            "attempt": self.attempt,
            "amount": self.amount,
            "currency": self.currency,
            "idempotencyKey": self.idempotency_key,
            "time": self.time,
            "paymentMethod": self.payment_method,
            "customerId": self.customer_id,
        }


@dataclass
class ProviderFault:
    """Fire ``kind`` on the next ``times`` requests to ``endpoint`` (for ``order_id`` only, if set).

    The order of a request is its ``metadata[orderId]`` (create), its PaymentIntent's (retrieve,
    cancel) or the ``metadata['orderId']`` clause of its query (search).
    """

    kind: FaultKind
    order_id: str | None = None
    endpoint: Endpoint = "create"
    times: int = 1
    seconds: float | None = None
    fired: int = 0


@dataclass(frozen=True)
class FailureRate:
    """Fire ``kind`` on each matching request with probability ``probability``."""

    kind: FaultKind
    probability: float
    order_id: str | None = None
    endpoint: Endpoint = "create"
    seconds: float | None = None


@dataclass
class _ForcedOutcome:
    status: str
    order_id: str | None
    times: int


@dataclass
class _Saved:
    """An idempotent result: what a retry with the same key gets back."""

    path: str
    params: dict[str, Any]
    status: int
    body: dict[str, Any]
    request_id: str
    created: float


@dataclass
class _Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    #: respond normally, reset the connection, or hold it open and then reset it.
    action: Literal["respond", "reset", "hang"] = "respond"
    hang_seconds: float = 0.0
    #: Whether the result may be saved under the request's idempotency key.
    saved: bool = True


class _BadRequest(Exception):
    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class ProviderEmulator:
    """A threaded HTTP server on ``host:port`` (port 0: an ephemeral port) speaking Stripe's API subset.

    ``dedupe=False`` ignores ``Idempotency-Key`` altogether (every request is applied).
    ``clock`` (seconds since the epoch) drives ``created`` and the 24-hour idempotency window;
    :meth:`advance_clock` moves it on. ``latency`` delays every API request before it is applied.
    ``search_lag_seconds`` models the eventual consistency of Stripe's search: the search sees every
    PaymentIntent as it was that long ago (not at all if it was created since, in its earlier status
    if it was updated since); any lag is accepted, hours included (Stripe gives no bound during
    incidents). The list, retrieve and the ledger are never behind. ``hang_seconds`` is how long
    ``timeout_after_apply`` holds a connection (``stop()`` cuts it short). ``seed`` makes failure
    rates reproducible.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        dedupe: bool = True,
        clock: Callable[[], float] = time.time,
        latency: float = 0.0,
        search_lag_seconds: float = 0.0,
        hang_seconds: float = 30.0,
        seed: int | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.dedupe = dedupe
        self.latency = latency
        self.search_lag_seconds = search_lag_seconds
        self.hang_seconds = hang_seconds
        self._clock = clock
        self._clock_offset = 0.0
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        #: Restricted keys' PaymentIntents permission (an ``rk_`` key not listed may write).
        self._key_permissions: dict[str, Permission] = {}
        self._revoked: set[str] = set()
        self._reset_state()

    def _reset_state(self) -> None:
        self._intents: dict[str, dict[str, Any]] = {}
        self._intent_info: dict[str, dict[str, Any]] = {}
        #: Every state each PaymentIntent was in, with the time it took it: what search lags behind.
        self._versions: dict[str, list[tuple[float, dict[str, Any]]]] = {}
        self._ledger: list[LedgerEntry] = []
        self._saved: dict[tuple[str, str], _Saved] = {}
        self._in_flight: set[tuple[str, str]] = set()
        self._faults: list[ProviderFault] = []
        self._rates: list[FailureRate] = []
        self._forced: list[_ForcedOutcome] = []
        self._requests: dict[str, int] = dict.fromkeys(sorted(ENDPOINTS), 0)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ProviderEmulator:
        """Bind and serve in a background thread. Returns self, so ``ProviderEmulator().start()`` works."""
        if self._server is not None:
            raise RuntimeError("the provider emulator is already running")
        self._stopping.clear()
        handler = type("_BoundHandler", (_Handler,), {"emulator": self})
        self._server = _Server((self.host, self.port), handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"provider-emulator:{self._server.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut open connections (and hung requests) and release the port."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ProviderEmulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL to give the SDK, e.g. ``http://127.0.0.1:54321``."""
        if self._server is None:
            raise RuntimeError("the provider emulator is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- test controls -----------------------------------------------------------------------

    def now(self) -> float:
        """The emulator's clock: ``clock()`` plus whatever :meth:`advance_clock` added."""
        return self._clock() + self._clock_offset

    def advance_clock(self, seconds: float) -> float:
        """Move the emulator's clock on (idempotency keys expire, searches catch up). Returns ``now()``."""
        with self._lock:
            self._clock_offset += seconds
        return self.now()

    def charges(self) -> list[LedgerEntry]:
        """Every charge applied so far, oldest first."""
        with self._lock:
            return list(self._ledger)

    def charges_for(self, order_id: str) -> list[LedgerEntry]:
        """The charges applied for one order (by ``metadata[orderId]``)."""
        return [entry for entry in self.charges() if entry.order_id == order_id]

    def payment_intent(self, intent_id: str) -> dict[str, Any] | None:
        """A PaymentIntent as the API would return it, or None."""
        with self._lock:
            intent = self._intents.get(intent_id)
            return copy.deepcopy(intent) if intent is not None else None

    def payment_intents(self, order_id: str | None = None) -> list[dict[str, Any]]:
        """Every PaymentIntent (of ``order_id``, if set), oldest first, as the API would return them."""
        with self._lock:
            return [
                copy.deepcopy(intent)
                for intent in self._intents.values()
                if order_id is None or intent["metadata"].get("orderId") == order_id
            ]

    def request_count(self, endpoint: Endpoint) -> int:
        """How many authenticated requests reached ``endpoint`` (replays and 409s excluded)."""
        with self._lock:
            return self._requests[endpoint]

    def restrict_key(self, api_key: str, *, payment_intents: Permission) -> None:
        """Give the restricted key ``api_key`` (``rk_...``) this permission on PaymentIntents.

        ``write`` allows every endpoint, ``read`` retrieve, search and list only, ``none`` nothing:
        a request the key may not make is a 403, answered before parameters are validated or the
        idempotency key is looked at (nothing is applied or saved). A restricted key never
        configured here may write.
        """
        if not api_key.startswith(("rk_test_", "rk_live_")):
            raise ValueError("only a restricted key (rk_test_... or rk_live_...) has permissions")
        if payment_intents not in get_args(Permission):
            raise ValueError(f"payment_intents must be one of {get_args(Permission)}")
        with self._lock:
            self._key_permissions[api_key] = payment_intents

    def revoke_key(self, api_key: str) -> None:
        """Make ``api_key`` invalid from now on (a rolled or deleted key): every request is a 401."""
        with self._lock:
            self._revoked.add(api_key)

    def reset(self) -> None:
        """Forget every PaymentIntent, charge, idempotency key, fault and forced outcome.

        Settings (``dedupe``, ``latency``, ``search_lag_seconds``, key permissions and revoked keys)
        and the clock are kept.
        """
        with self._lock:
            self._reset_state()

    def inject(
        self,
        kind: FaultKind,
        *,
        order_id: str | None = None,
        endpoint: Endpoint = "create",
        times: int = 1,
        seconds: float | None = None,
    ) -> ProviderFault:
        """Queue a fault for the next ``times`` matching requests. See :data:`FAULT_KINDS`."""
        fault = ProviderFault(
            kind=_check_kind(kind),
            order_id=order_id,
            endpoint=_check_endpoint(endpoint),
            times=times,
            seconds=seconds,
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def set_failure_rate(
        self,
        kind: FaultKind,
        probability: float,
        *,
        order_id: str | None = None,
        endpoint: Endpoint = "create",
        seconds: float | None = None,
    ) -> FailureRate:
        """Fire ``kind`` on each matching request with ``probability`` (0 removes the rule)."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError("probability must be between 0 and 1")
        rate = FailureRate(_check_kind(kind), probability, order_id, _check_endpoint(endpoint), seconds)
        with self._lock:
            self._rates = [
                r for r in self._rates if (r.kind, r.order_id, r.endpoint) != (kind, order_id, endpoint)
            ]
            if probability > 0:
                self._rates.append(rate)
        return rate

    def clear_faults(self) -> None:
        """Drop every queued fault, failure rate and forced outcome."""
        with self._lock:
            self._faults.clear()
            self._rates.clear()
            self._forced.clear()

    def force_outcome(self, status: str, *, order_id: str | None = None, times: int = 1) -> None:
        """Make the next ``times`` confirms (of ``order_id``, if set) end in ``status`` instead.

        ``processing`` stands for a payment that settles later; ``requires_action`` for a
        confirmation that needs the customer (see :meth:`set_status` to settle either).
        """
        if status not in FORCEABLE_STATUSES:
            raise ValueError(f"status must be one of {sorted(FORCEABLE_STATUSES)}")
        with self._lock:
            self._forced.append(_ForcedOutcome(status, order_id, times))

    def set_status(self, intent_id: str, status: str) -> dict[str, Any]:
        """Move a PaymentIntent on, as Stripe does when a payment settles (``succeeded`` records a charge)."""
        if status not in {"succeeded", "requires_payment_method", "canceled", "processing"}:
            raise ValueError(f"cannot move a PaymentIntent to {status!r}")
        with self._lock:
            intent = self._intents.get(intent_id)
            if intent is None:
                raise KeyError(intent_id)
            self._transition(intent, status)
            self._publish(intent)
            return copy.deepcopy(intent)

    # -- request handling --------------------------------------------------------------------

    def _dispatch(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> _Reply:
        split = urlsplit(target)
        if split.path.startswith("/_emulator/"):
            return self._admin(method, split.path, split.query, body)
        request_id = _new_id("req_", 14)
        version = headers.get("Stripe-Version") or STRIPE_VERSION
        reply = self._api(method, split.path, split.query, headers, body, request_id, version)
        reply.headers.setdefault("Request-Id", request_id)
        reply.headers.setdefault("Stripe-Version", version)
        return reply

    def _api(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        body: bytes,
        request_id: str,
        version: str,
    ) -> _Reply:
        api_key = _authenticate(headers.get("Authorization"))
        if isinstance(api_key, _Reply):
            return api_key
        with self._lock:
            revoked = api_key in self._revoked
        if revoked:
            return _error(401, f"Expired API Key provided: {_mask_key(api_key)}")
        route = _route(method, path)
        if route is None:
            return _error(
                404,
                f"Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs or we can "
                "help at https://support.stripe.com/.",
            )
        endpoint, intent_id = route
        try:
            params = _decode_form(body if method == "POST" else query.encode())
        except _BadRequest as exc:
            return _error(400, exc.message, param=exc.param, code=exc.code)
        header_key = headers.get("Idempotency-Key") if method == "POST" else None
        echo = {"Idempotency-Key": header_key} if header_key else {}
        # Before the idempotency layer: nothing answered here is saved under the key.
        edge = self._take_fault(endpoint, params, intent_id, edge=True)
        if edge is not None:
            return _too_many_requests(edge.kind, echo)
        denied = self._permission_denied(api_key, endpoint)
        if denied is not None:
            return denied
        try:
            checked = self._validate(endpoint, params, version)
        except _BadRequest as exc:
            return _error(400, exc.message, param=exc.param, code=exc.code, headers=echo)

        slot = (api_key, header_key) if header_key and self.dedupe else None
        if slot is not None:
            if len(slot[1]) > 255:
                return _error(400, "Idempotency keys can be up to 255 characters long.", headers=echo)
            with self._lock:
                saved = self._saved.get(slot)
                if saved is not None and self.now() - saved.created >= IDEMPOTENCY_TTL_SECONDS:
                    del self._saved[slot]
                    saved = None
                if saved is not None:
                    if saved.path != path or saved.params != params:
                        return _error(
                            400,
                            "Keys for idempotent requests can only be used with the same parameters they "
                            f"were first used with. Try using a key other than '{slot[1]}' if you meant to "
                            "execute a different request.",
                            type_="idempotency_error",
                            headers=echo,
                        )
                    return _Reply(
                        saved.status,
                        copy.deepcopy(saved.body),
                        {**echo, "Idempotent-Replayed": "true", "Original-Request": saved.request_id},
                    )
                if slot in self._in_flight:
                    return _error(
                        409,
                        "There is currently another in-progress request using this Idempotent Key (that "
                        "probably means you submitted twice, and the other request is still going through): "
                        f"{slot[1]}. Please try again later.",
                        type_="idempotency_error",
                        code="idempotency_key_in_use",
                        headers=echo,
                    )
                self._in_flight.add(slot)
        try:
            with self._lock:
                self._requests[endpoint] += 1
            if self.latency > 0:
                self._stopping.wait(self.latency)
            fault = self._take_fault(endpoint, params, intent_id, edge=False)
            if fault is not None and fault.kind == "fail_before_apply":
                return _server_error(echo)
            reply = self._execute(endpoint, intent_id, params, checked, header_key, request_id)
            reply.headers.update(echo)
            if slot is not None and reply.saved:
                kept = (
                    _server_error(echo)
                    if fault is not None and fault.kind == "fail_after_apply_replayed"
                    else reply
                )
                with self._lock:
                    self._saved[slot] = _Saved(
                        path, params, kept.status, copy.deepcopy(kept.body), request_id, self.now()
                    )
            if fault is None:
                return reply
            if fault.kind in ("fail_after_apply", "fail_after_apply_replayed"):
                return _server_error(echo)
            if fault.kind == "reset_after_apply":
                return _Reply(0, {}, action="reset")
            return _Reply(
                0,
                {},
                action="hang",
                hang_seconds=fault.seconds if fault.seconds is not None else self.hang_seconds,
            )
        finally:
            if slot is not None:
                with self._lock:
                    self._in_flight.discard(slot)

    def _permission_denied(self, api_key: str, endpoint: str) -> _Reply | None:
        """The 403 Stripe answers a restricted key that lacks the endpoint's permission, if it does."""
        if not api_key.startswith("rk_"):
            return None
        with self._lock:
            granted = self._key_permissions.get(api_key, "write")
        needed: Permission = "write" if endpoint in ("create", "cancel") else "read"
        if granted == "write" or granted == needed:
            return None
        return _error(
            403,
            f"The provided key '{_mask_key(api_key)}' does not have the required permissions for this "
            f"endpoint on account 'acct_emulator'. Having the 'rak_payment_intent_{needed}' permission "
            "would allow this request to continue.",
        )

    def _validate(self, endpoint: str, params: dict[str, Any], version: str) -> dict[str, Any]:
        """Parameter validation, before the idempotency layer: what it refuses is never saved."""
        if endpoint == "create":
            return _validate_create(params, version)
        if endpoint == "cancel":
            unknown = sorted(set(params) - {"cancellation_reason", "expand"})
            if unknown:
                raise _BadRequest(
                    f"Received unknown parameter: {unknown[0]}", param=unknown[0], code="parameter_unknown"
                )
            reason = params.get("cancellation_reason")
            if reason is not None and reason not in _CANCELLATION_REASONS:
                raise _BadRequest(f"Invalid cancellation_reason: {reason}", param="cancellation_reason")
        return params

    def _execute(
        self,
        endpoint: str,
        intent_id: str | None,
        params: dict[str, Any],
        checked: dict[str, Any],
        key: str | None,
        request_id: str,
    ) -> _Reply:
        try:
            if endpoint == "create":
                return self._create(checked, params, key, request_id)
            if endpoint == "search":
                return self._search(params)
            if endpoint == "list":
                return self._list(params)
            assert intent_id is not None
            with self._lock:
                intent = self._intents.get(intent_id)
                if intent is None:
                    return _error(
                        404, f"No such payment_intent: '{intent_id}'", param="intent", code="resource_missing"
                    )
                if endpoint == "retrieve":
                    return _Reply(200, copy.deepcopy(intent))
                return self._cancel(intent, params)
        except _BadRequest as exc:
            # Raised while executing (an object that does not exist, an amount the currency does not
            # allow): the endpoint had begun, so Stripe saves this 400 under the key and replays it.
            return _error(400, exc.message, param=exc.param, code=exc.code)

    def _create(
        self, checked: dict[str, Any], params: dict[str, Any], key: str | None, request_id: str
    ) -> _Reply:
        amount: int = checked["amount"]
        currency: str = checked["currency"]
        confirm: bool = checked["confirm"]
        off_session_set: bool = checked["off_session_set"]
        metadata: dict[str, str] = checked["metadata"]
        types_param: str | None = checked["types_param"]
        types: Any = checked["types"]
        automatic: Any = checked["automatic"]
        error_on_requires_action: bool = checked["error_on_requires_action"]
        method: str | None = checked["method"]
        minimum = MINIMUM_AMOUNTS.get(currency, 1)
        if amount < minimum:
            raise _BadRequest(
                f"Amount must be at least {minimum} minor units of {currency} (Stripe's minimum charge"
                " amount for the currency).",
                param="amount",
                code="amount_too_small",
            )
        customer = params.get("customer")
        if customer is not None and (not isinstance(customer, str) or customer not in _CUSTOMERS):
            raise _BadRequest(f"No such customer: '{customer}'", param="customer", code="resource_missing")
        _check_saved_method(method, customer)
        if method and not _known_method(method):
            raise _BadRequest(
                f"No such PaymentMethod: '{method}'", param="payment_method", code="resource_missing"
            )
        if method and isinstance(types, list) and "card" not in types:
            raise _BadRequest(
                "The PaymentMethod provided (card) is not allowed for this PaymentIntent. Please attach a "
                f"PaymentMethod of one of the following types: {', '.join(types)}.",
                param="payment_method",
                code="payment_intent_incompatible_payment_method",
            )

        now = self.now()
        intent_id = _new_id("pi_3", 24)
        intent: dict[str, Any] = {
            "id": intent_id,
            "object": "payment_intent",
            "amount": amount,
            "amount_capturable": 0,
            "amount_details": {"tip": {}},
            "amount_received": 0,
            "application": None,
            "application_fee_amount": None,
            "automatic_payment_methods": (
                {"enabled": True, "allow_redirects": automatic.get("allow_redirects", "always")}
                if isinstance(automatic, dict) and automatic.get("enabled") == "true"
                else None
            ),
            "canceled_at": None,
            "cancellation_reason": None,
            "capture_method": params.get("capture_method", "automatic_async"),
            "client_secret": f"{intent_id}_secret_{_new_id('', 25)}",
            "confirmation_method": params.get("confirmation_method", "automatic"),
            "created": int(now),
            "currency": currency,
            "customer": customer,
            "description": params.get("description"),
            "last_payment_error": None,
            "latest_charge": None,
            "livemode": False,
            "metadata": dict(metadata),
            "next_action": None,
            "on_behalf_of": None,
            "payment_method": _new_id("pm_1", 24) if method else None,
            "payment_method_configuration_details": None,
            "payment_method_options": {"card": {"request_three_d_secure": "automatic"}},
            "payment_method_types": ["card"],
            "allowed_payment_method_types": types if types_param == "allowed_payment_method_types" else None,
            "excluded_payment_method_types": None,
            "processing": None,
            "receipt_email": params.get("receipt_email"),
            "review": None,
            "setup_future_usage": params.get("setup_future_usage"),
            "shipping": None,
            "source": None,
            "statement_descriptor": params.get("statement_descriptor"),
            "statement_descriptor_suffix": params.get("statement_descriptor_suffix"),
            "status": "requires_confirmation" if method else "requires_payment_method",
            "transfer_data": None,
            "transfer_group": None,
        }
        decline: tuple[str, str, str] | None = None
        with self._lock:
            self._intents[intent_id] = intent
            self._intent_info[intent_id] = {
                "payment_method": method,
                "idempotency_key": key,
                "request_id": request_id,
            }
            if confirm:
                assert method is not None
                forced = self._take_forced(metadata.get("orderId"))
                if forced == "processing":
                    self._transition(intent, "processing")
                elif forced == "requires_action" or (
                    method in _AUTHENTICATING_METHODS and not off_session_set and not error_on_requires_action
                ):
                    self._transition(intent, "requires_action")
                elif method in _AUTHENTICATING_METHODS:
                    decline = (
                        "authentication_required",
                        "authentication_required",
                        "Your card was declined. This transaction requires authentication.",
                    )
                elif method in _DECLINING_METHODS:
                    decline = _DECLINING_METHODS[method]
                else:
                    self._transition(intent, "succeeded")
            if decline is None:
                self._publish(intent)
                return _Reply(200, copy.deepcopy(intent))
            code, decline_code, message = decline
            charge_id = _new_id("ch_3", 24)
            error = {
                "charge": charge_id,
                "code": code,
                "decline_code": decline_code,
                "doc_url": f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}",
                "message": message,
                "payment_method": _payment_method_object(intent["payment_method"], method or ""),
                "type": "card_error",
            }
            intent.update(
                status="requires_payment_method",
                last_payment_error=copy.deepcopy(error),
                latest_charge=charge_id,
                payment_method=None,
            )
            self._publish(intent)
            return _Reply(
                402,
                {
                    "error": {
                        **error,
                        "payment_intent": copy.deepcopy(intent),
                        "request_log_url": f"https://dashboard.stripe.com/test/logs/{request_id}",
                    }
                },
            )

    def _cancel(self, intent: dict[str, Any], params: dict[str, Any]) -> _Reply:
        # Called with the lock held.
        unknown = sorted(set(params) - {"cancellation_reason", "expand"})
        if unknown:
            raise _BadRequest(
                f"Received unknown parameter: {unknown[0]}", param=unknown[0], code="parameter_unknown"
            )
        reason = params.get("cancellation_reason")
        if reason is not None and reason not in _CANCELLATION_REASONS:
            raise _BadRequest(f"Invalid cancellation_reason: {reason}", param="cancellation_reason")
        if intent["status"] not in _CANCELABLE:
            return _error(
                400,
                f"You cannot cancel this PaymentIntent because it has a status of {intent['status']}. Only a "
                "PaymentIntent with one of the following statuses may be canceled: "
                f"{', '.join(sorted(_CANCELABLE))}.",
                code="payment_intent_unexpected_state",
                extra={"payment_intent": copy.deepcopy(intent)},
            )
        self._transition(intent, "canceled")
        intent["cancellation_reason"] = reason
        self._publish(intent)
        return _Reply(200, copy.deepcopy(intent))

    def _search(self, params: dict[str, Any]) -> _Reply:
        query = params.get("query")
        if not isinstance(query, str) or not query.strip():
            raise _BadRequest("Missing required param: query.", param="query", code="parameter_missing")
        clauses = _parse_query(query)
        limit = _integer(params, "limit", default=10)
        if not 1 <= limit <= 100:
            raise _BadRequest("Limit must be between 1 and 100.", param="limit")
        offset = _page_offset(params.get("page"))
        # The search index is search_lag_seconds behind: it holds each PaymentIntent as it was then.
        horizon = self.now() - self.search_lag_seconds
        with self._lock:
            indexed = [self._indexed(intent_id, horizon) for intent_id in self._intents]
            found = [
                copy.deepcopy(intent)
                for intent in indexed
                if intent is not None and _matches(intent, clauses)
            ]
        # Newest first, like Stripe's search results.
        found.reverse()
        page = found[offset : offset + limit]
        has_more = offset + limit < len(found)
        return _Reply(
            200,
            {
                "object": "search_result",
                "data": page,
                "has_more": has_more,
                "next_page": _page_token(offset + limit) if has_more else None,
                "url": "/v1/payment_intents/search",
            },
        )

    def _list(self, params: dict[str, Any]) -> _Reply:
        """``GET /v1/payment_intents``: every PaymentIntent as it is now (never behind), newest first."""
        unknown = sorted(
            set(params) - {"created", "customer", "limit", "starting_after", "ending_before", "expand"}
        )
        if unknown:
            raise _BadRequest(
                f"Received unknown parameter: {unknown[0]}", param=unknown[0], code="parameter_unknown"
            )
        limit = _integer(params, "limit", default=10)
        if not 1 <= limit <= 100:
            raise _BadRequest("Limit must be between 1 and 100.", param="limit")
        created = _created_filter(params.get("created"))
        customer = params.get("customer")
        after, before = params.get("starting_after"), params.get("ending_before")
        if after is not None and before is not None:
            raise _BadRequest("You may only specify one of these parameters: starting_after, ending_before.")
        with self._lock:
            ordered = sorted(
                (
                    (intent["created"], position, intent)
                    for position, intent in enumerate(self._intents.values())
                ),
                key=lambda entry: (entry[0], entry[1]),
                reverse=True,
            )
            for cursor, name in ((after, "starting_after"), (before, "ending_before")):
                if cursor is not None and cursor not in self._intents:
                    raise _BadRequest(
                        f"No such payment_intent: '{cursor}'", param=name, code="resource_missing"
                    )
            matching = [
                intent
                for created_at, _, intent in ordered
                if created(created_at) and (customer is None or intent.get("customer") == customer)
            ]
            ids = [intent["id"] for intent in matching]
            if after is not None:
                start = ids.index(after) + 1 if after in ids else _first_older(matching, self._intents[after])
                page, has_more = matching[start : start + limit], start + limit < len(matching)
            elif before is not None:
                end = ids.index(before) if before in ids else _first_older(matching, self._intents[before])
                page, has_more = matching[max(0, end - limit) : end], end - limit > 0
            else:
                page, has_more = matching[:limit], limit < len(matching)
            data = copy.deepcopy(page)
        return _Reply(
            200, {"object": "list", "data": data, "has_more": has_more, "url": "/v1/payment_intents"}
        )

    def _publish(self, intent: dict[str, Any]) -> None:
        # Called with the lock held: record the state the search index will catch up with.
        self._versions.setdefault(intent["id"], []).append((self.now(), copy.deepcopy(intent)))

    def _indexed(self, intent_id: str, horizon: float) -> dict[str, Any] | None:
        # Called with the lock held: the latest state published at or before ``horizon``.
        found = None
        for published, state in self._versions.get(intent_id, []):
            if published > horizon:
                break
            found = state
        return found

    def _transition(self, intent: dict[str, Any], status: str) -> None:
        # Called with the lock held.
        intent["status"] = status
        intent["next_action"] = None
        if status == "succeeded":
            intent["amount_received"] = intent["amount"]
            intent["latest_charge"] = intent["latest_charge"] or _new_id("ch_3", 24)
            info = self._intent_info[intent["id"]]
            metadata = intent["metadata"]
            self._ledger.append(
                LedgerEntry(
                    charge_id=intent["id"],
                    order_id=metadata.get("orderId"),
                    attempt=metadata.get("attempt"),
                    amount=intent["amount"],
                    currency=intent["currency"].upper(),
                    idempotency_key=info["idempotency_key"],
                    time=self.now(),
                    payment_method=info["payment_method"],
                    customer_id=metadata.get("customerId"),
                )
            )
        elif status == "requires_action":
            intent["next_action"] = {
                "type": "use_stripe_sdk",
                "use_stripe_sdk": {
                    "type": "three_d_secure_redirect",
                    "stripe_js": "https://hooks.stripe.com/3d_secure",
                },
            }
        elif status == "canceled":
            intent["canceled_at"] = int(self.now())
        elif status == "processing":
            intent["processing"] = {"type": "card", "card": {}}

    def _take_forced(self, order_id: str | None) -> str | None:
        # Called with the lock held.
        for forced in self._forced:
            if forced.order_id is None or forced.order_id == order_id:
                forced.times -= 1
                if forced.times <= 0:
                    self._forced.remove(forced)
                return forced.status
        return None

    def _take_fault(
        self, endpoint: str, params: dict[str, Any], intent_id: str | None, *, edge: bool
    ) -> ProviderFault | None:
        """The next fault for this request: of the kinds answered before the idempotency layer
        (``edge``) or of those that fire once it has let the request through."""
        order_id = self._order_of(endpoint, params, intent_id)
        with self._lock:
            for fault in self._faults:
                if (
                    fault.endpoint == endpoint
                    and (fault.kind in _EDGE_FAULTS) == edge
                    and fault.order_id in (None, order_id)
                    and fault.fired < fault.times
                ):
                    fault.fired += 1
                    return fault
            for rate in self._rates:
                if (
                    rate.endpoint == endpoint
                    and (rate.kind in _EDGE_FAULTS) == edge
                    and rate.order_id in (None, order_id)
                    and self._random.random() < rate.probability
                ):
                    return ProviderFault(rate.kind, rate.order_id, rate.endpoint, 1, rate.seconds, 1)
        return None

    def _order_of(self, endpoint: str, params: dict[str, Any], intent_id: str | None) -> str | None:
        if endpoint == "create":
            metadata = params.get("metadata")
            value = metadata.get("orderId") if isinstance(metadata, dict) else None
            return value if isinstance(value, str) else None
        if endpoint == "search":
            try:
                clauses = _parse_query(str(params.get("query", "")))
            except _BadRequest:
                return None
            return next((c.value for c in clauses if c.field == "metadata[orderId]" and not c.negated), None)
        if endpoint == "list":
            return None  # a list is not about one order
        with self._lock:
            intent = self._intents.get(intent_id or "")
            return intent["metadata"].get("orderId") if intent is not None else None

    # -- admin API ---------------------------------------------------------------------------

    def _admin(self, method: str, path: str, query: str, body: bytes) -> _Reply:
        try:
            data = json.loads(body) if body.strip() else {}
            if not isinstance(data, dict):
                raise ValueError("the body must be a JSON object")
            return self._admin_route(method, path.removeprefix("/_emulator"), parse_qs(query), data)
        except (ValueError, KeyError, TypeError) as exc:
            return _Reply(400, {"error": f"{type(exc).__name__}: {exc}"})

    def _admin_route(
        self, method: str, path: str, query: dict[str, list[str]], data: dict[str, Any]
    ) -> _Reply:
        if (method, path) == ("GET", "/health"):
            return _Reply(
                200, {"ok": True, "dedupe": self.dedupe, "latency": self.latency, "now": self.now()}
            )
        if (method, path) == ("GET", "/charges"):
            order_id = query.get("orderId", [None])[0]
            entries = self.charges_for(order_id) if order_id else self.charges()
            return _Reply(200, {"data": [entry.to_json() for entry in entries]})
        if (method, path) == ("POST", "/reset"):
            self.reset()
            return _Reply(200, {"ok": True})
        if (method, path) == ("POST", "/faults"):
            fault = self.inject(
                data["kind"],
                order_id=data.get("orderId"),
                endpoint=data.get("endpoint", "create"),
                times=int(data.get("times", 1)),
                seconds=data.get("seconds"),
            )
            return _Reply(200, {"kind": fault.kind, "orderId": fault.order_id, "times": fault.times})
        if (method, path) == ("DELETE", "/faults"):
            self.clear_faults()
            return _Reply(200, {"ok": True})
        if (method, path) == ("POST", "/failure-rates"):
            self.set_failure_rate(
                data["kind"],
                float(data["probability"]),
                order_id=data.get("orderId"),
                endpoint=data.get("endpoint", "create"),
                seconds=data.get("seconds"),
            )
            return _Reply(200, {"ok": True})
        if (method, path) == ("POST", "/outcomes"):
            self.force_outcome(data["status"], order_id=data.get("orderId"), times=int(data.get("times", 1)))
            return _Reply(200, {"ok": True})
        if (method, path) == ("POST", "/config"):
            if "dedupe" in data:
                self.dedupe = bool(data["dedupe"])
            if "latency" in data:
                self.latency = float(data["latency"])
            if "searchLagSeconds" in data:
                self.search_lag_seconds = float(data["searchLagSeconds"])
            if "hangSeconds" in data:
                self.hang_seconds = float(data["hangSeconds"])
            return _Reply(200, {"dedupe": self.dedupe, "latency": self.latency})
        if (method, path) == ("POST", "/clock"):
            return _Reply(200, {"now": self.advance_clock(float(data.get("advanceSeconds", 0)))})
        match = re.fullmatch(r"/payment_intents/([A-Za-z0-9_]+)/status", path)
        if method == "POST" and match:
            return _Reply(200, self.set_status(match.group(1), data["status"]))
        return _Reply(404, {"error": f"no emulator endpoint {method} /_emulator{path}"})

    def _track(self, connection: socket.socket, open_: bool) -> None:
        with self._lock:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # stop() must not wait for a request that is deliberately hanging.
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "provider-emulator"
    #: Idle keep-alive connections are dropped after this long.
    timeout = 60
    emulator: ClassVar[ProviderEmulator]

    def setup(self) -> None:
        super().setup()
        self.emulator._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.emulator._track(self.connection, False)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s - " + format, self.address_string(), *args)

    def _serve(self, method: str) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self.send_error(400, "bad Content-Length")
            return
        body = self.rfile.read(length) if length else b""
        # Header names are case-insensitive: index them the way the emulator looks them up.
        canonical = {name.title(): value for name, value in self.headers.items()}
        reply = self.emulator._dispatch(method, self.path, canonical, body)
        if reply.action == "hang":
            self.emulator._stopping.wait(reply.hang_seconds)
        if reply.action != "respond":
            self._reset_connection()
            return
        payload = json.dumps(reply.body, indent=2).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _reset_connection(self) -> None:
        self.close_connection = True
        # Linger 0: closing sends a TCP reset rather than an orderly FIN.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


# -- wire-format helpers -------------------------------------------------------------------------


def _error(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> _Reply:
    error: dict[str, Any] = {"message": message, "type": type_}
    if param is not None:
        error["param"] = param
    if code is not None:
        error["code"] = code
        error["doc_url"] = f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}"
    error.update(extra or {})
    return _Reply(status, {"error": error}, dict(headers or {}))


def _too_many_requests(kind: str, headers: dict[str, str]) -> _Reply:
    """A 429 as Stripe sends it: the rate limiter's, or an object lock that could not be taken."""
    if kind == "lock_timeout":
        return _error(
            429,
            "This object cannot be accessed right now because another API request or Stripe process is "
            "currently accessing it. If you see this error intermittently, retry the request. If you see "
            "this error frequently and are making multiple concurrent requests to a single object, make "
            "your requests serially or at a lower rate.",
            code="lock_timeout",
            headers=headers,
        )
    return _error(
        429,
        "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.",
        code="rate_limit",
        headers={**headers, "Stripe-Rate-Limited-Reason": "endpoint-rate"},
    )


def _server_error(headers: dict[str, str]) -> _Reply:
    return _error(
        500,
        "An unknown error occurred while processing your request (the provider emulator injected it).",
        type_="api_error",
        headers=headers,
    )


def _authenticate(authorization: str | None) -> str | _Reply:
    """The API key of a request, or the 401 Stripe would answer."""
    if not authorization:
        return _error(
            401,
            "You did not provide an API key. You need to provide your API key in the Authorization header, "
            "using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api"
            "#authentication for details, or we can help at https://support.stripe.com/.",
        )
    scheme, _, credentials = authorization.strip().partition(" ")
    key = credentials.strip()
    if scheme.lower() == "basic":
        try:
            key = base64.b64decode(key, validate=True).decode().partition(":")[0]
        except (binascii.Error, UnicodeDecodeError):
            key = ""
    elif scheme.lower() != "bearer":
        key = ""
    prefix = next((p for p in API_KEY_PREFIXES if key.startswith(p)), None)
    if prefix is None or len(key) == len(prefix):
        return _error(401, f"Invalid API Key provided: {_mask_key(key)}")
    return key


def _mask_key(key: str) -> str:
    # Stripe quotes the key's type prefix and last four characters, never the rest.
    match = re.match(r"^[a-z]{2}_(?:test|live)_", key)
    prefix = match.group(0) if match else ""
    hidden = len(key) - len(prefix) - 4
    if hidden <= 0:
        return "*" * len(key)
    return prefix + "*" * hidden + key[-4:]


def _route(method: str, path: str) -> tuple[str, str | None] | None:
    if path == "/v1/payment_intents" and method == "POST":
        return "create", None
    if path == "/v1/payment_intents" and method == "GET":
        return "list", None
    if path == "/v1/payment_intents/search" and method == "GET":
        return "search", None
    match = re.fullmatch(r"/v1/payment_intents/([^/]+)(/cancel)?", path)
    if match and match.group(2) and method == "POST":
        return "cancel", match.group(1)
    if match and not match.group(2) and method == "GET":
        return "retrieve", match.group(1)
    return None


def _decode_form(raw: bytes) -> dict[str, Any]:
    """Decode Stripe's form encoding: ``a[b]=1``, ``a[]=x``, ``a[0]=x`` into nested dicts and lists."""
    try:
        pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise _BadRequest("The request body is not valid UTF-8.") from None
    root: dict[str, Any] = {}
    for name, value in pairs:
        base, bracket, rest = name.partition("[")
        path = [base, *re.findall(r"([^\]]*)\]", rest)] if bracket else [base]
        node = root
        for position, part in enumerate(path):
            if part == "":
                part = str(len(node))
            if position == len(path) - 1:
                node[part] = value
                break
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise _BadRequest(f"Invalid hash: {name}", param=path[0], code="parameter_invalid_hash")
            node = child
    params = _listify(root)
    if not isinstance(params, dict):
        raise _BadRequest("Invalid request: the parameters must be named.")
    return params


def _listify(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    converted = {key: _listify(value) for key, value in node.items()}
    if converted and all(key.isdigit() for key in converted):
        return [converted[key] for key in sorted(converted, key=int)]
    return converted


def _string(params: dict[str, Any], name: str) -> str:
    value = params.get(name)
    if value is None or value == "":
        raise _BadRequest(f"Missing required param: {name}.", param=name, code="parameter_missing")
    if not isinstance(value, str):
        raise _BadRequest(f"Invalid string: {name}", param=name, code="parameter_invalid_string")
    return value


def _integer(params: dict[str, Any], name: str, *, default: int | None = None) -> int:
    if default is not None and name not in params:
        return default
    value = _string(params, name)
    if not re.fullmatch(r"-?[0-9]+", value):
        raise _BadRequest(f"Invalid integer: {value}", param=name, code="parameter_invalid_integer")
    return int(value)


def _boolean(params: dict[str, Any], name: str, *, default: bool) -> bool:
    value = params.get(name)
    if value is None:
        return default
    if value not in ("true", "false"):
        raise _BadRequest(f"Invalid boolean: {value}", param=name)
    return bool(value == "true")


def _validate_create(params: dict[str, Any], version: str) -> dict[str, Any]:
    """Validate a create's parameters (Stripe does this before its idempotency layer).

    Only what the parameters alone decide; whatever needs an object or the account (does the
    PaymentMethod exist, is the amount above the currency's minimum) is checked while executing.
    """
    unknown = sorted(set(params) - _CREATE_PARAMS)
    if unknown:
        raise _BadRequest(
            f"Received unknown parameter: {unknown[0]}", param=unknown[0], code="parameter_unknown"
        )
    amount = _integer(params, "amount")
    if amount < 1:
        raise _BadRequest("Amount must be at least 1 minor unit.", param="amount", code="amount_too_small")
    if amount > MAX_AMOUNT:
        raise _BadRequest("Amount must be no more than 99,999,999.", param="amount", code="amount_too_large")
    currency = _string(params, "currency").lower()
    if not re.fullmatch(r"[a-z]{3}", currency):
        raise _BadRequest(f"Invalid currency: {currency}.", param="currency", code="parameter_invalid_string")
    step = 10 if currency in THREE_DECIMAL_CURRENCIES else 100 if currency in WHOLE_UNIT_CURRENCIES else 1
    if amount % step:
        raise _BadRequest(
            f"Invalid amount: {currency} amounts must be a multiple of {step} minor units (the last"
            f" {'digit' if step == 10 else 'two digits'} must be 0); round to the nearest {step}.",
            param="amount",
            code="invalid_charge_amount",
        )
    confirm = _boolean(params, "confirm", default=False)
    off_session = params.get("off_session", "false")
    if off_session not in ("true", "false", "one_off", "recurring"):
        raise _BadRequest(f"Invalid off_session: {off_session}", param="off_session")
    off_session_set = off_session != "false"
    if off_session_set and not confirm:
        raise _BadRequest("You may only specify off_session when confirm=true.", param="off_session")
    metadata = params.get("metadata", {})
    if metadata == "":
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _BadRequest("Invalid hash", param="metadata", code="parameter_invalid_hash")
    if len(metadata) > 50 or any(len(k) > 40 or len(v) > 500 for k, v in metadata.items()):
        raise _BadRequest(
            "Metadata can have up to 50 keys of at most 40 characters, with values of at most 500 "
            "characters.",
            param="metadata",
        )
    if "payment_method_types" in params and version[:10] >= _PAYMENT_METHOD_TYPES_REMOVED:
        raise _BadRequest(
            "The `payment_method_types` parameter is no longer supported on this API version. Use "
            "`allowed_payment_method_types`, `excluded_payment_method_types` or dynamic payment methods.",
            param="payment_method_types",
            code="payment_method_types_no_longer_supported",
        )
    exclusive = [
        name
        for name in ("payment_method_types", "allowed_payment_method_types", "automatic_payment_methods")
        if name in params
    ]
    if len(exclusive) > 1:
        raise _BadRequest(
            f"You may only specify one of these parameters: {', '.join(exclusive)}.", param=exclusive[1]
        )
    types_param = next((n for n in exclusive if n.endswith("payment_method_types")), None)
    types = params.get(types_param) if types_param else None
    automatic = params.get("automatic_payment_methods")
    if types_param and (not isinstance(types, list) or not all(isinstance(t, str) for t in types)):
        raise _BadRequest("Invalid array", param=types_param, code="parameter_invalid_array")
    # Assumption for allowed_payment_method_types: an explicit list of types needs no
    # return_url, as payment_method_types did.
    redirects_allowed = types is None and not (
        isinstance(automatic, dict)
        and automatic.get("enabled") == "true"
        and automatic.get("allow_redirects") == "never"
    )
    error_on_requires_action = _boolean(params, "error_on_requires_action", default=False)
    method = params.get("payment_method")
    if method is not None and not isinstance(method, str):
        raise _BadRequest("Invalid string", param="payment_method", code="parameter_invalid_string")
    if confirm and not method:
        raise _BadRequest(
            "You cannot confirm this PaymentIntent because it's missing a payment method. To confirm the "
            "PaymentIntent with a payment method, provide a `payment_method`.",
            code="payment_intent_unexpected_state",
        )
    if confirm and redirects_allowed and not params.get("return_url"):
        raise _BadRequest(
            "This PaymentIntent is configured to accept payment methods enabled in your Dashboard. "
            "Because some of these payment methods might redirect your customer off of your page, you "
            "must provide a `return_url`. If you don't want to accept redirect-based payment methods, "
            "set `automatic_payment_methods[enabled]` to `true` and "
            "`automatic_payment_methods[allow_redirects]` to `never` when creating Setup Intents and "
            "Payment Intents.",
        )
    return {
        "amount": amount,
        "currency": currency,
        "confirm": confirm,
        "off_session_set": off_session_set,
        "metadata": metadata,
        "types_param": types_param,
        "types": types,
        "automatic": automatic,
        "error_on_requires_action": error_on_requires_action,
        "method": method,
    }


def _check_saved_method(method: str | None, customer: str | None) -> None:
    """A payment method attached to a Customer is used only with that Customer, as on Stripe."""
    owner = _SAVED_METHODS.get(method) if method else None
    if owner is None:
        # Not attached to anyone: usable with or without a customer.
        return
    if customer is None:
        # Stripe's message and code for this case (code parameter_missing, param payment_method).
        raise _BadRequest(
            f"The `payment_method` parameter supplied {method} belongs to the Customer {owner}. Please "
            "include the Customer in the `customer` parameter on the PaymentIntent.",
            param="payment_method",
            code="parameter_missing",
        )
    if customer != owner:
        # Stripe's message for a payment method the named customer does not hold; the code is our
        # assumption (Stripe's reports seen quote the message only).
        raise _BadRequest(
            f"The customer does not have a payment method with the ID {method}. The payment method must "
            "be attached to the customer.",
            param="payment_method",
            code="resource_missing",
        )


def _known_method(method: str) -> bool:
    return (
        method in _SAVED_METHODS
        or method in _SUCCEEDING_METHODS
        or method in _DECLINING_METHODS
        or method in _AUTHENTICATING_METHODS
        or bool(_COUNTRY_METHOD.match(method))
    )


def _payment_method_object(method_id: str | None, token: str) -> dict[str, Any]:
    brand = next(
        (b for b in ("mastercard", "amex", "discover", "diners", "jcb", "unionpay") if b in token), "visa"
    )
    return {
        "id": method_id,
        "object": "payment_method",
        "type": "card",
        # Test cards only: the last four digits and the brand, never a number.
        "card": {
            "brand": brand,
            "last4": "0002" if "Declined" in token else "4242",
            "exp_month": 12,
            "exp_year": 2034,
        },
        "customer": _SAVED_METHODS.get(token),
        "livemode": False,
        "metadata": {},
    }


def _new_id(prefix: str, length: int) -> str:
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    number = uuid.uuid4().int
    chars = []
    for _ in range(length):
        number, digit = divmod(number, len(alphabet))
        chars.append(alphabet[digit])
    return prefix + "".join(chars)


def _created_filter(value: Any) -> Callable[[int], bool]:
    """The list's ``created`` filter: a timestamp, or a hash of ``gt``/``gte``/``lt``/``lte`` bounds."""
    if value is None:
        return lambda _: True
    if isinstance(value, str):
        if not re.fullmatch(r"[0-9]+", value):
            raise _BadRequest(f"Invalid integer: {value}", param="created", code="parameter_invalid_integer")
        return lambda created: created == int(value)
    if not isinstance(value, dict) or not value or set(value) - {"gt", "gte", "lt", "lte"}:
        raise _BadRequest("Invalid created: a timestamp or a hash of gt, gte, lt, lte.", param="created")
    bounds: dict[str, int] = {}
    for name, bound in value.items():
        if not isinstance(bound, str) or not re.fullmatch(r"[0-9]+", bound):
            raise _BadRequest(
                f"Invalid integer: {bound}", param=f"created[{name}]", code="parameter_invalid_integer"
            )
        bounds[name] = int(bound)
    checks: dict[str, Callable[[int, int], bool]] = {
        "gt": lambda c, b: c > b,
        "gte": lambda c, b: c >= b,
        "lt": lambda c, b: c < b,
        "lte": lambda c, b: c <= b,
    }
    return lambda created: all(checks[name](created, bound) for name, bound in bounds.items())


def _first_older(newest_first: list[dict[str, Any]], cursor: dict[str, Any]) -> int:
    # A cursor filtered out of the list: continue from the first PaymentIntent created before it.
    return next(
        (i for i, intent in enumerate(newest_first) if intent["created"] < cursor["created"]),
        len(newest_first),
    )


def _page_token(offset: int) -> str:
    return "page_" + base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode().rstrip("=")


def _page_offset(token: Any) -> int:
    if token is None:
        return 0
    if not isinstance(token, str) or not token.startswith("page_"):
        raise _BadRequest("Invalid page token.", param="page")
    encoded = token.removeprefix("page_")
    try:
        text = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise _BadRequest("Invalid page token.", param="page") from None
    if not re.fullmatch(r"offset:[0-9]+", text):
        raise _BadRequest("Invalid page token.", param="page")
    return int(text.removeprefix("offset:"))


@dataclass(frozen=True)
class _Clause:
    field: str
    operator: str
    value: str
    negated: bool


_CLAUSE = re.compile(
    r"""\s*(?P<neg>-)?(?P<field>metadata\[(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\]|[a-z_]+)"""
    r"""\s*(?P<op>:|>=|<=|>|<)\s*(?P<value>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s'"]+)\s*"""
)
_CONNECTOR = re.compile(r"(AND|OR)\s+")
_SEARCH_FIELDS = frozenset({"amount", "created", "currency", "customer", "status"})


def _parse_query(query: str) -> list[_Clause]:
    """Parse the subset of Stripe's search query language the emulator supports."""
    clauses: list[_Clause] = []
    connectors: set[str] = set()
    position = 0
    while True:
        match = _CLAUSE.match(query, position)
        if match is None:
            raise _BadRequest(f"Invalid search query at character {position}: {query!r}", param="query")
        field_ = match.group("field")
        if field_.startswith("metadata["):
            field_ = f"metadata[{_unquote(field_[len('metadata[') : -1])}]"
        elif field_ not in _SEARCH_FIELDS:
            raise _BadRequest(
                f"Field `{field_}` is an unsupported search field for resource `payment_intents`.",
                param="query",
            )
        operator = match.group("op")
        if operator != ":" and field_ not in ("amount", "created"):
            raise _BadRequest(f"Operator `{operator}` is not supported on field `{field_}`.", param="query")
        clauses.append(_Clause(field_, operator, _unquote(match.group("value")), bool(match.group("neg"))))
        position = match.end()
        if position == len(query):
            break
        connector = _CONNECTOR.match(query, position)
        if connector is None:
            raise _BadRequest(f"Invalid search query at character {position}: {query!r}", param="query")
        connectors.add(connector.group(1))
        position = connector.end()
    if len(connectors) > 1:
        raise _BadRequest("Queries cannot contain both AND and OR.", param="query")
    if len(clauses) > 10:
        raise _BadRequest("Queries can contain at most 10 clauses.", param="query")
    if connectors == {"OR"}:
        return [_Clause("__or__", ":", "", False), *clauses]
    return clauses


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def _matches(intent: dict[str, Any], clauses: list[_Clause]) -> bool:
    if clauses and clauses[0].field == "__or__":
        return any(_clause_matches(intent, clause) for clause in clauses[1:])
    return all(_clause_matches(intent, clause) for clause in clauses)


def _clause_matches(intent: dict[str, Any], clause: _Clause) -> bool:
    if clause.field.startswith("metadata["):
        result = intent["metadata"].get(clause.field[len("metadata[") : -1]) == clause.value
    elif clause.field in ("amount", "created"):
        if not re.fullmatch(r"-?[0-9]+", clause.value):
            raise _BadRequest(f"`{clause.field}` must be compared with an integer.", param="query")
        actual, expected = int(intent[clause.field]), int(clause.value)
        result = {
            ":": actual == expected,
            ">": actual > expected,
            "<": actual < expected,
            ">=": actual >= expected,
            "<=": actual <= expected,
        }[clause.operator]
    elif clause.field == "currency":
        result = str(intent["currency"]).lower() == clause.value.lower()
    else:
        result = intent.get(clause.field) == clause.value
    return bool(result != clause.negated)


def _check_kind(kind: str) -> FaultKind:
    if kind not in FAULT_KINDS:
        raise ValueError(f"fault kind must be one of {sorted(FAULT_KINDS)}, got {kind!r}")
    return kind  # type: ignore[return-value]


def _check_endpoint(endpoint: str) -> Endpoint:
    if endpoint not in ENDPOINTS:
        raise ValueError(f"endpoint must be one of {sorted(ENDPOINTS)}, got {endpoint!r}")
    return endpoint  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> None:
    """Serve the emulator until interrupted: ``python -m saga_local.provider_emulator --port N``."""
    parser = argparse.ArgumentParser(
        prog="python -m saga_local.provider_emulator", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default: 0, an ephemeral port)")
    parser.add_argument(
        "--no-dedupe", action="store_true", help="ignore Idempotency-Key (apply every request)"
    )
    parser.add_argument("--latency", type=float, default=0.0, help="seconds to delay every API request")
    parser.add_argument(
        "--search-lag",
        type=float,
        default=0.0,
        help="seconds the search lags behind creations and updates (any length; the list never lags)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed for failure rates")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    emulator = ProviderEmulator(
        host=args.host,
        port=args.port,
        dedupe=not args.no_dedupe,
        latency=args.latency,
        search_lag_seconds=args.search_lag,
        seed=args.seed,
    ).start()
    done = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(
        f"provider emulator listening on {emulator.url} (dedupe={'on' if emulator.dedupe else 'off'})",
        flush=True,
    )
    try:
        while not done.wait(0.5):
            pass
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
