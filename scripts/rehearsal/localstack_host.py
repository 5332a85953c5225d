"""Run LocalStack's Python runtime on this host, offline, for the deploy rehearsal.

The rehearsal (`make deploy-rehearsal`, tests/rehearsal/) sends the real `sam deploy` to LocalStack's
CloudFormation engine. LocalStack's runtime, started on the host without Docker and without the
internet, needs exactly four changes, all made here and nowhere else:

1. DynamoDB. LocalStack forwards every DynamoDB (and DynamoDB Streams) request to DynamoDB Local, a
   Java program it downloads on first use. Here the same forwarder points at a moto server (the
   project's pinned moto, `SAGA_REHEARSAL_MOTO_SERVER`), started and stopped where LocalStack would
   start and stop DynamoDB Local.
2. Lambda. Before a function becomes Active, LocalStack's Docker executor downloads its runtime
   interface emulator and pulls the runtime's image. The rehearsal deploys functions and never
   invokes one, so that preparation is skipped: the function is Active at once.
3. The gateway. LocalStack's Twisted server listens on every interface whatever `GATEWAY_LISTEN`
   says (it passes the port, not the host). Here it listens on 127.0.0.1 only.
4. A `!GetAtt` of a resource only SAM's transform creates (the webhook receiver's function URL, which
   the WebhookEndpointUrl output reads; the roles are all the template's own now). Before applying
   the transform, LocalStack's CloudFormation engine resolves what it can and leaves the rest for
   after it, by catching RuntimeError; a resource it cannot find yet raises its ValidationError
   instead, and the deploy fails on "Unresolved resource dependencies" although the transform
   creates it. Here that lookup is left for after the transform too, as AWS's engine does.

Each change replaces one LocalStack function whose source is pinned below by its hash, for the one
LocalStack version pinned below: `--check` (run by tests/rehearsal/test_localstack_contract.py)
fails loudly when the version or any patched function changes, so an upgrade is a decision, not a
surprise. The module runs under LocalStack's own interpreter (.venv-localstack, Python 3.13), which
is why it lives in scripts/ and not in the project's package: nothing of the project imports it.

Usage: python localstack_host.py [--check]   (environment: GATEWAY_LISTEN, FILESYSTEM_ROOT, ...)
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import sys
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

LOCALSTACK_VERSION = "2026.3.0"
LOOPBACK = "127.0.0.1"
MOTO_SERVER_ENV = "SAGA_REHEARSAL_MOTO_SERVER"

# sha256 of inspect.getsource() of each function this module replaces, as shipped in LOCALSTACK_VERSION.
PATCHED_SOURCES = {
    "localstack.services.dynamodb.server:DynamodbServer.do_start_thread": (
        "25c4d1c7796cf6eb151bc68bea7281fb001125254802aa8fd81263e3c17a8e51"
    ),
    "localstack.services.lambda_.invocation.docker_runtime_executor:DockerRuntimeExecutor.prepare_version": (
        "56ec1bc2a7d5d5c34adade8a33052bb40b03107bfcba34c8b8d86b987300f4e8"
    ),
    "localstack.runtime.server.twisted:TwistedRuntimeServer.register": (
        "6c7de9c19515369f5b9502e7c9ab698457ed7d0843374df39692c5de97c7df6c"
    ),
    "localstack.services.cloudformation.engine.v2.change_set_model_transform:"
    "ChangeSetModelTransform.visit_node_intrinsic_function_fn_get_att": (
        "cffa1d1d7e7d1d7090d2c34cf37631e13f4ad1a2376401bba87eed68f6319d8f"
    ),
}


def _resolve(target: str) -> tuple[Any, str, Callable[..., Any]]:
    """The class, attribute name and current function that ``module:Class.attr`` names."""
    module_name, _, qualname = target.partition(":")
    class_name, _, attribute = qualname.partition(".")
    owner = getattr(importlib.import_module(module_name), class_name)
    member = owner.__dict__[attribute]
    function = member.__func__ if isinstance(member, classmethod) else member
    return owner, attribute, inspect.unwrap(function)


def source_hash(function: Callable[..., Any]) -> str:
    """sha256 of a function's source: what the contract pins."""
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


