"""PaymentIntents: validate a request, then create, confirm, cancel and settle one.

Validation (:func:`validate_create`, :func:`validate_cancel`) decides from the parameters alone and
runs before the idempotency layer, so what it refuses is never saved. What needs an object or the
account (does the Customer or PaymentMethod exist, is the amount at least the currency's minimum)
is checked while executing (:func:`check_references`), after the layer: Stripe saves those 400s.

Amounts as Stripe takes them (:mod:`.currencies`): at most 99,999,999 minor units, at least the
currency's documented minimum (0.50 USD, 0.30 GBP, 175.00 HUF, ...), a multiple of 10 in the
three-decimal currencies (BHD, JOD, KWD, OMR, TND) and of 100 in ISK and UGX.

Stripe's test payment methods: ``pm_card_visa``, ``pm_card_mastercard``... succeed;
``pm_card_chargeDeclined``, ``pm_card_visa_chargeDeclinedInsufficientFunds``,
``pm_card_chargeDeclinedExpiredCard``... decline with a 402 ``card_error`` carrying the
PaymentIntent in ``error.payment_intent``; ``pm_card_authenticationRequired`` /
``pm_card_threeDSecure2Required`` end in ``requires_action``, or decline with
``authentication_required`` when confirmed ``off_session``. A confirm without
``payment_method_types`` or ``automatic_payment_methods[allow_redirects]=never`` needs a
``return_url``, as on an account whose API version enables automatic payment methods by default.

Customers and saved cards: :data:`TEST_CUSTOMER` holds :data:`SAVED_PAYMENT_METHOD` (a card that
succeeds), :data:`OTHER_TEST_CUSTOMER` holds nothing; any other ``customer`` is a 400 "No such
customer". As on Stripe, a saved payment method is refused (400 ``invalid_request_error``) unless
the PaymentIntent names the customer it is attached to.

The functions change the PaymentIntent (a plain dict, as the API returns it) they are given; the
emulator owns the dicts and calls them with its lock held.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from saga_local.stripe_emulator import currencies
from saga_local.stripe_emulator.exceptions import BadRequest
from saga_local.stripe_emulator.responses import (
    Reply,
    boolean,
    error,
    integer,
    new_id,
    reject_unknown,
    string,
)

#: From this version on, ``payment_method_types`` is no longer a create parameter.
PAYMENT_METHOD_TYPES_REMOVED = "2026-09-30"
#: The amount rules (largest amount, each currency's minimum and step) are the emulator's own copy of
#: Stripe's table (:mod:`.currencies`), not the product's: a mistake in the product's is then refused
#: here as Stripe would refuse it.
MAX_AMOUNT = currencies.MAXIMUM_CHARGE

#: What ``ProviderEmulator.set_status`` may move a PaymentIntent to (a payment settling, failing, ...).
SETTABLE_STATUSES = frozenset(
    {"succeeded", "requires_payment_method", "canceled", "processing", "requires_action"}
)
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
_SAVED_METHODS = {SAVED_PAYMENT_METHOD: TEST_CUSTOMER}
_CUSTOMERS = frozenset({TEST_CUSTOMER, OTHER_TEST_CUSTOMER})

#: (error code, decline code, message), as Stripe's test payment methods decline.
Decline = tuple[str, str, str]
_DECLINED = "Your card was declined."
_DECLINE_SUFFIXES: dict[str, Decline] = {
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
}
#: payment method -> how it declines (``pm_card_chargeDeclined`` and ``pm_card_visa_chargeDeclined``).
_DECLINING_METHODS: dict[str, Decline] = {
    f"pm_card_{prefix}{suffix}": outcome
    for suffix, outcome in _DECLINE_SUFFIXES.items()
    for prefix in ("", "visa_")
}
_AUTHENTICATING_METHODS = frozenset(
    {"pm_card_authenticationRequired", "pm_card_threeDSecure2Required", "pm_card_threeDSecureRequired"}
)
_AUTHENTICATION_DECLINE: Decline = (
    "authentication_required",
    "authentication_required",
    "Your card was declined. This transaction requires authentication.",
)
_CANCELABLE = frozenset(
    {"requires_payment_method", "requires_capture", "requires_confirmation", "requires_action", "processing"}
)
_CANCELLATION_REASONS = frozenset({"duplicate", "fraudulent", "requested_by_customer", "abandoned"})
_CANCEL_PARAMS = frozenset({"cancellation_reason", "expand"})
_RETRIEVE_PARAMS = frozenset({"client_secret", "expand"})
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
class ForcedOutcome:
    """The next ``times`` confirms (of ``order_id``, if set) end in ``status``."""

    status: str
    order_id: str | None
    times: int


def take_forced(forced: list[ForcedOutcome], order_id: str | None) -> str | None:
    """The status forced on this confirm, if any (one use of it is spent)."""
    for outcome in forced:
        if outcome.order_id is None or outcome.order_id == order_id:
            outcome.times -= 1
            if outcome.times <= 0:
                forced.remove(outcome)
            return outcome.status
    return None


# -- validate ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateRequest:
    """A create's parameters once validated (the rest are copied from the request as sent)."""

    amount: int
    currency: str
    confirm: bool
    off_session: bool
    metadata: dict[str, str]
    #: ``payment_method_types`` or ``allowed_payment_method_types``, whichever was sent.
    types_param: str | None
    types: list[str] | None
    automatic: Any
    error_on_requires_action: bool
    method: str | None


