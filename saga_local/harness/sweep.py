"""``saga reconcile``: run the sweeper's reconciliation by hand, on the local stack or a deployed one.

The same domain function the scheduled Lambda runs (``payment_saga.reconcile.reconcile``), so what
an operator sees in a dry run is what the sweeper would do. Dry run by default; ``apply=True``
writes. It never charges: it only searches and lists the provider's PaymentIntents.

Against a deployed stack (``reconcile_deployed``) it runs with the caller's credentials, which need
what the sweeper's role has: ``dynamodb:Query`` on the claims table's ``OpenClaimsByLease`` index,
``dynamodb:UpdateItem`` on the table (only with ``apply``), ``secretsmanager:GetSecretValue`` on the
provider key's secret, and ``cloudformation:DescribeStacks`` on the stack to find them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3

from payment_saga.api_keys import check_api_base, stripe_secret_from_string
from payment_saga.claims import SECONDS_PER_DAY, Claim, ClaimsStore
from payment_saga.clock import iso_utc, system_clock
from payment_saga.payments import StripeProvider
from payment_saga.reconcile import (
    DEFAULT_LIST_PAGE_CAP,
    DEFAULT_SEARCH_GRACE_SECONDS,
    ReconcileReport,
    reconcile,
)
from saga_local.aws.stack import LOCAL_API_KEY

if TYPE_CHECKING:
    from saga_local.stack.embedded import EmbeddedStack


def reconcile_stack(
    stack: EmbeddedStack,
    *,
    apply: bool,
    now: float | None = None,
    search_grace_seconds: int = DEFAULT_SEARCH_GRACE_SECONDS,
    list_page_cap: int = DEFAULT_LIST_PAGE_CAP,
) -> ReconcileReport:
    """Reconcile the embedded local stack's stale claims against its provider emulator.

    ``now`` pretends the sweep runs at that time (both for finding expired leases and for the
    writes' lease check), so a demo can look past a lease without waiting for it. ``list_page_cap``
    is the sweeper's bound on the pages one claim's proof may read (see ``reconcile``).
    """
    moment = time.time() if now is None else now
    store = ClaimsStore(
        stack.stack.table_name,
        client=stack.client("dynamodb"),
        clock=system_clock if now is None else (lambda: moment),
    )
    provider = StripeProvider(LOCAL_API_KEY, api_base=stack.provider.url)
    try:
        return reconcile(
            store,
            provider,
            now=moment,
            apply=apply,
            search_grace_seconds=search_grace_seconds,
            list_page_cap=list_page_cap,
        )
    finally:
        provider.close()


@dataclass(frozen=True)
class DeployedStack:
    """What reconciliation needs from a deployed stack, read from CloudFormation."""

    name: str
    table_name: str
    secret_arn: str
    api_base: str | None
    #: The stack's ``ClaimRetentionDays``: a claim this closes is kept as long as the sweeper's would be.
    retention_seconds: int
    #: The account the stack lives in (from its StackId), which its secret must be in too.
    account: str | None = None
    #: The stack's ``PaymentApiMode`` (``test`` when it predates the parameter, as its default):
    #: the key in its secret must be of this mode, as the deployed sweeper requires.
    api_mode: str = "test"


def deployed_stack(cloudformation: Any, stack_name: str) -> DeployedStack:
    """Read the claims table (output ``ClaimsTableName``), the provider settings (the stack's
    parameters ``PaymentApiKeySecretArn``, ``PaymentApiBase`` and ``PaymentApiMode``) and the
    retention of a closed claim (``ClaimRetentionDays``) of a deployed stack.

    A stack without ``ClaimRetentionDays`` is refused rather than given the library's default: a
    claim closed with a shorter retention than the stack's could expire while a copy of its order
    is still in a queue, and be charged again.
    """
    stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    if not stacks:
        raise LookupError(f"no stack named {stack_name}")
    found = stacks[0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in found.get("Outputs", [])}
    parameters = {
        p["ParameterKey"]: p.get("ResolvedValue", p.get("ParameterValue", ""))
        for p in found.get("Parameters", [])
    }
    missing = [name for name in ("ClaimsTableName",) if not outputs.get(name)] + [
        name for name in ("PaymentApiKeySecretArn",) if not parameters.get(name)
    ]
    if missing:
        raise LookupError(f"stack {stack_name} is not a payment saga stack: no {', '.join(missing)}")
    if not parameters.get("ClaimRetentionDays"):
        raise LookupError(
            f"stack {stack_name} has no ClaimRetentionDays parameter, so how long its closed claims are kept"
            " is unknown: deploy this version of template.yaml to it first (sam deploy)"
        )
    return DeployedStack(
        name=stack_name,
        table_name=outputs["ClaimsTableName"],
        secret_arn=parameters["PaymentApiKeySecretArn"],
        api_base=parameters.get("PaymentApiBase") or None,
        retention_seconds=int(parameters["ClaimRetentionDays"]) * SECONDS_PER_DAY,
        account=_account_of(str(found.get("StackId", ""))),
        api_mode=parameters.get("PaymentApiMode") or "test",
    )


def _account_of(arn: str) -> str | None:
    """The account field of an ARN (``arn:PARTITION:SERVICE:REGION:ACCOUNT:...``), or None."""
    parts = arn.split(":")
    return parts[4] if len(parts) > 5 and parts[0] == "arn" and parts[4] else None


def reconcile_deployed(
    stack_name: str,
    *,
    apply: bool,
    region: str | None,
    search_grace_seconds: int = DEFAULT_SEARCH_GRACE_SECONDS,
    session: boto3.session.Session | None = None,
    endpoint_url: str | None = None,
) -> ReconcileReport:
    """Reconcile a deployed stack's stale claims, with the caller's AWS credentials.

    The provider key is read from the stack's secret, as the sweeper reads it. Use the same
    ``search_grace_seconds`` as the deployed sweeper (its ``CLAIM_SEARCH_GRACE_SECONDS``); a
    shorter one would trust a search that may still lag. ``endpoint_url`` sends every AWS call
    there instead of to AWS (``--endpoint-url``: a moto server).
    """
    session = session or boto3.session.Session(region_name=region)
    found = deployed_stack(session.client("cloudformation", endpoint_url=endpoint_url), stack_name)
    # Whoever set the stack's parameters must not get the key from this laptop: the base URL is
    # checked before the secret is read, and again with the key (a live key goes to Stripe only).
    check_api_base(found.api_base)
    if found.account is not None and found.secret_arn.split(":")[4:5] != [found.account]:
        raise LookupError(
            f"stack {stack_name}'s PaymentApiKeySecretArn names a secret in another account than the"
            f" stack's ({found.account}): refusing to read it"
        )
    # The secret is read in the region its ARN names, as the sweeper reads it (it may not be the stack's).
    parts = found.secret_arn.split(":")
    secret_region = parts[3] if len(parts) > 3 and parts[3] else None
    secrets = session.client("secretsmanager", region_name=secret_region, endpoint_url=endpoint_url)
    raw = secrets.get_secret_value(SecretId=found.secret_arn)["SecretString"]
    store = ClaimsStore(
        found.table_name,
        client=session.client("dynamodb", endpoint_url=endpoint_url),
        retention_seconds=found.retention_seconds,
    )
    # A key of the other mode than the stack's is refused before anything is sent, as the sweeper
    # refuses it: reconciling by hand must not succeed where the deployed sweeper would not.
    provider = StripeProvider(stripe_secret_from_string(raw), api_base=found.api_base, mode=found.api_mode)
    try:
        return reconcile(
            store, provider, now=time.time(), apply=apply, search_grace_seconds=search_grace_seconds
        )
    finally:
        provider.close()


def not_due_deployed(
    stack_name: str,
    *,
    region: str | None,
    now: float,
    session: boto3.session.Session | None = None,
    endpoint_url: str | None = None,
) -> list[Claim]:
    """:func:`not_due` on a deployed stack's claims table (found as :func:`reconcile_deployed` finds
    it, ``endpoint_url`` too): why its sweep has nothing to do yet. Reads no secret and writes nothing."""
    session = session or boto3.session.Session(region_name=region)
    found = deployed_stack(session.client("cloudformation", endpoint_url=endpoint_url), stack_name)
    store = ClaimsStore(
        found.table_name,
        client=session.client("dynamodb", endpoint_url=endpoint_url),
        retention_seconds=found.retention_seconds,
    )
    return not_due(store, now)


#: How far ahead ``not_due`` looks for open claims: every lease there is.
_FOREVER_SECONDS = 100 * 365 * SECONDS_PER_DAY


def not_due(store: ClaimsStore, now: float) -> list[Claim]:
    """The open claims whose lease has not ended at ``now``: why a sweep has nothing to do yet.

    Reads the sweeper's ``OpenClaimsByLease`` index, as a sweep does (discovery only, never on the
    charge path), past ``now``.
    """
    everything = store.open_claims(lease_expired_before=int(now) + _FOREVER_SECONDS)
    return [claim for claim in everything if claim.lease_expires_at >= now]


def render(report: ReconcileReport, *, waiting: list[Claim] | None = None) -> str:
    """The report for a terminal: one line per stale claim, then the counts; with ``waiting`` (the
    open claims whose lease has not ended), when each of those will be due."""
    verb = "" if report.apply else "would be "
    lines = [
        f"stale claims at {iso_utc(report.now)} ({'applied' if report.apply else 'dry run: nothing written'},"
        f" released only on the provider's list, {report.search_grace_seconds} s after a lease ends)"
    ]
    for decision in report.decisions:
        charge = f" {decision.charge_id}" if decision.charge_id else ""
        if decision.release_reason is not None:
            charge += f" ({decision.release_reason.value})"
        if decision.extra_charge_ids:
            charge += f" DUPLICATE CHARGES: {', '.join(decision.extra_charge_ids)}"
        outcome = decision.outcome.value
        shown = f"{verb}{outcome}" if outcome in ("completed", "released") else outcome
        lines.append(
            f"  {decision.order_id:<24} attempt {decision.attempt}  {shown}{charge}  {decision.reason}"
        )
    if not report.decisions:
        lines.append("  none" + (": no claim's lease has ended yet" if waiting else ""))
    for claim in waiting or []:
        due = claim.lease_expires_at
        lines.append(
            f"  {claim.order_id:<24} attempt {claim.attempt}  open, lease ends {iso_utc(due)}"
            f" (in {due - report.now:,.0f} s): decided from then; released on a search that finds"
            f" nothing only from {iso_utc(due + report.search_grace_seconds)}"
        )
    counts = ", ".join(f"{name} {n}" for name, n in report.counts.items() if n)
    lines.append(f"total: {counts or 'nothing to do'}{'' if report.finished else ' (stopped early)'}")
    return "\n".join(lines)
