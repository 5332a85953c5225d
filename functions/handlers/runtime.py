"""What every handler shares: Powertools objects, configuration from the environment, and clients.

Clients and the provider are built once per container (the first call) and reused while the
container is warm. ``reset()`` forgets them: tests call it after starting moto, so that clients
are always created inside the mock.

Clients are botocore's, made by one session: one loader, so the endpoints data and each service's
model are read once per container, whichever client asks first. boto3 adds nothing the handlers use
to a client (its resources and S3 transfers are not used) and its import alone cost a cold start
more than creating the first client (it imports s3transfer).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import sys
from typing import TYPE_CHECKING, Any

import botocore.session
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.tracing.base import BaseProvider, BaseSegment
from botocore.config import Config

from payment_saga.api_keys import KeyModeMismatch, check_key_mode, stripe_secret_from_string
from payment_saga.claims import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_SETTLEMENT_WINDOW_DAYS,
    SECONDS_PER_DAY,
    ClaimsStore,
)
from payment_saga.payments import StripeProvider

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator, Sequence

    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from mypy_boto3_secretsmanager import SecretsManagerClient

    from payment_saga.sweeping import ProviderOnFirstUse, Said


class _UntracedSegment(BaseSegment):
    """What the handlers' subsegments are when tracing is off: nothing is recorded."""

    def close(self, end_time: int | None = None) -> None:
        pass

    def add_subsegment(self, subsegment: Any) -> None:
        pass

    def remove_subsegment(self, subsegment: Any) -> None:
        pass

    def put_annotation(self, key: str, value: Any) -> None:
        pass

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        pass

    def add_exception(self, exception: BaseException, stack: Any, remote: bool = False) -> None:
        pass


class _Untraced(BaseProvider):
    """The Tracer's provider when tracing is off: Powertools' own would still import the X-Ray SDK
    (with asyncio), about a tenth of a function's import, to record nothing."""

    @contextlib.contextmanager
    def in_subsegment(self, name: str | None = None, **kwargs: Any) -> Iterator[BaseSegment]:
        yield _UntracedSegment()

    @contextlib.asynccontextmanager
    async def in_subsegment_async(self, name: str | None = None, **kwargs: Any) -> AsyncIterator[BaseSegment]:
        yield _UntracedSegment()

    def put_annotation(self, key: str, value: Any) -> None:
        pass

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        pass

    def patch(self, modules: Sequence[str]) -> None:
        pass

    def patch_all(self) -> None:
        pass


def _tracer() -> Tracer:
    """X-Ray's Tracer where tracing is on (in Lambda, unless ``POWERTOOLS_TRACE_DISABLED``), as
    Powertools decides it; elsewhere one that imports and records nothing (local runs, tests)."""
    if Tracer._is_tracer_disabled():  # Powertools' own rule, not a copy of it
        return Tracer(disabled=True, provider=_Untraced())
    # X-Ray subsegments for the AWS SDK's calls, which every function makes. Not patch_all: it would
    # also import and patch requests (only the functions that call Stripe need it: provider() patches
    # it there) and sqlite3, which nothing uses, in every function's cold start.
    return Tracer(patch_modules=("botocore",))


logger = Logger()
tracer = _tracer()
metrics = Metrics()

#: Standard retry mode with a few attempts: DynamoDB throttles are retried by the SDK first, then
#: by the state machine's Retry, both safe because every write is conditional and re-entrant.
_BOTO_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=3, read_timeout=5)


def env(name: str, default: str | None = None) -> str:
    """A required setting: a clear error names the variable rather than a KeyError deep inside."""
    value = os.environ.get(name, default)
    if value is None or value == "":
        raise RuntimeError(f"environment variable {name} is not set (see template.yaml)")
    return value


def client(service: str) -> Any:
    """A client for ``service`` in the function's region (cached per container)."""
    return _client(service, None)


@functools.cache
def _session() -> botocore.session.Session:
    """The one session every client is made by (its loader caches what it has read).

    In Lambda nothing imports boto3, and this is a botocore session of its own. A process that has
    set up boto3's default session (the local stack's runtimes, which hook its events to authorize,
    count and fault every call a handler makes) gets that session's botocore session instead, so
    that its hooks see the handlers' calls.
    """
    boto3 = sys.modules.get("boto3")
    default = getattr(boto3, "DEFAULT_SESSION", None)
    if default is not None:
        shared: botocore.session.Session = default._session
        return shared
    return botocore.session.get_session()


