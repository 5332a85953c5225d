"""What ``make deploy`` checks before it installs, builds or calls anything: what a first deploy needs.

* python3.13, the functions' runtime, for ``sam build`` without a container (the Makefile finds it, or
  is given ``PYTHON313=``);
* the full ARNs of the two secrets the template requires (``PaymentApiKeySecretArn``,
  ``WebhookSigningSecretArn``), from ``PAYMENT_API_KEY_SECRET_ARN`` and ``WEBHOOK_SIGNING_SECRET_ARN``,
  or saved in samconfig.toml by an earlier guided deploy; each checked against the template's own
  ``AllowedPattern``, so a name or a partial ARN is refused here rather than by CloudFormation.

What is missing is said in one line on stderr (exit 1). Otherwise the arguments of ``sam deploy`` are
printed on stdout, shell-quoted: ``--guided`` the first time (samconfig.toml holds no secret ARN
yet: the guided deploy asks the rest and saves the answers), and the secrets' ARNs as parameter
overrides when they come from the environment (with samconfig.toml's other overrides, which a
command line's ``--parameter-overrides`` would otherwise replace as a whole).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Each secret parameter, and the variable that carries its ARN.
SECRETS = {
    "PaymentApiKeySecretArn": "PAYMENT_API_KEY_SECRET_ARN",
    "WebhookSigningSecretArn": "WEBHOOK_SIGNING_SECRET_ARN",
}
#: What each secret holds, for the line that says it is missing.
HOLDS = {
    "PaymentApiKeySecretArn": "your Stripe secret key",
    "WebhookSigningSecretArn": "the webhook endpoint's signing secret",
}


class Missing(Exception):
    """What the deploy lacks, in one line."""


def allowed_pattern(template: str, parameter: str) -> re.Pattern[str]:
    """The ``AllowedPattern`` of ``parameter`` in template.yaml (read as text: no YAML tags needed)."""
    block = re.search(rf"^  {parameter}:\n((?:    .*\n)+)", template, flags=re.MULTILINE)
    pattern = (
        re.search(r'^    AllowedPattern: "(.*)"$', block.group(1), flags=re.MULTILINE) if block else None
    )
    if pattern is None:
        raise Missing(f"template.yaml has no AllowedPattern for {parameter}")
    return re.compile(pattern.group(1).replace("\\\\", "\\"))


def saved_overrides(samconfig: Path) -> dict[str, str]:
    """The default deploy's parameter overrides samconfig.toml holds, by name."""
    try:
        config = tomllib.loads(samconfig.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    overrides = (
        config.get("default", {}).get("deploy", {}).get("parameters", {}).get("parameter_overrides", "")
    )
    words = shlex.split(overrides) if isinstance(overrides, str) else [str(w) for w in overrides]
    return dict(word.split("=", 1) for word in words if "=" in word)


def deploy_arguments(
    python313: str, environment: dict[str, str], template: str, samconfig: Path
) -> list[str]:
    """The arguments of ``sam deploy``; raises :class:`Missing` with what to do."""
    if not python313:
        raise Missing(
            "sam build needs python3.13 (the functions' runtime) and none was found: install it"
            " (pyenv install 3.13), or pass PYTHON313=/path/to/python3.13"
        )
    saved = saved_overrides(samconfig)
    given = {parameter: environment.get(variable, "").strip() for parameter, variable in SECRETS.items()}
    lacking = [p for p in SECRETS if not given[p] and not saved.get(p)]
    if lacking:
        what = " and ".join(f"{SECRETS[p]} (the ARN of the secret holding {HOLDS[p]})" for p in lacking)
        raise Missing(
            f"set {what}: create {'it' if len(lacking) == 1 else 'them'} as docs/deploy.md says"
            " (aws secretsmanager create-secret), then make deploy again"
        )
    for parameter, value in given.items():
        if value and not allowed_pattern(template, parameter).match(value):
            raise Missing(
                f"{SECRETS[parameter]} is not a secret's full ARN (arn:aws:secretsmanager:REGION:"
                "ACCOUNT:secret:NAME-XXXXXX): aws secretsmanager describe-secret --secret-id NAME"
                " --query ARN prints it"
            )
    arguments = [] if all(saved.get(p) for p in SECRETS) else ["--guided"]
    if any(given.values()):
        overrides = {**saved, **{p: v for p, v in given.items() if v}}
        arguments += ["--parameter-overrides", " ".join(f"{k}={v}" for k, v in overrides.items())]
    return arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python313", default="", help="the python3.13 the Makefile found (empty: none)")
    args = parser.parse_args(argv)
    try:
        arguments = deploy_arguments(
            args.python313,
            dict(os.environ),
            (ROOT / "template.yaml").read_text(encoding="utf-8"),
            ROOT / "samconfig.toml",
        )
    except Missing as exc:
        print(f"make deploy: {exc}", file=sys.stderr)
        return 1
    print(shlex.join(arguments))
    return 0


if __name__ == "__main__":
    sys.exit(main())
