"""``template.yaml`` read as data: the figures, permissions and boundaries that keep the promise.

cfn-lint and ``sam validate --lint`` (``make check-template``) check that the template is valid
CloudFormation; these tests check the saga's own rules: how the time limits relate, what the
queues and the claims table must be, how narrow each function's permissions are, and that no code
on the charge path can query, scan or read an index (invariant 3).
"""

from __future__ import annotations

import ast
import re
import shutil
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from payment_saga import claims
from tests.static.conftest import ALIAS_ARN

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from tests.static.conftest import StateMachine, Template

FUNCTIONS_DIR = Path(__file__).resolve().parents[2] / "functions"
FOURTEEN_DAYS = 14 * 24 * 3600
#: SQS's own default, when a queue sets none.
DEFAULT_VISIBILITY_TIMEOUT = 30
DEFAULT_RETENTION = 4 * 24 * 3600
NO_VALUE = {"Ref": "AWS::NoValue"}
#: Services whose statements must name their actions and their resources.
DATA_SERVICES = {"dynamodb", "sqs", "states", "secretsmanager"}
#: The handlers that take part in admitting a charge (invariant 3 applies to all of them).
CHARGE_PATH_HANDLERS = ("start_execution", "claim_order", "charge_payment", "mark_complete", "release_claim")
#: DynamoDB actions that read more than one key (PartiQL's can run a SELECT that scans).
MULTI_KEY_ACTIONS = {
    "dynamodb:query",
    "dynamodb:scan",
    "dynamodb:partiqlselect",
    "dynamodb:*",
}


def unconditional(policies: list[Any]) -> Iterator[Any]:
    """Each policy of a ``Policies`` list, a conditional one (``!If [cond, policy, !Ref AWS::NoValue]``)
    read as both of its branches: what a deploy may grant, whatever the parameters."""
    for policy in policies:
        if isinstance(policy, dict) and set(policy) == {"Fn::If"}:
            _, if_true, if_false = policy["Fn::If"]
            yield from unconditional([branch for branch in (if_true, if_false) if branch != NO_VALUE])
        else:
            yield policy


