"""The embedded local stack: the whole saga on one machine, no AWS account, no Docker.

* AWS is moto's server (pinned), on 127.0.0.1, so real clients work against it:
  ``aws --endpoint-url http://127.0.0.1:PORT stepfunctions get-execution-history ...``.
* Step Functions executes the real ASL from ``statemachine/``; every resource comes from
  ``template.yaml`` (``saga_local.aws.stack.provision``).
* Lambda is :class:`~saga_local.runtime.runtimes.WorkerRuntime`: the real handlers in worker
  processes, each function's environment, timeout and memory from the template.
* The SQS event source polls the orders queue and invokes the start function as Lambda does; the
  claims table's stream is read for the outcome relay the same way (``saga_local.aws.stream_source``),
  and the outcome bus is copied to an archive queue (``saga events``).
* The payment provider is :class:`~saga_local.stripe_emulator.ProviderEmulator`.
* With ``webhooks=True`` (``saga up``), Stripe's webhooks too: the WebhookReceiverFunction is served at a
  loopback URL as its function URL would be (``saga_local.aws.function_url``), registered with the
  emulator as a webhook endpoint through Stripe's API, its signing secret put into the Secrets
  Manager secret the ``WebhookSigningSecretArn`` parameter names, and the webhook queue's event
  source runs the WebhookConsumerFunction with its role. The emulator's retry waits are compressed
  by ``webhook_time_scale``.

Time can be moved on, too (:meth:`EmbeddedStack.advance_clock`, ``saga clock advance``): the stack's
clock is the machine's plus an offset, which the functions read as their ``time.time()`` (worker
processes only), the provider emulator as its own clock, and SQS's delays as time passed.

Three things are compressed in time, and only these: Retry waits (``retry_time_scale``; the waits
the ASL asked for are recorded), the queues' visibility timeout (``visibility_timeout``), so a
run that retries or redrives finishes in seconds, and the template's schedules under :meth:`serve`
(the sweeper's ``rate(5 minutes)``, in the visibility timeout's proportion: see
``saga_local.aws.schedule_source``). Everything else runs as written, leases included.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import socket
import threading
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from moto import mock_aws
from moto.server import ThreadedMotoServer

from saga_local.aws.function_url import FunctionUrlServer
from saga_local.aws.moto_adapter import SFN_CONFIG, EngineHooks, check_moto_version, patched_moto
from saga_local.aws.schedule_source import ScheduleSource, schedule_names, schedules
from saga_local.aws.stack import LOCAL_API_KEY, REGION, Stack, provision
from saga_local.runtime.faults import FaultPlan
from saga_local.runtime.runtimes import InProcessRuntime, WorkerRuntime
from saga_local.stack.driver import Driver
from saga_local.stripe_emulator import ProviderEmulator

#: Credentials for the local endpoint: moto accepts anything. Not a secret.
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}


def _shorten_sqs_delays(seconds: float) -> int:
    """Take ``seconds`` off every SQS delay still running (moto's queues, this process); how many
    messages that made deliverable."""
    from saga_local.aws.moto_adapter import _sqs_backends

    delivered = 0
    for backend in _sqs_backends():
        for queue in list(backend.queues.values()):
            for message in list(queue._messages):
                if message.delayed:
                    message.delayed_until -= seconds * 1000
                    delivered += not message.delayed
    return delivered


def quiet_libraries() -> None:
    """The server's access log and the engine's own error logging would drown the story."""
    for name in ("werkzeug", "moto", "botocore", "urllib3"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    # Powertools warns when an invocation flushes no metric (a death mid-handler): noise here.
    warnings.filterwarnings("ignore", message="No application metrics to publish")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedStack:
    """Start with :meth:`start` (or ``with``), drive with :attr:`driver`, stop with :meth:`stop`.

    Args:
        port: moto's port (0: a free one).
        runtime: ``"workers"`` (processes, as Lambda) or ``"inprocess"`` (threads, faster).
        guard: ``False`` bypasses the claim inside the workers (the lab's IDEMPOTENCY=0).
        provider_dedupe: ``False`` makes the provider ignore idempotency keys.
        faults: faults to inject into the functions.
        retry_time_scale: multiply the ASL's Retry waits by this (0: do not wait).
        visibility_timeout: the queues' visibility timeout, in seconds, for this run.
        max_workers: warm workers per function.
        log_dir: where the functions' JSON logs go (worker processes; in-process handlers log to
            this process's stdout).
        quiet: ``LogLevel=WARNING``, for runs that print a report (in-process handlers still print
            their EMF metric lines: see :func:`saga_local.output.handlers_quiet`).
        payment_api: ``(base URL, key)`` of a real provider for the functions instead of the
            emulator (``saga up --stripe-test``: Stripe's test mode). The emulator still runs, unused.
        webhooks: serve the webhook receiver's URL, register it with the emulator and run the
            webhook consumer (see the module's docstring).
        webhook_time_scale: multiply Stripe's webhook retry waits (a minute, five, ...) by this.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        runtime: str = "workers",
        guard: bool = True,
        provider_dedupe: bool = True,
        faults: FaultPlan | None = None,
        retry_time_scale: float = 0.0,
        visibility_timeout: int = 2,
        max_workers: int = 4,
        log_dir: Path | None = None,
        quiet: bool = False,
        payment_api: tuple[str, str] | None = None,
        webhooks: bool = False,
        webhook_time_scale: float = 1.0,
    ) -> None:
        if runtime not in ("workers", "inprocess"):
            raise ValueError("runtime must be 'workers' or 'inprocess'")
        if not guard and runtime != "workers":
            raise ValueError("the guard can only be switched off in worker processes")
        self.port = port or free_port()
        self.runtime_kind = runtime
        self.guard = guard
        self.faults = faults or FaultPlan()
        self.retry_time_scale = retry_time_scale
        self.visibility_timeout = visibility_timeout
        self.max_workers = max_workers
        self.log_dir = log_dir
        self.quiet = quiet
        self.payment_api = payment_api
        self.webhooks = webhooks
        self.provider = ProviderEmulator(dedupe=provider_dedupe, webhook_time_scale=webhook_time_scale)
        #: The webhook receiver's local function URL (``webhooks=True``), and its endpoint at the emulator.
        self.webhook_url: FunctionUrlServer | None = None
        self.webhook_endpoint_id: str | None = None
        #: Seconds the stack's clock runs ahead of the machine's (:meth:`advance_clock`).
        self.clock_offset = 0.0
        #: The template's schedules, once :meth:`schedule_sources` made them (run again on an advance).
        self.scheduled: list[ScheduleSource] = []
        self._server: ThreadedMotoServer | None = None
        self._exit = contextlib.ExitStack()
        self.stack: Stack
        self.driver: Driver
        self.runtime: WorkerRuntime | InProcessRuntime
        self.hooks: EngineHooks

    @property
    def provider_url(self) -> str:
        """The provider the functions call: the emulator's URL, or the real one of ``payment_api``."""
        return self.payment_api[0] if self.payment_api else self.provider.url

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, service: str) -> Any:
        """A client for the stack: in-process when the handlers are, else over HTTP to the server."""
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=None if self.runtime_kind == "inprocess" else self.endpoint,
            region_name=REGION,
            aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=64),
        )

    def start(self) -> EmbeddedStack:
        check_moto_version()
        quiet_libraries()
        # moto's Step Functions engine calls Lambda through this port (moto.settings.moto_server_port).
        os.environ["MOTO_PORT"] = str(self.port)
        for key, value in LOCAL_CREDENTIALS.items():
            os.environ.setdefault(key, value)
        os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
        self._server = _GuardedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self._exit.callback(self._server.stop)
        # moto's backends live in this process: start from an empty account every time.
        self._moto_api("reset", None)
        self._moto_api("config", {"stepfunctions": {"execute_state_machine": True}})
        if self.runtime_kind == "inprocess":
            # Handlers in this process reach moto's backends directly, without HTTP (much faster);
            # the server still answers every client outside this process.
            mock = mock_aws(config=SFN_CONFIG)
            mock.start(reset=False)
            self._exit.callback(mock.stop, remove_data=False)
        self.provider.start()
        self._exit.callback(self.provider.stop)
        api_base, api_key = self.payment_api or (self.provider.url, LOCAL_API_KEY)
        function_environment = {
            "PAYMENT_API_BASE": api_base,
            "PAYMENT_API_KEY": api_key,
            "PAYMENT_API_TIMEOUT_SECONDS": "5",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "AWS_DEFAULT_REGION": REGION,
            **LOCAL_CREDENTIALS,
        }
        if self.runtime_kind == "workers":
            function_environment["AWS_ENDPOINT_URL"] = self.endpoint
        self.stack = provision(
            self.client,
            parameters={"LogLevel": "WARNING" if self.quiet else "INFO"},
            extra_environment=function_environment,
            visibility_timeout=self.visibility_timeout,
        )
        if self.payment_api is not None:
            # What a function reads when PAYMENT_API_KEY is unset (`saga invoke` with SAM's env-vars
            # file): the same key, kept in moto's memory only.
            self.client("secretsmanager").put_secret_value(
                SecretId=self.stack.resolver.parameters["PaymentApiKeySecretArn"],
                SecretString=json.dumps({"apiKey": api_key}),
            )
        if self.runtime_kind == "workers":
            self.runtime = WorkerRuntime(
                self.stack.functions,
                base_environment={},
                faults=self.faults,
                max_workers=self.max_workers,
                log_dir=self.log_dir,
                guard_off=not self.guard,
                iam=self.stack.iam,
            )
            self._exit.callback(self.runtime.close)
        else:
            self.runtime = InProcessRuntime(self.stack.functions, faults=self.faults, iam=self.stack.iam)
        self.hooks = self._exit.enter_context(
            patched_moto(self.runtime, retry_time_scale=self.retry_time_scale)
        )
        self.driver = Driver(self.client, self.stack)
        if self.webhooks:
            self._wire_webhooks()
        # What is alive now (moto's and botocore's service models, the modules, the provisioned
        # stack) lives as long as the stack: out of the collector's sight, a full collection walks
        # what the run adds, not the objects that never die (why it matters: docs/performance.md).
        # Back in sight when the stack stops, so that a process that runs many stacks (the tests)
        # frees them.
        gc.freeze()
        self._exit.callback(gc.unfreeze)
        return self

    def _wire_webhooks(self) -> None:
        """Serve the receiver's URL, register it at the emulator, store its secret, run the consumer."""
        server = wire_webhooks(self.stack, self.provider, self.client, self.driver)
        self.webhook_url = server
        self._exit.callback(server.stop)
        self.webhook_endpoint_id = self.provider.webhooks.endpoints()[0]["id"]

    def _moto_api(self, path: str, body: dict[str, Any] | None) -> None:
        request = urllib.request.Request(  # noqa: S310 - our own loopback endpoint
            f"{self.endpoint}/moto-api/{path}",
            data=json.dumps(body or {}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=10).close()  # noqa: S310

    def stop(self) -> None:
        self._exit.close()

    def __enter__(self) -> EmbeddedStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fault_control(self) -> dict[str, str]:
        """Start the loopback route that takes faults for the functions from other processes
        (``saga fault throttle|crash|late-write``), until the stack stops; its URL and token."""
        from saga_local.runtime.control import FaultControl

        control = FaultControl(self.faults, clock=self.advance_clock if self.clock_movable else None).start()
        self._exit.callback(control.stop)
        return {"url": control.url, "token": control.token}

    def schedule_sources(self, *, compress: float) -> list[ScheduleSource]:
        """The template's schedules, each firing every ``compress`` times its rate (see :meth:`serve`)."""
        specs = {spec.logical_id: spec for spec, _ in self.stack.functions.values()}
        lambda_client = self.client("lambda")
        self.scheduled = [
            ScheduleSource(
                lambda_client,
                self.stack.function_name(schedule.logical_id),
                schedule,
                schedule.seconds * compress,
                clock=self.now,
            )
            for schedule in schedules(specs)
        ]
        return self.scheduled

    # -- the stack's clock ------------------------------------------------------------------------

    @property
    def clock_movable(self) -> bool:
        """Whether :meth:`advance_clock` can move everything that waits: the functions must run in
        workers (in-process, they share moto's clock), and the provider must be the emulator (Stripe's
        test mode keeps Stripe's time, and its webhooks' signatures would be refused as too old)."""
        return self.runtime_kind == "workers" and self.payment_api is None

    def now(self) -> float:
        """The stack's clock: the machine's, plus what :meth:`advance_clock` added."""
        return time.time() + self.clock_offset

    def advance_clock(self, seconds: float) -> dict[str, Any]:
        """Let ``seconds`` pass for everything that waits, at once; what happened, as JSON.

        The functions' clock (leases, settle-by times, the sweeper's grace) and the emulator's (its
        PaymentIntents' times, its searches, its webhook retries) move on together; each message an
        SQS delay holds has that much less to wait (a re-queued order whose delay ends is delivered);
        then each scheduled function (the sweeper) runs once, on the new time. ``0`` only reads.
        """
        if seconds <= 0:
            return self._clock_answer(delivered=0, ran={})
        if not self.clock_movable:
            raise RuntimeError("this stack's clock cannot be moved")
        self.clock_offset += seconds
        if isinstance(self.runtime, WorkerRuntime):
            self.runtime.clock_offset = self.clock_offset
        self.provider.advance_clock(seconds)
        delivered = _shorten_sqs_delays(seconds)
        ran: dict[str, Any] = {}
        names = schedule_names([source.schedule for source in self.scheduled])
        for name, source in zip(names, self.scheduled, strict=True):
            try:
                ran[name] = source.tick()
            except Exception as exc:  # noqa: BLE001 - said in the answer; the schedule goes on
                ran[name] = {"error": str(exc)}
        return self._clock_answer(delivered=delivered, ran=ran)

    def _clock_answer(self, *, delivered: int, ran: dict[str, Any]) -> dict[str, Any]:
        from payment_saga.clock import iso_utc

        return {
            "offsetSeconds": self.clock_offset,
            "now": iso_utc(self.now()),
            "delivered": delivered,
            "ran": ran,
        }

    def serve(
        self, stop: threading.Event, pollers: int = 1, scheduled: list[ScheduleSource] | None = None
    ) -> None:
        """Run the SQS and claims-stream event sources, and the ``scheduled`` ones (the sweeper), until
        ``stop`` is set (``saga up``)."""
        threads = [
            threading.Thread(target=self.driver.event_source.run, args=(stop,), daemon=True)
            for _ in range(pollers)
        ]
        threads += [
            threading.Thread(target=source.run, args=(stop,), daemon=True) for source in scheduled or []
        ]
        if self.driver.stream_source is not None:
            threads.append(threading.Thread(target=self.driver.stream_source.run, args=(stop,), daemon=True))
        if self.driver.webhook_source is not None:
            threads.append(threading.Thread(target=self.driver.webhook_source.run, args=(stop,), daemon=True))
        for thread in threads:
            thread.start()
        stop.wait()
        for thread in threads:
            thread.join()


class _GuardedMotoServer(ThreadedMotoServer):
    """moto's threaded server with :class:`~saga_local.loopback.LoopbackGuard` in front of its app.

    moto answers any ``Origin`` (echoing it in ``Access-Control-Allow-Origin``) and any ``Host``, so a
    web page could drive the local AWS. ``_server_entry`` is moto's own (pinned 5.2.5), with the app
    wrapped.
    """

    def _server_entry(self) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        from saga_local.loopback import LoopbackGuard

        app = LoopbackGuard(DomainDispatcherApplication(create_backend_app), self._port)
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()


def wire_webhooks(
    stack: Stack, provider: ProviderEmulator, clients: Any, driver: Driver
) -> FunctionUrlServer:
    """Stripe's webhooks for a provisioned stack, as an operator sets them up (docs/webhooks.md): the
    receiver served at a loopback URL as its function URL, registered with the emulator through
    Stripe's API, the secret it answers put into the secret ``WebhookSigningSecretArn`` names, and
    the webhook queue's event source (the consumer, with its role) on ``driver``. The caller stops
    the returned server."""
    import stripe  # the SDK, as an operator registers an endpoint with Stripe

    from payment_saga.webhooks import PAYMENT_INTENT_EVENTS

    server = FunctionUrlServer(clients("lambda"), stack.function_name("WebhookReceiverFunction")).start()
    sdk = stripe.StripeClient(LOCAL_API_KEY, base_addresses={"api": provider.url})
    params: Any = {
        "url": server.url,
        "enabled_events": sorted(PAYMENT_INTENT_EVENTS),  # docs/webhooks.md's list
        "description": f"{stack.name} (local)",
    }
    endpoint = sdk.v1.webhook_endpoints.create(params)
    # What an operator does with the secret the dashboard reveals (docs/webhooks.md, step 3).
    clients("secretsmanager").put_secret_value(
        SecretId=stack.resolver.parameters["WebhookSigningSecretArn"], SecretString=endpoint.secret
    )
    stack.outputs["WebhookEndpointUrl"] = server.url
    driver.webhook_source = driver.consumer_source("WebhookConsumerFunction", "WebhookQueue", clients)
    driver.webhook_deliveries_idle = provider.webhooks.idle
    return server
