"""The moto internals saga_local.aws.moto_adapter relies on, pinned to the exact moto version we use.

If moto changes any of these, this file fails first and says which assumption broke, instead of
the local stack quietly running Lambdas in Docker, waiting out real retry delays, or letting two
conditional writes both win.
"""

from __future__ import annotations

import inspect
from typing import Any

import moto
from moto.awslambda.models import LambdaBackend
from moto.dynamodb.responses import DynamoHandler
from moto.sqs.models import SQSBackend
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.eval.states import ExecutionData
from moto.stepfunctions.parser.asl.utils import boto_client, json_path
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

from saga_local.aws.moto_adapter import MOTO_VERSION


def test_moto_is_the_version_the_adapter_was_written_against() -> None:
    assert moto.__version__ == MOTO_VERSION


def test_lambda_invocations_go_through_lambda_backend_invoke() -> None:
    params = list(inspect.signature(LambdaBackend.invoke).parameters)
    assert params == ["self", "function_name", "qualifier", "body", "headers", "response_headers"]


def test_retry_waits_are_a_time_sleep_in_the_retrier_module() -> None:
    assert "time.sleep(interval_seconds)" in inspect.getsource(retrier_decl.RetrierDecl._eval_body)


def test_dynamodb_update_reads_the_old_item_outside_the_backend_write() -> None:
    # Why the lock wraps the whole request, not the backend's write: ALL_OLD is read first.
    source = inspect.getsource(DynamoHandler.update_item)
    assert source.index("existing_item = copy.deepcopy") < source.index("self.dynamodb_backend.update_item(")
    assert "call_action" in vars(DynamoHandler) or hasattr(DynamoHandler, "call_action")


def test_the_engine_parses_the_definition_per_execution_and_builds_its_context_here() -> None:
    assert "AmazonStateLanguageParser.parse" in inspect.getsource(ExecutionWorker._get_evaluation_entrypoint)
    assert "ExecutionData(" in inspect.getsource(ExecutionWorker._get_evaluation_environment)
    # moto still lacks $$.Execution.RedriveCount: when it gains it, drop our patch.
    assert "RedriveCount" not in ExecutionData.__annotations__


def test_the_engine_makes_clients_with_boto3_client_and_parses_jsonpath_with_parse() -> None:
    assert "boto3.client(" in inspect.getsource(boto_client.boto_client_for)
    assert "parse(path)" in inspect.getsource(json_path.extract_json)


def test_eventbridge_parses_each_targets_input_paths_with_jsonpath_ng_ext_parse_at_call_time() -> None:
    # The adapter caches jsonpath_ng.ext.parse: moto must look it up when it is called, not before.
    from moto.events.utils import EventTemplateParser

    source = inspect.getsource(EventTemplateParser.parse)
    assert "from jsonpath_ng.ext import parse" in source
    assert "parse(input_paths_map[input_path])" in source


def test_executions_live_in_their_state_machines_list_and_names_are_checked_there() -> None:
    # retire_executions replaces that list under the lock start_execution runs in, and the name
    # check refuses a retired name before moto's own loop over the list.
    from moto.stepfunctions.models import StateMachine
    from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    start = inspect.getsource(StepFunctionsParserBackend.start_execution)
    assert "state_machine._handle_name_input_idempotency(" in start
    assert "state_machine.executions.append(execution)" in start
    assert "id(state_machine.executions): []" in start  # the per-execution clone drops the list
    check = StateMachine._handle_name_input_idempotency
    assert list(inspect.signature(check).parameters) == ["self", "name", "execution_input"]
    ended = inspect.getsource(BaseExecutionWorkerCommunication._reflect_execution_status)
    assert "self.execution.stop_date = " in ended
    assert "self.execution.exec_status = ExecutionStatus.SUCCEEDED" in ended


