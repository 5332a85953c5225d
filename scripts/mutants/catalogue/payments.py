"""payments.py: the idempotency key, the charge request, and the mapping of every provider answer to
Charge / PaymentDeclined / ChargeNotAttempted / PaymentOutcomeUnknown (a wrong row releases a claim
whose charge may have landed, or charges twice); and api_keys.py, the checks on the key's mode."""

from __future__ import annotations

from model import Catalogue

from catalogue.outbox import SWEEPER_TESTS

PAYMENTS = Catalogue(
    "functions/payment_saga/payments.py",
    (
        "tests/unit/test_charge_rules.py",
        "tests/unit/test_payments.py",
        "tests/unit/test_provider_error_paths.py",
    ),
)
m = PAYMENTS
#: api_keys.py: where the key may go and in which mode, checked before any request.
API_KEYS = Catalogue(
    "functions/payment_saga/api_keys.py", ("tests/unit/test_payments.py", "tests/unit/test_key_mode.py")
)
#: What reconciliation decides from the provider's records is tested with the sweeper too.
SWEEP = ("tests/unit/test_charge_rules.py", "tests/unit/test_payments.py", *SWEEPER_TESTS)

# -- the idempotency key (invariant 5) --
m.text(
    "pay-key-without-attempt",
    'return f"payment-saga/{order_id}/attempt-{attempt}"',
    'return f"payment-saga/{order_id}"',
    "the idempotency key ignores the attempt: a customer's retry after a decline replays the decline",
)
m.text(
    "pay-key-without-order",
    'return f"payment-saga/{order_id}/attempt-{attempt}"',
    'return f"payment-saga/attempt-{attempt}"',
    "the idempotency key ignores the order: two orders share attempt 1's key",
)
m.text(
    "pay-key-header-dropped",
    '(params, {"idempotency_key": idempotency_key})',
    "(params, {})",
    "the charge is sent without its Idempotency-Key: a retry after a lost answer charges again",
)
# -- the request --
m.text(
    "pay-not-confirmed",
    '"confirm": True,',
    '"confirm": False,',
    "the PaymentIntent is created but not confirmed: nothing is charged, the order ends unknown",
)
m.text(
    "pay-not-off-session",
    '"off_session": True,',
    '"off_session": False,',
    "a card that needs 3-D Secure parks in requires_action instead of failing the confirm",
)
m.text(
    "pay-metadata-attempt-dropped",
    '"attempt": str(attempt),\n',
    "",
    "the charge does not record its attempt: find_charge can never see it, the sweeper releases a paid order",
)
# -- the outcome of a 200 --
m.text(
    "pay-processing-is-charged",
    'if status == "succeeded":\n            return self._charge_from(intent, order, key, replayed=replayed)',
    'if status in ("succeeded", "processing"):\n'
    "            return self._charge_from(intent, order, key, replayed=replayed)",
    "a payment still processing is reported charged (it may still fail)",
)
m.text(
    "pay-requires-payment-method-not-declined",
    "if status in _FAILED_STATUSES:\n            # After a confirm",
    'if status == "canceled":\n            # After a confirm',
    "a confirm answered 200 requires_payment_method is not taken as the decline it is",
)
m.text(
    "pay-processing-is-a-failed-status",
    '_FAILED_STATUSES = frozenset({"requires_payment_method", "canceled"})',
    '_FAILED_STATUSES = frozenset({"requires_payment_method", "canceled", "processing"})',
    "a processing payment counts as failed: it is released as declined and may still settle",
)
m.text(
    "pay-requires-action-not-canceled",
    'if status == "requires_action":\n            return self._abandon_unauthenticated(intent, order, key)',
    'if status == "requires_action_":\n            return self._abandon_unauthenticated(intent, order, key)',
    "requires_action is left as it is (never canceled), so it is unknown instead of declined",
)
m.text(
    "pay-cancel-anything-is-declined",
    'if status == "canceled":\n            raise PaymentDeclined(',
    'if status != "succeeded":\n            raise PaymentDeclined(',
    "a PaymentIntent the cancel could not cancel is reported declined (it may still be authenticated)",
)
m.text(
    "pay-cancel-lost-race-succeeded-ignored",
    'if current.status == "succeeded":\n                return self._charge_from(current,',
    'if current.status == "succeeded_":\n                return self._charge_from(current,',
    "a PaymentIntent that succeeded while we tried to cancel it is not reported as the charge",
)
m.text(
    "pay-amount-check-dropped",
    "if intent.amount != order.amount or intent.currency.upper() != order.currency:",
    "if False:",
    "a PaymentIntent for another amount or currency is accepted as this order's charge",
)
# -- the outcome of an error --
m.text(
    "pay-card-error-unknown",
    "if isinstance(exc, stripe.CardError):\n            return self._declined(exc, order, key)",
    'if isinstance(exc, stripe.CardError):\n            return PaymentOutcomeUnknown(f"declined {where}")',
    "a 402 decline is treated as unknown: the claim is kept and reconciled instead of released",
)
m.text(
    "pay-permission-error-unknown",
    "if isinstance(exc, (stripe.AuthenticationError, stripe.PermissionError)):",
    "if isinstance(exc, stripe.AuthenticationError):",
    "a 403 (restricted key) is unknown instead of not attempted",
)
m.text(
    "pay-idempotency-error-not-attempted",
    'return PaymentOutcomeUnknown(\n                f"the provider already executed {key}',
    'return ChargeNotAttempted(\n                f"the provider already executed {key}',
    "a 400 idempotency_error (an earlier request with the key executed) is taken as not attempted",
)
m.text(
    "pay-404-unknown",
    "exc.http_status in (400, 404)",
    "exc.http_status in (400,)",
    "a 404 (no such payment method) is unknown instead of not attempted",
)
m.text(
    "pay-400-with-intent-not-attempted",
    "if _error_payment_intent(exc) is None:\n                return ChargeNotAttempted(",
    "if True:\n                return ChargeNotAttempted(",
    "a 400 that carries a PaymentIntent (something was created) is taken as not attempted",
)
m.text(
    "pay-other-errors-not-attempted",
    'return PaymentOutcomeUnknown(\n            f"the outcome of the charge for {where} is unknown',
    'return ChargeNotAttempted(\n            f"the outcome of the charge for {where} is unknown',
    "a timeout, 5xx or 409 is taken as not attempted: the claim of a charge that landed is released",
)
m.text(
    "pay-402-not-card-error-declined",
    'or error.type != "card_error"\n',
    "",
    "a 402 that is not a card_error is taken as a decline",
)
m.text(
    "pay-402-with-live-intent-declined",
    "or (intent_status is not None and intent_status not in _FAILED_STATUSES)",
    "or False",
    "a 402 whose PaymentIntent did not fail (it succeeded or is processing) is taken as a decline",
)
m.text(
    "pay-secret-not-redacted",
    'text.replace(self._api_key, "<redacted>")',
    "text",
    "the API key is not redacted from provider messages that quote it",
)
# -- find_charge: the sweeper's proof (invariant 6) --
m.text(
    "pay-find-any-order",
    'return metadata.get("orderId") == order.order_id and metadata.get("attempt") == str(attempt)',
    'return metadata.get("attempt") == str(attempt)',
    "the provider's matching is trusted: another order's PaymentIntent is taken for this order's",
    tests=SWEEP,
)
m.text(
    "pay-find-any-attempt",
    'return metadata.get("orderId") == order.order_id and metadata.get("attempt") == str(attempt)',
    'return metadata.get("orderId") == order.order_id',
    "another attempt's PaymentIntent is taken for this attempt's (a charge of attempt 1 completes attempt 2)",
    tests=SWEEP,
)
m.text(
    "pay-find-search-failure-is-none",
    """        except stripe.StripeError as exc:
            raise PaymentOutcomeUnknown(
                f"could not search the provider""",
    """        except stripe.StripeError as exc:
            return None
            raise PaymentOutcomeUnknown(
                f"could not search the provider""",
    "a failed search is taken as 'no charge': the sweeper releases a paid order",
    tests=SWEEP,
)
m.text(
    "pay-find-pending-ignored",
    "pending = [i for i in intents if i.status not in _FAILED_STATUSES]",
    'pending = [i for i in intents if i.status == "processing"]',
    "a PaymentIntent in requires_action (it may still be authenticated) is taken as no charge",
    tests=SWEEP,
)
m.text(
    "pay-find-query-without-attempt",
    """            f" AND metadata['attempt']:'{_search_literal(str(attempt))}'"
""",
    "",
    "the search asks for every attempt of the order (the exact filter must still pick the right one)",
    equivalent="find_charge filters the results on the exact orderId and attempt itself "
    "(pay-find-any-attempt proves that filter is tested), so a wider query returns the same "
    "charges; only the page count could differ",
)
m.text(
    "pay-list-window-too-narrow",
    '"created": {"gte": created_from, "lte": created_to},',
    '"created": {"gte": created_to, "lte": created_to},',
    "the list only looks at the window's last second: a charge made earlier in it is missed",
    tests=SWEEP,
)
m.text(
    "pay-list-failure-is-empty",
    """        except stripe.StripeError as exc:
            raise PaymentOutcomeUnknown(
                f"could not list the provider's""",
    """        except stripe.StripeError as exc:
            return AttemptRecord(source="list")
            raise PaymentOutcomeUnknown(
                f"could not list the provider's""",
    "a failed list is taken as proof that nothing was charged",
    tests=SWEEP,
)
m.text(
    "pay-double-charge-unreported",
    "extra_charge_ids=tuple(i.id for i in succeeded[1:]),",
    "extra_charge_ids=tuple(i.id for i in succeeded[2:]),",
    "the second succeeded PaymentIntent of one attempt (a double charge) is not reported for refund",
    tests=SWEEP,
)
m.text(
    "pay-no-intent-is-declined",
    "return self.charge is None and bool(self.failed_ids)",
    "return self.charge is None",
    "an attempt with no PaymentIntent at all counts as declined (the order is never charged again)",
    tests=SWEEP,
)