def validate_create(params: dict[str, Any], version: str) -> CreateRequest:
    """Validate a create's parameters (Stripe does this before its idempotency layer).

    Only what the parameters alone decide; whatever needs an object or the account (does the
    PaymentMethod exist, is the amount above the currency's minimum) is checked while executing.
    Checks run in Stripe's order: the first failure is the one answered.
    """
    reject_unknown(params, _CREATE_PARAMS)
    amount, currency = _amount(params)
    confirm = boolean(params, "confirm", default=False)
    off_session = _off_session(params, confirm=confirm)
    metadata = _metadata(params)
    types_param, types = _payment_method_types(params, version)
    automatic = params.get("automatic_payment_methods")
    error_on_requires_action = boolean(params, "error_on_requires_action", default=False)
    method = params.get("payment_method")
    if method is not None and not isinstance(method, str):
        raise BadRequest("Invalid string", param="payment_method", code="parameter_invalid_string")
    if confirm:
        _check_confirmable(params, method=method, types=types, automatic=automatic)
    return CreateRequest(
        amount=amount,
        currency=currency,
        confirm=confirm,
        off_session=off_session,
        metadata=metadata,
        types_param=types_param,
        types=types,
        automatic=automatic,
        error_on_requires_action=error_on_requires_action,
        method=method,
    )


def _amount(params: dict[str, Any]) -> tuple[int, str]:
    amount = integer(params, "amount")
    if amount < 1:
        raise BadRequest("Amount must be at least 1 minor unit.", param="amount", code="amount_too_small")
    if amount > MAX_AMOUNT:
        raise BadRequest("Amount must be no more than 99,999,999.", param="amount", code="amount_too_large")
    currency = string(params, "currency").lower()
    if not re.fullmatch(r"[a-z]{3}", currency):
        raise BadRequest(f"Invalid currency: {currency}.", param="currency", code="parameter_invalid_string")
    step = currencies.step(currency.upper())
    if amount % step:
        raise BadRequest(
            f"Invalid amount: {currency} amounts must be a multiple of {step} minor units (the last"
            f" {'digit' if step == 10 else 'two digits'} must be 0); round to the nearest {step}.",
            param="amount",
            code="invalid_charge_amount",
        )
    return amount, currency


def _off_session(params: dict[str, Any], *, confirm: bool) -> bool:
    off_session = params.get("off_session", "false")
    if off_session not in ("true", "false", "one_off", "recurring"):
        raise BadRequest(f"Invalid off_session: {off_session}", param="off_session")
    if off_session != "false" and not confirm:
        raise BadRequest("You may only specify off_session when confirm=true.", param="off_session")
    return bool(off_session != "false")


def _metadata(params: dict[str, Any]) -> dict[str, str]:
    metadata = params.get("metadata", {})
    if metadata == "":
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise BadRequest("Invalid hash", param="metadata", code="parameter_invalid_hash")
    if len(metadata) > 50 or any(len(k) > 40 or len(v) > 500 for k, v in metadata.items()):
        raise BadRequest(
            "Metadata can have up to 50 keys of at most 40 characters, with values of at most 500 "
            "characters.",
            param="metadata",
        )
    return metadata