def test_every_model_instance_is_tracked_by_base_model_new_and_engine_threads_are_listed() -> None:
    # The adapter replaces BaseModel.__new__ (moto's dashboard registry, a leak in a long run) and
    # prunes the engine's list of threads; neither may hide anything else moto does there.
    from moto.core.common_models import BaseModel
    from moto.stepfunctions.parser import utils
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    source = inspect.getsource(BaseModel.__new__)
    assert "instance = super().__new__(cls)" in source
    assert "cls.instances_tracked.append(instance)" in source
    assert source.rstrip().endswith("return instance")
    assert isinstance(utils.TMP_THREADS, list)
    assert "TMP_THREADS.append(execution_logic_thread)" in inspect.getsource(ExecutionWorker.start)


def test_queue_attributes_computed_one_by_one_equal_moto_s_whole_dict() -> None:
    import json

    import boto3
    from moto import mock_aws
    from moto.sqs.models import Queue, sqs_backends

    from saga_local.aws.moto_sqs import QueueAttributes

    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        dlq = sqs.create_queue(QueueName="dead.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        redrive = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 5})
        sqs.create_queue(
            QueueName="q.fifo",
            Attributes={"FifoQueue": "true", "RedrivePolicy": redrive, "ContentBasedDeduplication": "true"},
        )
        sqs.create_queue(QueueName="plain", Attributes={"DelaySeconds": "3"})
        backend = sqs_backends["123456789012"]["us-east-1"]
        for queue in backend.queues.values():
            whole = Queue.attributes.fget(queue)  # type: ignore[attr-defined]
            lazy = QueueAttributes(queue)
            assert dict(lazy) == whole
            assert list(lazy) == list(whole)
            assert lazy.get("ContentBasedDeduplication") == whole.get("ContentBasedDeduplication")


def test_sqs_retention_check_computes_queue_attributes() -> None:
    source = inspect.getsource(SQSBackend.is_message_valid_based_on_retention_period)
    assert 'get_queue_attributes(\n            queue_name, ["MessageRetentionPeriod"]' in source


# -- what saga_local.runtime.faults relies on for ``lost_answer`` and ``late_write`` -----------------------


def test_moto_answers_requests_from_a_before_send_handler_we_can_call_ourselves() -> None:
    # apply_request hands a held or lost request to moto's stubber directly.
    from moto.core.botocore_stubber import BotocoreStubber
    from moto.core.models import botocore_stubber

    assert isinstance(botocore_stubber, BotocoreStubber)
    assert list(inspect.signature(BotocoreStubber.__call__).parameters)[:3] == [
        "self",
        "event_name",
        "request",
    ]


def test_botocore_resends_after_a_read_timeout_and_sleeps_with_its_endpoint_modules_time() -> None:
    from botocore import endpoint
    from botocore.exceptions import ReadTimeoutError
    from botocore.retries.standard import TransientRetryableChecker

    # A handler's exception at before-send is the send's failure, then needs-retry decides.
    assert "except Exception as e:" in inspect.getsource(endpoint.Endpoint._do_get_response)  # type: ignore[attr-defined]
    assert issubclass(ReadTimeoutError, TransientRetryableChecker._TRANSIENT_EXCEPTION_CLS)  # type: ignore[attr-defined]
    # install_retry_sleep_skip replaces this module's ``time`` for the fault's one retry.
    assert "time.sleep(handler_response)" in inspect.getsource(endpoint.Endpoint._needs_retry)  # type: ignore[attr-defined]


def test_a_delayed_sqs_message_is_held_by_its_delayed_until_time() -> None:
    # deliver_delayed_messages sets it to 0 on every delayed message of every queue.
    from moto.sqs.models import Message, Queue

    assert "self.delayed_until = " in inspect.getsource(Message.delay)
    assert "self.delayed_until" in inspect.getsource(Message.delayed.fget)  # type: ignore[attr-defined]
    assert "_messages" in inspect.getsource(Queue.__init__)


def test_messages_counted_in_moto_s_queue_equal_get_queue_attributes_three_counts() -> None:
    # Driver.queue_depth reads len(queue._messages) instead of asking GetQueueAttributes.
    import boto3
    from moto import mock_aws

    from saga_local.aws.moto_adapter import messages_in_queue

    counts: list[Any] = [f"ApproximateNumberOfMessages{kind}" for kind in ("", "NotVisible", "Delayed")]
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="orders")["QueueUrl"]
        assert messages_in_queue(url) == 0
        for i in range(5):
            sqs.send_message(QueueUrl=url, MessageBody=str(i))
        sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=900)
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=300)
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=counts)["Attributes"]
        assert [int(attributes[name]) for name in counts] == [3, 2, 1]  # one of each kind
        assert messages_in_queue(url) == 6
        assert messages_in_queue(url, delayed=False) == 5  # visible and in flight, not the delayed one
        assert messages_in_queue(url.replace("orders", "elsewhere")) is None
        boto3.client("sqs", region_name="eu-west-1").create_queue(QueueName="orders")
        assert messages_in_queue(url) is None  # the same name in two regions: ask SQS instead


