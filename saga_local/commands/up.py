"""``saga up``: run the embedded stack until Ctrl-C, and say where everything is."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import threading
from typing import TYPE_CHECKING

from saga_local.output import Out
from saga_local.paths import STATE_DIR
from saga_local.stack import running, targets
from saga_local.stack.targets import relative

if TYPE_CHECKING:
    from pathlib import Path


def cmd_up(args: argparse.Namespace) -> int:
    """Run the embedded stack until Ctrl-C; refuse while another `saga up` runs from this state directory."""
    from saga_local.commands import stripe_mode

    out = Out()
    log_dir = STATE_DIR / "logs"
    try:
        payment_api = stripe_mode.payment_api(args.stripe_test)
    except stripe_mode.StripeKeyError as exc:
        raise SystemExit(f"saga up: {exc}") from None
    try:
        with running.exclusive(targets.LOCK_FILE, targets.STATE_FILE):
            return _serve_up(args, out, log_dir, payment_api)
    except running.AlreadyRunning as exc:
        raise SystemExit(f"saga up: {exc}") from None


def _serve_up(args: argparse.Namespace, out: Out, log_dir: Path, payment_api: tuple[str, str] | None) -> int:
    from saga_local.aws.schedule_source import schedule_names
    from saga_local.aws.stack import REGION
    from saga_local.commands.activity import Activity
    from saga_local.private_files import write_private_text
    from saga_local.stack.embedded import EmbeddedStack
    from saga_local.stack.local_invoke import write_sam_env_file

    visibility = 30
    # Stripe's webhook retries (a minute, five, half an hour...) compressed as the queues' waits are.
    compress = visibility / _template_visibility_timeout()
    with EmbeddedStack(
        port=args.port,
        runtime=args.runtime,
        log_dir=log_dir,
        visibility_timeout=visibility,
        payment_api=payment_api,
        webhooks=True,
        webhook_time_scale=compress,
    ) as stack:
        # A payment that answers `processing` (a bank debit) settles this long after, and sends its event.
        stack.provider.settle_seconds = SETTLE_SECONDS
        sam_env = write_sam_env_file(stack.stack, stack.endpoint)
        state = {
            "endpoint": stack.endpoint,
            "region": REGION,
            "outputs": stack.stack.outputs,
            "provider": stack.provider_url,
            # Test mode: the key is not written here; `saga reconcile` reads it from the environment.
            "stripeTestMode": payment_api is not None,
            # The emulator's /_emulator/* routes need it: this file is the local tooling's way in.
            "providerAdminToken": stack.provider.admin_token,
            "samEnvVars": str(sam_env),
            "pid": os.getpid(),
            # Where `saga fault` hands the functions' faults to this process (and its token).
            "faultControl": stack.fault_control(),
            # Whether `saga clock advance` can move this stack's time (workers and the emulator only).
            "clockMovable": stack.clock_movable,
        }
        scheduled = stack.schedule_sources(compress=compress)
        names = schedule_names([source.schedule for source in scheduled])
        for name, source in zip(names, scheduled, strict=True):
            if name == source.schedule.logical_id:  # --sweep-every sets the sweep's, not the hourly check's
                source.interval = args.sweep_every or source.interval
        state["schedules"] = {name: source.interval for name, source in zip(names, scheduled, strict=True)}
        write_private_text(targets.STATE_FILE, json.dumps(state, indent=2))
        banner = up_banner(
            stack.endpoint,
            stack.stack.outputs,
            stack.provider_url,
            log_dir,
            sam_env,
            test_mode=payment_api is not None,
        )
        for name, source in zip(names, scheduled, strict=True):
            label = f"{name} schedule"
            banner.insert(
                banner.index(""),
                f"  {label:28} every {source.interval:g} s ({source.schedule.expression} in template.yaml,"
                " compressed as the queues' waits are; leases are not)",
            )
        for line in banner:
            out(out.bold(line) if line.startswith("Embedded stack") else line)
        out("")
        out("Executions, as each ends (recorded: `saga trace NAME` shows them after this stops):")
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        watcher = threading.Thread(target=Activity(stack, out).run, args=(stop,), daemon=True)
        watcher.start()
        try:
            stack.serve(stop, pollers=args.pollers, scheduled=scheduled)
            watcher.join()
        finally:
            for path in (targets.STATE_FILE, sam_env):  # both describe a stack that is gone
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
    out("stopped")
    return 0


#: How long a `processing` payment takes to settle under `saga up` (days for a real bank debit).
SETTLE_SECONDS = 10.0


def _template_visibility_timeout() -> int:
    """The orders queue's VisibilityTimeout in template.yaml: the local waits are compressed against it."""
    from saga_local.template import load_template

    return int(load_template()["Resources"]["OrdersQueue"]["Properties"]["VisibilityTimeout"])


def up_banner(
    endpoint: str,
    outputs: dict[str, str],
    provider: str,
    log_dir: Path,
    sam_env: Path,
    *,
    test_mode: bool = False,
) -> list[str]:
    """What `saga up` prints: the resources, then commands that work as printed.

    The AWS CLI lines name ``--endpoint-url`` explicitly: AWS CLI v1 (and v2 before 2.13) ignore
    ``AWS_ENDPOINT_URL``; the ``export AWS_ENDPOINT_URL`` line is for the rest (v2, boto3, SAM CLI).
    Credentials and region come from the environment in both versions.
    """
    from saga_local.aws.stack import REGION

    queue, machine = outputs["OrdersQueueUrl"], outputs["PaymentSagaStateMachineArn"]
    lines = [f"Embedded stack running on {endpoint}  (Ctrl-C stops it)"]
    lines += [f"  {key:28} {value}" for key, value in sorted(outputs.items())]
    lines += [
        f"  {'Provider (Stripe test mode)':28} {provider}"
        if test_mode
        else f"  {'Provider (Stripe emulator)':28} {provider}  (sends webhooks to WebhookEndpointUrl)",
        f"  {'Function logs (JSON)':28} {log_dir}/",
        f"  {'SAM env-vars file':28} {relative(sam_env)}",
        "",
        "From another terminal, in this directory:",
        "  saga send --copies 4 --wait          # then: saga trace <name it prints>",
        "  saga invoke ClaimOrderFunction -e events/claim_order.json",
        "",
        "The AWS CLI (v1 or v2) or boto3:",
        f"  export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION={REGION}",
        f"  export AWS_ENDPOINT_URL={endpoint}   # read by AWS CLI v2 (2.13+), boto3 and SAM CLI; not by v1",
        f"  aws --endpoint-url {endpoint} sqs send-message --queue-url {queue}"
        " --message-body file://events/order.json",
        f"  aws --endpoint-url {endpoint} stepfunctions list-executions --state-machine-arn {machine}",
        f"  boto3.client('stepfunctions', endpoint_url='{endpoint}', region_name='{REGION}')",
        "",
        "With Docker, SAM CLI's own local invoke against this stack (Linux: host network):",
        f"  sam local invoke ClaimOrderFunction -e events/claim_order.json --env-vars {relative(sam_env)}"
        f" --docker-network host --region {REGION}",
    ]
    return lines
