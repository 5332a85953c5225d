"""saga_local.aws.moto_speed changes what moto's DynamoDB costs, never what it answers.

Each scenario runs twice on a fresh moto, once as moto ships and once with the patches, and every
answer (the parsed response, or the error's code and message) and the table left behind must be the
same. The scenarios are the claims store's own writes (every conditional UpdateItem the saga sends,
won and lost) and update expressions DynamoDB refuses, each for its own reason.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from unittest import mock

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb.comparisons import ConditionExpressionParser
from moto.dynamodb.parsing import validators
from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser  # type: ignore[attr-defined]

from payment_saga.claims import ClaimsStore, ReleaseReason
from payment_saga.errors import ClaimLost, OrderConflict
from payment_saga.orders import order_from_message
from saga_local.aws import moto_speed
from saga_local.aws.stack import REGION, table_request
from saga_local.template import load_template
from tests.helpers import FakeClock, order

if TYPE_CHECKING:
    from collections.abc import Callable

Answers = list[tuple[str, Any]]


@contextlib.contextmanager
def _moto(*, fast: bool) -> Iterator[Any]:
    with contextlib.ExitStack() as stack:
        if fast:
            for owner, name, value in moto_speed.patches():
                stack.enter_context(mock.patch.object(owner, name, value))
        stack.enter_context(mock_aws())
        client = boto3.client("dynamodb", region_name=REGION)
        props = load_template()["Resources"]["ClaimsTable"]["Properties"]
        client.create_table(**table_request(props, "claims"))
        yield client


def _record(client: Any) -> Answers:
    """Every DynamoDB answer the client gets, as botocore parsed it (errors included)."""
    answers: Answers = []

    def after_call(http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        answers.append((model.name, {k: v for k, v in parsed.items() if k != "ResponseMetadata"}))

    client.meta.events.register("after-call.dynamodb", after_call)
    return answers


def _run(scenario: Callable[[Any], list[str]], *, fast: bool) -> tuple[Answers, list[str], list[Any]]:
    with _moto(fast=fast) as client:
        answers = _record(client)
        outcomes = scenario(client)
        table = sorted(client.scan(TableName="claims")["Items"], key=lambda item: item["orderId"]["S"])
        return answers, outcomes, table


def _outcome(call: Callable[[], Any]) -> str:
    try:
        result = call()
    except (ClaimLost, OrderConflict, ClientError) as exc:
        return f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - moto itself fails on some refused expressions: compare how
        return f"moto failed: {type(exc).__name__}: {exc}"
    if isinstance(result, dict):  # a response: its request id and date differ from run to run
        result = {k: v for k, v in result.items() if k != "ResponseMetadata"}
    return repr(result)


def _claims_store_writes(client: Any) -> list[str]:
    clock = FakeClock()
    store = ClaimsStore("claims", client=client, clock=clock)
    first, second = order_from_message(order("ORDER-1")), order_from_message(order("ORDER-2"))
    other_amount = order_from_message(order("ORDER-1", amount=99))
    calls: list[Callable[[], Any]] = [
        lambda: store.claim(first, token="t1"),
        lambda: store.claim(first, token="t1"),  # the same write again: re-entrant
        lambda: store.claim(first, token="t2"),  # a duplicate
        lambda: store.claim(other_amount, token="t3"),  # a conflict
        lambda: store.check_held("ORDER-1", token="t1", attempt=1, margin_seconds=5),
        lambda: store.complete("ORDER-1", token="t1", charge_id="ch_1"),
        lambda: store.complete("ORDER-1", token="t1", charge_id="ch_1"),
        lambda: store.complete("ORDER-1", token="t2", charge_id="ch_2"),
        lambda: store.claim(second, token="t4"),
        lambda: store.release(
            "ORDER-2", token="t4", reason=ReleaseReason.DECLINED, payment_attempt=second.payment_attempt
        ),
        lambda: store.claim(second, token="t5"),
        lambda: store.fence_failed_claim(order_from_message(order("ORDER-3")), token="t6"),
        lambda: store.claim(order_from_message(order("ORDER-3")), token="t6"),
        lambda: store.claim(order_from_message(order("ORDER-2", paymentAttempt="again")), token="t7"),
        lambda: store.claim(order_from_message(order("ORDER-4")), token="t8"),
        lambda: clock.advance(10_000),
        lambda: store.claim(order_from_message(order("ORDER-4")), token="t9"),  # an expired lease
        lambda: store.get("ORDER-2"),
    ]
    return [_outcome(call) for call in calls]


#: (update expression, attribute names, attribute values): each refused by DynamoDB.
REFUSED = [
    ("SET a = :x SET b = :x", {}, {":x": {"S": "v"}}),
    ("ADD n :one ADD m :one", {}, {":one": {"N": "1"}}),
    ("REMOVE a REMOVE b", {}, {}),
    ("SET a = :x REMOVE a", {}, {":x": {"S": "v"}}),
    ("SET a.b = :x, a = :x", {}, {":x": {"S": "v"}}),
    ("SET #a = :x, #b = :x", {"#a": "same", "#b": "same"}, {":x": {"S": "v"}}),
    ("SET #missing = :x", {}, {":x": {"S": "v"}}),
    ("SET a = :missing", {}, {}),
    ("SET orderId = :x", {}, {":x": {"S": "v"}}),
    ("SET a = b + :one", {}, {":one": {"N": "1"}}),
    ("SET a = list_append(a, :l)", {}, {":l": {"L": []}}),
    ("SET a = :x ADD n :one SET b = :x ADD m :one", {}, {":x": {"S": "v"}, ":one": {"N": "1"}}),
    ("SET = :x", {}, {":x": {"S": "v"}}),
    ("SET leaseExpiresAt = :x", {}, {":x": {"S": "v"}}),  # an index key of another type
    ("SET openClaim = :empty", {}, {":empty": {"S": ""}}),  # an index key set to ""
]


def _refused_expressions(client: Any) -> list[str]:
    outcomes = []
    for existing in (False, True):
        key = {"orderId": {"S": f"ROW-{existing}"}}
        if existing:
            client.put_item(TableName="claims", Item={**key, "a": {"S": "old"}})
        for expression, names, values in REFUSED:
            request: dict[str, Any] = {"TableName": "claims", "Key": key, "UpdateExpression": expression}
            if names:
                request["ExpressionAttributeNames"] = names
            if values:
                request["ExpressionAttributeValues"] = values
            outcomes.append(_outcome(functools.partial(client.update_item, **request)))
    return outcomes


#: (condition expression, attribute names, attribute values) for a conditional write to ROW: the
#: good ones twice, with values that pass and that fail, then the ones DynamoDB cannot read (moto
#: 5.2.5 raises on those rather than answer a ValidationException: the same way with the patches).
CONDITIONS = [
    ("attribute_not_exists(orderId) OR a = :x", {}, {":x": {"S": "old"}}),
    ("attribute_not_exists(orderId) OR a = :x", {}, {":x": {"S": "new"}}),
    (
        "(#a = :x AND size(a) < :n) OR NOT attribute_exists(#a)",
        {"#a": "a"},
        {":x": {"S": "v"}, ":n": {"N": "9"}},
    ),
    (
        "(#a = :x AND size(a) < :n) OR NOT attribute_exists(#a)",
        {"#a": "a"},
        {":x": {"S": "v"}, ":n": {"N": "0"}},
    ),
    (
        "a IN (:x, :y) AND n BETWEEN :lo AND :hi",
        {},
        {":x": {"S": "v"}, ":y": {"S": "w"}, ":lo": {"N": "1"}, ":hi": {"N": "2"}},
    ),
    ("attribute_exists(orderId) AND size(#a) > :n", {"#a": "a"}, {":n": {"N": "0"}}),
    ("attribute_exists(orderId) AND size(#a) > :n", {"#a": "a"}, {":n": {"N": "99"}}),
    ("attribute_not_exists(", {}, {}),
    ("a = = :x", {}, {":x": {"S": "v"}}),
    ("a = :x AND", {}, {":x": {"S": "v"}}),
    ("#missing = :x", {}, {":x": {"S": "v"}}),
    ("a = :missing", {}, {}),
    ("a = :x )", {}, {":x": {"S": "v"}}),
    ("a ~ :x", {}, {":x": {"S": "v"}}),
]


def _conditional_writes(client: Any) -> list[str]:
    outcomes: list[str] = []
    for round_ in range(2):  # the second round reads every expression again
        for expression, names, values in CONDITIONS:
            request: dict[str, Any] = {
                "TableName": "claims",
                "Key": {"orderId": {"S": "ROW"}},
                "UpdateExpression": "SET a = :set",
                "ConditionExpression": expression,
                "ExpressionAttributeValues": {**values, ":set": {"S": f"set-{round_}-{len(outcomes)}"}},
            }
            if names:
                request["ExpressionAttributeNames"] = names
            outcomes.append(_outcome(functools.partial(client.update_item, **request)))
    return outcomes


SCENARIOS = [_claims_store_writes, _refused_expressions, _conditional_writes]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_moto_answers_the_same_with_the_patches_as_without(scenario: Callable[[Any], list[str]]) -> None:
    plain = _run(scenario, fast=False)
    fast = _run(scenario, fast=True)
    assert fast == plain
    answers, outcomes, _ = plain
    answered = [o for o in outcomes if not o.startswith("moto failed")]
    assert len(answers) >= len(answered) - 1  # each call reached moto (the clock's move does not)


def test_the_refused_expressions_are_refused_for_their_own_reasons() -> None:
    # Without this the equivalence above could hold between two stacks that refuse nothing.
    _, outcomes, _ = _run(_refused_expressions, fast=True)
    refused = [o for o in outcomes if o.startswith("ClientError: An error occurred (ValidationException)")]
    assert len(refused) >= len(outcomes) - 2, outcomes
    assert len(set(outcomes)) >= len(REFUSED) - 1, outcomes


def test_the_conditions_pass_fail_and_are_refused() -> None:
    # The equivalence of _conditional_writes means something only if its writes do all three.
    _, outcomes, _ = _run(_conditional_writes, fast=True)
    assert sum(o.startswith("{") for o in outcomes) >= 3, outcomes
    assert any("ConditionalCheckFailedException" in o for o in outcomes), outcomes
    assert sum(o.startswith("moto failed") for o in outcomes) == 14, outcomes


def _output_structures(service: str) -> Iterator[Any]:
    """Every structure shape a response of ``service`` holds, once each."""
    from moto.core.utils import get_service_model

    model = get_service_model(service)
    seen: set[str] = set()
    stack = [model.operation_model(name).output_shape for name in model.operation_names]
    while stack:
        shape = stack.pop()
        if shape is None or shape.name in seen:
            continue
        seen.add(shape.name)
        if shape.type_name == "structure":
            yield shape
            stack.extend(shape.members.values())
        elif shape.type_name == "list":
            stack.append(shape.member)
        elif shape.type_name == "map":
            stack.append(shape.value)


@pytest.mark.parametrize("service", ["dynamodb", "sqs", "stepfunctions", "events", "lambda"])
def test_a_dict_member_is_picked_as_moto_picks_it(service: str) -> None:
    # The serialiser's shortcut for plain dicts, against moto's picker on every member of every
    # response structure of the services the stack runs: for a dict holding none, one, or all of
    # the keys moto would try (each with its own value, so the first one tried must win).
    from moto.core import serialize
    from moto.core.utils import get_service_model

    model = get_service_model(service)
    operation = model.operation_model(model.operation_names[0])
    members = 0
    for structure in _output_structures(service):
        for key, member in structure.members.items():
            member.parent = structure  # as the serialiser sets it before picking
            context = serialize.AttributePickerContext(obj={}, key=key, shape=member)
            tried = list(serialize.XFormedAttributePicker().get_possible_keys(context))
            dicts: list[dict[str, Any]] = [{}, {"unrelated": 1}, {k: f"{i}" for i, k in enumerate(tried)}]
            dicts += [{k: None} for k in tried] + [{k: [k]} for k in tried]
            picked = []
            for fast in (False, True):
                with contextlib.ExitStack() as patched:
                    if fast:
                        for owner, name, value in moto_speed.patches():
                            patched.enter_context(mock.patch.object(owner, name, value))
                    serializer = serialize.JSONSerializer(
                        operation_model=operation, value_picker=serialize.XFormedAttributePicker()
                    )
                    picked.append([serializer.get_value(d, key, member) for d in dicts])
            assert picked[0] == picked[1], (structure.name, key, dicts)
            members += 1
    assert members > 50


def test_the_patched_internals_are_the_ones_moto_calls() -> None:
    # If moto stops calling these, the patches silently do nothing (or worse, half of something).
    import inspect

    from moto.core import responses, serialize
    from moto.dynamodb.models import DynamoDBBackend

    update = inspect.getsource(DynamoDBBackend.update_item)
    assert "UpdateExpressionParser.make(update_expression)" in update
    assert "UpdateExpressionValidator(" in update
    assert "self.node_to_validate = deepcopy(expression)" in inspect.getsource(validators.Validator.__init__)
    assert "processor.traverse(n)" in inspect.getsource(validators.Validator.validate)
    assert "get_service_model(self.boto3_service_name)" in inspect.getsource(
        responses.BaseResponse.serialized
    )
    assert "XFormedAttributePicker(" in inspect.getsource(responses.ActionResult.execute_result)
    assert "self.get_possible_keys(context)" in inspect.getsource(serialize.AttributePicker.__call__)
    assert "self._value_picker(context)" in inspect.getsource(serialize.ResponseSerializer.get_value)
    assert "self.get_value(value, key, shape)" in inspect.getsource(
        serialize.ResponseSerializer._serialize_structure_member
    )
    assert "self._lex_condition_expression()" in inspect.getsource(ConditionExpressionParser.parse)
    # The lexer's tokens are kept without their children: it must make every node with none.
    lexer = inspect.getsource(ConditionExpressionParser._lex_one_node)
    assert lexer.count("self.Node(") == 1
    assert "children=[]" in lexer
    assert "return processor(node)" in inspect.getsource(DepthFirstTraverser.process)
