"""The sweeper's Lambda (handlers/sweeper.py): what it logs and counts, its heartbeat, its time
and page budgets, and the settings it refuses to guess."""

from __future__ import annotations

import functools
import json
import time
from typing import TYPE_CHECKING, Any

import pytest

from handlers import runtime as handler_runtime
from handlers import sweeper
from payment_saga.claims import ClaimsStore, ClaimStatus
from payment_saga.errors import PaymentProcessing
from payment_saga.orders import Order
from payment_saga.payments import AttemptRecord, StripeProvider, idempotency_key
from payment_saga.sweep_lock import SweepLock
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.runtime.api import LambdaContext
from saga_local.stripe_emulator import ProviderEmulator
from saga_local.template import ROOT, load_template
from tests.functional.sweeper_support import LEASE, ORDER, A, RacingProvider, charge, release_as_not_charged

if TYPE_CHECKING:
    from tests.helpers import FakeClock


# -- the Lambda ---------------------------------------------------------------------------------


def test_the_sweeper_lambda_completes_and_releases_and_logs_each_decision(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The Lambda runs on the real clock: seed claims taken 5,000 s before it (lease 900 s).
    past = ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000)
    past.claim(ORDER, token=A)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    landed = charge(holder)
    holder.close()
    past.claim(Order("ORDER-004", 2500, "USD", "cus_9", "pm_card_visa"), token=A)
    event = json.loads((ROOT / "events" / "sweeper.json").read_text())

    result = sweeper.handler(event, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert result["counts"] == {
        "completed": 1,
        "released": 1,
        "pending": 0,
        "changed": 0,
        "charge_on_released": 0,
        "failed": 0,
    }
    store = ClaimsStore(claims_table, client=dynamodb)
    assert store.get(ORDER.order_id).charge_id == landed.charge_id  # type: ignore[union-attr]
    assert store.get("ORDER-004").status is ClaimStatus.RELEASED  # type: ignore[union-attr]
    events = {(getattr(r, "event", None), getattr(r, "orderId", None)) for r in caplog.records}
    assert ("reconciliation_completed", ORDER.order_id) in events
    assert ("reconciliation_released", "ORDER-004") in events
    lines = [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{")]
    metrics = {  # Powertools writes metrics as CloudWatch embedded metric format lines
        (metric["Name"], tuple(sorted(set(dimensions) - {"service"})))
        for line in lines
        for directive in (line.get("_aws") or {}).get("CloudWatchMetrics", [])
        for metric in directive["Metrics"]
        for dimensions in directive["Dimensions"]
    }
    assert ("ReconciliationResolved", ("Outcome",)) in metrics


def test_a_sweep_with_less_time_left_than_one_claim_needs_leaves_it_for_the_next_tick(
    sweeper_env: None, dynamodb: Any, claims_table: str, emulator: ProviderEmulator
) -> None:
    # A claim the sweeper would complete, and an invocation with 25 s left: less than one search and
    # one write need (RESERVE_MILLIS). Starting it anyway risks Lambda killing the sweep mid-claim.
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000).claim(ORDER, token=A)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    charge(holder)
    holder.close()

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 25))

    assert result["finished"] is False
    assert ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).status is ClaimStatus.CLAIMED  # type: ignore[union-attr]


def test_a_sweeper_deployed_with_a_longer_grace_waits_that_long_before_it_releases(
    sweeper_env: None, dynamodb: Any, claims_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A provider whose search lags up to two hours: the stack sets a two-hour grace. The claim's lease
    # ran out 4,100 s ago, past the default grace (3,600 s) but not past the stack's.
    monkeypatch.setenv("CLAIM_SEARCH_GRACE_SECONDS", "7200")
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000).claim(ORDER, token=A)

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert (result["counts"]["pending"], result["counts"]["released"]) == (1, 0)
    assert ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).status is ClaimStatus.CLAIMED  # type: ignore[union-attr]


