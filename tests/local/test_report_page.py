"""The HTML report of ``saga simulate`` and ``saga chaos`` (``saga_local/trace/report.py``), from
the plain dicts their ``--json`` prints: escaped, allowed by its own CSP, money as the demo prints it."""

from __future__ import annotations

import base64
import hashlib
import re
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any

from saga_local.trace.report import money, render_report, write_report

if TYPE_CHECKING:
    from pathlib import Path

HOSTILE = '<script>document.body.setAttribute("data-pwned","1")</script><img src=x onerror=alert(1)>'


def simulate_report(**changes: Any) -> dict[str, Any]:
    """A simulate report as ``Report.to_dict()`` writes it, with the run's recorded executions."""
    report: dict[str, Any] = {
        "orders": 3,
        "deliveries": 6,
        "charges": 2,
        "double_charged_orders": 0,
        "lost_orders": 0,
        "charged": 2,
        "declined": 1,
        "needs_reconciliation": 0,
        "conflicts": 0,
        "duplicates_suppressed": {"start": 0, "claim": 3},
        "executions": 6,
        "execution_outcomes": {"SUCCEEDED": 5, "PaymentDeclined": 1},
        "dead_lettered": 0,
        "wall_seconds": 1.5,
        "orders_per_second": 2.0,
        "faults_injected": {},
        "order_endings": {"charged": 2, "declined": 1},
        "problems": [],
        "money": [
            {
                "currency": "BRL",
                "ordered": 45000,
                "billed": 30000,
                "declined": 15000,
                "billed_twice": 0,
                "not_billed": 0,
            },
            {
                "currency": "JPY",
                "ordered": 500,
                "billed": 500,
                "declined": 0,
                "billed_twice": 0,
                "not_billed": 0,
            },
        ],
        "lost_reasons": {},
        "recorded": {"byError": {"PaymentDeclined": ["ORDER-2-abc"]}, "leftOut": 0},
    }
    report.update(changes)
    return report


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def tags(page: str) -> Tags:
    parsed = Tags()
    parsed.feed(page)
    parsed.close()
    return parsed


def test_a_field_holding_a_script_is_shown_as_text_and_never_becomes_markup() -> None:
    report = simulate_report(
        problems=[f"ORDER-X{HOSTILE}: lost"],
        lost_reasons={HOSTILE: 1},
        execution_outcomes={HOSTILE: 1},
        money=[
            {
                "currency": HOSTILE,
                "ordered": 1,
                "billed": 0,
                "declined": 0,
                "billed_twice": 0,
                "not_billed": 1,
            }
        ],
        recorded={"byError": {HOSTILE: [f"name{HOSTILE}"]}, "leftOut": 0},
    )
    page = render_report(report, kind="simulate", traces={f"name{HOSTILE}": f"x/{HOSTILE}.html"})

    parsed = tags(page)
    assert [tag for tag, _ in parsed.tags if tag in {"script", "img", "iframe", "object"}] == []
    assert [name for _, attrs in parsed.tags for name in attrs if name.startswith("on")] == []
    assert HOSTILE in "".join(parsed.text)  # shown, as text
    assert "<script>document" not in page


def test_the_report_allows_only_its_own_style_and_no_script() -> None:
    page = render_report(simulate_report(), kind="simulate", traces={})

    (policy,) = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    policy = policy.replace("&#x27;", "'")
    (style,) = re.findall(r"<style>(.*?)</style>", page, flags=re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(style.encode("utf-8")).digest()).decode("ascii")
    assert policy == (
        f"default-src 'none'; style-src 'sha256-{digest}'; img-src data:; base-uri 'none'; form-action 'none'"
    )
    assert "unsafe-inline" not in policy
    assert "<script" not in page
    assert re.findall(r"<[^>]*\s(on\w+|style)=", page) == []


def test_money_is_printed_in_each_currency_s_own_minor_units_as_the_demo_prints_it() -> None:
    page = render_report(simulate_report(), kind="simulate", traces={})

    assert (money(15000, "BRL"), money(500, "JPY"), money(1234, "KWD")) == (
        "150.00 BRL",
        "500 JPY",
        "1.234 KWD",
    )
    for shown in ("450.00 BRL", "300.00 BRL", "150.00 BRL", "500 JPY"):
        assert f">{shown}<" in page


def test_a_chaos_report_shows_each_check_and_the_broken_one_fails_the_promise() -> None:
    after = simulate_report(lost_orders=1, order_endings={"charged": 2, "lost": 1})
    report = {
        "before": simulate_report(order_endings={"charged": 1, "needs-reconciliation": 2}),
        "after": after,
        "faultsByKind": {"die": 4, "lost answer": 2},
        "faultsPlanned": 9,
        "checks": {"no order charged twice": True, "no order lost": False},
        "outage": {"startAfterSeconds": 60.0, "seconds": 2.0, "began": None, "ended": None, "callsFailed": 0},
        "lambdaThrottle": {
            "functions": ["ClaimOrderFunction", "ReleaseClaimFunction"],
            "startAfterSeconds": 0.5,
            "seconds": 4.0,
            "began": 0.6,
            "throttles": 17,
        },
        "recorded": {"byError": {}, "leftOut": 0},
    }
    parsed = tags(render_report(report, kind="chaos", traces={}))

    rows = {attrs["data-check"]: attrs["class"] for tag, attrs in parsed.tags if "data-check" in attrs}
    assert rows == {"no order charged twice": "ok", "no order lost": "fail"}
    body = next(attrs for tag, attrs in parsed.tags if tag == "body")
    assert body["data-promise-kept"] == "false"
    assert {attrs["data-fault"] for _, attrs in parsed.tags if "data-fault" in attrs} == {
        "die",
        "lost answer",
    }
    text = "".join(parsed.text)
    assert "PROMISE BROKEN" in text
    assert "2.0 s from 60.0 s into the run; did not begin (the run ended first)" in text
    throttled = "ClaimOrderFunction, ReleaseClaimFunction: 4.0 s from 0.5 s into the run"
    assert f"{throttled}; began at 0.6 s, 17 throttles" in text


def test_an_execution_whose_record_is_gone_is_named_without_a_link(tmp_path: Path) -> None:
    page_path = write_report(
        tmp_path / "run.html", simulate_report(), kind="simulate", load=lambda name: None
    )

    parsed = tags(page_path.read_text(encoding="utf-8"))
    assert [attrs for tag, attrs in parsed.tags if tag == "a"] == []
    assert "no page: saga trace ORDER-2-abc" in "".join(parsed.text)
    assert not (tmp_path / "run-traces").exists()
