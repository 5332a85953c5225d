"""What a trace shows of an order by default: not who pays, nor with what.

An execution's history carries the order as it arrived (``paymentMethod``, ``providerCustomerId``,
``customerId``) in every state's input and output. A trace page is made to be shared (attached to a
ticket, pasted into a chat), so those fields are replaced by :data:`REDACTED` unless ``--io`` asks
for the execution's data as it is.
"""

from __future__ import annotations

import copy
import json
from typing import Any

#: The order's fields that say who pays and with what.
REDACTED_FIELDS = frozenset({"paymentMethod", "providerCustomerId", "customerId"})
REDACTED = "<redacted>"
#: The fields of an event's details (and of the execution) that hold JSON text of the order.
_JSON_FIELDS = ("input", "output", "parameters", "cause")


def redacted_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of ``history`` with :data:`REDACTED_FIELDS` replaced wherever they appear."""
    return [_redacted_event(event) for event in history]


def redacted_description(description: dict[str, Any]) -> dict[str, Any]:
    """A copy of an execution's description with its input and output redacted."""
    copied = copy.deepcopy(description)
    for name in _JSON_FIELDS:
        if isinstance(copied.get(name), str):
            copied[name] = _redacted_text(copied[name])
    return copied


def _redacted_event(event: dict[str, Any]) -> dict[str, Any]:
    copied = copy.deepcopy(event)
    for key, details in copied.items():
        if key.endswith("EventDetails") and isinstance(details, dict):
            for name in _JSON_FIELDS:
                if isinstance(details.get(name), str):
                    details[name] = _redacted_text(details[name])
    return copied


def _redacted_text(text: str) -> str:
    try:
        value = json.loads(text)
    except ValueError:
        return text  # not JSON (an error's cause in words): no order fields to find by name
    return json.dumps(_redacted(value), ensure_ascii=False)


def _redacted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if k in REDACTED_FIELDS else _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(item) for item in value]
    if isinstance(value, str) and value[:1] in "{[":
        # A step's output can hold JSON text (a Lambda's Payload, an SQS message body).
        try:
            return json.dumps(_redacted(json.loads(value)), ensure_ascii=False)
        except ValueError:
            return value
    return value
