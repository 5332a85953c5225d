"""``saga simulate --html`` and ``saga chaos --html``: a run's report as one page, beside a trace page
for every execution that did not go the happy way.

The renderer reads plain dicts: the report's ``to_dict()`` with the run's recorded executions under
``"recorded"`` (``{"byError": {error: [names]}, "leftOut": n}``), exactly what ``--json`` prints. It
draws how the orders ended (bars), the money ordered against billed (integer minor units, printed as
``saga demo`` prints them), the faults fired by kind, the verdict per check of the promise, and links
each recorded execution to its trace page (:func:`saga_local.trace.render_html`, redacted as
``saga trace --html`` is without ``--io``), written to ``<name>-traces/`` next to the report.

As the trace page: nothing fetched, one stylesheet (``static/report.css``) allowed by its hash, no
script at all, and every string (order ids, reasons, error names: attacker-influenced) escaped.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol
from urllib.parse import quote

from payment_saga.currencies import decimals
from saga_local.trace.history import load_definition
from saga_local.trace.html import csp_hash, render_html, static_text
from saga_local.trace.redact import redacted_description, redacted_history
from saga_local.trace.svg import escape

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

Kind = Literal["simulate", "chaos"]
#: How an order can end, in the order a reader scans them, with the bar's colour class.
ENDINGS = (
    ("charged", "good"),
    ("declined", "neutral"),
    ("needs-reconciliation", "warn"),
    ("released, not charged", "bad"),
    ("lost", "bad"),
    ("double-charged", "bad"),
)
BAR_WIDTH = 240


class Traceable(Protocol):
    """A recorded execution: what ``saga trace`` renders (``saga_local.stack.archive.RecordedExecution``)."""

    @property
    def description(self) -> dict[str, Any]: ...
    @property
    def history(self) -> list[dict[str, Any]]: ...
    @property
    def definition(self) -> str: ...


def traces_folder(path: Path) -> Path:
    """Where the trace pages of the report at ``path`` go: ``report.html`` -> ``report-traces/``."""
    return path.with_name(f"{path.stem}-traces")


def write_report(
    path: Path, report: Mapping[str, Any], *, kind: Kind, load: Callable[[str], Traceable | None]
) -> Path:
    """Write each recorded execution's trace page (``load(name)``; None: not kept), then the report
    linking to them; returns ``path``. Raises OSError when a file cannot be written."""
    folder = traces_folder(path)
    traces: dict[str, str] = {}
    for name in recorded_names(report):
        found = load(name)
        if found is None:
            continue
        if not traces:
            folder.mkdir(exist_ok=True)
        page = render_html(
            redacted_description(found.description),
            redacted_history(found.history),
            load_definition(found.definition),
        )
        (folder / f"{name}.html").write_text(page, encoding="utf-8")
        traces[name] = f"{quote(folder.name)}/{quote(name)}.html"
    path.write_text(render_report(report, kind=kind, traces=traces), encoding="utf-8")
    return path


def recorded_names(report: Mapping[str, Any]) -> list[str]:
    """Every execution name the run recorded, error by error."""
    by_error: Mapping[str, list[str]] = (report.get("recorded") or {}).get("byError") or {}
    return [str(name) for _, names in sorted(by_error.items()) for name in names]


def render_report(report: Mapping[str, Any], *, kind: Kind, traces: Mapping[str, str]) -> str:
    """The page: verdict, endings, figures, money, faults, problems, links to the trace pages.

    ``traces`` maps an execution name to its trace page's address, relative to the report.
    """
    css = "\n" + static_text("report.css")
    csp = f"default-src 'none'; style-src {csp_hash(css)}; img-src data:; base-uri 'none'; form-action 'none'"
    # Chaos judges the run after its sweep; its report before the sweep is shown for comparison.
    final: Mapping[str, Any] = report.get("after", report) if kind == "chaos" else report
    checks = _checks(report, kind)
    kept = all(checks.values())
    verdict = "PROMISE KEPT" if kept else "PROMISE BROKEN"
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{escape(csp)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>saga {kind} · {verdict}</title>",
        f"<style>{css}</style></head>",
        f'<body data-kind="{kind}" data-promise-kept="{"true" if kept else "false"}">',
        f'<header><h1>saga {kind}<span class="verdict {"ok" if kept else "fail"}">{verdict}</span></h1>',
        f'<div class="meta">{_meta(report, final, kind)}</div></header><main>',
    ]
    page += _verdict(checks)
    page += _endings(final, report.get("before") if kind == "chaos" else None)
    page += _figures(final)
    page += _money(final.get("money") or [])
    page += _faults(report, kind)
    page += _problems(report, final, kind)
    page += _recorded(report.get("recorded") or {}, traces)
    page.append("</main></body></html>")
    return "\n".join(page) + "\n"


def money(amount: int, currency: str) -> str:
    """Minor units as ``saga demo`` prints them: 15000 BRL -> '150.00 BRL', 500 JPY -> '500 JPY'."""
    places = decimals(currency)
    if places == 0:
        return f"{amount} {currency}"
    sign = "-" if amount < 0 else ""
    whole, fraction = divmod(abs(amount), 10**places)
    return f"{sign}{whole}.{fraction:0{places}d} {currency}"


def _checks(report: Mapping[str, Any], kind: Kind) -> dict[str, bool]:
    """The verdict per check. Chaos's report carries its own; simulate's promise is no order
    charged twice and none lost (``Report.promise_kept``)."""
    if kind == "chaos":
        return {str(name): bool(ok) for name, ok in (report.get("checks") or {}).items()}
    return {
        "no order charged twice": report.get("double_charged_orders", 0) == 0,
        "no order lost": report.get("lost_orders", 0) == 0,
    }


def _meta(report: Mapping[str, Any], final: Mapping[str, Any], kind: Kind) -> str:
    parts = [
        f"{final.get('orders', 0)} orders",
        f"{final.get('deliveries', 0)} deliveries",
        f"{final.get('executions', 0)} executions",
    ]
    seconds = report.get("wallSeconds") if kind == "chaos" else report.get("wall_seconds")
    if seconds is not None:
        parts.append(f"{float(seconds):.1f} s")
    config = report.get("config")
    if isinstance(config, dict) and "seed" in config:
        parts.append(f"seed {config['seed']}")
    return "".join(f"<span>{escape(part)}</span>" for part in parts)


def _verdict(checks: Mapping[str, bool]) -> list[str]:
    parts = ['<section id="verdict"><h2>Verdict</h2><table class="checks"><tbody>']
    for check, ok in checks.items():
        state = "ok" if ok else "fail"
        parts.append(
            f'<tr class="{state}" data-check="{escape(check)}"><td class="mark">{"ok" if ok else "FAIL"}</td>'
            f"<td>{escape(check)}</td></tr>"
        )
    parts.append("</tbody></table></section>")
    return parts


def _bar(value: int, total: int, tone: str) -> str:
    """A bar drawn in SVG (its width is an attribute: the policy allows no inline style)."""
    width = 0 if not total else max(2.0 if value else 0.0, BAR_WIDTH * value / total)
    return (
        f'<svg class="bar" width="{BAR_WIDTH}" height="14" viewBox="0 0 {BAR_WIDTH} 14" aria-hidden="true">'
        f'<rect class="track" width="{BAR_WIDTH}" height="14" rx="3"/>'
        f'<rect class="fill {tone}" width="{width:.1f}" height="14" rx="3"/></svg>'
    )


def _endings(final: Mapping[str, Any], before: Mapping[str, Any] | None) -> list[str]:
    """How the orders ended, one bar each (after the sweep for chaos, with before beside it)."""
    endings: Mapping[str, int] = final.get("order_endings") or {}
    earlier: Mapping[str, int] = (before or {}).get("order_endings") or {}
    total = int(final.get("orders", 0)) or sum(endings.values())
    known = [name for name, _ in ENDINGS]
    rows = [(name, tone) for name, tone in ENDINGS if endings.get(name) or earlier.get(name)]
    rows += [(str(name), "bad") for name in sorted(set(endings) | set(earlier)) if name not in known]
    header = "<th>before the sweep</th>" if before is not None else ""
    parts = [
        '<section id="endings"><h2>How the orders ended</h2><table class="endings"><thead><tr>'
        f'<th>ending</th><th class="num">orders</th><th></th>{header}</tr></thead><tbody>'
    ]
    for name, tone in rows:
        value = int(endings.get(name, 0))
        cell = f'<td class="num">{int(earlier.get(name, 0))}</td>' if before is not None else ""
        parts.append(
            f'<tr data-ending="{escape(name)}"><td>{escape(name)}</td><td class="num">{value}</td>'
            f"<td>{_bar(value, total, tone)}</td>{cell}</tr>"
        )
    if not rows:
        parts.append('<tr><td colspan="3" class="muted">no order</td></tr>')
    parts.append("</tbody></table></section>")
    return parts


def _figures(final: Mapping[str, Any]) -> list[str]:
    """The counts ``saga simulate`` prints, as a table."""
    suppressed: Mapping[str, int] = final.get("duplicates_suppressed") or {}
    outcomes: Mapping[str, int] = final.get("execution_outcomes") or {}
    rows = [
        ("orders", final.get("orders", 0)),
        ("deliveries", final.get("deliveries", 0)),
        ("charges", final.get("charges", 0)),
        ("double-charged orders", final.get("double_charged_orders", 0)),
        ("lost orders", final.get("lost_orders", 0)),
        ("charged", final.get("charged", 0)),
        ("declined", final.get("declined", 0)),
        ("needs reconciliation", final.get("needs_reconciliation", 0)),
        ("order conflicts", final.get("conflicts", 0)),
        ("duplicates stopped at the start", suppressed.get("start", 0)),
        ("duplicates stopped at the claim", suppressed.get("claim", 0)),
        ("dead-lettered deliveries", final.get("dead_lettered", 0)),
        ("executions", final.get("executions", 0)),
    ]
    rows += [(f"  ended {name}", n) for name, n in sorted(outcomes.items())]
    parts = ['<section id="figures"><h2>Counts</h2><table class="figures"><tbody>']
    for label, value in rows:
        indent = ' class="sub"' if label.startswith("  ") else ""
        parts.append(
            f'<tr data-figure="{escape(label.strip())}"><td{indent}>{escape(label.strip())}</td>'
            f'<td class="num">{escape(value)}</td></tr>'
        )
    parts.append("</tbody></table></section>")
    return parts


def _money(entries: list[Mapping[str, Any]]) -> list[str]:
    """Ordered against billed, per currency, and where the difference went."""
    parts = [
        '<section id="money"><h2>Money, ordered against billed</h2><table class="money"><thead><tr>'
        '<th>currency</th><th class="num">ordered</th><th class="num">billed</th>'
        '<th class="num">declined</th><th class="num">not billed</th><th class="num">billed twice</th>'
        "<th>billed of ordered</th></tr></thead><tbody>"
    ]
    for entry in entries:
        currency = str(entry.get("currency", "?"))
        cells = "".join(
            f'<td class="num{" bad" if field == "billed_twice" and entry.get(field) else ""}">'
            f"{escape(money(int(entry.get(field, 0)), currency))}</td>"
            for field in ("ordered", "billed", "declined", "not_billed", "billed_twice")
        )
        billed, ordered = int(entry.get("billed", 0)), int(entry.get("ordered", 0))
        tone = "bad" if entry.get("billed_twice") else "good"
        parts.append(
            f'<tr data-currency="{escape(currency)}"><td>{escape(currency)}</td>{cells}'
            f"<td>{_bar(min(billed, ordered), ordered, tone)}</td></tr>"
        )
    if not entries:
        parts.append('<tr><td colspan="7" class="muted">no order</td></tr>')
    parts.append("</tbody></table></section>")
    return parts


def _faults(report: Mapping[str, Any], kind: Kind) -> list[str]:
    """The faults that fired, by kind (and, for chaos, by function, the outage and the throttle)."""
    by_kind: Mapping[str, int] = (
        report.get("faultsByKind") if kind == "chaos" else report.get("faults_injected")
    ) or {}
    parts = ['<section id="faults"><h2>Faults fired</h2>']
    if kind == "chaos":
        parts.append(
            f'<p class="muted">{sum(by_kind.values())} fired from {escape(report.get("faultsPlanned", 0))}'
            " planned</p>"
        )
    parts.append('<table class="faults"><tbody>')
    top = max(by_kind.values(), default=0)
    for name, n in sorted(by_kind.items(), key=lambda item: (-item[1], item[0])):
        parts.append(
            f'<tr data-fault="{escape(name)}"><td>{escape(name)}</td><td class="num">{int(n)}</td>'
            f"<td>{_bar(int(n), top, 'warn')}</td></tr>"
        )
    if not by_kind:
        parts.append('<tr><td class="muted">none injected</td></tr>')
    parts.append("</tbody></table>")
    if kind == "chaos":
        extra = [
            ("by function", _counts(report.get("faultsByFunction") or {})),
            ("provider outage", _window(report.get("outage") or {}, "callsFailed", "calls failed")),
            ("Lambda throttled", _window(report.get("lambdaThrottle") or {}, "throttles", "throttles")),
            ("redeliveries", _counts(report.get("redeliveries") or {})),
            ("late writes", _counts(report.get("lateWrites") or {})),
            ("sweep", _counts(report.get("sweepCounts") or {})),
            ("re-queued by the relay, ended", _counts(report.get("requeuedEndings") or {})),
        ]
        parts.append('<table class="figures"><tbody>')
        parts.extend(f"<tr><td>{escape(label)}</td><td>{escape(text)}</td></tr>" for label, text in extra)
        parts.append("</tbody></table>")
    parts.append("</section>")
    return parts


def _problems(report: Mapping[str, Any], final: Mapping[str, Any], kind: Kind) -> list[str]:
    """What is wrong at the end, each named once (as the text report lists them)."""
    found: list[str] = []
    if kind == "chaos":
        found += [str(p) for p in report.get("violationsBefore") or []]
        found += [str(p) for p in report.get("violationsAfter") or []]
        found += [str(p) for p in report.get("declinedAttemptsSentAgain") or []]
        outcomes = report.get("outcomeEvents") or {}
        found += [str(p) for p in (outcomes.get("problems") or [])[:20]]
    found += [str(p) for p in final.get("problems") or []]
    reasons: Mapping[str, int] = final.get("lost_reasons") or {}
    if not found and not reasons:
        return []
    parts = ['<section id="problems"><h2>Problems</h2>']
    if reasons:
        parts.append('<table class="reasons"><tbody>')
        parts.extend(
            f'<tr><td>lost: {escape(reason)}</td><td class="num">{int(n)}</td></tr>'
            for reason, n in sorted(reasons.items())
        )
        parts.append("</tbody></table>")
    parts.append("<ul>")
    parts.extend(f"<li>{escape(problem)}</li>" for problem in dict.fromkeys(found))
    parts.append("</ul></section>")
    return parts


def _recorded(recorded: Mapping[str, Any], traces: Mapping[str, str]) -> list[str]:
    """Every execution that did not succeed, by how it ended, each linked to its trace page."""
    by_error: Mapping[str, list[str]] = recorded.get("byError") or {}
    total = sum(len(names) for names in by_error.values())
    parts = [
        '<section id="unhappy"><h2>Executions that did not go the happy way'
        f' <span class="muted">{total}</span></h2>'
    ]
    if not total:
        parts.append('<p class="muted">none: every execution succeeded</p></section>')
        return parts
    for error, names in sorted(by_error.items()):
        parts.append(f'<details open data-error="{escape(error)}"><summary><b>{escape(error)}</b>')
        parts.append(f'<span class="muted">{len(names)}</span></summary><ul class="names">')
        for name in names:
            href = traces.get(name)
            if href is None:
                hint = f"<span class='muted'>(no page: saga trace {escape(name)})</span>"
                parts.append(f"<li>{escape(name)} {hint}</li>")
            else:
                parts.append(
                    f'<li><a href="{escape(href)}" data-execution="{escape(name)}">{escape(name)}</a></li>'
                )
        parts.append("</ul></details>")
    if recorded.get("leftOut"):
        parts.append(f'<p class="muted">{escape(recorded["leftOut"])} more not recorded</p>')
    parts.append("</section>")
    return parts


def _counts(counts: Mapping[str, Any]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "none"


def _window(window: Mapping[str, Any], counted: str, noun: str) -> str:
    """An outage or a throttle (``Outage.to_dict``, ``LambdaThrottle.to_dict``) in words."""
    if not window.get("seconds"):
        return "none"
    what = f"{', '.join(window['functions'])}: " if window.get("functions") else ""
    planned = f"{what}{window['seconds']} s from {window.get('startAfterSeconds', 0)} s into the run"
    if window.get("began") is None:
        return f"{planned}; did not begin (the run ended first)"
    return f"{planned}; began at {window['began']} s, {window.get(counted, 0)} {noun}"