def contract() -> dict[str, Any]:
    """The installed LocalStack version and the hash of each function to patch, against the pins."""
    installed = metadata.version("localstack-core")
    found = {target: source_hash(_resolve(target)[2]) for target in PATCHED_SOURCES}
    return {
        "version": {"pinned": LOCALSTACK_VERSION, "installed": installed},
        "sources": {t: {"pinned": PATCHED_SOURCES[t], "installed": h} for t, h in found.items()},
        "ok": installed == LOCALSTACK_VERSION and all(PATCHED_SOURCES[t] == h for t, h in found.items()),
    }


def _moto_server_thread(server: Any) -> Any:
    """DynamodbServer.do_start_thread: start a moto server on the port DynamoDB Local would have used."""
    from localstack.utils.common import TMP_THREADS, ShellCommandThread

    executable = os.environ.get(MOTO_SERVER_ENV)
    if not executable:
        raise RuntimeError(f"{MOTO_SERVER_ENV} must name a moto_server (the project's .venv/bin/moto_server)")
    # LocalStack's default account: the ARNs moto returns are then the ones LocalStack's own services use.
    env = {"MOTO_ACCOUNT_ID": "000000000000"}
    thread = ShellCommandThread(
        [executable, "-H", LOOPBACK, "-p", str(server.port)],
        strip_color=True,
        auto_restart=True,
        name="dynamodb-moto",
        env_vars=env,
    )
    TMP_THREADS.append(thread)
    thread.start()
    return thread


def _prepare_version_without_download(cls: Any, function_version: Any) -> None:
    """DockerRuntimeExecutor.prepare_version: nothing to download or pull; nothing here invokes."""


def _register_on_loopback(
    self: Any, gateway: Any, listen: list[Any], ssl_creds: tuple[str, str] | None = None
) -> None:
    """TwistedRuntimeServer.register, listening on 127.0.0.1 at each configured port (and nowhere else)."""
    from localstack.aws.serving.twisted import TLSMultiplexerFactory
    from rolo.serving.twisted import TwistedGateway
    from twisted.internet import endpoints, reactor, ssl

    site = TwistedGateway(gateway)
    protocol_factory: Any = site
    if ssl_creds:
        cert_file_name, key_file_name = ssl_creds
        context_factory = ssl.DefaultOpenSSLContextFactory(key_file_name, cert_file_name)
        context_factory.getContext().use_certificate_chain_file(cert_file_name)
        protocol_factory = TLSMultiplexerFactory(context_factory, False, site)
    for port in sorted({host_and_port.port for host_and_port in listen}):
        endpoints.TCP4ServerEndpoint(reactor, port, interface=LOOPBACK).listen(protocol_factory)


def _get_att_after_the_transform(self: Any, node_intrinsic_function: Any) -> Any:
    """ChangeSetModelTransform.visit_node_intrinsic_function_fn_get_att, leaving a resource the
    transform has yet to create (ValidationError, not only RuntimeError) for after it."""
    from localstack.services.cloudformation.engine.v2.change_set_model_preproc import ChangeSetModelPreproc
    from localstack.services.cloudformation.engine.validations import ValidationError

    try:
        return ChangeSetModelPreproc.visit_node_intrinsic_function_fn_get_att(self, node_intrinsic_function)
    except (RuntimeError, ValidationError):
        return self.visit(node_intrinsic_function.arguments)


def apply() -> None:
    """Replace the four functions (after checking the contract: a mismatch refuses to start)."""
    state = contract()
    if not state["ok"]:
        raise SystemExit("LocalStack does not match the pinned contract:\n" + json.dumps(state, indent=2))
    dynamodb, lambda_, gateway, get_att = PATCHED_SOURCES
    replacements = {
        dynamodb: _moto_server_thread,
        lambda_: classmethod(_prepare_version_without_download),
        gateway: _register_on_loopback,
        get_att: _get_att_after_the_transform,
    }
    for target, replacement in replacements.items():
        owner, attribute, _ = _resolve(target)
        setattr(owner, attribute, replacement)


def main(argv: list[str]) -> int:
    """`--check`: print the contract as JSON and exit 1 on a mismatch; otherwise run LocalStack patched."""
    if argv[1:] == ["--check"]:
        state = contract()
        print(json.dumps(state, indent=2))
        return 0 if state["ok"] else 1
    apply()
    from localstack.runtime.main import main as localstack_main

    localstack_main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
