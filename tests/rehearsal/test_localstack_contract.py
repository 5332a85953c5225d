"""The LocalStack internals scripts/rehearsal/localstack_host.py replaces, pinned to one version.

The launcher replaces four LocalStack functions (DynamoDB Local's start, the Lambda runtime's
preparation, the gateway's listening sockets, the engine's lookup of a resource only SAM's transform
creates). It refuses to start when LocalStack is not the version
it was written against or when any of those functions changed; these tests say so first, and which
one, so that an upgrade of `localstack-core` is a reviewed change of the launcher, not a rehearsal that
quietly downloads Java, pulls images or listens on every interface.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.rehearsal.conftest import LOCALSTACK_HOST, LOCALSTACK_PYTHON, ROOT, LocalStack

pytestmark = pytest.mark.rehearsal


def check() -> dict[str, object]:
    result = subprocess.run(  # noqa: S603 - LocalStack's interpreter and the project's launcher
        [str(LOCALSTACK_PYTHON), str(LOCALSTACK_HOST), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    state: dict[str, object] = json.loads(result.stdout)
    assert (result.returncode == 0) == state["ok"]
    return state


def test_localstack_is_the_version_the_launcher_and_the_makefile_pin() -> None:
    state = check()
    version = state["version"]
    assert isinstance(version, dict)
    assert version["installed"] == version["pinned"]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    (pinned,) = re.findall(r"^LOCALSTACK_VERSION := (\S+)$", makefile, re.MULTILINE)
    assert pinned == version["pinned"]


def test_every_function_the_launcher_replaces_is_the_one_it_was_written_against() -> None:
    sources = check()["sources"]
    assert isinstance(sources, dict)
    assert len(sources) == 4
    changed = {target: found for target, found in sources.items() if found["installed"] != found["pinned"]}
    assert not changed, f"LocalStack changed what the launcher patches: {changed}"


def test_the_gateway_listens_on_loopback_only(localstack: LocalStack) -> None:
    """Whatever GATEWAY_LISTEN says, LocalStack's Twisted server binds every interface unpatched."""
    port = int(localstack.endpoint.rsplit(":", 1)[1])
    listening = _listening_addresses(port)
    assert listening == {"127.0.0.1"}, listening


def _listening_addresses(port: int) -> set[str]:
    """Local addresses with a TCP socket listening on ``port`` (Linux's /proc/net/tcp and tcp6)."""
    found: set[str] = set()
    for table in ("tcp", "tcp6"):
        path = Path("/proc/net") / table
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.rsplit(":", 1)
            if state != "0A" or int(port_hex, 16) != port:  # 0A: LISTEN
                continue
            if len(address) == 8:
                found.add(".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)))
            else:
                found.add(f"ipv6:{address}")
    return found
