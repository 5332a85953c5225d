"""``saga``: run, watch and break the payment saga, locally or against a deployed stack.

    saga demo                      the lab of seed 000, guard off then on, then a decline
    saga up                        start the embedded local stack and keep it running
    saga send [FILE] [--copies N]  send an order (events/order.json by default)
    saga trace EXECUTION [--html]  an execution state by state, or as a graph page
    saga simulate --orders N ...   many orders, duplicates and concurrency; a report
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from saga_local.template import ROOT

if TYPE_CHECKING:
    from collections.abc import Sequence

    from saga_local.driver import ExecutionResult
    from saga_local.embedded import EmbeddedStack

ZERO_DECIMAL = {"BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV", "XAF",
                "XOF", "XPF"}


def money(amount: int, currency: str) -> str:
    """Minor units to a readable amount: 15000 BRL -> '150.00 BRL'."""
    if currency in ZERO_DECIMAL:
        return f"{amount} {currency}"
    return f"{amount // 100}.{amount % 100:02d} {currency}"


class Out:
    """Terminal output with colour when it is a terminal."""

    def __init__(self, stream: Any = sys.stdout) -> None:
        self.stream = stream
        self.color = hasattr(stream, "isatty") and stream.isatty()

    def __call__(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def paint(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def ok(self, text: str) -> str:
        return self.paint(text, "32")

    def bad(self, text: str) -> str:
        return self.paint(text, "31")

    def warn(self, text: str) -> str:
        return self.paint(text, "33")

    def bold(self, text: str) -> str:
        return self.paint(text, "1")

    def dim(self, text: str) -> str:
        return self.paint(text, "2")


def describe_path(out: Out, result: ExecutionResult) -> str:
    arrow = " -> "
    path = arrow.join(result.path)
    outcome = result.outcome
    if outcome == "CHARGED":
        tag = out.ok(f"CHARGED {result.output.get('chargeId')}" if result.output else "CHARGED")
    elif outcome == "DUPLICATE":
        holder = (result.output or {}).get("holderStatus")
        tag = out.warn(f"DUPLICATE (holder {holder})")
    else:
        tag = out.bad(outcome)
    return f"{path}   {tag}"


def seed_order(order_id: str = "ORDER-003", **overrides: Any) -> dict[str, Any]:
    order = json.loads((ROOT / "events" / "order.json").read_text())
    order.update({"orderId": order_id, **overrides})
    return order


# -- demo ----------------------------------------------------------------------------------------


def _act(out: Out, stack: EmbeddedStack, order: dict[str, Any], copies: int) -> list[ExecutionResult]:
    before = set(stack.driver.execution_arns())
    stack.driver.send(order, copies=copies)
    stack.driver.pump(pollers=min(copies, 4), timeout=120)
    results = [stack.driver.result(a) for a in stack.driver.execution_arns() if a not in before]
    for result in sorted(results, key=lambda r: r.name):
        out(f"    {out.dim(result.name[:24] + '...')}  {describe_path(out, result)}")
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


def cmd_demo(args: argparse.Namespace) -> int:
    from saga_local.embedded import EmbeddedStack  # noqa: PLC0415 - keeps `saga --help` fast

    out = Out()
    began = time.monotonic()
    order = seed_order()
    out(out.bold("Payment saga demo: the lab of seed 000 on the embedded local stack"))
    out(
        out.dim(
            "  moto (pinned) on 127.0.0.1, the real ASL from statemachine/, the real handlers from functions/\n"
            "  in worker processes, a Stripe emulator; every resource comes from template.yaml."
        )
    )
    out()
    out(out.bold(f"Act 1: guard OFF. {order['orderId']} ({money(order['amount'], order['currency'])}) delivered 4"
                 " times at once."))
    out(out.dim("  The claim is bypassed (the lab's IDEMPOTENCY=0, local stack only) and the provider does not"
                " deduplicate."))
    with EmbeddedStack(guard=False, provider_dedupe=False, runtime=args.runtime) as stack:
        _act(out, stack, order, 4)
        unguarded = _charges_line(out, stack, order)
    out()
    out(out.bold("Act 2: guard ON (the template as deployed). The same 4 deliveries."))
    out(out.dim("  The provider still does not deduplicate: one charge here is the claim's doing alone."))
    with EmbeddedStack(provider_dedupe=False, runtime=args.runtime) as stack:
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
    out(out.dim(f"Done in {elapsed:.1f} s. Next: `saga up`, then `saga send --copies 4` and `saga trace`."))
    return 0 if ok else 1


# -- entry point ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="saga", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the seed-000 lab: four charges without the claim, one with it")
    demo.add_argument("--runtime", choices=["workers", "inprocess"], default="workers",
                      help="run handlers in worker processes (as Lambda) or in threads")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
