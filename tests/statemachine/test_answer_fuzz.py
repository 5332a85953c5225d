"""Each Lambda Task's answer, every field the definition reads from it removed or mistyped in turn.

The fields are read from the definition itself (each Task's ResultSelector: every later state reads a
Lambda's answer through it), so a field the definition starts reading is fuzzed without editing this
file. The engine is the patched one (``saga_local.aws.moto_adapter``): a ResultSelector path that
finds nothing is ``States.Runtime``, which no Retry nor Catch handles, so the execution fails at that
Task as it would on AWS. What must hold whatever the answer: the order is charged at most once, and it
is not lost: after the execution and the sweeper (run once the lease and the search's grace are over)
its claim is completed with the one charge it made, or released with nothing charged, or still open
for a payment that settles later.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from payment_saga.claims import ClaimsStore
from payment_saga.payments import StripeProvider
from payment_saga.reconcile import reconcile
from saga_local.aws.stack import LOCAL_API_KEY, REGION
from saga_local.harness.chaos_report import broken_invariants
from saga_local.runtime.api import Invocation
from saga_local.template import ROOT
from tests.helpers import Saga, order

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga_local.stack.driver import ExecutionResult

DEFINITION = json.loads((ROOT / "statemachine" / "payment_saga.asl.json").read_text())
#: The template's default lease and the sweeper's default search grace (tests/statemachine/test_sweeper.py).
LEASE, GRACE = 900, 3600


@dataclass(frozen=True)
class Step:
    """A Lambda Task of the definition: its function, how an order reaches it, how to tell its call."""

    function: str
    order: dict[str, Any]
    processing: bool = False
    #: Among the function's invocations, this Task's (Mark Complete and Await Settlement share one).
    is_call: Callable[[dict[str, Any]], bool] = lambda _: True


DECLINED = {"paymentMethod": "pm_card_chargeDeclined"}
STEPS = {
    "Claim Order": Step("ClaimOrderFunction", {}),
    "Charge Payment": Step("ChargePaymentFunction", {}),
    "Mark Complete": Step("MarkCompleteFunction", {}, is_call=lambda event: "settlement" not in event),
    "Await Settlement": Step(
        "MarkCompleteFunction", {}, processing=True, is_call=lambda event: "settlement" in event
    ),
    "Release Claim": Step("ReleaseClaimFunction", DECLINED),
}


def answer_fields(state: str) -> list[str]:
    """The fields of the Lambda's answer the state's ResultSelector reads (``$.Payload.<field>``)."""
    selector: dict[str, str] = DEFINITION["States"][state]["ResultSelector"]
    return [path.removeprefix("$.Payload.") for path in selector.values()]


def test_every_lambda_task_of_the_definition_is_fuzzed() -> None:
    lambda_tasks = {
        name
        for name, state in DEFINITION["States"].items()
        if state["Type"] == "Task" and state["Resource"].endswith(":states:::lambda:invoke")
    }
    assert lambda_tasks == set(STEPS)
    for state in STEPS:
        selector = DEFINITION["States"][state]["ResultSelector"]
        assert all(path.startswith("$.Payload.") for path in selector.values())


def mistyped(value: Any) -> Any:
    """A value of another JSON type than ``value``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return 12345
    if value is None:
        return {"unexpected": True}
    return "unexpected"


CHANGES = ("removed", "mistyped")


def order_id_of(event: dict[str, Any]) -> str | None:
    """The orderId a step's event carries (Mark Complete's at the top, Release Claim's in its state)."""
    found = event.get("orderId") or (event.get("order") or {}).get("orderId")
    if found is None and isinstance(event.get("state"), dict):
        found = (event["state"].get("order") or {}).get("orderId")
    return found


def sweep_after_the_grace(saga: Saga) -> None:
    later = time.time() + LEASE + GRACE + 1
    store = ClaimsStore(
        saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION), clock=lambda: later
    )
    provider = StripeProvider(LOCAL_API_KEY, api_base=saga.provider.url)
    try:
        reconcile(store, provider, now=later, apply=True, search_grace_seconds=GRACE)
    finally:
        provider.close()


@pytest.mark.parametrize("state", list(STEPS))
def test_an_answer_missing_or_mistyping_a_field_loses_no_order_and_charges_it_at_most_once(
    saga: Saga, monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    """One order per (field, change), all on one stack: each order's answer from ``state`` has that
    one field removed or mistyped."""
    step = STEPS[state]
    function_name = saga.stack.function_name(step.function)
    cases = {
        f"ORDER-FUZZ-{i}": (field, how)
        for i, (field, how) in enumerate((field, how) for field in answer_fields(state) for how in CHANGES)
    }
    changed: dict[str, list[Any]] = {order_id: [] for order_id in cases}
    real_invoke = saga.runtime.invoke

    def invoke(name: str, payload: bytes) -> Invocation:
        answer = real_invoke(name, payload)
        event = json.loads(payload)
        order_id = order_id_of(event)
        if name != function_name or answer.function_error or order_id not in cases or not step.is_call(event):
            return answer
        field, how = cases[order_id]
        body = json.loads(answer.payload)
        if not isinstance(body, dict) or field not in body:
            return answer
        changed[order_id].append(body[field])
        if how == "removed":
            del body[field]
        else:
            body[field] = mistyped(body[field])
        return Invocation(json.dumps(body).encode())

    monkeypatch.setattr(saga.runtime, "invoke", invoke)
    results = {}
    for i, order_id in enumerate(cases):
        if step.processing:
            saga.provider.force_outcome("processing", order_id=order_id, times=100)
        execution = saga.driver.start(order(order_id, **step.order), name=f"fuzzed-{i}")
        results[order_id] = saga.driver.wait(execution)
        assert saga.charges(order_id) <= 1, (order_id, cases[order_id])

    sweep_after_the_grace(saga)

    problems: list[str] = []
    for order_id, (field, how) in cases.items():
        problems.extend(
            f"{state} {field} {how}: {problem}"
            for problem in judge(saga, step, state, order_id, how, results[order_id], changed[order_id])
        )
    assert problems == []


def judge(
    saga: Saga, step: Step, state: str, order_id: str, how: str, result: ExecutionResult, changed: list[Any]
) -> list[str]:
    """What went wrong for one order, after its execution and the sweep (nothing, when all is well)."""
    if not changed:
        return ["the field was never in the answer"]
    problems: list[str] = []
    if how == "removed":
        # AWS: the ResultSelector's path finds nothing, States.Runtime, not retried, not caught.
        if (result.status, result.error, result.path[-1]) != ("FAILED", "States.Runtime", state):
            problems.append(
                f"ended {result.status} {result.error} at {result.path[-1]}, not States.Runtime there"
            )
        if len(changed) != 1:
            problems.append(f"answered {len(changed)} times: retried")
    claim = saga.driver.claim(order_id)
    if claim is None:
        return [*problems, "no claim"]
    charges = saga.provider.charges_for(order_id)
    problems.extend(broken_invariants([order_id], {order_id: claim}, charges))
    if charges and claim["status"] != "COMPLETED":
        problems.append(f"charged, claim {claim['status']} after the sweep")
    if not charges and not step.processing and claim["status"] != "RELEASED":
        problems.append(f"never charged, claim {claim['status']} after the sweep")
    if not charges and step.processing and claim["status"] not in {"CLAIMED", "RELEASED"}:
        problems.append(f"settling, claim {claim['status']} after the sweep")
    return problems
