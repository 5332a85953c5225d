"""``saga reconcile``: what the sweeper would do with a stack's stale claims (harness/sweep), or do it."""

from __future__ import annotations

import argparse
import json
import time

from saga_local.output import Out
from saga_local.stack import targets
from saga_local.stack.targets import resolve_target


def cmd_reconcile(args: argparse.Namespace) -> int:
    """``saga reconcile``: what the sweeper would do with stale claims, or do it with --apply."""
    from payment_saga.api_keys import KeyModeMismatch, UnsafeApiBase
    from payment_saga.claims import ClaimsStore
    from payment_saga.payments import StripeProvider
    from payment_saga.reconcile import reconcile
    from saga_local.commands import stripe_mode
    from saga_local.harness.sweep import not_due, not_due_deployed, reconcile_deployed, render

    waiting = None
    if args.stack:
        try:
            report = reconcile_deployed(
                args.stack, apply=args.apply, region=args.region, endpoint_url=args.endpoint_url
            )
        except UnsafeApiBase as exc:
            raise SystemExit(f"saga reconcile: the stack's PaymentApiBase is refused: {exc}") from None
        except (LookupError, KeyModeMismatch) as exc:
            # Each names what to fix in the stack (a parameter, its secret), never the key.
            raise SystemExit(f"saga reconcile: {exc}") from None
        waiting = not_due_deployed(
            args.stack, region=args.region, now=report.now, endpoint_url=args.endpoint_url
        )
    else:
        from saga_local.commands.clock import stack_offset

        if args.apply and args.later:
            raise SystemExit(
                "saga reconcile: --later with --apply would write its decisions stamped in the future:"
                f" let the time pass with `saga clock advance {args.later:g}` (the sweeper then runs), or"
                " drop --apply to only look."
            )
        target = resolve_target(args)
        state = json.loads(targets.STATE_FILE.read_text())
        # Locally, decide on the stack's clock (`saga clock advance` moves it); --later only looks
        # further, without writing. Against AWS, time is time.
        now = time.time() + stack_offset(state) + args.later
        store = ClaimsStore(
            target.outputs["ClaimsTableName"], client=target.clients("dynamodb"), clock=lambda: now
        )
        provider = StripeProvider(stripe_mode.provider_key(state), api_base=state["provider"])
        report = reconcile(store, provider, now=now, apply=args.apply, search_grace_seconds=args.grace)
        waiting = not_due(store, now)  # why nothing more is due: the leases still running
    Out()(render(report, waiting=waiting))
    return 0
