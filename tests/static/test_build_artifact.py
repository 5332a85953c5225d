"""What ``sam build`` ships: bytecode the runtime's Python trusts, and nothing that is not the saga.

Lambda's ``/var/task`` is read-only: a package without valid bytecode for the runtime's exact Python
compiles every module it imports at each cold start. functions/Makefile compiles the package
with python3.13 in unchecked-hash mode (PEP 552): Python then loads the ``.pyc`` without looking at the
source at all, so a ``.pyc`` that does not match the shipped source would run other code than the one
shipped. These tests read the build output that ``make sam-build`` leaves in ``.aws-sam/build-check``
(``make check-template``, which CI runs before pytest, builds it). Without it they skip, except in CI
(``CI=true``), where a missing build is a failure. How fast the imports are is measured by
``bench/cold_start.py`` (``make bench``), not here.

Also here, read from ``functions/`` with no build: which functions load the Stripe SDK when imported.
"""

from __future__ import annotations

import _imp
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.static.conftest import Template

ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = ROOT / ".aws-sam" / "build-check"
FUNCTIONS_DIR = ROOT / "functions"
#: CPython 3.13's bytecode magic number (importlib.util.MAGIC_NUMBER: 3571, then b"\r\n"), the runtime's.
PY313_MAGIC = (3571).to_bytes(2, "little") + b"\r\n"
#: PEP 552 flags word of a hash-based .pyc whose source is never checked (bit 0 set, bit 1 clear).
UNCHECKED_HASH = 0b01
#: The saga's own packages: the handlers and the domain.
OUR_PACKAGES = ("handlers", "payment_saga")
#: What must never ship: the test suite, the local stack, the benchmarks.
NOT_SHIPPED = ("tests", "saga_local", "bench")
#: Functions that call Stripe, and so may load its SDK at import; every other one must not.
CALLS_STRIPE_AT_EVERY_INVOCATION = {"ChargePaymentFunction"}


def source_hash_313(source: bytes) -> bytes:
    """The source hash python3.13 writes in a hash-based .pyc (SipHash keyed by its magic number)."""
    return bytes(_imp.source_hash(int.from_bytes(PY313_MAGIC, "little"), source))


@pytest.fixture(scope="module")
def built(template: Template) -> dict[str, Path]:
    """Function logical id -> its package in the build output; skip (fail in CI) when there is none."""
    packages = {name: BUILD_DIR / name for name in template.functions}
    missing = sorted(name for name, package in packages.items() if not package.is_dir())
    if missing:
        reason = (
            f"no sam build output for {', '.join(missing)} in {BUILD_DIR}: "
            "run `make sam-build` (make check-template runs it)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; in CI, make test builds it before pytest")
        pytest.skip(reason)
    return packages


def test_every_function_is_built_by_the_makefile_for_python313(template: Template) -> None:
    # sam's own Python builder ships no bytecode: a function without BuildMethod makefile would.
    not_makefile = {
        name: (template.resources[name].get("Metadata") or {}).get("BuildMethod")
        for name in template.functions
        if (template.resources[name].get("Metadata") or {}).get("BuildMethod") != "makefile"
    }
    assert not not_makefile, f"functions built without functions/Makefile (no bytecode): {not_makefile}"
    runtimes = {name: template.function_setting(name, "Runtime") for name in template.functions}
    assert set(runtimes.values()) == {"python3.13"}, (
        f"functions/Makefile compiles for python3.13 only: {runtimes}"
    )
    assert (FUNCTIONS_DIR / "Makefile").is_file()


def test_handler_and_domain_modules_ship_unchecked_bytecode_of_their_own_source(
    built: dict[str, Path],
) -> None:
    problems = []
    for name, package in built.items():
        modules = [path for top in OUR_PACKAGES for path in sorted((package / top).rglob("*.py"))]
        assert modules, f"{name}: no {' or '.join(OUR_PACKAGES)} modules in {package}"
        for module in modules:
            where = f"{name}: {module.relative_to(package)}"
            pyc = module.parent / "__pycache__" / f"{module.stem}.cpython-313.pyc"
            if not pyc.is_file():
                problems.append(f"{where}: no {pyc.name}")
                continue
            header = pyc.read_bytes()[:16]
            if header[:4] != PY313_MAGIC:
                problems.append(f"{where}: magic {header[:4]!r}, not python3.13's {PY313_MAGIC!r}")
            elif int.from_bytes(header[4:8], "little") != UNCHECKED_HASH:
                problems.append(f"{where}: flags {int.from_bytes(header[4:8], 'little')}, not unchecked-hash")
            elif header[8:16] != source_hash_313(module.read_bytes()):
                problems.append(f"{where}: its .pyc was compiled from another source than the one shipped")
    assert not problems, "\n".join(problems)


