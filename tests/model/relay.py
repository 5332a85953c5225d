"""The outcome relay's side of the model: stream records, the AWS clients it calls, the events' rule.

The model runs the real relay handler (``handlers.outcome_relay``) on the stream records the real
writes make (:mod:`tests.model.dynamo` takes them from moto's shard) and the real start function
(``handlers.start_execution``) on the messages it re-queues. Their AWS calls go through real boto3
clients (botocore validates every request against the service's model, and raises the modelled
exception for an error answer), answered in-process by the model (:func:`served_client`): the bus
keeps what was put on it, the queues what was sent, Step Functions the executions started. So a
fault is an answer the model chooses, and the bus, the queues and the stream are plain data the
explorer saves, restores and hashes with the rest of the state.

The event source mapping is read from the template (``FilterCriteria``, ``BatchSize``,
``MaximumRetryAttempts``, ``MaximumRecordAgeInSeconds``, ``BisectBatchOnFunctionError``), and
applied as Lambda applies it: see :class:`Mapping`.

The rule the events must follow (docs/outcome-events.md) is checked by :func:`event_violations`
after every step and by :func:`final_outcome_violations` once everything has drained.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
from moto.events.models import EventPattern

from payment_saga.outcomes import FINAL_OUTCOMES, Outcome

if TYPE_CHECKING:
    from collections.abc import Callable

    Answer = Callable[[str, dict[str, Any]], dict[str, Any]]

#: Faults of one relay invocation, on its k-th AWS call (``PutEvents`` or ``SendMessage``).
RELAY_CALL_FAULTS: dict[str, tuple[str, ...]] = {
    # EventBridge answers 500 until the SDK's retries are spent: nothing was put on the bus.
    "PutEvents": ("put_failed", "entry_refused", "answer_lost", "relay_died"),
    "SendMessage": ("send_failed", "answer_lost", "relay_died"),
}
#: Every relay fault kind (``poison`` is a record, not a call: see ``World``).
RELAY_FAULTS = frozenset(
    {"put_failed", "entry_refused", "send_failed", "answer_lost", "relay_died", "poison"}
)

#: The key of the record a poison fault puts on the stream: another row, whose image is no claim row.
POISON_KEY = "POISON-ROW"


class ServiceError(Exception):
    """An error answer of an AWS service (botocore raises the client's modelled exception for it)."""

    def __init__(self, code: str, message: str, status: int = 500) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status


@dataclass
class _Http:
    status_code: int
    headers: dict[str, str]
    content: bytes = b""
    raw: Any = None


def served_client(service: str, answer: Answer) -> Any:
    """A real boto3 client of ``service`` whose calls ``answer(operation, params)`` answers in-process.

    The request is validated by botocore as for any call; ``answer`` returns the parsed response or
    raises :class:`ServiceError`, which the caller sees as boto3's modelled exception.
    """
    made = _session().client(  # type: ignore[call-overload]  # the service is named at run time
        service, region_name="us-east-1", aws_access_key_id="model", aws_secret_access_key="model"
    )
    service_id = made.meta.service_model.service_id.hyphenize()

    def keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["model_params"] = copy.deepcopy(params)

    def respond(model: Any, context: dict[str, Any], **_: Any) -> tuple[_Http, dict[str, Any]]:
        try:
            parsed = answer(model.name, context["model_params"])
        except ServiceError as error:
            failure = {"Error": {"Code": error.code, "Message": error.message}, "ResponseMetadata": {}}
            return _Http(error.status, {}), failure
        return _Http(200, {}), {**parsed, "ResponseMetadata": {"HTTPStatusCode": 200}}

    made.meta.events.register(f"before-parameter-build.{service_id}", keep_params)
    made.meta.events.register(f"before-call.{service_id}", respond)
    return made


@functools.cache
def _session() -> boto3.session.Session:
    """One session for every model client: each session loads botocore's endpoint data again."""
    return boto3.session.Session()


@dataclass(frozen=True)
class Mapping:
    """The relay's event source mapping, as the template declares it (the settings the model applies)."""

    filters: tuple[str, ...]
    batch_size: int
    max_retry_attempts: int
    max_record_age_seconds: int
    bisect_on_error: bool
    report_batch_item_failures: bool

    @classmethod
    def from_template(cls, template: dict[str, Any]) -> Mapping:
        events = template["Resources"]["OutcomeRelayFunction"]["Properties"]["Events"]
        properties = next(e["Properties"] for e in events.values() if e["Type"] == "DynamoDB")
        return cls(
            filters=tuple(
                f["Pattern"] for f in (properties.get("FilterCriteria") or {}).get("Filters") or []
            ),
            batch_size=int(properties.get("BatchSize", 100)),
            max_retry_attempts=int(properties.get("MaximumRetryAttempts", -1)),
            max_record_age_seconds=int(properties.get("MaximumRecordAgeInSeconds", -1)),
            bisect_on_error=bool(properties.get("BisectBatchOnFunctionError", False)),
            report_batch_item_failures="ReportBatchItemFailures"
            in (properties.get("FunctionResponseTypes") or []),
        )

    def matcher(self) -> Callable[[dict[str, Any]], bool]:
        """``FilterCriteria`` as Lambda evaluates it (moto's EventBridge pattern matcher)."""
        patterns = [EventPattern.load(pattern) for pattern in self.filters]
        return lambda record: not patterns or any(p.matches_event(record) for p in patterns)  # type: ignore[arg-type]


def lambda_record(record: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    """A pending record of the model as Lambda hands it to the relay (an ``aws:dynamodb`` record)."""
    change: dict[str, Any] = {
        "ApproximateCreationDateTime": record["created"],
        "Keys": record["Keys"],
        "SequenceNumber": str(record["sequence"]),
        "SizeBytes": 1,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    for image in ("OldImage", "NewImage"):
        if image in record:
            change[image] = json.loads(json.dumps(record[image]))  # a copy (faster than deepcopy)
    return {
        "eventID": f"model-{record['sequence']}",
        "eventName": record["eventName"],
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": change,
        "eventSourceARN": stream_arn,
    }


def poison_record(sequence: int, now: int) -> dict[str, Any]:
    """A record that passes the filter but whose image is no claim row (written by hand, say)."""
    return {
        "sequence": sequence,
        "created": now,
        "eventName": "INSERT",
        "Keys": {"orderId": {"S": POISON_KEY}},
        "NewImage": {"orderId": {"S": POISON_KEY}, "status": {"S": "COMPLETED"}},
        "poison": True,
    }


#: The ``reason`` the model gives the start of a wait for settlement (an open claim, not a closing).
AWAITING_SETTLEMENT = "AWAITING_SETTLEMENT"


def closing(record: dict[str, Any]) -> dict[str, Any] | None:
    """What a record of the order's row closed, read by the model itself (not by the relay's code).

    Also the start of a wait for settlement (``CLAIMED``, reason :data:`AWAITING_SETTLEMENT`): the
    row newly holds a ``settlementIntentId``. It closes nothing, but the relay announces it
    (``OrderPaymentProcessing``), so the events' rule reads it like a closing.
    """
    new, old = record.get("NewImage") or {}, record.get("OldImage") or {}
    status = new.get("status", {}).get("S")
    awaiting = status == "CLAIMED" and "settlementIntentId" in new and "settlementIntentId" not in old
    if not awaiting and (status not in ("COMPLETED", "RELEASED") or old.get("status", {}).get("S") == status):
        return None
    version = new.get("version", {}).get("N")
    return {
        "record": record["sequence"],
        "sequence": int(version) if version is not None else None,
        "status": status,
        "reason": AWAITING_SETTLEMENT if awaiting else new.get("releaseReason", {}).get("S"),
        "attempt": int(new["attempt"]["N"]),
        "chargeId": new.get("chargeId", {}).get("S"),
        "paymentAttempt": new.get("paymentAttempt", {}).get("S"),
        # The Stripe event whose proof the write was (the webhook consumer's writes), else None.
        "webhookEventId": new.get("webhookEventId", {}).get("S"),
    }


#: Which closing transition each relay event announces.
_ANNOUNCES = {
    Outcome.CHARGED.value: ("COMPLETED", None),
    Outcome.DECLINED.value: ("RELEASED", "DECLINED"),
    Outcome.RELEASED.value: ("RELEASED", "NOT_CHARGED"),
    Outcome.REQUEUED.value: ("RELEASED", "NOT_CHARGED"),
    Outcome.NEEDS_ATTENTION.value: ("RELEASED", "NOT_CHARGED"),
    # Not a closing: the open claim's wait for a payment the provider settles later (never final).
    Outcome.PAYMENT_PROCESSING.value: ("CLAIMED", AWAITING_SETTLEMENT),
}


def distinct(bus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bus's events deduplicated on ``eventId`` (the first copy), as a consumer reads them."""
    seen: set[str] = set()
    events = []
    for event in bus:
        event_id = event["detail"].get("eventId")
        if event_id in seen:
            continue
        seen.add(event_id)
        events.append(event)
    return events


def event_violations(
    bus: list[dict[str, Any]], closings: list[dict[str, Any]], charges: list[str]
) -> list[str]:
    """What must hold of the events at every step: each announces what happened, in stream order."""
    found = []
    highest: int | None = None
    for event in distinct(bus):
        kind, detail = event["detailType"], event["detail"]
        if event["publisher"] != "relay":
            continue
        sequence = detail.get("sequence")
        status, reason = _ANNOUNCES.get(kind, (None, None))
        if not any(
            c["sequence"] == sequence and c["status"] == status and (reason is None or c["reason"] == reason)
            for c in closings
        ):
            found.append(f"the relay published {kind} (sequence {sequence}) for a change that did not happen")
        if kind == Outcome.CHARGED.value and detail.get("chargeId") not in charges:
            found.append(
                f"the relay published OrderCharged with a charge the provider does not show ({detail})"
            )
        if sequence is not None:
            if highest is not None and sequence < highest:
                found.append(
                    f"the relay published an outcome of the order out of stream order: {kind} (sequence"
                    f" {sequence}) first published after an event of sequence {highest}"
                )
            highest = sequence if highest is None else max(highest, sequence)
    return found


def final_outcome_violations(bus: list[dict[str, Any]], charges: list[str]) -> list[str]:
    """docs/outcome-events.md, "Counting final outcomes per order", once nothing is left to publish.

    Ranked by ``sequence`` (the events without one below every event with one, by ``occurredAt``
    among themselves), the order's final events are declines but the last, carry distinct
    ``paymentAttempt``s, hold at most one charge, and the last agrees with the provider.
    """
    finals = [
        (index, event)
        for index, event in enumerate(distinct(bus))
        if event["detailType"] in FINAL_OUTCOMES and event["detailType"] != Outcome.CONFLICT.value
    ]
    if not finals:
        return ["the order has no final outcome event: as far as its subscribers know it is lost"]

    def rank(item: tuple[int, dict[str, Any]]) -> tuple[Any, ...]:
        index, event = item
        sequence = event["detail"].get("sequence")
        if sequence is None:
            return (0, 0, str(event["detail"].get("occurredAt")), index)
        return (1, sequence, "", index)

    ranked = [event for _, event in sorted(finals, key=rank)]
    kinds = [event["detailType"] for event in ranked]
    found = []
    if any(kind != Outcome.DECLINED.value for kind in kinds[:-1]):
        found.append(f"a final outcome other than a decline is followed by another: {kinds}")
    if kinds.count(Outcome.CHARGED.value) > 1:
        found.append(f"more than one OrderCharged: {kinds}")
    attempts = [e["detail"].get("paymentAttempt") for e in ranked if e["detail"].get("paymentAttempt")]
    if len(attempts) != len(set(attempts)):
        found.append(f"two final outcomes of one paymentAttempt: {list(zip(kinds, attempts, strict=False))}")
    last = ranked[-1]
    if charges and (
        last["detailType"] != Outcome.CHARGED.value or last["detail"].get("chargeId") not in charges
    ):
        found.append(f"the provider charged the order but its final outcome is {last['detailType']}")
    if not charges and last["detailType"] == Outcome.CHARGED.value:
        found.append("the order's final outcome is OrderCharged but the provider shows no charge")
    return found


#: What the invariants read of an event (the rest, times included, decides nothing).
_KEPT = ("eventId", "sequence", "chargeId", "paymentAttempt")
#: Events no invariant reads: never final, and announcing no change of the claim.
_UNREAD = frozenset({Outcome.NEEDS_RECONCILIATION.value, Outcome.CONFLICT.value})


def bus_text(bus: list[dict[str, Any]], rename: dict[int, int]) -> list[str]:
    """The bus as the explorer hashes it: the distinct events, as much of each as the invariants read,
    with ``sequence`` renamed by ``rename`` (its rank: only the order of sequences decides anything)."""
    texts = []
    for event in distinct(bus):
        if event["detailType"] in _UNREAD:
            continue
        kept = [event["detail"].get(k) for k in _KEPT]
        kept[1] = rename.get(kept[1], kept[1])
        texts.append(json.dumps([event["publisher"], event["detailType"], kept]))
    return sorted(texts)