def emitted_metrics(out: str, *, function_name: str | None = None) -> dict[str, float]:
    """Metric name -> total over the embedded metric format lines Powertools printed: those with no
    dimension but the service, or with ``function_name`` those broken down by ``FunctionName``."""
    dimensions = ["service"] if function_name is None else ["FunctionName", "service"]
    totals: dict[str, float] = {}
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        for directive in (record.get("_aws") or {}).get("CloudWatchMetrics", []):
            if sorted(directive["Dimensions"][0]) != dimensions or len(directive["Dimensions"]) != 1:
                continue
            if function_name is not None:
                assert record["FunctionName"] == function_name
            for metric in directive["Metrics"]:
                value = record[metric["Name"]]
                totals[metric["Name"]] = totals.get(metric["Name"], 0) + sum(
                    value if isinstance(value, list) else [value]
                )
    return totals


def test_the_sweeper_lambda_alarms_on_a_charge_for_a_released_claim_and_on_duplicate_charges(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    past = ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    # ORDER-003: charged, then released on a wrong proof while the sweeper looked.
    past.claim(ORDER, token=A)
    landed = charge(holder)
    # ORDER-004: charged twice under one attempt (the provider applied the key twice).
    double = Order("ORDER-004", 2500, "USD", "cus_9", "pm_card_visa")
    past.claim(double, token=A)
    emulator.dedupe = False
    both = {charge(holder, double).charge_id, charge(holder, double).charge_id}
    emulator.dedupe = True
    holder.close()

    def racing() -> RacingProvider:
        released: list[bool] = []

        def race() -> None:
            if not released:
                released.append(True)
                release_as_not_charged(ClaimsStore(claims_table, client=dynamodb))

        return RacingProvider(StripeProvider(LOCAL_API_KEY, api_base=emulator.url), race)

    monkeypatch.setattr(handler_runtime, "provider", functools.cache(racing))  # reset() clears it

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert (result["counts"]["charge_on_released"], result["counts"]["completed"]) == (1, 1)
    assert ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).charge_id == landed.charge_id  # type: ignore[union-attr]
    errors = {
        (getattr(r, "event", None), getattr(r, "orderId", None)): r
        for r in caplog.records
        if r.levelname == "ERROR"
    }
    assert ("charge_on_released_claim", ORDER.order_id) in errors
    duplicate = errors[("duplicate_charge", "ORDER-004")]
    kept, extras = duplicate.chargeId, duplicate.duplicateChargeIds  # type: ignore[attr-defined]
    assert (len(extras), {kept, *extras}) == (1, both)
    totals = emitted_metrics(capfd.readouterr().out)
    assert (totals.get("ChargeOnReleasedClaim"), totals.get("DuplicateCharge")) == (1, 1)


def test_the_sweeper_lambda_counts_each_extra_charge_of_an_attempt_charged_three_times(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # The provider applied one key three times: two refunds are owed, and the alarm must say two.
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000).claim(ORDER, token=A)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    emulator.dedupe = False
    charges = {charge(holder).charge_id for _ in range(3)}
    emulator.dedupe = True
    holder.close()

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert (len(charges), result["counts"]["completed"]) == (3, 1)
    assert emitted_metrics(capfd.readouterr().out).get("DuplicateCharge") == 2


def test_the_sweeper_lambda_counts_a_claim_it_cannot_prove_within_the_list_cap_and_leaves_it_claimed(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    claimed_at = int(time.time()) - 5000
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: claimed_at).claim(ORDER, token=A)
    # More PaymentIntents of other orders in the attempt's window than ten pages of the list.
    emulator.add_history(1500, created_from=claimed_at - 300, created_to=claimed_at + LEASE)

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert (result["finished"], result["counts"]["pending"]) == (True, 1)
    assert ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).status is ClaimStatus.CLAIMED  # type: ignore[union-attr]
    (pending,) = [r for r in caplog.records if getattr(r, "event", None) == "reconciliation_pending"]
    assert (pending.orderId, pending.listCapReached) == (ORDER.order_id, True)  # type: ignore[attr-defined]
    totals = emitted_metrics(capfd.readouterr().out)
    assert (totals.get("ReconciliationPending"), totals.get("ReconciliationListCapped")) == (1, 1)


