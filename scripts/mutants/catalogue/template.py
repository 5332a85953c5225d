"""The template's IAM grants: one mutant per action a role grants, the action taken away.

A role one action short deploys fine and fails on AWS at the first order that needs the action (a
Release Claim that cannot write its tombstone leaves nothing behind; a sweeper that cannot re-read a
claim cannot see a double charge). The local stack enforces every role (saga_local/aws/iam.py), so
each of these must fail a test. The mutants are read from the template itself: a grant added later
gets its mutant without anyone writing one.

Not mutated: the platform's grants (CloudWatch Logs, X-Ray: no local run writes to them), and the
KMS grants for a customer managed key on the secret, which only a deploy with such a key has.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from model import Catalogue, MutantError

from saga_local.template import parse_template

TEMPLATE = "template.yaml"
#: The static checks of the mapping's grants (fast), then the outcome tests, so that the table names
#: the scenario that broke; the check that every grant is used last.
TESTS = (
    "tests/static/test_security.py",
    "tests/static/test_outcome_events.py",
    "tests/statemachine/test_paths.py",
    "tests/statemachine/test_gate_edges.py",
    "tests/statemachine/test_sweeper.py",
    "tests/statemachine/test_order_messages.py",
    "tests/local/test_outcome_events.py",
    "tests/statemachine/test_iam.py",
)
#: Services whose grants no local run can exercise (see the module docstring).
NOT_LOCAL = frozenset({"logs", "xray", "kms"})

TEMPLATE_GRANTS = Catalogue(TEMPLATE, TESTS)


def _statement_lists(resource: dict[str, Any]) -> Iterator[list[Any]]:
    """Every ``Statement`` list of a function's, state machine's or role's policies."""
    for policy in resource.get("Properties", {}).get("Policies") or []:
        if not isinstance(policy, dict):
            continue
        document = policy.get("PolicyDocument", policy)
        if isinstance(document.get("Statement"), list):
            yield document["Statement"]


def _grants(document: dict[str, Any]) -> Iterator[tuple[str, int, int, str]]:
    """(resource id, which statement list, which statement, action) for every action granted."""
    for name, resource in document["Resources"].items():
        if resource["Type"] not in {
            "AWS::Serverless::Function",
            "AWS::StepFunctions::StateMachine",
            "AWS::IAM::Role",
        }:
            continue
        for n, statements in enumerate(_statement_lists(resource)):
            for i, statement in enumerate(statements):
                actions = statement.get("Action", [])
                for action in actions if isinstance(actions, list) else [actions]:
                    if statement.get("Effect") == "Allow" and action.partition(":")[0] not in NOT_LOCAL:
                        yield name, n, i, action


def _without(name: str, n: int, i: int, action: str) -> Any:
    def transform(document: dict[str, Any]) -> None:
        statements = list(_statement_lists(document["Resources"][name]))
        if n >= len(statements) or i >= len(statements[n]):
            raise MutantError(f"{name}: no statement {n}/{i}")
        statement = statements[n][i]
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if action not in actions:
            raise MutantError(f"{name}: {action} is no longer granted there")
        kept = [a for a in actions if a != action]
        if kept:
            statement["Action"] = kept
        else:
            del statements[n][i]

    return transform


_DOCUMENT = parse_template((Path(__file__).resolve().parents[3] / TEMPLATE).read_text(encoding="utf-8"))
for _name, _n, _i, _action in _grants(_DOCUMENT):
    TEMPLATE_GRANTS.yaml(
        f"iam-{_name}-{_action.replace(':', '-')}-{_n}.{_i}",
        _without(_name, _n, _i, _action),
        f"{_name}'s role without {_action} (statement {_n}.{_i})",
    )

#: The queues' resource policies: who may send to and read the queues a forged message would travel.
QUEUE_POLICY_TESTS = ("tests/static/test_resource_policies.py", "tests/local/test_queue_policies.py")
for sid, description in (
    ("OnlyTheReceiverQueuesWebhooks", "any role of the account with sqs:SendMessage queues a webhook event"),
    (
        "NobodyDeadLettersWebhooks",
        "a message planted on the webhook dead-letter queue is redriven as an event",
    ),
    ("OnlyTheConsumerAndOperatorsReadWebhooks", "any role of the account reads (and deletes) webhook events"),
    ("OnlyTheRelayParks", "any role of the account plants a record on the relay's parking queue"),
):
    TEMPLATE_GRANTS.text(
        f"queue-policy-{sid}",
        f"          - Sid: {sid}\n            Effect: Deny\n",
        f"          - Sid: {sid}\n            Effect: Allow\n",
        f"the queue policy's Deny {sid} is an Allow, which binds no principal of the account: {description}",
        tests=QUEUE_POLICY_TESTS,
    )
