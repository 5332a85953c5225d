"""How ``sam build`` installs what ships (functions/Makefile): loudly, from a lock, for the template's CPU.

macOS's make is 3.81, which has no ``.SHELLFLAGS``: every recipe line runs as plain ``bash -c``. There
a failing ``pip install`` inside a ``;`` chain exited 0, ``sam build`` said "Build Succeeded", and the
empty folder went into the cache for every later build: every function failed at import. These tests
run the recipe as make 3.81 would (``.SHELLFLAGS=-c`` on the command line) as well as with the
Makefile's own flags, with python3.13 (the runtime's Python, which the recipe insists on) and a cache
in a temporary folder. pip is given no network to reach: a requirement it refuses, or none at all.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.static.conftest import Template

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = ROOT / "functions"
LOCK = FUNCTIONS_DIR / "requirements.txt"
DIRECT = FUNCTIONS_DIR / "requirements.in"
#: Lambda's CPU names and the ones wheels are tagged with.
WHEEL_ARCH = {"arm64": "aarch64", "x86_64": "x86_64"}
#: As make 3.81 runs a recipe line (it ignores .SHELLFLAGS), and as GNU make >= 3.82 runs it here.
SHELL_FLAGS = {"make 3.81": [".SHELLFLAGS=-c"], "the Makefile's own flags": []}
IS_313 = "import sys; sys.exit(sys.version_info[:2] != (3, 13))"
#: make from PATH, as a developer runs it.
MAKE = shutil.which("make") or "make"


def python313() -> str:
    """python3.13 as ``make sam-build`` finds it (PATH, then pyenv's builds); skip (fail in CI) without."""
    pyenv = shutil.which("pyenv")
    root = ""
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False).stdout.strip()  # noqa: S603
    builds = sorted(Path(root).glob("versions/3.13*/bin/python3.13")) if root else []
    for candidate in [shutil.which("python3.13"), *map(str, builds)]:
        # A pyenv shim is on PATH whether or not it runs: ask each one.
        if candidate and subprocess.run([candidate, "-c", IS_313], check=False).returncode == 0:  # noqa: S603
            return candidate
    if os.environ.get("CI") == "true":
        pytest.fail("python3.13 not found: CI builds the functions with it")
    pytest.skip("python3.13 not found (pyenv install 3.13): the recipe builds with the runtime's Python")


