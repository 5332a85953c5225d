"""How wide text will be in the page, estimated generously, so boxes are sized before any browser runs."""

from __future__ import annotations

from saga_local.trace.formatting import clean

#: Advance widths in em of a wide sans-serif (DejaVu Sans, what ``system-ui`` falls back to on a
#: Linux without desktop fonts): narrower fonts (Segoe UI, SF, Roboto) always fit in what these give.
_EM_WIDTHS: dict[str, float] = {
    ch: em
    for chars, em in (
        ("iljI.,:;'!|", 0.30),
        (" ", 0.32),
        ("ftr()[]{}-/\\", 0.40),
        ('"*^`~', 0.50),
        ("_sczJ?", 0.55),
        ("FLP", 0.62),
        ("ABCDEGHKNOQRSTUVXYZ", 0.76),
        ("=<>+#&", 0.84),
        ("mM", 0.98),
        ("wW@%", 1.0),
    )
    for ch in chars
}
#: Bold (font-weight 600) glyphs of that font are up to 13% wider; the rest is a margin.
_BOLD = 1.14
_MARGIN = 1.04

#: Node names: 13px, weight 600 (the stylesheet's ``.node .name``); padding inside the node.
NAME_PX = 13.0
NAME_PAD = 28.0


def _em(ch: str) -> float:
    if ch in _EM_WIDTHS:
        return _EM_WIDTHS[ch]
    if ch.isdigit() or ch.islower():
        return 0.64
    if ch.isupper():
        return 0.76
    return 0.8  # symbols, and anything outside ASCII


def text_width(text: str, size: float, *, bold: bool = False) -> float:
    """A generous estimate of ``text``'s rendered width at ``size`` px: never less than the browser's.

    Measured in Chromium against DejaVu Sans: 4 to 16% above the real width, normal and bold
    (tests/local/test_trace.py measures the page itself).
    """
    ems = 0.0
    for ch in text:
        ems += _em(ch)
    return ems * size * (_BOLD if bold else 1.0) * _MARGIN


def fit(text: str, room: float, size: float, *, bold: bool = False) -> str:
    """``text``, shortened with an ellipsis until it fits in ``room`` px."""
    if text_width(text, size, bold=bold) <= room:
        return text
    cut = len(text)
    while cut > 1 and text_width(text[:cut] + "…", size, bold=bold) > room:
        cut -= 1
    return text[:cut] + "…"


def node_width(name: str) -> float:
    """A state's box: its name in bold with padding, between 150 and 260 px."""
    return max(150.0, min(260.0, text_width(clean(name), NAME_PX, bold=True) + NAME_PAD))


def badge_width(text: str) -> float:
    """A badge (``retried 2x``): 10px bold text with 5 px each side."""
    return text_width(text, 10, bold=True) + 10
