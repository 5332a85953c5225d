"""Finding PaymentIntents: the search (eventually consistent) and the list (never behind).

``GET /v1/payment_intents/search`` takes clauses ``metadata['k']:'v'``, ``status:``, ``currency:``,
``customer:``, ``amount``/``created`` with ``: > < >= <=``, optional ``-`` negation, joined by
``AND`` or by ``OR`` (not both), at most 10; results newest first, paged with ``page`` tokens.

``GET /v1/payment_intents`` takes ``created`` as an integer or ``created[gt|gte|lt|lte]``,
``customer``, ``limit`` 1-100 and the cursors ``starting_after`` / ``ending_before``; newest first,
with ``has_more``.

The lag: every state change of a PaymentIntent is published (:func:`publish`) with its time; the
search reads each PaymentIntent as it was ``search_lag_seconds`` ago (absent if it was created
since, in its older status if it was updated since), while the list and retrieve read it as it is.
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from saga_local.stripe_emulator.exceptions import BadRequest
from saga_local.stripe_emulator.responses import Reply, limit, reject_unknown

if TYPE_CHECKING:
    from collections.abc import Callable

#: intent id -> every state it was in, with the time it took it (oldest first).
Versions = dict[str, list[tuple[float, dict[str, Any]]]]

_LIST_PARAMS = frozenset({"created", "customer", "limit", "starting_after", "ending_before", "expand"})
_SEARCH_PARAMS = frozenset({"query", "limit", "page", "expand"})


def publish(versions: Versions, intent: dict[str, Any], now: float) -> None:
    """Record the state the search index will catch up with."""
    versions.setdefault(intent["id"], []).append((now, copy.deepcopy(intent)))


def indexed(versions: Versions, intent_id: str, horizon: float) -> dict[str, Any] | None:
    """The latest state of ``intent_id`` published at or before ``horizon``, or None."""
    found = None
    for published, state in versions.get(intent_id, []):
        if published > horizon:
            break
        found = state
    return found


# -- search --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clause:
    """One ``field op value`` of a query (``field`` is ``metadata[key]`` for metadata)."""

    field: str
    operator: str
    value: str
    negated: bool


@dataclass(frozen=True)
class SearchRequest:
    """A search's parameters once validated."""

    clauses: list[Clause]
    limit: int
    offset: int


def validate_search(params: dict[str, Any]) -> SearchRequest:
    """Validate a search's parameters (query, limit, page)."""
    reject_unknown(params, _SEARCH_PARAMS)
    query = params.get("query")
    if not isinstance(query, str) or not query.strip():
        raise BadRequest("Missing required param: query.", param="query", code="parameter_missing")
    clauses = parse_query(query)
    return SearchRequest(clauses, limit(params), _page_offset(params.get("page")))


def search(request: SearchRequest, intent_ids: list[str], versions: Versions, horizon: float) -> Reply:
    """One page of the PaymentIntents whose state at ``horizon`` matches, newest first."""
    indexed_states = [indexed(versions, intent_id, horizon) for intent_id in intent_ids]
    found = [
        copy.deepcopy(intent)
        for intent in indexed_states
        if intent is not None and matches(intent, request.clauses)
    ]
    # Newest first, like Stripe's search results.
    found.reverse()
    offset, size = request.offset, request.limit
    page = found[offset : offset + size]
    has_more = offset + size < len(found)
    return Reply(
        200,
        {
            "object": "search_result",
            "data": page,
            "has_more": has_more,
            "next_page": _page_token(offset + size) if has_more else None,
            "url": "/v1/payment_intents/search",
        },
    )


_CLAUSE = re.compile(
    r"""\s*(?P<neg>-)?(?P<field>metadata\[(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\]|[a-z_]+)"""
    r"""\s*(?P<op>:|>=|<=|>|<)\s*(?P<value>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s'"]+)\s*"""
)
_CONNECTOR = re.compile(r"(AND|OR)\s+")
_SEARCH_FIELDS = frozenset({"amount", "created", "currency", "customer", "status"})
#: A first clause with this field marks the others as joined by OR (the default is AND).
_OR = "__or__"