def _payment_method_types(params: dict[str, Any], version: str) -> tuple[str | None, list[str] | None]:
    """Which ``*payment_method_types`` parameter was sent, and its list."""
    if "payment_method_types" in params and version[:10] >= PAYMENT_METHOD_TYPES_REMOVED:
        raise BadRequest(
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
        raise BadRequest(
            f"You may only specify one of these parameters: {', '.join(exclusive)}.", param=exclusive[1]
        )
    types_param = next((n for n in exclusive if n.endswith("payment_method_types")), None)
    if types_param is None:
        return None, None
    types = params.get(types_param)
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise BadRequest("Invalid array", param=types_param, code="parameter_invalid_array")
    return types_param, types


def _check_confirmable(
    params: dict[str, Any], *, method: str | None, types: list[str] | None, automatic: Any
) -> None:
    """What ``confirm=true`` needs: a payment method, and a ``return_url`` if it may redirect."""
    if not method:
        raise BadRequest(
            "You cannot confirm this PaymentIntent because it's missing a payment method. To confirm the "
            "PaymentIntent with a payment method, provide a `payment_method`.",
            code="payment_intent_unexpected_state",
        )
    # Assumption for allowed_payment_method_types: an explicit list of types needs no
    # return_url, as payment_method_types did.
    redirects_allowed = types is None and not (
        isinstance(automatic, dict)
        and automatic.get("enabled") == "true"
        and automatic.get("allow_redirects") == "never"
    )
    if redirects_allowed and not params.get("return_url"):
        raise BadRequest(
            "This PaymentIntent is configured to accept payment methods enabled in your Dashboard. "
            "Because some of these payment methods might redirect your customer off of your page, you "
            "must provide a `return_url`. If you don't want to accept redirect-based payment methods, "
            "set `automatic_payment_methods[enabled]` to `true` and "
            "`automatic_payment_methods[allow_redirects]` to `never` when creating Setup Intents and "
            "Payment Intents.",
        )


def validate_retrieve(params: dict[str, Any]) -> None:
    """Validate a retrieve's parameters: Stripe refuses one it does not know, on a GET too."""
    reject_unknown(params, _RETRIEVE_PARAMS)


def validate_cancel(params: dict[str, Any]) -> None:
    """Validate a cancel's parameters (before the idempotency layer)."""
    reject_unknown(params, _CANCEL_PARAMS)
    reason = params.get("cancellation_reason")
    if reason is not None and reason not in _CANCELLATION_REASONS:
        raise BadRequest(f"Invalid cancellation_reason: {reason}", param="cancellation_reason")


# -- create and confirm --------------------------------------------------------------------------


def check_references(request: CreateRequest, customer: Any) -> None:
    """What a create needs of the account: the minimum, the Customer, the PaymentMethod.

    Checked while executing (after the idempotency layer), so these 400s are saved under the key.
    """
    minimum = currencies.minimum(request.currency.upper())
    if request.amount < minimum:
        raise BadRequest(
            f"Amount must be at least {minimum} minor units of {request.currency} (Stripe's minimum charge"
            " amount for the currency).",
            param="amount",
            code="amount_too_small",
        )
    if customer is not None and (not isinstance(customer, str) or customer not in _CUSTOMERS):
        raise BadRequest(f"No such customer: '{customer}'", param="customer", code="resource_missing")
    method = request.method
    _check_saved_method(method, customer)
    if method and not _known_method(method):
        raise BadRequest(
            f"No such PaymentMethod: '{method}'", param="payment_method", code="resource_missing"
        )
    if method and request.types is not None and "card" not in request.types:
        raise BadRequest(
            "The PaymentMethod provided (card) is not allowed for this PaymentIntent. Please attach a "
            f"PaymentMethod of one of the following types: {', '.join(request.types)}.",
            param="payment_method",
            code="payment_intent_incompatible_payment_method",
        )


def _check_saved_method(method: str | None, customer: str | None) -> None:
    """A payment method attached to a Customer is used only with that Customer, as on Stripe."""
    owner = _SAVED_METHODS.get(method) if method else None
    if owner is None:
        # Not attached to anyone: usable with or without a customer.
        return
    if customer is None:
        # Stripe's message and code for this case (code parameter_missing, param payment_method).
        raise BadRequest(
            f"The `payment_method` parameter supplied {method} belongs to the Customer {owner}. Please "
            "include the Customer in the `customer` parameter on the PaymentIntent.",
            param="payment_method",
            code="parameter_missing",
        )
    if customer != owner:
        # Stripe's message for a payment method the named customer does not hold; the code is our
        # assumption (Stripe's reports seen quote the message only).
        raise BadRequest(
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


def keyed_id(idempotency_key: str) -> str:
    """The id the emulator gives the PaymentIntent first created under ``idempotency_key``.

    Stripe's ids are random; the emulator derives this one from the key (in Stripe's alphabet and
    length), so that a walk-through can name it before it exists: events/mark_complete.json carries
    the id ChargePaymentFunction's sample charge gets on a fresh local stack. One key creates one
    PaymentIntent while the provider deduplicates; a second under the same key (deduplication off,
    or a key past its retention) gets a random id.
    """
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    number = int.from_bytes(hashlib.sha256(idempotency_key.encode()).digest(), "big")
    chars = []
    for _ in range(24):
        number, digit = divmod(number, len(alphabet))
        chars.append(alphabet[digit])
    return "pi_3" + "".join(chars)


def new_intent(
    request: CreateRequest, params: dict[str, Any], now: float, *, intent_id: str | None = None
) -> dict[str, Any]:
    """A PaymentIntent as created (not yet confirmed), in the API's shape (a random id unless given)."""
    intent_id = intent_id or new_id("pi_3", 24)
    automatic = request.automatic
    method = request.method
    return {
        "id": intent_id,
        "object": "payment_intent",
        "amount": request.amount,
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
        "client_secret": f"{intent_id}_secret_{new_id('', 25)}",
        "confirmation_method": params.get("confirmation_method", "automatic"),
        "created": int(now),
        "currency": request.currency,
        "customer": params.get("customer"),
        "description": params.get("description"),
        "last_payment_error": None,
        "latest_charge": None,
        "livemode": False,
        "metadata": dict(request.metadata),
        "next_action": None,
        "on_behalf_of": None,
        "payment_method": new_id("pm_1", 24) if method else None,
        "payment_method_configuration_details": None,
        "payment_method_options": {"card": {"request_three_d_secure": "automatic"}},
        "payment_method_types": ["card"],
        "allowed_payment_method_types": (
            request.types if request.types_param == "allowed_payment_method_types" else None
        ),
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


def settled_intent(
    *, amount: int, currency: str, created: int, customer: str | None, metadata: dict[str, str], status: str
) -> dict[str, Any]:
    """A PaymentIntent as a create and confirm with a test card leave it once ``status`` is reached.

    For a test that gives the account a history without sending it (see
    :meth:`~saga_local.stripe_emulator.ProviderEmulator.add_history`): the same shape as
    :func:`new_intent` then :func:`transition` give one created over HTTP.
    """
    request = CreateRequest(
        amount=amount,
        currency=currency,
        confirm=True,
        off_session=True,
        metadata=metadata,
        types_param=None,
        types=None,
        automatic={"enabled": "true", "allow_redirects": "never"},
        error_on_requires_action=False,
        method="pm_card_visa",
    )
    intent = new_intent(request, {"customer": customer} if customer else {}, created)
    transition(intent, status, created)
    return intent


def confirm_outcome(request: CreateRequest, forced: str | None) -> str | Decline:
    """What confirming ``request``'s payment method ends in: a status, or how it declines."""
    method = request.method
    authenticating = method in _AUTHENTICATING_METHODS
    if forced == "processing":
        return "processing"
    if forced == "requires_action" or (
        authenticating and not request.off_session and not request.error_on_requires_action
    ):
        return "requires_action"
    if authenticating:
        # Off session (or error_on_requires_action): nobody can authenticate, so it declines.
        return _AUTHENTICATION_DECLINE
    if method in _DECLINING_METHODS:
        return _DECLINING_METHODS[method]
    return "succeeded"


def decline(intent: dict[str, Any], outcome: Decline, method: str, request_id: str) -> Reply:
    """Record a declined confirm on ``intent`` and answer Stripe's 402 ``card_error``."""
    code, decline_code, message = outcome
    charge_id = new_id("ch_3", 24)
    card_error = {
        "charge": charge_id,
        "code": code,
        "decline_code": decline_code,
        "doc_url": f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}",
        "message": message,
        "payment_method": _payment_method_object(intent["payment_method"], method, intent["created"]),
        "type": "card_error",
    }
    intent.update(
        status="requires_payment_method",
        last_payment_error=copy.deepcopy(card_error),
        latest_charge=charge_id,
        payment_method=None,
    )
    return Reply(
        402,
        {
            "error": {
                **card_error,
                "payment_intent": copy.deepcopy(intent),
                "request_log_url": f"https://dashboard.stripe.com/test/logs/{request_id}",
            }
        },
    )


def _payment_method_object(method_id: str | None, token: str, created: int) -> dict[str, Any]:
    """The declined PaymentMethod as a card error carries it: every field Stripe's schema requires."""
    brand = next(
        (b for b in ("mastercard", "amex", "discover", "diners", "jcb", "unionpay") if b in token), "visa"
    )
    funding = next((f for f in ("debit", "prepaid") if f in token), "credit")
    return {
        "id": method_id,
        "object": "payment_method",
        "billing_details": {
            "address": dict.fromkeys(("city", "country", "line1", "line2", "postal_code", "state")),
            "email": None,
            "name": None,
            "phone": None,
        },
        # Test cards only: the last four digits and the brand, never a number.
        "card": {
            "brand": brand,
            "checks": {"address_line1_check": None, "address_postal_code_check": None, "cvc_check": None},
            "country": "US",
            "exp_month": 12,
            "exp_year": 2034,
            "funding": funding,
            "generated_from": None,
            "last4": "0002" if "Declined" in token else "4242",
            "networks": {"available": [brand], "preferred": None},
            "three_d_secure_usage": {"supported": True},
            "wallet": None,
        },
        "created": created,
        "customer": _SAVED_METHODS.get(token),
        "livemode": False,
        "metadata": {},
        "type": "card",
    }


# -- state changes -------------------------------------------------------------------------------


def transition(intent: dict[str, Any], status: str, now: float) -> None:
    """Move ``intent`` to ``status`` with the fields Stripe sets on the way (the ledger is the caller's)."""
    intent["status"] = status
    intent["next_action"] = None
    if status == "succeeded":
        intent["amount_received"] = intent["amount"]
        intent["latest_charge"] = intent["latest_charge"] or new_id("ch_3", 24)
    elif status == "requires_action":
        intent["next_action"] = {
            "type": "use_stripe_sdk",
            "use_stripe_sdk": {
                "type": "three_d_secure_redirect",
                "stripe_js": "https://hooks.stripe.com/3d_secure",
            },
        }
    elif status == "canceled":
        intent["canceled_at"] = int(now)
    elif status == "processing":
        intent["processing"] = {"type": "card", "card": {}}


def ledger_entry(intent: dict[str, Any], info: dict[str, Any], now: float) -> LedgerEntry:
    """The charge a PaymentIntent that just succeeded adds to the ledger."""
    metadata = intent["metadata"]
    return LedgerEntry(
        charge_id=intent["id"],
        order_id=metadata.get("orderId"),
        attempt=metadata.get("attempt"),
        amount=intent["amount"],
        currency=intent["currency"].upper(),
        idempotency_key=info["idempotency_key"],
        time=now,
        payment_method=info["payment_method"],
        customer_id=metadata.get("customerId"),
    )


def cannot_cancel(intent: dict[str, Any]) -> Reply | None:
    """Stripe's 400 for cancelling a PaymentIntent in a final state, or None if it may be cancelled."""
    if intent["status"] in _CANCELABLE:
        return None
    return error(
        400,
        f"You cannot cancel this PaymentIntent because it has a status of {intent['status']}. Only a "
        "PaymentIntent with one of the following statuses may be canceled: "
        f"{', '.join(sorted(_CANCELABLE))}.",
        code="payment_intent_unexpected_state",
        extra={"payment_intent": copy.deepcopy(intent)},
    )


def settlement_failure() -> dict[str, Any]:
    """The ``last_payment_error`` of a payment that was ``processing`` and failed to settle (a bank
    debit returned for insufficient funds): what ``payment_intent.payment_failed`` then carries."""
    return {
        "code": "payment_intent_payment_attempt_failed",
        "decline_code": "insufficient_funds",
        "message": "The payment failed to settle: the customer's bank returned it.",
        "type": "invalid_request_error",
    }