def test_the_sweeper_lambda_logs_a_decline_as_declined(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Claim and charge on the emulator's clock (weeks before the Lambda's): the list's window is
    # the claim's, and the PaymentIntent must fall in it.
    assert clock.now < time.time() - 5000
    declined = Order("ORDER-D", 15000, "BRL", "cus_123", "pm_card_chargeDeclined")
    ClaimsStore(claims_table, client=dynamodb, clock=clock).claim(declined, token=A)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    with pytest.raises(Exception, match="declined"):
        charge(holder, declined)
    holder.close()

    sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    (released,) = [r for r in caplog.records if getattr(r, "event", None) == "reconciliation_released"]
    assert (released.orderId, released.releaseReason) == ("ORDER-D", "DECLINED")  # type: ignore[attr-defined]


class UnreachableProvider:
    """A provider the sweeper cannot reach: every search fails before an answer."""

    def search_attempt(self, order: Order, *, attempt: int, idempotency_key: str) -> AttemptRecord:
        raise OSError("network unreachable")


def a_stale_claim_the_provider_cannot_be_asked_about(
    dynamodb: Any, claims_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim whose lease ran out long ago, and a sweeper whose provider is unreachable."""
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000).claim(ORDER, token=A)
    monkeypatch.setattr(handler_runtime, "provider", functools.cache(UnreachableProvider))


def test_the_sweeper_lambda_fails_visibly_when_a_claim_could_not_be_reconciled(
    sweeper_env: None, dynamodb: Any, claims_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a_stale_claim_the_provider_cannot_be_asked_about(dynamodb, claims_table, monkeypatch)

    with pytest.raises(RuntimeError, match="1 stale claim"):
        sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))
    assert ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).status is ClaimStatus.CLAIMED  # type: ignore[union-attr]


def test_a_claim_the_sweeper_lambda_could_not_reconcile_is_counted_for_its_alarm(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    a_stale_claim_the_provider_cannot_be_asked_about(dynamodb, claims_table, monkeypatch)

    with pytest.raises(RuntimeError):
        sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert emitted_metrics(capfd.readouterr().out).get("ReconciliationFailed") == 1


def function_metrics(out: str, function_name: str) -> dict[str, float]:
    """Metric name -> value over the embedded metric format lines broken down by ``FunctionName``."""
    return emitted_metrics(out, function_name=function_name)


def test_a_sweep_publishes_its_heartbeat_and_the_age_of_the_claim_it_left_pending(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A claim whose lease ran out 100 s ago: its search finds nothing and the grace has not passed.
    monkeypatch.setenv("CLAIM_SEARCH_GRACE_SECONDS", "3600")
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - LEASE - 100).claim(ORDER, token=A)

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert result["counts"]["pending"] == 1
    readings = function_metrics(capfd.readouterr().out, "payment-saga-SweeperFunction")
    assert readings["SweepCompleted"] == 1
    assert LEASE + 100 <= readings["OldestUnresolvedClaimAge"] < LEASE + 200


def test_a_sweep_with_nothing_to_do_still_beats_and_reads_zero(
    sweeper_env: None, capfd: pytest.CaptureFixture[str]
) -> None:
    sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    readings = function_metrics(capfd.readouterr().out, "payment-saga-SweeperFunction")
    assert (readings["SweepCompleted"], readings["OldestUnresolvedClaimAge"]) == (1, 0)


def test_a_sweep_that_fails_on_a_claim_still_beats_and_counts_the_claim_unresolved(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    a_stale_claim_the_provider_cannot_be_asked_about(dynamodb, claims_table, monkeypatch)

    with pytest.raises(RuntimeError):
        sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    readings = function_metrics(capfd.readouterr().out, "payment-saga-SweeperFunction")
    assert readings["SweepCompleted"] == 1
    assert readings["OldestUnresolvedClaimAge"] >= 5000


def test_a_sweep_that_finds_the_lock_held_publishes_no_heartbeat(
    sweeper_env: None, dynamodb: Any, claims_table: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A skip is healthy only if the sweep holding the lease completes: that sweep beats, not this one."""
    SweepLock(claims_table, client=dynamodb).acquire("another-sweep", lease_seconds=300)

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert result["skipped"] is True
    out = capfd.readouterr().out
    assert "SweepCompleted" not in function_metrics(out, "payment-saga-SweeperFunction")
    assert emitted_metrics(out).get("SweepSkipped") == 1


def test_a_sweeper_that_fails_before_its_first_claim_publishes_no_heartbeat(
    sweeper_env: None, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # The index query fails (a permission taken away, say): the sweep never reaches a claim.
    def refused(self: ClaimsStore, **_: Any) -> Any:
        raise RuntimeError("AccessDeniedException: dynamodb:Query")

    monkeypatch.setattr(ClaimsStore, "open_claims", refused)

    with pytest.raises(RuntimeError, match="AccessDenied"):
        sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert "SweepCompleted" not in function_metrics(capfd.readouterr().out, "payment-saga-SweeperFunction")


def test_a_sweeper_without_the_retention_setting_refuses_rather_than_guessing_one(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A charged claim the sweeper would complete, with a TTL: it must not pick one of its own.
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000).claim(ORDER, token=A)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    charge(holder)
    holder.close()
    monkeypatch.delenv("CLAIM_RETENTION_DAYS")

    with pytest.raises(RuntimeError, match="CLAIM_RETENTION_DAYS"):
        sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).status is ClaimStatus.CLAIMED  # type: ignore[union-attr]


def test_the_sample_event_is_what_the_schedule_sends() -> None:
    schedule = load_template()["Resources"]["SweeperFunction"]["Properties"]["Events"]["Sweep"]
    sent = json.loads(schedule["Properties"]["Input"])
    sample = json.loads((ROOT / "events" / "sweeper.json").read_text())
    assert schedule["Properties"]["ScheduleExpression"] == "rate(5 minutes)"
    assert set(sample) == set(sent)
    assert sample["source"] == sent["source"]


@pytest.mark.parametrize(("page_cap", "outcome"), [(None, "pending"), ("20", "released")])
def test_the_sweeper_lambda_lists_as_many_pages_as_its_page_cap_allows(
    sweeper_env: None,
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    page_cap: str | None,
    outcome: str,
) -> None:
    # 1,200 PaymentIntents of other orders during the lease: more than the default 10 pages list.
    if page_cap is not None:
        monkeypatch.setenv("CLAIM_LIST_PAGE_CAP", page_cap)
    began = time.time() - 5000
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: began).claim(ORDER, token=A)
    emulator.add_history(1200, created_from=int(began), created_to=int(began) + LEASE)
    event = json.loads((ROOT / "events" / "sweeper.json").read_text())

    result = sweeper.handler(event, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert result["counts"][outcome] == 1
    status = ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).status  # type: ignore[union-attr]
    assert status is (ClaimStatus.CLAIMED if outcome == "pending" else ClaimStatus.RELEASED)


