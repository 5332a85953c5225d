"""The claims table for the model: moto decides every answer, the model owns the table's contents.

``ClaimsStore`` is handed a :class:`ModelTable` as its DynamoDB client. Every call is answered by
moto (the project's DynamoDB, with its real conditional-expression semantics) through a real boto3
client, but the table's contents live here, as plain data, so the explorer can save and restore them
for free. A DynamoDB call is a pure function of the request and the table's contents, so answers are
memoised on both: the same write from the same table state is sent to moto once, however many
schedules reach it. On a miss the contents are first copied into moto, then read back after a write.

Faults are not applied here: an ``interceptor`` (the model's fault layer) sees every call with a
function that applies it, and decides whether, when and how often to call it.

Every write that changes an item makes the stream record DynamoDB would (the table's stream is
``NEW_AND_OLD_IMAGES``): moto's own shard records it, the record's key and images are kept with the
memoised answer, and ``on_records`` is handed them each time the write is applied (a memo hit
included), in the order the writes are applied. A write that leaves an item as it was makes no
record, as DynamoDB writes none.
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    Interceptor = Callable[[str, dict[str, Any], Callable[[], Any]], Any]
    RecordsHandler = Callable[[list[dict[str, Any]]], None]

#: Operations that never change the table (their answer is memoised, nothing is read back).
READS = frozenset({"get_item", "query", "scan", "batch_get_item", "describe_table"})
WRITES = frozenset({"update_item", "put_item", "delete_item", "transact_write_items", "batch_write_item"})

Items = dict[str, dict[str, Any]]
#: The parts of a stream record a write decides (moto's ``eventID``, sequence number and time are not).
Records = list[dict[str, Any]]


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


class ModelTable:
    """A DynamoDB client (the subset ``ClaimsStore`` uses) over one moto table the model owns.

    Args:
        client: a boto3 DynamoDB client made under moto.
        table_name: the table (already created).
    """

    def __init__(self, client: Any, table_name: str) -> None:
        from moto.core import DEFAULT_ACCOUNT_ID  # type: ignore[attr-defined]
        from moto.dynamodb.models import dynamodb_backends

        self._client = client
        self.table_name = table_name
        schema = client.describe_table(TableName=table_name)["Table"]["KeySchema"]
        self._key_names = [element["AttributeName"] for element in schema]
        # Copying the contents in and out goes straight to moto's table (moto is pinned: see
        # saga_local/aws/moto_adapter.py); only the call under test goes through boto3.
        self._moto_table = dynamodb_backends[DEFAULT_ACCOUNT_ID][client.meta.region_name].get_table(
            table_name
        )
        self.items: Items = {}
        self._items_text = canonical(self.items)
        self._moto: Items = {}
        self._memo: dict[tuple[str, str, str], tuple[bool, Any, Items, Records]] = {}
        self.interceptor: Interceptor | None = None
        #: Called with the stream records of each write applied (none for a write that changed nothing).
        self.on_records: RecordsHandler | None = None
        self.hits = 0
        self.misses = 0

    # -- what ClaimsStore calls -------------------------------------------------------------------

    def __getattr__(self, operation: str) -> Callable[..., Any]:
        if operation not in READS | WRITES:
            raise AttributeError(operation)

        def call(**request: Any) -> Any:
            return self.call(operation, request)

        return call

    def get_paginator(self, operation: str) -> _Paginator:
        return _Paginator(self, operation)

    def call(self, operation: str, request: dict[str, Any]) -> Any:
        """One call as the store makes it: through the interceptor (faults), if one is set."""

        def apply() -> Any:
            return self.apply(operation, request)

        if self.interceptor is None:
            return apply()
        return self.interceptor(operation, request, apply)

    # -- state ------------------------------------------------------------------------------------

    def snapshot(self) -> Items:
        return self.items  # never mutated in place: every write replaces the dict

    def restore(self, items: Items) -> None:
        self.items = items
        self._items_text = canonical(items)

    def state_text(self) -> str:
        return self._items_text

    def apply(self, operation: str, request: dict[str, Any]) -> Any:
        """Apply ``operation`` to the table as DynamoDB (moto) would; raise its ``ClientError``."""
        memo_key = (operation, canonical(request), self._items_text)
        answer = self._memo.get(memo_key)
        if answer is None:
            self.misses += 1
            answer = self._ask_moto(operation, request)
            self._memo[memo_key] = answer
        else:
            self.hits += 1
        raised, response, after, records = answer
        if operation not in READS:
            self.restore(after)
        if records and self.on_records is not None:
            self.on_records(copy.deepcopy(records))
        if raised:
            error_response, operation_name = response
            raise ClientError(copy.deepcopy(error_response), operation_name)
        return copy.deepcopy(response)

    def _ask_moto(self, operation: str, request: dict[str, Any]) -> tuple[bool, Any, Items, Records]:
        self._sync()
        self._take_stream_records()  # what copying the contents in wrote: not a write of the model's
        try:
            response = getattr(self._client, operation)(**copy.deepcopy(request))
        except ClientError as exc:
            answer: tuple[bool, Any] = (True, (_without_metadata(dict(exc.response)), exc.operation_name))
        else:
            answer = (False, _without_metadata(response))
        after = self.items if operation in READS else self._read_back()
        self._moto = after
        return (*answer, after, self._take_stream_records())

    def _take_stream_records(self) -> Records:
        """The records moto's shard holds (key, event name, images), emptied so that it does not grow."""
        shard = self._moto_table.stream_shard
        if shard is None:
            return []
        records = []
        for record in shard.items:
            change = record.to_json()["dynamodb"]
            old, new = change.get("OldImage"), change.get("NewImage")
            if old == new:
                continue  # an item written as it was: DynamoDB writes no stream record
            kept = {"eventName": record.to_json()["eventName"], "Keys": change["Keys"]}
            kept.update({name: image for name, image in (("OldImage", old), ("NewImage", new)) if image})
            records.append(copy.deepcopy(kept))
        shard.starting_sequence_number += len(shard.items)
        shard.items.clear()
        return records

    def _key(self, item: dict[str, Any]) -> str:
        return canonical({name: item[name] for name in self._key_names})

    def _sync(self) -> None:
        """Make moto hold exactly ``self.items`` (after a restore, it may hold another state)."""
        if self._moto == self.items:
            return
        self._moto_table.items.clear()
        for item in self.items.values():
            self._moto_table.put_item(copy.deepcopy(item))
        self._moto = self.items

    def _read_back(self) -> Items:
        items = (item.to_json()["Attributes"] for item in self._moto_table.all_items())
        return dict(sorted((self._key(item), item) for item in items))


class _Paginator:
    """``get_paginator("query")`` as boto3 pages it: ``LastEvaluatedKey`` -> ``ExclusiveStartKey``."""

    def __init__(self, table: ModelTable, operation: str) -> None:
        self._table = table
        self._operation = operation

    def paginate(self, **request: Any) -> Iterator[dict[str, Any]]:
        request.pop("PaginationConfig", None)
        while True:
            page: dict[str, Any] = self._table.call(self._operation, request)
            yield page
            if not page.get("LastEvaluatedKey"):
                return
            request = {**request, "ExclusiveStartKey": page["LastEvaluatedKey"]}


def _without_metadata(response: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in response.items() if key != "ResponseMetadata"}