def parse_query(query: str) -> list[Clause]:
    """Parse the subset of Stripe's search query language the emulator supports."""
    clauses: list[Clause] = []
    connectors: set[str] = set()
    position = 0
    while True:
        match = _CLAUSE.match(query, position)
        if match is None:
            raise BadRequest(f"Invalid search query at character {position}: {query!r}", param="query")
        clauses.append(_clause(match))
        position = match.end()
        if position == len(query):
            break
        connector = _CONNECTOR.match(query, position)
        if connector is None:
            raise BadRequest(f"Invalid search query at character {position}: {query!r}", param="query")
        connectors.add(connector.group(1))
        position = connector.end()
    if len(connectors) > 1:
        raise BadRequest("Queries cannot contain both AND and OR.", param="query")
    if len(clauses) > 10:
        raise BadRequest("Queries can contain at most 10 clauses.", param="query")
    if connectors == {"OR"}:
        return [Clause(_OR, ":", "", False), *clauses]
    return clauses


def _clause(match: re.Match[str]) -> Clause:
    field = match.group("field")
    if field.startswith("metadata["):
        field = f"metadata[{_unquote(field[len('metadata[') : -1])}]"
    elif field not in _SEARCH_FIELDS:
        raise BadRequest(
            f"Field `{field}` is an unsupported search field for resource `payment_intents`.",
            param="query",
        )
    operator = match.group("op")
    if operator != ":" and field not in ("amount", "created"):
        raise BadRequest(f"Operator `{operator}` is not supported on field `{field}`.", param="query")
    return Clause(field, operator, _unquote(match.group("value")), bool(match.group("neg")))


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def order_of_query(query: str) -> str | None:
    """The order a search is about (its ``metadata['orderId']`` clause), if any and if it parses."""
    try:
        clauses = parse_query(query)
    except BadRequest:
        return None
    return next((c.value for c in clauses if c.field == "metadata[orderId]" and not c.negated), None)


def matches(intent: dict[str, Any], clauses: list[Clause]) -> bool:
    """Whether ``intent`` satisfies the parsed query."""
    if clauses and clauses[0].field == _OR:
        return any(_clause_matches(intent, clause) for clause in clauses[1:])
    return all(_clause_matches(intent, clause) for clause in clauses)


def _clause_matches(intent: dict[str, Any], clause: Clause) -> bool:
    if clause.field.startswith("metadata["):
        result = intent["metadata"].get(clause.field[len("metadata[") : -1]) == clause.value
    elif clause.field in ("amount", "created"):
        result = _compare(int(intent[clause.field]), clause)
    elif clause.field == "currency":
        result = str(intent["currency"]).lower() == clause.value.lower()
    else:
        result = intent.get(clause.field) == clause.value
    return bool(result != clause.negated)


def _compare(actual: int, clause: Clause) -> bool:
    if not re.fullmatch(r"-?[0-9]+", clause.value):
        raise BadRequest(f"`{clause.field}` must be compared with an integer.", param="query")
    expected = int(clause.value)
    return {
        ":": actual == expected,
        ">": actual > expected,
        "<": actual < expected,
        ">=": actual >= expected,
        "<=": actual <= expected,
    }[clause.operator]


def _page_token(offset: int) -> str:
    return "page_" + base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode().rstrip("=")


def _page_offset(token: Any) -> int:
    if token is None:
        return 0
    if not isinstance(token, str) or not token.startswith("page_"):
        raise BadRequest("Invalid page token.", param="page")
    encoded = token.removeprefix("page_")
    try:
        text = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise BadRequest("Invalid page token.", param="page") from None
    if not re.fullmatch(r"offset:[0-9]+", text):
        raise BadRequest("Invalid page token.", param="page")
    return int(text.removeprefix("offset:"))