def test_the_hourly_settlement_check_completes_a_settled_debit_whose_webhook_never_came(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The schedule's ``"check": "settlements"`` input: no sweep lock, no lease needed, one read of
    Stripe per awaiting claim, and the settled debit ends COMPLETED, counted and logged."""
    store = ClaimsStore(claims_table, client=dynamodb)
    debit = Order("ORDER-SEPA", 15000, "EUR", "cus_123", "pm_card_visa")
    store.claim(debit, token=A)
    emulator.force_outcome("processing", order_id=debit.order_id)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    with pytest.raises(PaymentProcessing) as processing:
        holder.charge(debit, attempt=1, idempotency_key=idempotency_key(debit.order_id, 1))
    holder.close()
    intent = processing.value.payment_intent_id
    store.await_settlement(debit.order_id, token=A, attempt=1, payment_intent_id=intent)
    emulator.set_status(intent, "succeeded")
    event = {"source": "payment-saga.sweeper", "check": "settlements", "executionId": "hour-1"}

    result = sweeper.handler(event, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert result == {"settlementCheck": {"completed": 1}, "failed": 0}
    claim = store.get(debit.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.COMPLETED, intent)
    assert [r.message for r in caplog.records if r.message.startswith("settlement_check")] == [
        "settlement_checked",
        "settlement_check_done",
    ]
    assert emitted_metrics(capfd.readouterr().out).get("SettlementChecked") == 1
