"""The state machine definition, read as data: what must hold before anything runs.

asl-validator (``make check-template``) checks that the definition is well formed; these tests
check what it cannot know: that the substitutions match the template, that every step outlives the
Lambda it calls, that Retry and Catch follow the saga's rules (a charge is never released on an
ambiguous error), and that every error name the definition matches is a class the code raises.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from payment_saga import errors

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.static.conftest import StateMachine, Template

ROOT = Path(__file__).resolve().parents[2]

LAMBDA_SERVICE_ERRORS = (
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.ClientExecutionTimeoutException",
    "Lambda.TooManyRequestsException",
)
#: ASL defaults of a retrier's fields, used when a field is left out.
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_RATE = 2.0
DEFAULT_JITTER = "NONE"
TERMINAL_TYPES = {"Succeed", "Fail"}
LAMBDA_INVOKE = ":states:::lambda:invoke"
#: Title Case words: a capitalised word or an acronym; short linking words may stay lower case.
_WORD = re.compile(r"[A-Z][a-z0-9]*|[A-Z0-9]{2,}")
_MINOR_WORDS = {"a", "an", "and", "as", "at", "by", "for", "in", "of", "on", "or", "the", "to"}
#: The most states the graph may have: the three steps, their named endings, and no state that only a
#: corner case of the machinery needs (docs/design.md: "The state machine: only the states the
#: promise needs").
MAX_STATES = 26


def matches(error_equals: list[str], error: str) -> bool:
    """Whether a retrier or catcher with ``error_equals`` applies to ``error`` (ASL wildcard rules)."""
    if "States.ALL" in error_equals or error in error_equals:
        return True
    # States.TaskFailed is a wildcard for every error except States.Timeout.
    return "States.TaskFailed" in error_equals and error != "States.Timeout"


def first_match(rules: list[dict[str, Any]], error: str) -> dict[str, Any] | None:
    """The retrier (or catcher) Step Functions uses for ``error``: the first that matches."""
    return next((rule for rule in rules if matches(rule["ErrorEquals"], error)), None)


def lambda_tasks(saga: StateMachine) -> list[tuple[str, dict[str, Any]]]:
    """The Task states that invoke a Lambda function (the others publish outcome events)."""
    return [
        (name, state)
        for name, state in saga.tasks()
        if str(state.get("Resource", "")).endswith(LAMBDA_INVOKE)
    ]


def successors(state: dict[str, Any]) -> set[str]:
    """Where a state can go next: Next, Choice targets and Default, Catch targets."""
    targets = {state["Next"]} if "Next" in state else set()
    targets |= {choice["Next"] for choice in state.get("Choices", [])}
    targets |= {state["Default"]} if "Default" in state else set()
    targets |= {catcher["Next"] for catcher in state.get("Catch", [])}
    return targets


def reachable(states: dict[str, Any], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(successors(states[name]))
    return seen


def steps(template: Template, task_functions: dict[str, str], handler: str) -> list[str]:
    """Every Task state that runs ``handlers.<handler>`` (found by code, not by state name)."""
    function = template.function_by_handler(f"handlers.{handler}.handler")
    return [name for name, invoked in task_functions.items() if invoked == function]


def step(template: Template, task_functions: dict[str, str], handler: str) -> str:
    """The one Task state that runs ``handlers.<handler>``."""
    names = steps(template, task_functions, handler)
    assert len(names) == 1, f"expected one Task invoking handlers.{handler}, found {names}"
    return names[0]


def saga_error_names() -> set[str]:
    found: set[str] = set()
    todo: list[type[errors.SagaError]] = [errors.SagaError]
    while todo:
        cls = todo.pop()
        found.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return found


def matched_error_names(saga: StateMachine) -> Iterator[tuple[str, str]]:
    """(state, error name) for every name matched in ErrorEquals, or compared with a caught ``Error``."""

    def choice_rules(rules: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for rule in rules:
            yield rule
            yield from choice_rules(rule.get("And", []) + rule.get("Or", []))
            if "Not" in rule:
                yield from choice_rules([rule["Not"]])

    for name, state in saga.states():
        for rule in state.get("Retry", []) + state.get("Catch", []):
            for error in rule["ErrorEquals"]:
                yield name, error
        for rule in choice_rules(state.get("Choices", [])):
            if str(rule.get("Variable", "")).endswith(".Error") and "StringEquals" in rule:
                yield name, rule["StringEquals"]


# -- substitutions --------------------------------------------------------------------------------


def test_every_substitution_in_the_definition_is_supplied_by_the_template(saga: StateMachine) -> None:
    used = set(saga.substitutions_used())
    missing = used - set(saga.substitutions)
    assert not missing, f"{saga.path.name} uses ${{...}} with no DefinitionSubstitutions entry: {missing}"


def test_every_substitution_the_template_supplies_is_used(saga: StateMachine) -> None:
    unused = set(saga.substitutions) - set(saga.substitutions_used())
    assert not unused, f"DefinitionSubstitutions never used by {saga.path.name}: {unused}"


def test_every_definition_file_is_deployed_by_a_state_machine(template: Template) -> None:
    deployed = {machine.path for machine in template.state_machines()}
    assert set((ROOT / "statemachine").glob("*.asl.json")) <= deployed


# -- every task: retried, caught, bounded --------------------------------------------------------


def test_every_task_has_retry_catch_and_a_timeout(saga: StateMachine) -> None:
    assert saga.tasks(), "the saga has no Task state"
    for name, state in saga.tasks():
        assert state.get("Retry"), f"{name}: no Retry"
        assert state.get("Catch"), f"{name}: no Catch (a failure would end the execution unnamed)"
        assert isinstance(state.get("TimeoutSeconds"), int), f"{name}: no TimeoutSeconds"


def test_every_task_invokes_a_function_of_the_template(
    saga: StateMachine, task_functions: dict[str, str]
) -> None:
    assert {name for name, _ in lambda_tasks(saga)} == set(task_functions)


def test_every_task_waits_longer_than_the_lambda_it_invokes(
    template: Template, saga: StateMachine, task_functions: dict[str, str]
) -> None:
    """The Lambda's own timeout must fire first, so the failure the state machine sees is the Lambda's."""
    for name, state in lambda_tasks(saga):
        function = task_functions[name]
        assert state["TimeoutSeconds"] > template.function_timeout(function), (
            f"{name}: TimeoutSeconds {state['TimeoutSeconds']} <= {function} Timeout"
            f" {template.function_timeout(function)}"
        )


def test_the_execution_has_a_timeout(saga: StateMachine) -> None:
    assert isinstance(saga.definition.get("TimeoutSeconds"), int)


@pytest.mark.parametrize("error", LAMBDA_SERVICE_ERRORS)
def test_every_task_retries_lambda_service_errors_with_backoff_and_full_jitter(
    saga: StateMachine, error: str
) -> None:
    """Throttling and Lambda service hiccups are named, not left to a catch-all tuned for unknowns."""
    for name, state in lambda_tasks(saga):
        retrier = first_match(state["Retry"], error)
        assert retrier is not None, f"{name}: {error} is not retried"
        assert error in retrier["ErrorEquals"], f"{name}: {error} is retried only by {retrier['ErrorEquals']}"
        assert retrier.get("MaxAttempts", DEFAULT_MAX_ATTEMPTS) > 0, f"{name}: {error} is not retried"
        assert retrier.get("BackoffRate", DEFAULT_BACKOFF_RATE) > 1, f"{name}: {error}: no backoff"
        assert retrier.get("JitterStrategy", DEFAULT_JITTER) == "FULL", f"{name}: {error}: no jitter"


def test_states_all_stands_alone_and_last(saga: StateMachine) -> None:
    """Step Functions rejects anything else; so would a deploy, much later than this test."""
    for name, state in saga.states():
        for field in ("Retry", "Catch"):
            rules = state.get(field, [])
            for position, rule in enumerate(rules):
                if "States.ALL" in rule["ErrorEquals"]:
                    assert rule["ErrorEquals"] == ["States.ALL"], f"{name} {field}: States.ALL is not alone"
                    assert position == len(rules) - 1, f"{name} {field}: States.ALL is not last"


# -- error names are the code's API --------------------------------------------------------------


def test_every_error_name_the_definition_matches_is_an_exception_class(saga: StateMachine) -> None:
    """Lambda reports an exception as its class name: a renamed class would silently stop matching."""
    known = saga_error_names()
    unknown = {
        (state, error)
        for state, error in matched_error_names(saga)
        if not error.startswith(("States.", "Lambda.")) and error not in known
    }
    assert not unknown, f"error names with no class in payment_saga/errors.py: {sorted(unknown)}"


# -- release only on proof (invariant 6) ---------------------------------------------------------


def test_the_charge_releases_its_claim_only_on_a_decline_or_a_charge_not_attempted(
    template: Template, saga: StateMachine, task_functions: dict[str, str]
) -> None:
    states = saga.definition["States"]
    charge = step(template, task_functions, "charge_payment")
    release = step(template, task_functions, "release_claim")
    catch = states[charge]["Catch"]

    to_release = {
        error for catcher in catch if catcher["Next"] == release for error in catcher["ErrorEquals"]
    }
    assert to_release == {"PaymentDeclined", "ChargeNotAttempted"}
    assert catch[-1]["ErrorEquals"] == ["States.ALL"]
    # Through the outcome event (OrderNeedsReconciliation), whose task goes on to the Fail state either way.
    assert catch[-1]["Next"] == "Publish Reconciliation"
    assert {catcher["Next"] for catcher in states["Publish Reconciliation"]["Catch"]} == {
        "Needs Reconciliation"
    }
    assert states["Publish Reconciliation"]["Next"] == "Needs Reconciliation"
    assert states["Needs Reconciliation"]["Type"] == "Fail"


def test_an_ambiguous_charge_failure_never_reaches_release(
    template: Template, saga: StateMachine, task_functions: dict[str, str]
) -> None:
    """Nothing after a possible charge (the charge's success path, Mark Complete and Await Settlement,
    the other catchers: a payment that settles later among them) can lead to Release Claim."""
    states = saga.definition["States"]
    charge = step(template, task_functions, "charge_payment")
    writes = steps(template, task_functions, "mark_complete")
    release = step(template, task_functions, "release_claim")
    proof = {"PaymentDeclined", "ChargeNotAttempted"}

    assert len(writes) == 2, writes  # Mark Complete, and Await Settlement
    assert all(catcher["Next"] != release for write in writes for catcher in states[write]["Catch"])
    after_a_possible_charge = [states[charge]["Next"], *writes] + [
        catcher["Next"] for catcher in states[charge]["Catch"] if not set(catcher["ErrorEquals"]) <= proof
    ]
    for start in after_a_possible_charge:
        assert release not in reachable(states, start), f"{release} is reachable from {start}"


def test_the_charge_step_tells_its_handler_whether_an_earlier_request_may_have_landed(
    template: Template, saga: StateMachine, task_functions: dict[str, str]
) -> None:
    """ChargeNotAttempted proves nothing about an earlier request of the same attempt, so the handler
    releases on it only on the first try of a never-redriven execution that did not take the claim
    over. Without these fields it would take every try for a first one."""
    states = saga.definition["States"]
    claim = states[step(template, task_functions, "claim_order")]
    payload = states[step(template, task_functions, "charge_payment")]["Parameters"]["Payload"]

    assert payload.get("retryCount.$") == "$$.State.RetryCount"
    assert payload.get("redriveCount.$") == "$$.Execution.RedriveCount"
    assert payload.get("claim.$") == claim["ResultPath"]
    assert "how.$" in claim["ResultSelector"], "the charge cannot tell a takeover"


# -- the graph people read in the console --------------------------------------------------------


def test_the_graph_has_at_most_its_budget_of_states(saga: StateMachine) -> None:
    """Each state is one more box in the console graph a person reads to follow an order; one re-queue
    path and no state for hand-started executions keep the whole graph readable."""
    names = [name for name, _ in saga.states()]
    assert len(names) <= MAX_STATES, f"{len(names)} states: {names}"


def test_one_task_sends_orders_back_to_the_queue(saga: StateMachine) -> None:
    """Both re-queues (behind an open payment attempt, after a failed Claim step) take one path; the
    delay and the ending ride in variables its ways in assign."""
    senders = [
        name for name, state in saga.tasks() if str(state["Resource"]).endswith(":states:::sqs:sendMessage")
    ]
    assert senders == ["Requeue Order"]


def test_every_transition_names_an_existing_state(saga: StateMachine) -> None:
    states = saga.definition["States"]
    for name, state in states.items():
        assert successors(state) <= set(states), f"{name} goes to a state that does not exist"


def test_every_state_is_reachable_and_every_path_ends(saga: StateMachine) -> None:
    states = saga.definition["States"]
    from_start = reachable(states, saga.definition["StartAt"])
    assert from_start == set(states), f"unreachable: {set(states) - from_start}"

    def terminal(name: str) -> bool:
        return states[name]["Type"] in TERMINAL_TYPES or states[name].get("End") is True

    for name in states:
        assert any(terminal(then) for then in reachable(states, name)), f"no path from {name} ever ends"
        if not terminal(name):
            assert successors(states[name]), f"{name} neither ends nor goes anywhere"


def test_state_names_are_title_case_phrases(saga: StateMachine) -> None:
    for name, state in saga.states():
        phrase = name.removesuffix("?") if state["Type"] == "Choice" else name
        first, *rest = phrase.split(" ")
        assert _WORD.fullmatch(first), f"state name {name!r} is not a Title Case phrase"
        assert all(_WORD.fullmatch(word) or word in _MINOR_WORDS for word in rest), (
            f"state name {name!r} is not a Title Case phrase"
        )