def build(
    tmp_path: Path, requirements: Path, *flags: str, artifact: str = "artifact"
) -> subprocess.CompletedProcess[str]:
    """``make build-ClaimOrderFunction`` as sam build runs it, into ``tmp_path``'s artifact and cache."""
    artifacts = tmp_path / artifact
    artifacts.mkdir()
    return subprocess.run(  # noqa: S603 - make from PATH, the test's own arguments
        [
            MAKE,
            "-C",
            str(FUNCTIONS_DIR),
            "build-ClaimOrderFunction",
            f"PYTHON313={python313()}",
            f"REQUIREMENTS={requirements}",
            f"DEPS_CACHE={tmp_path / 'cache'}",
            *flags,
        ],
        env={**os.environ, "ARTIFACTS_DIR": str(artifacts)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.mark.parametrize("flags", SHELL_FLAGS.values(), ids=SHELL_FLAGS.keys())
def test_a_failing_pip_fails_the_build_and_caches_nothing(tmp_path: Path, flags: list[str]) -> None:
    refused = tmp_path / "requirements.txt"
    refused.write_text("this is not a requirement ==\n", encoding="utf-8")

    result = build(tmp_path, refused, *flags)

    assert result.returncode != 0, result.stdout + result.stderr
    assert "Invalid requirement" in result.stderr
    cache = tmp_path / "cache"
    assert not cache.exists() or not list(cache.iterdir()), "a failed install left something in the cache"
    assert not (tmp_path / "artifact" / "handlers").exists(), "the function was packaged anyway"
    # And again: nothing of the first failure is taken for a finished install.
    assert build(tmp_path, refused, *flags, artifact="again").returncode != 0


@pytest.mark.parametrize("flags", SHELL_FLAGS.values(), ids=SHELL_FLAGS.keys())
def test_a_cache_entry_without_its_completion_marker_is_rebuilt_not_shipped(
    tmp_path: Path, flags: list[str]
) -> None:
    nothing = tmp_path / "requirements.txt"
    nothing.write_text("# no dependencies: pip has nothing to fetch\n", encoding="utf-8")
    first = build(tmp_path, nothing, *flags)
    assert first.returncode == 0, first.stdout + first.stderr
    assert (tmp_path / "artifact" / "handlers" / "claim_order.py").is_file()
    (entry,) = (tmp_path / "cache").iterdir()
    assert (entry / ".complete").is_file()
    # What an interrupted build, or the Makefile before the marker, leaves: a folder, no marker.
    (entry / ".complete").unlink()
    (entry / "site" / "left_by_a_failed_build.py").write_text("raise ImportError\n", encoding="utf-8")

    second = build(tmp_path, nothing, *flags, artifact="second")

    assert second.returncode == 0, second.stdout + second.stderr
    assert not (tmp_path / "second" / "left_by_a_failed_build.py").exists()
    assert (entry / ".complete").is_file()
    assert not (tmp_path / "second" / ".complete").exists(), "the marker is the cache's, not the package's"


def make_says(*arguments: str) -> str:
    result = subprocess.run(  # noqa: S603 - make from PATH, the test's own arguments
        [MAKE, "-s", "-C", str(FUNCTIONS_DIR), *arguments], capture_output=True, text=True, check=True
    )
    return result.stdout


def test_the_wheels_are_for_the_templates_architecture_and_any_manylinux_up_to_lambdas_glibc(
    template: Template,
) -> None:
    architectures = {tuple(template.function_setting(name, "Architectures")) for name in template.functions}
    assert len(architectures) == 1, (
        f"one installed copy of the dependencies serves every function: {architectures}"
    )
    ((architecture,),) = architectures
    said = dict(re.findall(r"(\w+)=(\S+)", make_says("print-platforms").split(" pip=")[0]))
    platforms = make_says("print-platforms").split(" pip=")[1].split()

    assert said["architecture"] == architecture
    arch = WHEEL_ARCH[architecture]
    assert said["lock"] == f"{arch}-manylinux_2_34"  # Amazon Linux 2023, python3.13's: glibc 2.34
    assert all(platform.endswith(f"_{arch}") for platform in platforms)
    # A wheel published only for a newer tag than manylinux2014 is accepted, up to glibc 2.34.
    for tag in ("manylinux_2_34", "manylinux_2_28", "manylinux_2_17", "manylinux2014"):
        assert f"{tag}_{arch}" in platforms
    assert f"manylinux_2_35_{arch}" not in platforms
    assert f"(platform: {said['lock']})" in LOCK.read_text(encoding="utf-8"), (
        "make lock: the lock is for another platform"
    )


def locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of every requirement in the lock."""
    found: dict[str, tuple[str, list[str]]] = {}
    name = ""
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        pinned = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if pinned:
            name = pinned.group(1).lower().replace("_", "-")
            found[name] = (pinned.group(2), [])
        for digest in re.findall(r"--hash=sha256:([0-9a-f]{64})", line):
            found[name][1].append(digest)
    return found


def test_the_lock_pins_every_shipped_package_with_its_hashes() -> None:
    lock = locked()
    for name, (version, hashes) in lock.items():
        assert hashes, f"{name}=={version} has no hash"
    for line in DIRECT.read_text(encoding="utf-8").splitlines():
        pinned = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", line)
        if pinned:
            name = pinned.group(1).lower()
            assert lock.get(name, ("absent",))[0] == pinned.group(2), (
                f"{name}: make lock after editing requirements.in"
            )
    # What floated before the lock: the SDKs' own dependencies.
    assert {"wrapt", "urllib3", "requests", "certifi", "charset-normalizer"} <= set(lock)


def test_the_build_installs_the_lock_and_nothing_it_does_not_hash(tmp_path: Path) -> None:
    commands = make_says(
        "-n", "build-ClaimOrderFunction", f"ARTIFACTS_DIR={tmp_path}", f"DEPS_CACHE={tmp_path}"
    )
    joined = commands.replace("\\\n", " ")  # the recipe's continuation lines, as the shell reads them
    (install,) = [line for line in joined.splitlines() if "-m pip install" in line]
    assert "--require-hashes" in install
    assert "-r requirements.txt" in install
    assert "--only-binary=:all:" in install


#: A client made in the functions' code: ``client("sqs")``, ``_client("secretsmanager", region)``.
CLIENT_CALL = re.compile(r"""client\(\s*["']([a-z0-9-]+)["']""")


def test_the_build_keeps_the_botocore_data_of_every_client_the_code_makes() -> None:
    # The package ships only these services' botocore data (trim_botocore.py): a client of any other
    # would fail with UnknownServiceError in Lambda, and nowhere else (tests run on the full botocore).
    kept = set(make_says("print-botocore-services").split())
    made = {
        service
        for path in FUNCTIONS_DIR.rglob("*.py")
        for service in CLIENT_CALL.findall(path.read_text(encoding="utf-8"))
    }
    assert {"dynamodb", "secretsmanager", "stepfunctions", "sqs", "events"} <= made, made
    assert made <= kept, f"clients made without their botocore data in the package: {sorted(made - kept)}"
    assert "xray" in kept, "the X-Ray SDK makes a client of its own outside Lambda's sampling"


def test_the_functions_never_import_boto3_which_the_package_does_not_ship() -> None:
    # Their clients are botocore's (handlers/runtime.py). An import of boto3 would find the runtime's own,
    # of whatever version, running on the package's botocore.
    importing = sorted(
        str(path.relative_to(FUNCTIONS_DIR))
        for path in FUNCTIONS_DIR.rglob("*.py")
        if re.search(r"^\s*(import boto3|from boto3\b)", path.read_text(encoding="utf-8"), re.MULTILINE)
    )
    assert importing == []
    assert "boto3" not in locked()
