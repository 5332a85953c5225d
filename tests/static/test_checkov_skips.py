"""checkov skips (``scripts/checkov.sh`` runs checkov itself): each one says why, in the resource (the
shared ones are rendered there from ``scripts/template_sections.yaml``, and reviewed here as they land).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
        # Each function's own log group (CKV_AWS_158, as the state machine's).
        *(f"{function}LogGroup" for function in template.functions),
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


def test_make_test_runs_checkov() -> None:
    """checkov runs where CI runs everything (.ci/run: make test), not only by hand."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    (prerequisites,) = re.findall(r"^test:([^#\n]*)##", makefile, flags=re.MULTILINE)
    assert "checkov" in prerequisites.split()
    (recipe,) = re.findall(r"^checkov:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, flags=re.MULTILINE)
    assert "scripts/checkov.sh" in recipe