@functools.cache
def _client(service: str, region: str | None) -> Any:
    return _session().create_client(service, region_name=region, config=_BOTO_CONFIG)


@functools.cache
def claims_store() -> ClaimsStore:
    """The claims store configured from ``CLAIMS_TABLE_NAME``, ``CLAIM_LEASE_SECONDS``,
    ``CLAIM_RETENTION_DAYS`` and ``SETTLEMENT_WINDOW_DAYS``.

    The retention has no default here: a closed claim kept too briefly lets a redriven copy of a
    charged order be charged again, so the one figure is the template's ``ClaimRetentionDays``
    (checked there against the queues' retention) and a function without it refuses to start.
    """
    return ClaimsStore(
        env("CLAIMS_TABLE_NAME"),
        client=client("dynamodb"),
        lease_seconds=int(env("CLAIM_LEASE_SECONDS", str(DEFAULT_LEASE_SECONDS))),
        retention_seconds=int(env("CLAIM_RETENTION_DAYS")) * SECONDS_PER_DAY,
        # Only the writes that start a wait for settlement read it (Mark Complete, the webhook consumer).
        settlement_window_seconds=int(env("SETTLEMENT_WINDOW_DAYS", str(DEFAULT_SETTLEMENT_WINDOW_DAYS)))
        * SECONDS_PER_DAY,
    )


@functools.cache
def payment_key() -> str:
    """The Stripe key: ``PAYMENT_API_KEY`` if set (local runs, tests), else the secret, read once per
    container (the first call that passes).

    The key must be of the stack's mode, ``PAYMENT_API_MODE`` (``test`` unless set, as the webhook
    consumer reads it): a key of the other mode is refused before any request is sent, logged at ERROR
    as ``payment_key_mode_mismatch`` (the two modes, never the key) and counted as
    ``PaymentKeyModeMismatch``, at every call (a refusal is not cached: the next call reads the
    secret again).

    Raises:
        KeyModeMismatch: the key's mode is not the stack's.
    """
    key = _api_key()
    stack_mode = env("PAYMENT_API_MODE", "test")
    try:
        check_key_mode(key, stack_mode)
    except KeyModeMismatch as exc:
        logger.error(
            "payment_key_mode_mismatch",
            extra={
                "event": "payment_key_mode_mismatch",
                "keyMode": exc.key_mode,
                "stackMode": exc.stack_mode,
                "reason": str(exc),
            },
        )
        count("PaymentKeyModeMismatch")
        raise
    return key


@functools.cache
def provider() -> StripeProvider:
    """The payment provider, with :func:`payment_key` (whose refusal it raises: KeyModeMismatch)."""
    key = payment_key()
    tracer.patch(modules=("requests",))  # the Stripe SDK's HTTP calls, as X-Ray subsegments
    return StripeProvider(
        key,
        api_base=os.environ.get("PAYMENT_API_BASE") or None,
        timeout_seconds=float(env("PAYMENT_API_TIMEOUT_SECONDS", "10")),
        mode=env("PAYMENT_API_MODE", "test"),
    )


def stripe_on_first_use() -> ProviderOnFirstUse:
    """For the sweeper: :func:`provider` (the key read and checked, the client built) at the first claim
    that asks Stripe something, not before (``payment_saga.sweeping``)."""
    from payment_saga.sweeping import ProviderOnFirstUse  # here: the sweeper's import, not every function's

    return ProviderOnFirstUse(provider)


def _api_key() -> str:
    key = os.environ.get("PAYMENT_API_KEY")
    if key:
        return key
    return stripe_secret_from_string(secret_string(env("PAYMENT_API_KEY_SECRET_ARN")))


def secret_string(arn: str) -> str:
    """The ``SecretString`` of the Secrets Manager secret ``arn``, read in the region the ARN names.

    (arn:PARTITION:secretsmanager:REGION:ACCOUNT:secret:NAME), which may not be the function's own: a
    client of the function's region answers ResourceNotFound. The client is kept, one per region, like
    the others: the webhook receiver reads its secret again every few minutes.
    """
    parts = arn.split(":")
    region = parts[3] if len(parts) > 3 and parts[3] else None  # a bare name: the function's region
    secrets: SecretsManagerClient = _client("secretsmanager", region)
    return secrets.get_secret_value(SecretId=arn)["SecretString"]


