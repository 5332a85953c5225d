"""``saga fault``: break the provider of a running `saga up`, to rehearse the runbook as it happens.

The Stripe emulator of `saga up` takes faults over its own ``/_emulator/`` routes (not Stripe's; see
``saga_local.stripe_emulator.admin``). Each kind here is one the runbook answers:

* ``outage``: every request to the provider fails with a 500 before it is applied, until
  ``saga fault clear``: charges end in Needs Reconciliation (the outcome is unknown), the claim is
  kept, and the sweeper resolves it once the provider is back and the lease has run out;
* ``lost-answer``: the next charge (of ``--order-id``, or any) is applied, then its answer is lost
  (a 500 after the commit): the retry replays it under the same idempotency key and the order is
  charged once;
* ``clear``: every fault and failure rate removed.

The functions' own faults (a throttled Claim Order, a Lambda that dies) live in the `saga up`
process and are not reachable from here: ``saga chaos`` injects those.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.request
from typing import Any

from saga_local.commands.targets import running_stack
from saga_local.output import Out
from saga_local.stripe_emulator import ENDPOINTS
from saga_local.stripe_emulator.emulator import ADMIN_TOKEN_HEADER

KINDS = ("outage", "lost-answer", "clear")


class FaultError(Exception):
    """The emulator could not be reached, or refused the fault, in words."""


def _call(provider: str, token: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(  # noqa: S310 - the local emulator's loopback URL
        f"{provider}/_emulator{path}",
        data=json.dumps(body or {}).encode(),
        method=method,
        headers={"Content-Type": "application/json", ADMIN_TOKEN_HEADER: token},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise FaultError(
            f"the emulator at {provider} refused {method} {path}: {exc.read().decode()}"
        ) from None
    except OSError as exc:
        raise FaultError(f"nothing answers at {provider} (is `saga up` still running?): {exc}") from None


def apply(provider: str, kind: str, *, token: str, order_id: str | None = None, times: int = 1) -> str:
    """Put the fault on the emulator at ``provider`` (``token``: its admin token, from the stack
    file `saga up` writes); what it will do, in one line."""
    if kind == "outage":
        for endpoint in sorted(ENDPOINTS):
            _call(
                provider,
                token,
                "POST",
                "/failure-rates",
                {"kind": "fail_before_apply", "probability": 1.0, "endpoint": endpoint},
            )
        return "provider outage: every request fails (HTTP 500, nothing applied) until `saga fault clear`"
    if kind == "lost-answer":
        _call(
            provider,
            token,
            "POST",
            "/faults",
            {"kind": "fail_after_apply", "orderId": order_id, "times": times},
        )
        which = f"of {order_id}" if order_id else "of any order"
        return (
            f"the next {times} charge(s) {which} will be applied and their answer lost (HTTP 500 after the"
            " commit); the retry replays the charge under the same key"
        )
    if kind == "clear":
        _call(provider, token, "DELETE", "/faults")
        return "provider faults cleared: every request is answered normally"
    raise FaultError(f"no fault kind {kind!r}; the kinds: {', '.join(KINDS)}")


def cmd_fault(args: argparse.Namespace) -> int:
    """A provider fault on the running `saga up`."""
    state = running_stack("fault")
    if state is None:
        raise SystemExit(
            "saga fault: no local stack is running: start one with `saga up` (another terminal)."
        )
    try:
        said = apply(
            str(state["provider"]),
            args.kind,
            token=str(state.get("providerAdminToken", "")),
            order_id=args.order_id,
            times=args.times,
        )
    except FaultError as exc:
        raise SystemExit(f"saga fault: {exc}") from None
    Out()(said)
    return 0