def statements(properties: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A function's or state machine's SAM ``Policies`` statements, or an IAM role's inline ones."""
    for policy in unconditional(properties.get("Policies") or []):
        if isinstance(policy, dict):
            yield from policy.get("Statement", [])
            yield from policy.get("PolicyDocument", {}).get("Statement", [])


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def claims_table(template: Template) -> tuple[str, dict[str, Any]]:
    """The table the Claim Order function writes (its ``CLAIMS_TABLE_NAME``)."""
    claim_order = template.function_by_handler("handlers.claim_order.handler")
    variables = template.functions[claim_order]["Environment"]["Variables"]
    name = template.referenced_resource(variables["CLAIMS_TABLE_NAME"])
    assert name is not None
    return name, template.resources[name]


# -- how the time limits relate -----------------------------------------------------------------


def test_a_claim_outlasts_every_execution_that_could_still_act_on_it(
    template: Template, saga: StateMachine, task_functions: dict[str, str]
) -> None:
    """When a lease runs out, the execution that held it has timed out and its last Lambda has
    stopped: a takeover never races a live holder."""
    longest_step = max(template.function_timeout(function) for function in task_functions.values())
    bound = saga.definition["TimeoutSeconds"] + longest_step
    lease = template.parameters["ClaimLeaseSeconds"]

    assert int(lease["Default"]) > bound
    assert int(lease["MinValue"]) > bound, "a deploy could set a lease shorter than an execution"
    assert bound < claims.DEFAULT_LEASE_SECONDS, "the code's fallback lease is shorter than an execution"


def test_the_claim_function_takes_its_lease_from_the_checked_parameter(template: Template) -> None:
    claim_order = template.function_by_handler("handlers.claim_order.handler")
    variables = template.functions[claim_order]["Environment"]["Variables"]
    assert variables["CLAIM_LEASE_SECONDS"] == {"Ref": "ClaimLeaseSeconds"}


def sqs_sources(template: Template) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(function, event properties, queue) for every SQS event source."""
    for function, properties in template.functions.items():
        for event in (properties.get("Events") or {}).values():
            if event["Type"] == "SQS":
                queue = template.referenced_resource(event["Properties"]["Queue"])
                assert queue is not None
                yield function, event["Properties"], queue


def test_a_message_stays_hidden_while_its_batch_may_still_be_processed(template: Template) -> None:
    """AWS's advice for SQS event sources: visibility timeout at least 6 x the function's timeout,
    or a message still being handled (or throttled) is delivered again."""
    sources = list(sqs_sources(template))
    assert sources, "no function reads the orders queue"
    for function, _, queue in sources:
        visibility = template.resources[queue]["Properties"].get(
            "VisibilityTimeout", DEFAULT_VISIBILITY_TIMEOUT
        )
        assert visibility >= 6 * template.function_timeout(function), f"{queue} vs {function}"


def test_the_start_function_reports_failures_per_message(template: Template) -> None:
    """Without ReportBatchItemFailures, Lambda ignores the partial batch response and one bad
    message sends its whole batch round again."""
    for _, event, _ in sqs_sources(template):
        assert "ReportBatchItemFailures" in event.get("FunctionResponseTypes", [])


def test_failed_and_malformed_orders_land_in_a_dead_letter_queue_that_keeps_them_14_days(
    template: Template,
) -> None:
    for function, _, queue in sqs_sources(template):
        source = template.resources[queue]["Properties"]
        redrive = source["RedrivePolicy"]
        assert int(redrive["maxReceiveCount"]) >= 1
        dead_letter = template.referenced_resource(redrive["deadLetterTargetArn"])
        assert dead_letter is not None
        kept = template.resources[dead_letter]["Properties"]["MessageRetentionPeriod"]
        assert kept == FOURTEEN_DAYS
        # A message keeps its first enqueue time in the DLQ: a shorter DLQ retention would drop it early.
        assert kept > source.get("MessageRetentionPeriod", DEFAULT_RETENTION)
        # The start function rejects a malformed message into that same queue.
        if queue == "OrdersQueue":
            variables = template.functions[function]["Environment"]["Variables"]
            assert template.referenced_resource(variables["DEAD_LETTER_QUEUE_URL"]) == dead_letter


def test_every_queue_is_encrypted(template: Template) -> None:
    queues = template.of_type("AWS::SQS::Queue")
    assert queues
    for name, properties in queues.items():
        assert properties.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in properties, name


# -- the claims table -----------------------------------------------------------------------------


def test_the_claims_table_is_keyed_by_order_id_alone(template: Template) -> None:
    _, table = claims_table(template)
    properties = table["Properties"]
    assert properties["KeySchema"] == [{"AttributeName": "orderId", "KeyType": "HASH"}]
    assert {"AttributeName": "orderId", "AttributeType": "S"} in properties["AttributeDefinitions"]


def test_the_claims_table_is_durable_encrypted_and_on_demand(template: Template) -> None:
    _, table = claims_table(template)
    properties = table["Properties"]
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert properties["SSESpecification"]["SSEEnabled"] is True
    # The record of who was charged survives every stack operation (tests/static/test_deploy.py).
    assert table.get("DeletionPolicy") == "Retain"
    assert table.get("UpdateReplacePolicy") == "Retain"
    assert properties["DeletionProtectionEnabled"] is True


def test_claims_expire_through_the_attribute_the_code_writes(template: Template) -> None:
    _, table = claims_table(template)
    ttl = table["Properties"]["TimeToLiveSpecification"]
    assert ttl["Enabled"] is True
    package = Path(claims.__file__).parent
    source = "".join(module.read_text(encoding="utf-8") for module in sorted(package.glob("*.py")))
    assert re.search(rf"\b{re.escape(ttl['AttributeName'])} = :", source), (
        f"the claims package never sets the TTL attribute {ttl['AttributeName']!r}"
    )


def test_a_closed_claim_outlasts_every_copy_of_its_order_a_queue_can_still_deliver(
    template: Template,
) -> None:
    """A closed claim's row is what stops a copy of a charged order from being charged again: once
    its TTL deletes it, a copy is claimed afresh at attempt 1, under a key the provider forgot.

    How long after an order is first sent can a copy still reach the claim? In the orders queue,
    its retention. Moved to the dead-letter queue, the message keeps its first enqueue time, so it
    is gone from there by the dead-letter queue's retention after it was first sent, whatever time
    it spent in the orders queue. A redrive (``saga redrive``, a message move task) sends it back as
    a new message, with a new retention window in the orders queue. So one redrive reaches the claim
    at most DLQ retention + orders queue retention after the order was sent (14 + 4 = 18 days), and
    the claim closes after the order was sent: the retention must be longer than that sum, both as
    deployed by default and at the least value a deploy may set. (A copy that fails into the
    dead-letter queue again and is redriven a second time is not covered: each round adds a DLQ
    retention; docs/design.md says so.) The library's fallback is the same figure.
    """
    (_, _, queue), *_ = list(sqs_sources(template))
    source = template.resources[queue]["Properties"]
    dead_letter = template.referenced_resource(source["RedrivePolicy"]["deadLetterTargetArn"])
    assert dead_letter is not None
    dead_letter_kept = int(template.resources[dead_letter]["Properties"]["MessageRetentionPeriod"])
    orders_kept = int(source.get("MessageRetentionPeriod", DEFAULT_RETENTION))
    bound = dead_letter_kept + orders_kept
    retention = template.parameters["ClaimRetentionDays"]
    for days in (retention["Default"], retention["MinValue"]):
        assert int(days) * claims.SECONDS_PER_DAY > bound, f"{days} days do not outlast a redriven copy"
    assert int(retention["Default"]) * claims.SECONDS_PER_DAY == claims.DEFAULT_RETENTION_SECONDS


def claim_writers(template: Template) -> set[str]:
    """Functions allowed to write an item of the claims table."""
    table, _ = claims_table(template)
    return {
        function
        for function in template.functions
        for statement in template.function_statements(function)
        if {"dynamodb:UpdateItem", "dynamodb:PutItem"} & set(as_list(statement["Action"]))
        and table in {template.referenced_resource(r) for r in as_list(statement["Resource"])}
    }


def claims_store_builders(template: Template) -> set[str]:
    """Functions whose handler builds the claims store (``runtime.claims_store()``)."""
    found = set()
    for function in template.functions:
        module = str(template.function_setting(function, "Handler")).rsplit(".", 1)[0]
        source = (FUNCTIONS_DIR / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8")
        if re.search(r"\bclaims_store\(\)", source):
            found.add(function)
    return found


def test_every_function_that_writes_claims_takes_their_retention_from_the_parameter(
    template: Template,
) -> None:
    """One figure: the functions read ``CLAIM_RETENTION_DAYS`` with no default of their own, so a
    function that writes (or builds the store) without it would fail, and one given another figure
    would close claims for less time than the checked parameter."""
    writers = claim_writers(template)
    assert len(writers) >= 4, writers  # claim, mark complete, release, the sweeper
    for function in writers | claims_store_builders(template):
        variables = template.functions[function]["Environment"]["Variables"]
        assert variables.get("CLAIM_RETENTION_DAYS") == {"Ref": "ClaimRetentionDays"}, function


def test_the_sweepers_index_is_the_one_the_code_reads(template: Template) -> None:
    _, table = claims_table(template)
    indexes = {index["IndexName"] for index in table["Properties"].get("GlobalSecondaryIndexes", [])}
    assert claims.OPEN_CLAIMS_INDEX in indexes


# -- permissions -----------------------------------------------------------------------------------


def test_functions_declare_their_own_statements_not_sam_policy_templates(template: Template) -> None:
    """A policy template such as DynamoDBCrudPolicy grants Scan, BatchWrite and DeleteItem on the
    table and its indexes: each function states the actions it needs instead."""
    for name, properties in template.functions.items():
        if "Role" in properties:
            # A function with its own role (the start function: SAM's generated one would carry the
            # SQS execution policy on every queue) must use a role of this template, whose inline
            # statements the other checks read (allowed_statements); an external one escapes them.
            role = template.referenced_resource(properties["Role"])
            assert role in template.resources, f"{name}: an external Role escapes these checks"
            assert template.resources[role]["Type"] == "AWS::IAM::Role", name
            continue
        for policy in unconditional(properties.get("Policies") or []):
            assert isinstance(policy, dict), f"{name}: managed policy {policy}"
            assert set(policy) == {"Statement"}, f"{name}: policy template {policy}"


def test_the_state_machine_may_invoke_exactly_the_functions_it_calls(
    template: Template, saga: StateMachine, task_functions: dict[str, str]
) -> None:
    """By each function's alias (``!Sub "${X.Arn}:live"``, the ARN the Task invokes) and that function
    unqualified (for executions started before it had an alias): no policy template (LambdaInvokePolicy
    grants function:<name>*, every function whose name starts with it), no wildcard, no other function."""
    role = template.referenced_resource(saga.properties["RoleArn"])
    assert role is not None
    assert template.resources[role]["Type"] == "AWS::IAM::Role", "the execution role is this template's"
    invokable = []
    for policy in template.resources[role]["Properties"]["Policies"]:
        for statement in policy["PolicyDocument"]["Statement"]:
            if "lambda:InvokeFunction" in as_list(statement["Action"]):
                assert as_list(statement["Action"]) == ["lambda:InvokeFunction"], statement
                resource, latest = as_list(statement["Resource"])
                alias = ALIAS_ARN.fullmatch(str(resource.get("Fn::Sub", "")))
                assert alias, resource
                function, name = alias.groups()
                assert template.function_setting(function, "AutoPublishAlias") == name, resource
                assert latest == {"Fn::GetAtt": [function, "Arn"]}, latest
                invokable.append(function)
    assert sorted(invokable) == sorted(set(task_functions.values()))


def allowed_statements(template: Template) -> Iterator[tuple[str, dict[str, Any]]]:
    principals = {
        **template.functions,
        **template.of_type("AWS::StepFunctions::StateMachine"),
        **template.of_type("AWS::IAM::Role"),
    }
    for name, properties in principals.items():
        for statement in statements(properties):
            if statement.get("Effect", "Allow") == "Allow":
                yield name, statement


def names_a_template_resource(template: Template, value: Any) -> bool:
    """A ``!Ref``/``!GetAtt`` of a resource, or of a parameter that only admits an ARN, or a ``!Sub``
    built on a resource's ARN with no wildcard (an index: ``${ClaimsTable.Arn}/index/OpenClaimsByLease``)."""
    target = template.referenced_resource(value)
    if target in template.resources:
        return True
    parameter = template.parameters.get(target or "")
    if parameter:
        return str(parameter.get("AllowedPattern", "")).startswith("^arn:")
    if isinstance(value, dict) and "Fn::Sub" in value:
        # !Sub "text", or !Sub [text, {name: value}] whose every value names a resource itself.
        text, variables = (value["Fn::Sub"], {}) if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"]
        if "${AWS::AccountId}" in text and all("Fn::Select" in item for item in variables.values()):
            # An ARN parameter's own fields rebuilt in the stack's account (the provider's secret):
            # every variable is a field of a parameter that only admits an ARN, and nothing is a wildcard.
            fields = [item["Fn::Select"] for item in variables.values()]
            return "*" not in text and all(
                isinstance(index, int) and names_a_template_resource(template, split["Fn::Split"][1])
                for index, split in fields
            )
        names = re.findall(r"\$\{([^}.]+)(?:\.[^}]*)?\}", text)
        return (
            text.startswith("${")
            and "*" not in text
            and all(name in template.resources or name in variables for name in names)
            and all(names_a_template_resource(template, variable) for variable in variables.values())
        )
    return False


def test_data_permissions_name_their_actions_and_one_resource_each(template: Template) -> None:
    checked = 0
    for name, statement in allowed_statements(template):
        actions = as_list(statement["Action"])
        if not any(action.split(":", 1)[0] in DATA_SERVICES for action in actions):
            continue
        checked += 1
        assert all("*" not in action for action in actions), f"{name}: wildcard action in {actions}"
        for resource in as_list(statement["Resource"]):
            assert names_a_template_resource(template, resource), f"{name}: {actions} on {resource}"
    assert checked, "no data permission found: the check would pass on anything"


def test_the_claim_function_may_only_update_items(template: Template) -> None:
    """The gate is one conditional UpdateItem: no Put that could overwrite, no read to decide on."""
    claim_order = template.function_by_handler("handlers.claim_order.handler")
    granted = {a for s in template.function_statements(claim_order) for a in as_list(s["Action"])}
    # Besides what Lambda itself does with the role: write the function's logs and traces.
    assert {a for a in granted if a.partition(":")[0] not in {"logs", "xray"}} == {"dynamodb:UpdateItem"}


def test_no_function_on_the_charge_path_may_query_scan_or_read_an_index(template: Template) -> None:
    """Invariant 3 in IAM: even a code change could not take the charge decision from an index."""
    for handler in CHARGE_PATH_HANDLERS:
        function = template.function_by_handler(f"handlers.{handler}.handler")
        statements = template.function_statements(function)
        assert statements, f"{function}: no statement: the check would pass on anything"
        for statement in statements:
            actions = {action.lower() for action in as_list(statement["Action"])}
            assert not actions & MULTI_KEY_ACTIONS, f"{function}: {sorted(actions & MULTI_KEY_ACTIONS)}"
            assert "/index/" not in str(statement["Resource"]), f"{function}: {statement['Resource']}"


# -- invariant 3: no Query, Scan or index on the charge path ---------------------------------------

#: Client methods that read more than one key, or an index: PartiQL's ExecuteStatement can run a
#: SELECT that scans, so it counts as one.
FORBIDDEN_METHODS = {"query", "scan", "execute_statement", "batch_execute_statement"}
#: Constructing a class runs these (and the class body); its other methods are reached by name.
CONSTRUCTORS = {"__init__", "__post_init__", "__new__"}


@dataclass(frozen=True)
class Reached:
    names: set[str]
    nodes: list[tuple[Path, ast.AST]]


class CallGraph:
    """Which code of ``functions/`` a set of entry modules can run, by name (over-approximated).

    Every name a reached piece of code mentions (``f(...)``, ``obj.f(...)``, or ``f`` passed as a
    callback) that is defined somewhere in ``functions/`` is followed: a function's whole body; a
    class's body and constructor only (its other methods are followed when they are named).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules = {path: ast.parse(path.read_text(encoding="utf-8")) for path in root.rglob("*.py")}
        self.definitions: dict[str, list[tuple[Path, ast.AST]]] = defaultdict(list)
        for path, tree in self.modules.items():
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    self.definitions[node.name].append((path, node))
                elif isinstance(node, ast.ClassDef):
                    for part in self._construction(node):
                        self.definitions[node.name].append((path, part))

    @staticmethod
    def _construction(node: ast.ClassDef) -> Iterator[ast.AST]:
        yield from node.decorator_list
        for statement in node.body:
            if (
                isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef)
                and statement.name not in CONSTRUCTORS
            ):
                continue
            yield statement

    def module(self, relative: str) -> tuple[Path, ast.AST]:
        path = self.root / relative
        assert path in self.modules, f"{relative} does not exist"
        return path, self.modules[path]

    def reach(self, entries: Iterable[tuple[Path, ast.AST]]) -> Reached:
        names: set[str] = set()
        nodes = list(entries)
        todo = list(nodes)
        while todo:
            _, node = todo.pop()
            for child in ast.walk(node):
                name = child.id if isinstance(child, ast.Name) else getattr(child, "attr", None)
                if isinstance(name, str) and name in self.definitions and name not in names:
                    names.add(name)
                    nodes.extend(self.definitions[name])
                    todo.extend(self.definitions[name])
        return Reached(names, nodes)

    def multi_key_reads(self, reached: Reached) -> set[str]:
        """``file:line: what`` for every Query, Scan or index read in the reached code."""
        found = set()
        for path, node in reached.nodes:
            for child in ast.walk(node):
                what = _multi_key_read(child)
                if what:
                    found.add(f"{path.relative_to(self.root)}:{getattr(child, 'lineno', '?')}: {what}")
        return found


def _multi_key_read(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_METHODS:
        return f".{node.attr}"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get_paginator"
        and any(isinstance(arg, ast.Constant) and arg.value in FORBIDDEN_METHODS for arg in node.args)
    ):
        return "get_paginator of a query or scan"
    if isinstance(node, ast.keyword) and node.arg == "IndexName":
        return "IndexName="
    if isinstance(node, ast.Dict) and any(
        isinstance(key, ast.Constant) and key.value == "IndexName" for key in node.keys
    ):
        return '"IndexName" in a request'
    return None


def charge_path(graph: CallGraph) -> Reached:
    return graph.reach(graph.module(f"handlers/{handler}.py") for handler in CHARGE_PATH_HANDLERS)


def test_the_charge_path_handlers_are_the_ones_deployed(template: Template) -> None:
    for handler in CHARGE_PATH_HANDLERS:
        template.function_by_handler(f"handlers.{handler}.handler")


def test_nothing_on_the_charge_path_queries_scans_or_reads_an_index() -> None:
    graph = CallGraph(FUNCTIONS_DIR)
    reached = charge_path(graph)

    assert "claim" in reached.names, "the analysis no longer sees the claim: it proves nothing"
    assert "open_claims" not in reached.names, "the sweeper's index query is reachable from the charge path"
    assert graph.multi_key_reads(reached) == set()


def test_the_check_sees_the_sweepers_index_query() -> None:
    """The sweeper's discovery (allowed to read the index) is exactly what the check must find."""
    graph = CallGraph(FUNCTIONS_DIR)
    found = graph.multi_key_reads(graph.reach(graph.definitions["open_claims"]))
    assert any("get_paginator" in line for line in found)
    assert any("IndexName" in line for line in found)


def test_calling_the_sweepers_discovery_from_claim_order_would_fail_the_check(tmp_path: Path) -> None:
    copy = tmp_path / "functions"
    shutil.copytree(FUNCTIONS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "handlers" / "claim_order.py").open("a", encoding="utf-8") as module:
        module.write(
            "\n\ndef _stale_claims() -> list[object]:\n"
            "    return list(claims_store().open_claims(lease_expired_before=0))\n"
        )
    graph = CallGraph(copy)
    reached = charge_path(graph)
    assert "open_claims" in reached.names
    assert graph.multi_key_reads(reached)
