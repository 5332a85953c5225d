"""``make deploy``: what a first deploy needs is checked before anything is installed or AWS is called,
and what is missing is said in one line. ``make`` runs here with no AWS settings and an impossible
PATH for the SAM CLI's calls: a check that let it through would fail on something else, not call AWS."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make") or "make"
#: Obviously fake, and shaped as the template's AllowedPattern wants (a full ARN, -XXXXXX at the end).
KEY_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:payment-saga/stripe-AbC123"
SIGNING_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:payment-saga/stripe-webhook-XyZ789"
TEMPLATE = (ROOT / "template.yaml").read_text(encoding="utf-8")


def preflight() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "deploy_preflight", ROOT / "scripts" / "deploy_preflight.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["deploy_preflight"] = module
    spec.loader.exec_module(module)
    return module


def make_deploy(*variables: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - make from PATH, the test's own arguments
        [MAKE, "--no-print-directory", "deploy", *variables],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def said(result: subprocess.CompletedProcess[str]) -> list[str]:
    """What make deploy said itself (make's own `*** ... Error` line left out)."""
    return [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("make: ***")]


@pytest.mark.skipif(
    not (ROOT / ".venv" / "bin" / "python").exists(), reason=".venv is not installed (make install)"
)
def test_make_deploy_without_python313_says_so_in_one_line_before_anything_else() -> None:
    result = make_deploy(
        "PYTHON313=", env={"PAYMENT_API_KEY_SECRET_ARN": KEY_ARN, "WEBHOOK_SIGNING_SECRET_ARN": SIGNING_ARN}
    )

    assert result.returncode != 0
    (line,) = said(result)
    assert line.startswith("make deploy: sam build needs python3.13")
    assert "PYTHON313=" in line
    assert "sam" not in result.stdout, "nothing was built or deployed"


@pytest.mark.skipif(
    not (ROOT / ".venv" / "bin" / "python").exists(), reason=".venv is not installed (make install)"
)
def test_make_deploy_without_the_secrets_arns_names_both_variables_in_one_line() -> None:
    result = make_deploy("PYTHON313=/usr/bin/python3")

    assert result.returncode != 0
    (line,) = said(result)
    assert "PAYMENT_API_KEY_SECRET_ARN" in line
    assert "WEBHOOK_SIGNING_SECRET_ARN" in line
    assert "docs/deploy.md" in line


def test_a_secret_s_name_instead_of_its_full_arn_is_refused_by_the_template_s_own_pattern(
    tmp_path: Path,
) -> None:
    module = preflight()
    environment = {
        "PAYMENT_API_KEY_SECRET_ARN": "payment-saga/stripe",
        "WEBHOOK_SIGNING_SECRET_ARN": SIGNING_ARN,
    }

    with pytest.raises(module.Missing, match="PAYMENT_API_KEY_SECRET_ARN is not a secret's full ARN"):
        module.deploy_arguments("/usr/bin/python3.13", environment, TEMPLATE, tmp_path / "none.toml")


def test_the_first_deploy_is_guided_and_keeps_samconfig_s_other_overrides() -> None:
    module = preflight()
    environment = {"PAYMENT_API_KEY_SECRET_ARN": KEY_ARN, "WEBHOOK_SIGNING_SECRET_ARN": SIGNING_ARN}

    arguments = module.deploy_arguments("/usr/bin/python3.13", environment, TEMPLATE, ROOT / "samconfig.toml")

    assert arguments[0] == "--guided"  # the project's samconfig.toml holds no secret yet
    overrides = arguments[arguments.index("--parameter-overrides") + 1].split()
    assert f"PaymentApiKeySecretArn={KEY_ARN}" in overrides
    assert f"WebhookSigningSecretArn={SIGNING_ARN}" in overrides
    assert "ClaimLeaseSeconds=900" in overrides


def test_a_deploy_after_a_guided_one_saved_the_arns_needs_no_variable_and_no_prompt(tmp_path: Path) -> None:
    module = preflight()
    samconfig = tmp_path / "samconfig.toml"
    samconfig.write_text(
        "version = 0.1\n[default.deploy.parameters]\n"
        f'parameter_overrides = "PaymentApiKeySecretArn={KEY_ARN} WebhookSigningSecretArn={SIGNING_ARN}"\n'
    )

    assert module.deploy_arguments("/usr/bin/python3.13", {}, TEMPLATE, samconfig) == []
