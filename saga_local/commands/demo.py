"""``saga demo``: the lab of field report 000 on the embedded stack, guard off, then on, then a decline."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from saga_local.output import Out, money
from saga_local.template import ROOT

if TYPE_CHECKING:
    from saga_local.stack.driver import ExecutionResult
    from saga_local.stack.embedded import EmbeddedStack


def describe_path(out: Out, result: ExecutionResult) -> str:
    arrow = " -> "
    path = arrow.join(result.path)
    outcome = result.outcome
    if outcome == "CHARGED":
        tag = out.ok(f"CHARGED {result.output.get('chargeId')}" if result.output else "CHARGED")
    elif outcome == "DUPLICATE":
        holder = result.holder_status
        tag = out.warn(f"DUPLICATE (holder {holder})")
    else:
        tag = out.bad(outcome)
    return f"{path}   {tag}"


def seed_order(order_id: str = "ORDER-003", **overrides: Any) -> dict[str, Any]:
    order: dict[str, Any] = json.loads((ROOT / "events" / "order.json").read_text())
    order.update({"orderId": order_id, **overrides})
    return order


def _act(out: Out, stack: EmbeddedStack, order: dict[str, Any], copies: int) -> list[ExecutionResult]:
    from saga_local.stack import archive

    before = set(stack.driver.execution_arns())
    stack.driver.send(order, copies=copies)
    stack.driver.pump(pollers=min(copies, 4), timeout=120)
    results = [stack.driver.result(a) for a in stack.driver.execution_arns() if a not in before]
    for result in sorted(results, key=lambda r: r.name):
        # The demo's stacks stop when it ends: record each execution so `saga trace NAME` still shows it.
        archive.record(archive.read_execution(stack.driver.sfn, result.arn))
        out(f"    {result.name}")
        out(f"      {describe_path(out, result)}")
    return results


def _charges_line(out: Out, stack: EmbeddedStack, order: dict[str, Any]) -> int:
    charges = stack.provider.charges_for(order["orderId"])
    total = sum(c.amount for c in charges)
    owed = order["amount"]
    line = (
        f"    provider charges for {order['orderId']}: {len(charges)}"
        f" -> {money(total, order['currency'])} billed for a {money(owed, order['currency'])} order"
    )
    out(out.ok(line) if total == owed else out.bad(line))
    return len(charges)


def run_demo(runtime: str) -> int:
    """Tell the story; 0 when every act came out as promised."""
    from saga_local.stack.embedded import EmbeddedStack

    out = Out()
    began = time.monotonic()
    order = seed_order()
    out(out.bold("Payment saga demo: the lab of field report 000 on the embedded local stack"))
    out(
        out.dim(
            "  moto (pinned) on 127.0.0.1, the real ASL from statemachine/, the real handlers from\n"
            "  functions/ in worker processes, a Stripe emulator; every resource comes from template.yaml."
        )
    )
    out()
    out(
        out.bold(
            f"Act 1: guard OFF. {order['orderId']} ({money(order['amount'], order['currency'])}) delivered 4"
            " times at once."
        )
    )
    out(
        out.dim(
            "  The claim is bypassed (the lab's IDEMPOTENCY=0, local stack only) and the provider does not"
            " deduplicate."
        )
    )
    with EmbeddedStack(guard=False, provider_dedupe=False, runtime=runtime) as stack:
        _act(out, stack, order, 4)
        unguarded = _charges_line(out, stack, order)
    out()
    out(out.bold("Act 2: guard ON (the template as deployed). The same 4 deliveries."))
    out(out.dim("  The provider still does not deduplicate: one charge here is the claim's doing alone."))
    with EmbeddedStack(provider_dedupe=False, runtime=runtime) as stack:
        _act(out, stack, order, 4)
        guarded = _charges_line(out, stack, order)
        claim = stack.driver.claim(order["orderId"]) or {}
        out(f"    claim {order['orderId']}: status {claim.get('status')}, attempt {claim.get('attempt')}")
        out()
        declined = seed_order("ORDER-004", paymentMethod="pm_card_chargeDeclined")
        out(out.bold("Act 3: a declined card releases its claim."))
        results = _act(out, stack, declined, 1)
        claim = stack.driver.claim("ORDER-004") or {}
        out(
            f"    claim ORDER-004: status {claim.get('status')} ({claim.get('releaseReason')}),"
            f" charges {len(stack.provider.charges_for('ORDER-004'))}"
        )
    out()
    elapsed = time.monotonic() - began
    ok = unguarded == 4 and guarded == 1 and results and results[0].error == "PaymentDeclined"
    verdict = out.ok("as promised") if ok else out.bad("NOT as promised")
    out(f"Charges: {unguarded} without the claim, {guarded} with it; the decline charged nothing: {verdict}.")
    out(
        out.dim(
            f"Done in {elapsed:.1f} s. Each execution above was recorded: `saga trace <name>` shows it"
            " state by state\n(`--html FILE` as a graph). Next: `saga up`, then `saga send --copies 4`."
        )
    )
    return 0 if ok else 1


def cmd_demo(args: argparse.Namespace) -> int:
    """``saga demo``: the lab of field report 000, guard off then on, then a decline."""
    return run_demo(args.runtime)