def test_every_module_of_the_package_has_python313_bytecode(built: dict[str, Path]) -> None:
    # The dependencies too (Powertools, botocore, stripe...): they are most of the import time.
    for name, package in built.items():
        uncompiled = [
            str(module.relative_to(package))
            for module in package.rglob("*.py")
            if not (module.parent / "__pycache__" / f"{module.stem}.cpython-313.pyc").is_file()
        ]
        assert not uncompiled, f"{name}: {len(uncompiled)} modules without bytecode, e.g. {uncompiled[:5]}"


def test_the_package_holds_neither_tests_nor_the_local_stack(built: dict[str, Path]) -> None:
    for name, package in built.items():
        shipped = sorted(entry.name for entry in package.iterdir() if entry.name in NOT_SHIPPED)
        assert not shipped, f"{name} ships {shipped}"
        assert all((package / top / "__init__.py").is_file() for top in OUR_PACKAGES), name


def test_only_the_function_that_charges_loads_the_stripe_sdk_at_import(template: Template) -> None:
    # Importing stripe (with requests, urllib3...) is a large share of a cold start: the functions that
    # never call Stripe must not pay for it, and Charge Payment must pay it at init, not on its first charge.
    loaded = {}
    for name in template.functions:
        module = str(template.function_setting(name, "Handler")).rsplit(".", 1)[0]
        completed = subprocess.run(  # noqa: S603 - fixed argv: this interpreter, a handler of the template
            [sys.executable, "-c", f"import json, sys, {module}; print(json.dumps('stripe' in sys.modules))"],
            env={**os.environ, "PYTHONPATH": str(FUNCTIONS_DIR)},
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        loaded[name] = json.loads(completed.stdout.strip().splitlines()[-1])
    expected = {name: name in CALLS_STRIPE_AT_EVERY_INVOCATION for name in template.functions}
    assert loaded == expected


#: Where each kept service's client is sent, in each partition: the endpoints the functions reach.
REGIONS = ("us-east-1", "eu-west-1", "cn-north-1", "us-gov-west-1")
#: Asks a package's own botocore (and nothing else: -S) for every kept service's endpoint in REGIONS.
ENDPOINTS_OF = """
import json, sys
import botocore.exceptions, botocore.session
session = botocore.session.get_session()
def endpoint(service, region):
    try:
        made = session.create_client(service, region_name=region, aws_access_key_id="offline",
                                     aws_secret_access_key="offline")
    except botocore.exceptions.UnknownServiceError:
        return None
    return made.meta.endpoint_url
print(json.dumps({f"{s} {r}": endpoint(s, r) for s in sys.argv[2:] for r in sys.argv[1].split(",")}))
"""


def kept_services() -> list[str]:
    result = subprocess.run(  # noqa: S603 - make from PATH, a fixed target
        ["make", "-s", "-C", str(FUNCTIONS_DIR), "print-botocore-services"],  # noqa: S607
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.split()


def test_the_package_keeps_the_botocore_data_of_its_clients_only(built: dict[str, Path]) -> None:
    # A cold start's first client lists every service folder and parses the endpoints file: the
    # package keeps what its clients need (functions/trim_botocore.py), and no other service.
    kept = kept_services()
    for name, package in built.items():
        data = package / "botocore" / "data"
        folders = sorted(entry.name for entry in data.iterdir() if entry.is_dir())
        assert folders == sorted(kept), f"{name}: {folders}"
        for partition in json.loads((data / "endpoints.json").read_text(encoding="utf-8"))["partitions"]:
            assert len(partition["services"]) <= len(kept), f"{name}: {partition['partition']}"


def test_each_kept_client_reaches_the_endpoint_the_full_botocore_gives_it(built: dict[str, Path]) -> None:
    import botocore.session

    kept = kept_services()
    package = next(iter(built.values()))
    completed = subprocess.run(  # noqa: S603 - this interpreter, the test's own program
        [sys.executable, "-S", "-c", ENDPOINTS_OF, ",".join(REGIONS), *kept, "s3"],
        env={"PYTHONPATH": str(package), "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        check=False,
        cwd=package,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    trimmed = json.loads(completed.stdout.strip().splitlines()[-1])
    full = botocore.session.get_session()
    for service in kept:
        for region in REGIONS:
            made = full.create_client(
                service, region_name=region, aws_access_key_id="offline", aws_secret_access_key="offline"
            )
            assert trimmed[f"{service} {region}"] == made.meta.endpoint_url, (service, region)
    # Any other service is refused at once, not sent somewhere surprising.
    assert all(trimmed[f"s3 {region}"] is None for region in REGIONS)