# -- retrieve_intent: the webhook consumer's and the settlement check's read of one PaymentIntent --
#: The read is what a doorbell is answered with: a wrong reading completes or releases a claim wrongly.
READ = ("tests/unit/test_provider_error_paths.py", "tests/functional/test_webhook_endpoint.py")
m.text(
    "pay-read-id-unquoted",
    "f\"/v1/payment_intents/{quote(payment_intent_id, safe='')}\"",
    'f"/v1/payment_intents/{payment_intent_id}"',
    "a forged doorbell's id goes into the URL as it is: its slashes and query ask Stripe for something else",
    tests=READ,
)
m.text(
    "pay-read-missing-is-unknown",
    "if exc.http_status == 404:\n                return None",
    "if exc.http_status == 999:\n                return None",
    "a forged or another account's PaymentIntent id is an unknown outcome: its doorbell is retried until it"
    " is dead-lettered and pages",
    tests=READ,
)
m.text(
    "pay-read-metadata-dropped",
    'intent.get("metadata") or {},',
    "{},",
    "the reading names no order: every webhook about a charge is ignored and its claim waits for the sweeper",
    tests=READ,
)
m.text(
    "pay-read-failure-dropped",
    'failed=intent.get("last_payment_error") is not None,',
    "failed=False,",
    "a PaymentIntent whose confirm failed reads as waiting for a payment method: its claim is not released",
    tests=READ,
)

# -- the key's mode against the stack's --
KEY_MODE = ("tests/unit/test_key_mode.py", "tests/statemachine/test_key_mode.py")
m.text(
    "pay-key-mode-not-checked-by-the-provider",
    "        if mode is not None:\n            check_key_mode(api_key, mode)",
    "        pass",
    "the provider the Charge step and the sweeper build never checks the key's mode",
    tests=("tests/statemachine/test_key_mode.py", "tests/unit/test_key_mode.py"),
)

# -- the key's mode, in api_keys.py --
API_KEYS.text(
    "pay-key-mode-not-compared",
    "if found is not None and found != mode:",
    "if False:",
    "a live key on a test stack charges, and every webhook about its charges is refused: the claims"
    " wait for the sweeper, silently",
    tests=KEY_MODE,
)
API_KEYS.text(
    "pay-key-mode-live-prefixes-only-secret",
    '    if api_key.startswith(_LIVE_KEY_PREFIXES):\n        return "live"',
    '    if api_key.startswith("sk_live_"):\n        return "live"',
    "a restricted live key is taken for a key of no mode and sent from a test stack",
    tests=KEY_MODE,
)
