"""A DynamoDB client that loses answers and delivers writes late, the way a network does.

Shared by the claim protocol's functional tests and the state machine's: wrap a boto3 DynamoDB client
(or put one in front of the claims store the handlers use) and plan what happens to the next
``UpdateItem`` calls, in order.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError, ReadTimeoutError

if TYPE_CHECKING:
    from collections.abc import Callable


class Network:
    """A DynamoDB client whose next ``UpdateItem`` calls misbehave the way a network does."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._plan: list[Callable[[Callable[..., Any], dict[str, Any]], Any]] = []
        self.held: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def update_item(self, **request: Any) -> Any:
        if self._plan:
            return self._plan.pop(0)(self._client.update_item, request)
        return self._client.update_item(**request)

    def then_normal(self) -> Network:
        self._plan.append(lambda send, request: send(**request))
        return self

    def then_answer_lost(self, meanwhile: Callable[[], object] | None = None) -> Network:
        """The write is applied, its answer lost; ``meanwhile`` runs; botocore sends it again."""

        def lose(send: Callable[..., Any], request: dict[str, Any]) -> Any:
            with contextlib.suppress(ClientError):  # the first send's answer is lost, whatever it was
                send(**request)
            if meanwhile is not None:
                meanwhile()
            return send(**request)

        self._plan.append(lose)
        return self

    def then_applied_then_failed(self) -> Network:
        """The write is applied; the sender never hears back (its retries spent, or it died)."""

        def apply_and_fail(send: Callable[..., Any], request: dict[str, Any]) -> Any:
            with contextlib.suppress(ClientError):
                send(**request)
            raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com/")

        self._plan.append(apply_and_fail)
        return self

    def then_before(self, meanwhile: Callable[[], object]) -> Network:
        """Someone else writes just before this write reaches DynamoDB."""

        def race(send: Callable[..., Any], request: dict[str, Any]) -> Any:
            meanwhile()
            return send(**request)

        self._plan.append(race)
        return self

    def then_held_in_flight(self) -> Network:
        """The sender is killed with the write on the wire; ``land_held`` delivers it later."""

        def hold(send: Callable[..., Any], request: dict[str, Any]) -> Any:
            self.held.append(request)
            raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com/")

        self._plan.append(hold)
        return self

    def land_held(self) -> bool:
        """Apply the held write now. Returns whether its condition let it land."""
        try:
            self._client.update_item(**self.held.pop(0))
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False
        return True