# -- list ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ListRequest:
    """A list's parameters once validated."""

    limit: int
    created: Callable[[int], bool]
    customer: Any
    starting_after: Any
    ending_before: Any


def validate_list(params: dict[str, Any]) -> ListRequest:
    """Validate a list's parameters (the cursors' existence is checked against the data)."""
    reject_unknown(params, _LIST_PARAMS)
    size = limit(params)
    created = _created_filter(params.get("created"))
    after, before = params.get("starting_after"), params.get("ending_before")
    if after is not None and before is not None:
        raise BadRequest("You may only specify one of these parameters: starting_after, ending_before.")
    return ListRequest(size, created, params.get("customer"), after, before)


def list_page(request: ListRequest, intents: dict[str, dict[str, Any]]) -> Reply:
    """``GET /v1/payment_intents``: every PaymentIntent as it is now (never behind), newest first."""
    for cursor, name in (
        (request.starting_after, "starting_after"),
        (request.ending_before, "ending_before"),
    ):
        if cursor is not None and cursor not in intents:
            raise BadRequest(f"No such payment_intent: '{cursor}'", param=name, code="resource_missing")
    customer = request.customer
    # Filtered first, then sorted: an account of a hundred thousand PaymentIntents sorts only what
    # the filters keep. Newest first; among equal ``created`` seconds, the later created first.
    kept = [
        (intent["created"], position, intent)
        for position, intent in enumerate(intents.values())
        if (customer is None or intent.get("customer") == customer) and request.created(intent["created"])
    ]
    kept.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)
    matching = [intent for _, _, intent in kept]
    page, has_more = _page(matching, request, intents)
    return Reply(
        200,
        {"object": "list", "data": copy.deepcopy(page), "has_more": has_more, "url": "/v1/payment_intents"},
    )


def _page(
    matching: list[dict[str, Any]], request: ListRequest, intents: dict[str, dict[str, Any]]
) -> tuple[list[dict[str, Any]], bool]:
    size, after, before = request.limit, request.starting_after, request.ending_before
    ids = [intent["id"] for intent in matching]
    if after is not None:
        start = ids.index(after) + 1 if after in ids else _first_older(matching, intents[after])
        return matching[start : start + size], start + size < len(matching)
    if before is not None:
        end = ids.index(before) if before in ids else _first_older(matching, intents[before])
        return matching[max(0, end - size) : end], end - size > 0
    return matching[:size], size < len(matching)


def _first_older(newest_first: list[dict[str, Any]], cursor: dict[str, Any]) -> int:
    # A cursor filtered out of the list: continue from the first PaymentIntent created before it.
    return next(
        (i for i, intent in enumerate(newest_first) if intent["created"] < cursor["created"]),
        len(newest_first),
    )


def _created_filter(value: Any) -> Callable[[int], bool]:
    """The list's ``created`` filter: a timestamp, or a hash of ``gt``/``gte``/``lt``/``lte`` bounds."""
    if value is None:
        return lambda _: True
    if isinstance(value, str):
        if not re.fullmatch(r"[0-9]+", value):
            raise BadRequest(f"Invalid integer: {value}", param="created", code="parameter_invalid_integer")
        return lambda created: created == int(value)
    if not isinstance(value, dict) or not value or set(value) - {"gt", "gte", "lt", "lte"}:
        raise BadRequest("Invalid created: a timestamp or a hash of gt, gte, lt, lte.", param="created")
    bounds: dict[str, int] = {}
    for name, bound in value.items():
        if not isinstance(bound, str) or not re.fullmatch(r"[0-9]+", bound):
            raise BadRequest(
                f"Invalid integer: {bound}", param=f"created[{name}]", code="parameter_invalid_integer"
            )
        bounds[name] = int(bound)
    checks: dict[str, Callable[[int, int], bool]] = {
        "gt": lambda c, b: c > b,
        "gte": lambda c, b: c >= b,
        "lt": lambda c, b: c < b,
        "lte": lambda c, b: c <= b,
    }
    return lambda created: all(checks[name](created, bound) for name, bound in bounds.items())
