"""``ClaimsStore``: the claim writes and the closing writes on one table."""

from __future__ import annotations

from payment_saga.claims.claiming import ClaimWrites
from payment_saga.claims.closing import ClosingWrites
from payment_saga.claims.settlement import SettlementWrites


class ClaimsStore(ClaimWrites, ClosingWrites, SettlementWrites):
    """Conditional claim / complete / release on the claims table.

    Args:
        table_name: the claims table (base-table key ``orderId``).
        client: a boto3 DynamoDB *client* (injected: tests hand in one made under moto).
        clock: seconds since the epoch; leases and TTLs are computed from it.
        lease_seconds: how long a claim protects its holder (see ``DEFAULT_LEASE_SECONDS``).
        retention_seconds: TTL after which DynamoDB may delete a closed (completed or released) row.
        replay_horizon_seconds: the oldest attempt a takeover may continue.
        settlement_window_seconds: how long a payment that settles later may take (the claim's lease
            while it awaits settlement; see ``DEFAULT_SETTLEMENT_WINDOW_DAYS``).
    """
