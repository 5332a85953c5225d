"""The figures the README and docs/ read off the repository itself, not off a run.

The README's graph of the state machine is drawn from the definition (``template.yaml``'s
``DefinitionS3Location``) by :func:`saga_local.trace.mermaid.flowchart`, so it shows every state the
definition holds and no other. docs/design.md's counts and defaults (how long a closed claim is
kept and why, the lease and the execution timeout, the sweeper's list window and cap, how many
resources operations take) are read from ``template.yaml``, the definition and the sweeper's
constants; docs/order-message.md's count of currencies from the product's table.
:mod:`saga_local.harness.figures` writes these blocks with the others (``make docs-figures``) and
checks them exactly: with no run behind them there is no run's noise to allow for.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from payment_saga import currencies, payments
from payment_saga.reconcile import CLOCK_MARGIN_SECONDS
from saga_local.template import ROOT, load_template
from saga_local.trace.history import load_definition
from saga_local.trace.mermaid import flowchart

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

#: The state machine whose definition the README draws.
STATE_MACHINE = "PaymentSagaStateMachine"


def definition_path(template: dict[str, Any] | None = None) -> Path:
    """The definition's file, as the template names it (relative to the repository)."""
    properties = (template or _template())["Resources"][STATE_MACHINE]["Properties"]
    location = properties.get("DefinitionS3Location") or properties.get("DefinitionUri")
    if not isinstance(location, str):
        raise ValueError(f"{STATE_MACHINE} names no local definition file")
    return ROOT / location


def state_machine_graph(definition: dict[str, Any] | None = None) -> str:
    """The README's graph: a Mermaid flowchart of ``definition`` (the template's, by default)."""
    path = definition_path()
    if definition is None:
        definition = load_definition(path.read_text(encoding="utf-8"))
    return flowchart(definition, source=path.relative_to(ROOT).as_posix())


_DAY = 86_400
_WORDS = {5.0: "five", 10.0: "ten", 15.0: "fifteen", 20.0: "twenty", 30.0: "thirty"}


@cache
def _template() -> dict[str, Any]:
    """template.yaml, read once per process (the renderers only read it)."""
    return load_template()


def _parameter(name: str, field: str = "Default") -> int:
    return int(_template()["Parameters"][name][field])


def _queue_days(logical_id: str) -> int:
    """How long a queue of the template keeps a message, in whole days."""
    return int(_template()["Resources"][logical_id]["Properties"]["MessageRetentionPeriod"]) // _DAY


def claim_retention() -> str:
    """``ClaimRetentionDays``: its default and its least value."""
    return (
        f"{_parameter('ClaimRetentionDays')} days by default,"
        f" at least {_parameter('ClaimRetentionDays', 'MinValue')}"
    )


def orders_queue_days() -> str:
    return f"{_queue_days('OrdersQueue')} days"


def dead_letter_days() -> str:
    return f"{_queue_days('OrdersDeadLetterQueue')} days"


def redrive_days() -> str:
    """The longest a copy can still arrive: the dead-letter queue's retention, then a redrive's new
    window in the orders queue."""
    return f"{_queue_days('OrdersDeadLetterQueue') + _queue_days('OrdersQueue')} days"


def claim_lease() -> str:
    return f"{_parameter('ClaimLeaseSeconds')} s"


def execution_timeout() -> str:
    definition = load_definition(definition_path().read_text(encoding="utf-8"))
    return f"{int(definition['TimeoutSeconds'])} s"


def _list_window_seconds() -> int:
    """The sweeper's list window for an attempt: its lease, widened by the clock margin each side."""
    return _parameter("ClaimLeaseSeconds") + 2 * CLOCK_MARGIN_SECONDS


def clock_margin() -> str:
    """How much wider than the attempt's own window the sweeper lists, on each side."""
    minutes = CLOCK_MARGIN_SECONDS / 60
    return f"{_WORDS.get(minutes, f'{minutes:g}')} minutes"


def list_window() -> str:
    return f"{_list_window_seconds() / 60:.0f} minutes"


def list_cap() -> str:
    """The sweeper's page cap (the template's ``CLAIM_LIST_PAGE_CAP``), what it holds, and the order
    rate under which a whole account's PaymentIntents of one window fit in it."""
    sweeper = _template()["Resources"]["SweeperFunction"]["Properties"]["Environment"]["Variables"]
    pages = int(sweeper["CLAIM_LIST_PAGE_CAP"])
    # The page size the provider client asks Stripe for: what a page holds.
    held = pages * payments._LIST_PAGE_SIZE
    return (
        f"{pages} pages ({held:,} PaymentIntents; the whole account's fit below about"
        f" {held / _list_window_seconds():.1f} orders per second"
    )


def currency_count() -> str:
    """How many currency codes an order may be in (docs/order-message.md)."""
    return f"{len(currencies.SUPPORTED_CURRENCIES)} codes"


#: Block name -> what renders it (from the repository alone).
RENDERERS: dict[str, Callable[[], str]] = {
    "state-machine": state_machine_graph,
    "claim-retention": claim_retention,
    "orders-queue-days": orders_queue_days,
    "dead-letter-days": dead_letter_days,
    "redrive-days": redrive_days,
    "claim-lease": claim_lease,
    "execution-timeout": execution_timeout,
    "clock-margin": clock_margin,
    "list-window": list_window,
    "list-cap": list_cap,
    "currency-count": currency_count,
}
