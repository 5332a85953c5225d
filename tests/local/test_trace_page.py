"""The trace page's Content-Security-Policy, without a browser (``saga_local/trace/html.py``).

The page inlines ``static/trace.css`` and ``static/trace.js`` and allows exactly those by hash: if a
hash drifted from what is inlined, the browser would drop the page's colours or its script (the
Chromium test in tests/local/test_trace.py sees that too, where Chromium is installed).
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib import resources

from saga_local.trace import render_html

DEFINITION = {"StartAt": "Claim Order", "States": {"Claim Order": {"Type": "Succeed"}}}
HISTORY = [
    {
        "type": "ExecutionStarted",
        "id": 1,
        "previousEventId": 0,
        "executionStartedEventDetails": {"input": "{}"},
    },
    {
        "type": "SucceedStateEntered",
        "id": 2,
        "previousEventId": 1,
        "stateEnteredEventDetails": {"name": "Claim Order", "input": "{}"},
    },
    {
        "type": "SucceedStateExited",
        "id": 3,
        "previousEventId": 2,
        "stateExitedEventDetails": {"name": "Claim Order", "output": "{}"},
    },
    {"type": "ExecutionSucceeded", "id": 4, "previousEventId": 3, "executionSucceededEventDetails": {}},
]


def sha256(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def test_the_policy_allows_exactly_the_inlined_style_and_script_and_nothing_else() -> None:
    page = render_html({"name": "ORDER-1", "status": "SUCCEEDED"}, HISTORY, DEFINITION)

    (policy,) = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    policy = policy.replace("&#x27;", "'")
    (style,) = re.findall(r"<style>(.*?)</style>", page, flags=re.DOTALL)
    (script,) = re.findall(r"<script>(.*?)</script>", page, flags=re.DOTALL)
    assert policy == (
        f"default-src 'none'; style-src 'sha256-{sha256(style)}'; "
        f"script-src 'sha256-{sha256(script)}'; img-src data:; base-uri 'none'; form-action 'none'"
    )
    static = resources.files("saga_local.trace").joinpath("static")
    assert static.joinpath("trace.js").read_text(encoding="utf-8") in script
    assert static.joinpath("trace.css").read_text(encoding="utf-8") in style


def test_zoom_and_filter_add_nothing_the_policy_would_have_to_allow_inline() -> None:
    """The zoom buttons and the filter live in trace.js: no inline handler or style attribute,
    which a policy without 'unsafe-inline' would block (and which would tempt someone to add it)."""
    page = render_html({"name": "ORDER-1", "status": "SUCCEEDED"}, HISTORY, DEFINITION)

    (policy,) = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy
    assert re.findall(r"<[^>]*\s(on\w+|style)=", page) == []
    for control in ('id="zoom-in"', 'id="zoom-out"', 'id="zoom-fit"', 'id="show-all"', 'id="graph-zoom"'):
        assert control in page
