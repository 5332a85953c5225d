"""What tests control: faults and failure rates, and the ``/_emulator/`` routes that reach them.

Every control is a public method of :class:`~saga_local.stripe_emulator.ProviderEmulator`; the
routes here expose them over HTTP (JSON in, JSON out, errors as ``{"error": "..."}``: these are not
Stripe's endpoints and no SDK reads them):

* ``GET /_emulator/health``: ``ok``, ``dedupe``, ``latency``, ``now``;
* ``GET /_emulator/charges?orderId=``: the ledger (of one order, if given);
* ``POST /_emulator/reset``: forget every PaymentIntent, charge, key and fault;
* ``POST /_emulator/faults`` (``kind``, ``orderId``, ``endpoint``, ``times``, ``seconds``), and
  ``DELETE`` it to drop every fault, failure rate and forced outcome;
* ``POST /_emulator/failure-rates`` (``kind``, ``probability``, ``orderId``, ``endpoint``, ``seconds``);
* ``POST /_emulator/outcomes`` (``status``, ``orderId``, ``times``): force the next confirms;
* ``POST /_emulator/config`` (``dedupe``, ``latency``, ``searchLagSeconds``, ``hangSeconds``);
* ``POST /_emulator/clock`` (``advanceSeconds``): move the emulator's clock on;
* ``POST /_emulator/payment_intents/{id}/status`` (``status``): settle a PaymentIntent;
* ``POST /_emulator/trigger`` (``event``, ``paymentIntent`` or ``orderId``): send that webhook event
  for the PaymentIntent, as ``stripe trigger`` does (see ``ProviderEmulator.trigger``);
* ``GET /_emulator/webhooks``: the endpoints and every delivery attempt (``?orderId=``: of one order);
* ``POST /_emulator/webhooks`` (``duplicate``, ``reorder``, ``reorderSeconds``, ``delay``,
  ``delaySeconds``, ``lose``, ``downSeconds``, ``seed``): the delivery disorder, replacing the last
  (``{}`` turns it off).
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args
from urllib.parse import parse_qs

from saga_local.stripe_emulator.responses import Reply, server_error
from saga_local.stripe_emulator.search import order_of_query
from saga_local.stripe_emulator.server import ENDPOINTS, Endpoint
from saga_local.stripe_emulator.webhooks import WebhookDisorder, WebhookSender

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga_local.stripe_emulator.intents import LedgerEntry

FaultKind = Literal[
    "fail_before_apply",
    "fail_after_apply",
    "fail_after_apply_replayed",
    "reset_after_apply",
    "timeout_after_apply",
    "rate_limit",
    "lock_timeout",
]
#: * ``fail_before_apply``: a 500 before the endpoint runs (an edge failure): nothing applied or
#:   saved, so a retry with the same key is applied normally;
#: * ``fail_after_apply``: the request is applied and its real result saved under the key, then the
#:   client gets a 500 (the response was lost on the way back): a retry replays the real result;
#: * ``fail_after_apply_replayed``: applied, and the 500 itself is what is saved under the key, as
#:   Stripe documents for its own 500s: every retry with the key replays the 500 for 24 hours;
#: * ``reset_after_apply``: applied and saved, then the connection is reset without a response;
#: * ``timeout_after_apply``: applied and saved, then the connection is held open without a response
#:   (``seconds``, default :attr:`ProviderEmulator.hang_seconds`) and finally reset;
#: * ``rate_limit``: a 429 ``rate_limit`` (too many requests) before the idempotency layer: nothing
#:   applied or saved, a retry with the same key is applied normally;
#: * ``lock_timeout``: a 429 ``lock_timeout`` (another request holds the object's lock), also
#:   answered before the idempotency layer and not saved.
FAULT_KINDS: frozenset[str] = frozenset(get_args(FaultKind))
#: Faults answered before the idempotency layer (and never saved under a key).
EDGE_FAULTS = frozenset({"rate_limit", "lock_timeout"})


@dataclass
class ProviderFault:
    """Fire ``kind`` on the next ``times`` requests to ``endpoint`` (for ``order_id`` only, if set).

    The order of a request is its ``metadata[orderId]`` (create), its PaymentIntent's (retrieve,
    cancel) or the ``metadata['orderId']`` clause of its query (search).
    """

    kind: FaultKind
    order_id: str | None = None
    endpoint: Endpoint = "create"
    times: int = 1
    seconds: float | None = None
    fired: int = 0


@dataclass(frozen=True)
class FailureRate:
    """Fire ``kind`` on each matching request with probability ``probability``."""

    kind: FaultKind
    probability: float
    order_id: str | None = None
    endpoint: Endpoint = "create"
    seconds: float | None = None


class Controls(Protocol):
    """What the admin routes drive: the emulator's public controls.

    Named here rather than imported, so that this module (which the emulator imports for its fault
    types) does not import the emulator back.
    """

    dedupe: bool
    latency: float
    search_lag_seconds: float
    hang_seconds: float
    webhooks: WebhookSender
    settle_seconds: float | None
    settle_outcome: str

    def now(self) -> float: ...
    def advance_clock(self, seconds: float) -> float: ...
    def charges(self) -> list[LedgerEntry]: ...
    def charges_for(self, order_id: str) -> list[LedgerEntry]: ...
    def reset(self) -> None: ...
    def inject(
        self,
        kind: FaultKind,
        *,
        order_id: str | None = None,
        endpoint: Endpoint = "create",
        times: int = 1,
        seconds: float | None = None,
    ) -> ProviderFault: ...
    def set_failure_rate(
        self,
        kind: FaultKind,
        probability: float,
        *,
        order_id: str | None = None,
        endpoint: Endpoint = "create",
        seconds: float | None = None,
    ) -> FailureRate: ...
    def clear_faults(self) -> None: ...
    def force_outcome(self, status: str, *, order_id: str | None = None, times: int = 1) -> None: ...
    def set_status(self, intent_id: str, status: str) -> dict[str, Any]: ...
    def trigger(
        self, event_type: str, *, intent_id: str | None = None, order_id: str | None = None
    ) -> dict[str, Any]: ...


def check_kind(kind: str) -> FaultKind:
    """``kind`` if it is one of :data:`FAULT_KINDS`."""
    if kind not in FAULT_KINDS:
        raise ValueError(f"fault kind must be one of {sorted(FAULT_KINDS)}, got {kind!r}")
    return kind  # type: ignore[return-value]


def check_endpoint(endpoint: str) -> Endpoint:
    """``endpoint`` if it is one the emulator serves."""
    if endpoint not in ENDPOINTS:
        raise ValueError(f"endpoint must be one of {sorted(ENDPOINTS)}, got {endpoint!r}")
    return endpoint


def order_of(endpoint: str, params: dict[str, Any], intent: dict[str, Any] | None) -> str | None:
    """The order a request is about, for faults aimed at one order (None for a list)."""
    if endpoint == "create":
        metadata = params.get("metadata")
        value = metadata.get("orderId") if isinstance(metadata, dict) else None
        return value if isinstance(value, str) else None
    if endpoint == "search":
        return order_of_query(str(params.get("query", "")))
    if endpoint == "list":
        return None  # a list is not about one order
    return intent["metadata"].get("orderId") if intent is not None else None


def take_fault(
    faults: list[ProviderFault],
    rates: list[FailureRate],
    rng: random.Random,
    *,
    endpoint: str,
    order_id: str | None,
    edge: bool,
) -> ProviderFault | None:
    """The next fault for this request: of the kinds answered before the idempotency layer
    (``edge``) or of those that fire once it has let the request through. Queued faults first."""
    for fault in faults:
        if (
            fault.endpoint == endpoint
            and (fault.kind in EDGE_FAULTS) == edge
            and fault.order_id in (None, order_id)
            and fault.fired < fault.times
        ):
            fault.fired += 1
            return fault
    for rate in rates:
        if (
            rate.endpoint == endpoint
            and (rate.kind in EDGE_FAULTS) == edge
            and rate.order_id in (None, order_id)
            and rng.random() < rate.probability
        ):
            return ProviderFault(rate.kind, rate.order_id, rate.endpoint, 1, rate.seconds, 1)
    return None


def after_apply(fault: ProviderFault, echo: dict[str, str], *, default_hang: float) -> Reply:
    """What the client gets instead of the answer when a fault fires after the request was applied."""
    if fault.kind in ("fail_after_apply", "fail_after_apply_replayed"):
        return server_error(echo)
    if fault.kind == "reset_after_apply":
        return Reply(0, {}, action="reset")
    return Reply(
        0, {}, action="hang", hang_seconds=fault.seconds if fault.seconds is not None else default_hang
    )


# -- the /_emulator routes -----------------------------------------------------------------------

Query = dict[str, list[str]]
Data = dict[str, Any]


def admin_reply(emulator: Controls, method: str, path: str, query: str, body: bytes) -> Reply:
    """Answer a request under ``/_emulator/``; a bad request is a 400 ``{"error": ...}``."""
    try:
        data = json.loads(body) if body.strip() else {}
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
        return _route(emulator, method, path.removeprefix("/_emulator"), parse_qs(query), data)
    except (ValueError, KeyError, TypeError) as exc:
        return Reply(400, {"error": f"{type(exc).__name__}: {exc}"})


def _route(emulator: Controls, method: str, path: str, query: Query, data: Data) -> Reply:
    handler = _ROUTES.get((method, path))
    if handler is not None:
        return handler(emulator, query, data)
    match = re.fullmatch(r"/payment_intents/([A-Za-z0-9_]+)/status", path)
    if method == "POST" and match:
        return Reply(200, emulator.set_status(match.group(1), data["status"]))
    return Reply(404, {"error": f"no emulator endpoint {method} /_emulator{path}"})


def _health(emulator: Controls, query: Query, data: Data) -> Reply:
    return Reply(
        200, {"ok": True, "dedupe": emulator.dedupe, "latency": emulator.latency, "now": emulator.now()}
    )


def _charges(emulator: Controls, query: Query, data: Data) -> Reply:
    order_id = query.get("orderId", [None])[0]
    entries = emulator.charges_for(order_id) if order_id else emulator.charges()
    return Reply(200, {"data": [entry.to_json() for entry in entries]})


def _reset(emulator: Controls, query: Query, data: Data) -> Reply:
    emulator.reset()
    return Reply(200, {"ok": True})


def _inject(emulator: Controls, query: Query, data: Data) -> Reply:
    fault = emulator.inject(
        data["kind"],
        order_id=data.get("orderId"),
        endpoint=data.get("endpoint", "create"),
        times=int(data.get("times", 1)),
        seconds=data.get("seconds"),
    )
    return Reply(200, {"kind": fault.kind, "orderId": fault.order_id, "times": fault.times})


def _clear_faults(emulator: Controls, query: Query, data: Data) -> Reply:
    emulator.clear_faults()
    return Reply(200, {"ok": True})


def _failure_rate(emulator: Controls, query: Query, data: Data) -> Reply:
    emulator.set_failure_rate(
        data["kind"],
        float(data["probability"]),
        order_id=data.get("orderId"),
        endpoint=data.get("endpoint", "create"),
        seconds=data.get("seconds"),
    )
    return Reply(200, {"ok": True})


def _force_outcome(emulator: Controls, query: Query, data: Data) -> Reply:
    emulator.force_outcome(data["status"], order_id=data.get("orderId"), times=int(data.get("times", 1)))
    return Reply(200, {"ok": True})


def _configure(emulator: Controls, query: Query, data: Data) -> Reply:
    if "dedupe" in data:
        emulator.dedupe = bool(data["dedupe"])
    if "latency" in data:
        emulator.latency = float(data["latency"])
    if "searchLagSeconds" in data:
        emulator.search_lag_seconds = float(data["searchLagSeconds"])
    if "hangSeconds" in data:
        emulator.hang_seconds = float(data["hangSeconds"])
    if "settleSeconds" in data:
        emulator.settle_seconds = None if data["settleSeconds"] is None else float(data["settleSeconds"])
    if "settleOutcome" in data:
        if data["settleOutcome"] not in ("succeeded", "failed"):
            raise ValueError("settleOutcome must be succeeded or failed")
        emulator.settle_outcome = data["settleOutcome"]
    if "webhookTimeScale" in data:
        emulator.webhooks.time_scale = float(data["webhookTimeScale"])
    return Reply(200, {"dedupe": emulator.dedupe, "latency": emulator.latency})


def _advance_clock(emulator: Controls, query: Query, data: Data) -> Reply:
    return Reply(200, {"now": emulator.advance_clock(float(data.get("advanceSeconds", 0)))})


def _trigger(emulator: Controls, query: Query, data: Data) -> Reply:
    if not data.get("paymentIntent") and not data.get("orderId"):
        raise ValueError("name the PaymentIntent (paymentIntent) or its order (orderId)")
    event = emulator.trigger(data["event"], intent_id=data.get("paymentIntent"), order_id=data.get("orderId"))
    return Reply(200, event)


def _webhooks(emulator: Controls, query: Query, data: Data) -> Reply:
    order_id = query.get("orderId", [None])[0]
    return Reply(
        200,
        {
            "endpoints": emulator.webhooks.endpoints(),
            "attempts": [a.to_json() for a in emulator.webhooks.attempts(order_id)],
        },
    )


def _disorder(emulator: Controls, query: Query, data: Data) -> Reply:
    disorder = WebhookDisorder.from_json(data)
    emulator.webhooks.disorder = disorder
    return Reply(200, {"disorder": dataclasses.asdict(disorder)})


_ROUTES: dict[tuple[str, str], Callable[[Controls, Query, Data], Reply]] = {
    ("GET", "/health"): _health,
    ("GET", "/charges"): _charges,
    ("POST", "/reset"): _reset,
    ("POST", "/faults"): _inject,
    ("DELETE", "/faults"): _clear_faults,
    ("POST", "/failure-rates"): _failure_rate,
    ("POST", "/outcomes"): _force_outcome,
    ("POST", "/config"): _configure,
    ("POST", "/clock"): _advance_clock,
    ("POST", "/trigger"): _trigger,
    ("GET", "/webhooks"): _webhooks,
    ("POST", "/webhooks"): _disorder,
}