def test_sqs_receive_delete_and_visibility_change_are_the_methods_the_adapter_locks() -> None:
    # The adapter takes each queue's own lock (moto's send takes it too) around these three, and
    # runs a long poll as repeated receives with no wait: the signatures must still fit.
    from moto.sqs.models import Queue

    receive = list(inspect.signature(SQSBackend.receive_message).parameters)
    assert receive == [
        "self",
        "queue_name",
        "count",
        "wait_seconds_timeout",
        "visibility_timeout",
        "message_attribute_names",
    ]
    assert list(inspect.signature(Queue.delete_message).parameters) == ["self", "receipt_handle"]
    change = list(inspect.signature(SQSBackend.change_message_visibility).parameters)
    assert change == ["self", "queue_name", "receipt_handle", "visibility_timeout"]
    assert "with self._messages_lock:" in inspect.getsource(Queue.add_message)
    assert "self._messages = new_messages" in inspect.getsource(Queue.delete_message)


def test_a_new_execution_joins_the_list_before_its_status_is_set() -> None:
    # Why the adapter lists and describes executions under the lock its starts take.
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    source = inspect.getsource(StepFunctionsParserBackend.start_execution)
    assert source.index("state_machine.executions.append(execution)") < source.index("execution.start()")
    listing = inspect.getsource(StepFunctionsParserBackend.list_executions)
    assert "e.status == status_filter" in listing  # the read of a status that is not set yet


def test_retry_and_catch_match_an_error_in_error_equals_decl_over_the_engine_stack() -> None:
    # The adapter answers the match itself for States.Runtime and States.DataLimitExceeded: moto must
    # still pop the error name from the stack and push the match as a bool, for every retrier and
    # catcher alike, and still let States.ALL match everything (the rule the adapter narrows).
    from moto.stepfunctions.parser.asl.component.common.catch.catcher_decl import CatcherDecl
    from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import ErrorEqualsDecl

    source = inspect.getsource(ErrorEqualsDecl._eval_body)
    assert "error_name: ErrorName = env.stack.pop()" in source
    assert "env.stack.append(res)" in source
    assert "if ErrorEqualsDecl._STATE_ALL_ERROR in self.error_names:\n            res = True" in source
    assert "self.error_equals.eval(env)" in inspect.getsource(retrier_decl.RetrierDecl._eval_body)
    assert "self.error_equals.eval(env)" in inspect.getsource(CatcherDecl._eval_body)


def test_a_timed_out_task_ends_its_frame_and_its_call_records_success_after_eval() -> None:
    # The adapter drops a late TaskSucceeded by checking, in _after_eval_execution, whether the
    # call's frame is still running: moto ends the frame when the timeout's wait returns.
    from moto.stepfunctions.parser.asl.component.state.exec.execute_state import ExecutionState
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service import (
        StateTaskService,
    )

    timeout = inspect.getsource(ExecutionState._evaluate_with_timeout)
    assert timeout.index("terminated_event.wait(timeout_seconds)") < timeout.index("frame.set_ended()")
    assert "self._eval_execution(frame)" in timeout
    after = inspect.getsource(StateTaskService._after_eval_execution)
    assert "HistoryEventType.TaskSucceeded" in after
    assert "self._after_eval_execution(" in inspect.getsource(StateTaskService._eval_execution)


