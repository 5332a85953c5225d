"""A run's outcome events counted against its orders: does each order end exactly once?

What a subscriber would conclude from the outcome bus alone (every delivery read from the archive
queue by :class:`~saga_local.stack.outcome_log.OutcomeLog`), checked against the provider's ledger
when there is one: the verdict of chaos, the property tests and the simulation reports.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from saga_local.stack.outcome_log import deduplicated, in_outcome_order

if TYPE_CHECKING:
    from collections.abc import Iterable

    from saga_local.stack.outcome_log import OutcomeEvent


def final_outcomes(events: Iterable[OutcomeEvent]) -> dict[str, list[str]]:
    """orderId -> the final outcomes published for it, after deduplication (one each, if all is well),
    ranked by :func:`in_outcome_order` (the last is the order's final outcome)."""
    finals: dict[str, list[str]] = {}
    for event in in_outcome_order(deduplicated(events)):
        if event.final and event.order_id is not None:
            finals.setdefault(event.order_id, []).append(event.detail_type)
    return finals


@dataclass
class OutcomeTally:
    """The outcome events of a run counted against its orders (see :func:`tally`)."""

    #: Distinct events (by ``eventId``) per ``detail-type``, interim ones included.
    by_type: Counter[str]
    #: Orders per final outcome: the last final event of each order that has one.
    by_final: Counter[str]
    #: Orders of the run without any final outcome event: lost, as far as a subscriber knows.
    missing: list[str]
    #: Orders whose final events break the rule (two charges, two ends of one payment attempt, an end
    #: after a charge), or that disagree with the provider's ledger; one line each.
    problems: list[str]
    #: Orders with more than one distinct ``OrderCharged`` event.
    charged_twice: list[str]
    #: Deliveries dropped because their ``eventId`` had been read already.
    duplicates: int
    #: orderId -> its final outcome, for the orders that have one.
    final_by_order: dict[str, str] = field(default_factory=dict)
    #: Orders of the run with an ``OrderRequeued`` event (released never charged, sent again).
    requeued: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Every order has exactly one final outcome, and it agrees with the ledger."""
        return not self.missing and not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "byType": dict(sorted(self.by_type.items())),
            "byFinal": dict(sorted(self.by_final.items())),
            "missing": self.missing,
            "problems": self.problems,
            "chargedTwice": self.charged_twice,
            "duplicates": self.duplicates,
            "requeued": len(self.requeued),
        }


def tally(
    events: Iterable[OutcomeEvent],
    order_ids: Iterable[str],
    ledger: dict[str, list[str]] | None = None,
) -> OutcomeTally:
    """Count a run's outcome events against its orders: each order must have exactly one final outcome.

    ``events`` are every delivery read (duplicates included); they are deduplicated on ``eventId``
    first. An order's *final events* are its distinct events of a :data:`FINAL` type other than
    ``OrderConflict`` (a conflict reports a delivery that disagreed with the order holding the
    ``orderId``, beside that order's own outcome), ranked by :func:`in_outcome_order` (by their
    ``sequence``, so the count does not depend on the order they arrived in). The order's *final
    outcome* is the last of them. They are right when:

    * there is at least one (none: a subscriber never hears how the order ended, ``missing``);
    * every one before the last is ``OrderDeclined``: a decline ends one payment attempt, and the
      customer may pay again under a new ``paymentAttempt``, which ends in its own final event (a
      decline then a charge, or two declines); nothing follows a charge or a needs-attention;
    * no two of them carry the same ``paymentAttempt`` (one end per payment attempt);
    * at most one is ``OrderCharged``.

    ``ledger`` (orderId -> the provider's charge ids for it) adds the money's side: an order whose
    final outcome is ``OrderCharged`` has exactly that charge at the provider, and an order charged
    at the provider says ``OrderCharged``.
    """
    delivered = list(events)
    unique = deduplicated(delivered)
    wanted = list(dict.fromkeys(order_ids))
    finals: dict[str, list[OutcomeEvent]] = {order_id: [] for order_id in wanted}
    by_order: dict[str, list[OutcomeEvent]] = {}
    for event in in_outcome_order(unique):
        if event.order_id in finals:
            by_order.setdefault(event.order_id, []).append(event)
            if event.final and event.detail_type != "OrderConflict":
                finals[event.order_id].append(event)
    by_final: Counter[str] = Counter()
    missing: list[str] = []
    problems: list[str] = []
    charged_twice: list[str] = []
    final_by_order: dict[str, str] = {}
    for order_id, ends in finals.items():
        if not ends:
            missing.append(order_id)
            continue
        by_final[ends[-1].detail_type] += 1
        final_by_order[order_id] = ends[-1].detail_type
        if sum(1 for e in ends if e.detail_type == "OrderCharged") > 1:
            charged_twice.append(order_id)
        problems.extend(_wrong_ends(order_id, ends))
        if ledger is not None:
            problems.extend(_against_ledger(order_id, ends[-1], ledger.get(order_id, [])))
    return OutcomeTally(
        by_type=Counter(e.detail_type for e in unique),
        by_final=by_final,
        missing=missing,
        problems=problems,
        charged_twice=charged_twice,
        duplicates=len(delivered) - len(unique),
        final_by_order=final_by_order,
        requeued=[o for o in finals if any(e.detail_type == "OrderRequeued" for e in by_order.get(o, []))],
    )


def _wrong_ends(order_id: str, ends: list[OutcomeEvent]) -> list[str]:
    kinds = [e.detail_type for e in ends]
    problems = []
    if kinds.count("OrderCharged") > 1:
        problems.append(f"{order_id}: two OrderCharged events ({', '.join(e.event_id for e in ends)})")
    if any(kind != "OrderDeclined" for kind in kinds[:-1]):
        problems.append(f"{order_id}: a final outcome after another end ({', '.join(kinds)})")
    attempts = [e.detail.get("paymentAttempt") for e in ends]
    if len(set(attempts)) < len(attempts):
        problems.append(f"{order_id}: two final outcomes for one payment attempt ({', '.join(kinds)})")
    return problems


def _against_ledger(order_id: str, last: OutcomeEvent, charges: list[str]) -> list[str]:
    if last.detail_type == "OrderCharged" and charges != [last.detail.get("chargeId")]:
        held = ", ".join(charges) or "no charge"
        return [f"{order_id}: OrderCharged with {last.detail.get('chargeId')}, the provider has {held}"]
    if last.detail_type != "OrderCharged" and charges:
        return [f"{order_id}: ended {last.detail_type}, but the provider charged {', '.join(charges)}"]
    return []
