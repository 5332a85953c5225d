"""checkov skips (``scripts/checkov.sh`` runs checkov itself): each one says why, in the resource, or for
the checks skipped for every function or every log group in ``scripts/checkov.yaml``, above the check; a
function or log group that reason does not cover gives its own in its Metadata.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.static.conftest import Template

ROOT = Path(__file__).resolve().parents[2]


def checkov_skips(template: Template) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, resource in template.resources.items():
        for skip in ((resource.get("Metadata") or {}).get("checkov") or {}).get("skip") or []:
            yield name, skip


def test_every_checkov_skip_names_a_check_and_says_why(template: Template) -> None:
    skips = list(checkov_skips(template))
    for name, skip in skips:
        assert re.fullmatch(r"CKV2?_AWS_\d+", str(skip.get("id", ""))), f"{name}: {skip}"
        assert len(str(skip.get("comment", "")).split()) >= 12, f"{name}: {skip['id']} needs a real reason"
    ids = [(name, skip["id"]) for name, skip in skips]
    assert len(ids) == len(set(ids)), "a check skipped twice on one resource"


def test_checkov_skips_stay_on_the_resources_reviewed_for_them(template: Template) -> None:
    """Skips are for the resources reviewed for them; a new resource passes checkov or gets reviewed."""
    reviewed = {
        "OrdersQueue",
        "OrdersDeadLetterQueue",
        "OutcomeRelayFailureQueue",
        "OutcomeArchiveQueue",
        "WebhookQueue",
        "WebhookDeadLetterQueue",
        "ClaimsTable",
        "PaymentSagaStateMachineLogGroup",
        *template.functions,
    }
    skipped = {name for name, _ in checkov_skips(template)}
    assert skipped <= reviewed, f"new skips to review: {sorted(skipped - reviewed)}"


def test_every_sse_sqs_queue_says_why_checkov_s_kms_check_does_not_apply(template: Template) -> None:
    """CKV_AWS_27 only recognises KmsMasterKeyId: a queue encrypted with SSE-SQS fails it regardless."""
    skipped = {(name, skip["id"]) for name, skip in checkov_skips(template)}
    queues = template.of_type("AWS::SQS::Queue")
    assert queues
    for name, properties in queues.items():
        assert properties.get("SqsManagedSseEnabled") is True, f"{name}: not encrypted at rest"
        assert (name, "CKV_AWS_27") in skipped, f"{name}: checkov fails it (CKV_AWS_27) without a skip"


CHECKOV_CONFIG = ROOT / "scripts" / "checkov.yaml"
#: What each label of a skip in ``scripts/checkov.yaml`` stands for: the resource types its reason is about.
CONFIG_LABELS = {
    "Lambda functions": ("AWS::Serverless::Function", "AWS::Lambda::Function"),
    "Log groups": ("AWS::Logs::LogGroup",),
}
#: The checks skipped for every resource, each with the only resource types checkov 3.3.30 runs it on (its
#: registry, checkov.cloudformation.checks.resource.registry.cfn_registry.checks): a check skipped there is
#: not run on any resource, so it must be one that no other resource of the templates could fail.
CONFIG_CHECKS = {
    "CKV_AWS_115": CONFIG_LABELS["Lambda functions"],
    "CKV_AWS_116": CONFIG_LABELS["Lambda functions"],
    "CKV_AWS_117": CONFIG_LABELS["Lambda functions"],
    "CKV_AWS_173": CONFIG_LABELS["Lambda functions"],
    "CKV_AWS_158": CONFIG_LABELS["Log groups"],
}
#: The functions the reasons of scripts/checkov.yaml are written for: the start function and the state
#: machine's steps. Any other function says in its own Metadata why each of those checks does not apply.
SHARED_REASON_FUNCTIONS = frozenset(
    {
        "StartExecutionFunction",
        "ClaimOrderFunction",
        "ChargePaymentFunction",
        "MarkCompleteFunction",
        "ReleaseClaimFunction",
    }
)


@dataclass(frozen=True)
class ConfigSkip:
    check: str
    label: str
    reason: str


def config_skips(text: str) -> list[ConfigSkip]:
    """The ``skip-check:`` entries of a checkov configuration, each with the comment above it
    (``# <label>: <reason>``): YAML keeps no comments, and checkov refuses keys it does not know."""
    config = yaml.safe_load(text)
    (section,) = re.findall(r"^skip-check:\n((?:  [^\n]*\n)*)", text, flags=re.MULTILINE)
    found = []
    for match in re.finditer(r"((?:  #[^\n]*\n)*)  - ([^\s#]+)\n", section):
        comment = " ".join(line.strip().removeprefix("#").strip() for line in match[1].splitlines())
        label, _, reason = comment.partition(": ")
        found.append(ConfigSkip(match[2], label, reason))
    assert [skip.check for skip in found] == config["skip-check"], "a skip-check entry without its comment"
    return found


def test_every_check_skipped_for_all_resources_says_why_and_for_which(template: Template) -> None:
    skips = config_skips(CHECKOV_CONFIG.read_text(encoding="utf-8"))
    assert skips
    for skip in skips:
        assert skip.label in CONFIG_LABELS, f"{skip.check}: label its reason, one of {list(CONFIG_LABELS)}"
        assert len(skip.reason.split()) >= 12, f"{skip.check} needs a real reason"
        assert CONFIG_CHECKS.get(skip.check) == CONFIG_LABELS[skip.label], (
            f"{skip.check}: skipped for every resource but not reviewed as a check of {skip.label} only"
        )
    assert len({skip.check for skip in skips}) == len(skips), "a check skipped twice"
    script = (ROOT / "scripts" / "checkov.sh").read_text(encoding="utf-8")
    assert "--config-file scripts/checkov.yaml" in script


def test_a_config_comment_is_read_as_the_reason_of_the_check_below_it() -> None:
    text = (
        "# checkov's configuration.\n"
        "skip-check:\n"
        "  # Log groups: first line\n"
        "  # second line.\n"
        "  - CKV_AWS_158\n"
        "  - CKV_AWS_1\n"
    )
    skips = config_skips(text)
    assert skips[0] == ConfigSkip("CKV_AWS_158", "Log groups", "first line second line.")
    assert skips[1] == ConfigSkip("CKV_AWS_1", "", "")


def test_a_function_or_log_group_the_shared_reasons_miss_gives_its_own(template: Template) -> None:
    """A check skipped for all is skipped for a new function too: that function is reviewed for it."""
    skipped = {(name, skip["id"]) for name, skip in checkov_skips(template)}
    covered = {
        "Lambda functions": SHARED_REASON_FUNCTIONS,
        "Log groups": {f"{function}LogGroup" for function in template.functions},
    }
    assert set(template.functions) >= SHARED_REASON_FUNCTIONS
    for skip in config_skips(CHECKOV_CONFIG.read_text(encoding="utf-8")):
        for resource_type in CONFIG_LABELS[skip.label]:
            for name in template.of_type(resource_type):
                assert name in covered[skip.label] or (name, skip.check) in skipped, (
                    f"{name}: scripts/checkov.yaml skips {skip.check} for a reason written for other "
                    "resources: say in its Metadata why it does not apply to this one"
                )


def test_make_test_runs_checkov() -> None:
    """checkov runs where CI runs everything (.ci/run: make test), not only by hand."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    (prerequisites,) = re.findall(r"^test:([^#\n]*)##", makefile, flags=re.MULTILINE)
    assert "checkov" in prerequisites.split()
    (recipe,) = re.findall(r"^checkov:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, flags=re.MULTILINE)
    assert "scripts/checkov.sh" in recipe