def test_a_service_task_builds_its_input_in_state_task_eval_parameters_and_checks_no_quota_there() -> None:
    # The adapter checks the payload quota on what _eval_parameters returns: every service
    # integration must get its input there, and moto must still not check it (or drop our check).
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service import (
        StateTaskService,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task import StateTask

    assert "raw_parameters = self._eval_parameters(env=env)" in inspect.getsource(
        StateTaskService._eval_execution
    )
    assert "_eval_parameters" not in vars(StateTaskService)
    assert "quota" not in inspect.getsource(StateTask._eval_parameters)


def test_a_choice_rule_samples_its_variable_then_tests_it_and_takes_an_absent_one_for_no_match() -> None:
    # The adapter fails a rule whose Variable finds nothing (unless the test is IsPresent) before
    # moto's own evaluation, which samples the variable the same way and lets it through.
    from moto.stepfunctions.parser.asl.component.state.choice.comparison.comparison_variable import (
        ComparisonVariable,
    )
    from moto.stepfunctions.parser.asl.component.state.choice.comparison.variable import Variable

    rule = inspect.getsource(ComparisonVariable._eval_body)
    assert rule.index("variable.eval(env)") < rule.index("comparison_function.eval(env)")
    sample = inspect.getsource(Variable._eval_body)
    assert "value = NoSuchVariable(" in sample
    assert "string_sampler" in sample


def test_a_variable_read_is_a_string_variable_sample_that_pushes_its_value_on_the_stack() -> None:
    # The adapter answers a JSONPath state's "$name.field" from the variable store itself: moto must
    # still parse such a read into StringVariableSample, evaluate it through the JSONata evaluator it
    # leaves unset, and take the value from the top of the stack.
    from moto.stepfunctions.parser.asl.component.common.string.string_expression import StringVariableSample
    from moto.stepfunctions.parser.asl.eval.variable_store import VariableStore
    from moto.stepfunctions.parser.asl.jsonata import jsonata

    sample = inspect.getsource(StringVariableSample._eval_body)
    assert "eval_jsonata_expression(" in sample
    assert "env.stack.append(result)" in sample
    assert "_eval_jsonata = None\n" in inspect.getsource(jsonata.eval_jsonata_expression)
    assert "raise NoSuchVariable(" in inspect.getsource(VariableStore.get)


def test_a_redrive_can_run_a_second_worker_on_an_execution_and_its_history() -> None:
    # redrive_execution builds a second ExecutionWorker from the first one's parts, starts the
    # program at another state on an environment sharing the first one's event manager, and lets
    # the execution's own communication reflect the end: each of those must still be so.
    from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication, Execution

    init = list(inspect.signature(ExecutionWorker.__init__).parameters)
    assert init[:5] == [
        "self",
        "evaluation_details",
        "exec_comm",
        "cloud_watch_logging_session",
        "activity_store",
    ]
    logic = inspect.getsource(ExecutionWorker._execution_logic)
    assert "program.eval(self.env)" in logic
    assert "self._execution_communication.terminated()" in logic
    reflect = inspect.getsource(BaseExecutionWorkerCommunication._reflect_execution_status)
    assert "self.execution.exec_worker.env.program_state()" in reflect
    history = inspect.getsource(Execution.to_history_output)
    assert "env = self.exec_worker.env" in history
    assert "env.event_manager.get_event_history()" in history
    # moto still has no RedriveExecution of its own: when it gains one, drop ours.
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    assert not hasattr(StepFunctionsParserBackend, "redrive_execution")