def reset() -> None:
    """Forget cached clients and configuration (tests; a new container does this by starting)."""
    _client.cache_clear()
    _session.cache_clear()
    claims_store.cache_clear()
    payment_key.cache_clear()
    provider.cache_clear()


def after_restore(forget: Callable[[], object]) -> None:
    """Call ``forget`` whenever Lambda resumes this environment from a SnapStart snapshot (the template's
    ``SnapStart`` parameter); never otherwise.

    Every environment restored from one snapshot starts from the snapshot's memory: one random
    generator state, and whatever the Init phase built. The functions build no client, read no secret
    and make nothing unique at import (all of it on the first call, after a restore); these hooks keep
    that true should init ever do more. Lambda's managed runtime provides ``snapshot_restore_py``;
    elsewhere (tests, local runs) there is no snapshot to restore and nothing is registered.
    """
    try:
        from snapshot_restore_py import register_after_restore  # type: ignore[import-not-found]
    except ImportError:
        return
    register_after_restore(forget)


def _restored() -> None:
    random.seed()  # from os.urandom: each restored environment its own generator (retry jitter, sampling)
    reset()  # clients, configuration, the key, the provider: built again, with this environment's credentials


after_restore(_restored)


def count(name: str, **dimensions: str) -> None:
    """Add 1 to metric ``name``; with ``dimensions``, also to ``name`` broken down by them.

    The plain total is what alarms watch; the breakdown (``Layer=start|claim``) is what people read.
    """
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)
    if not dimensions:
        return
    with single_metric(name=name, unit=MetricUnit.Count, value=1, namespace=metrics.namespace) as metric:
        for key, value in dimensions.items():
            metric.add_dimension(name=key, value=value)


def measure(name: str, value: float, unit: MetricUnit, **dimensions: str) -> None:
    """Publish one reading of ``name`` (an age, say), broken down by ``dimensions`` only.

    Not added to a plain total as ``count`` does: a sum of readings from two stacks means nothing,
    so an alarm on a reading names the function that published it (``FunctionName``).
    """
    with single_metric(name=name, unit=unit, value=value, namespace=metrics.namespace) as metric:
        for key, dimension in dimensions.items():
            metric.add_dimension(name=key, value=dimension)


def log_event(event: str, **fields: Any) -> None:
    """A structured log line named for what happened (``claim_won``, ``charge_applied``...)."""
    logger.info(event, extra={"event": event, **fields})


def tell(*said: Said) -> None:
    """Each ``Said`` (``payment_saga.sweeping``): its log event at its level, and its metrics counted."""
    for one in said:
        getattr(logger, one.level)(one.event, extra={"event": one.event, **one.fields})
        for metric in one.counts:
            count(metric.name, **dict(metric.dimensions))


class BatchFailed(Exception):
    """Every message of an SQS batch failed: the invocation fails (Lambda's ``Errors``), and the queue
    delivers them all again after their visibility timeout."""


def each_message(
    event: dict[str, Any], handle: Callable[[dict[str, Any]], None]
) -> PartialItemFailureResponse:
    """``handle`` each SQS message of ``event``; report the ones that raised as the partial batch
    response (``ReportBatchItemFailures``): each is retried alone and, after the queue's
    ``maxReceiveCount``, dead-lettered; a poison message never holds its neighbours back.

    As Powertools' batch utility does, a batch whose every message failed raises :class:`BatchFailed`
    instead (chained to the last error): nothing went through, so the invocation is an error that
    Lambda's ``Errors`` metric counts. The batch utility itself is not imported: it imports every one of
    Powertools' event classes at a cold start, for a loop of a few lines (bench/cold_start.py measures
    what that costs: ``consumer_levers``).
    """
    records: list[dict[str, Any]] = event.get("Records") or []
    failed: list[str] = []
    last: Exception | None = None
    for record in records:
        try:
            handle(record)
        except Exception as exc:  # noqa: BLE001 - any failure: this message is retried, not the batch
            failed.append(record["messageId"])
            last = exc
    if records and len(failed) == len(records):
        raise BatchFailed(f"every message of the batch failed ({len(records)}); the last: {last!r}") from last
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failed]}


def dumps(value: Any) -> str:
    """Compact JSON, for causes and reasons."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
