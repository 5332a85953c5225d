"""Text shared by the terminal and the page: untrusted strings made visible, causes, JSON, times.

Execution inputs and error causes are attacker-influenced: :func:`clean` makes control, format
(bidi override) and separator characters visible before anything reaches a terminal or a page.
"""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC
from typing import TYPE_CHECKING, Any

from saga_local.trace.history import when

if TYPE_CHECKING:
    from collections.abc import Iterable


def clean(text: str, *, keep_newlines: bool = False) -> str:
    """Make control, format (bidi override) and separator characters visible as escapes."""
    out = []
    for char in text:
        if char == "\n" and keep_newlines:
            out.append(char)
        elif unicodedata.category(char) in {"Cc", "Cf", "Zl", "Zp"}:
            out.append(char.encode("unicode_escape").decode("ascii"))
        else:
            out.append(char)
    return "".join(out)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(raw: Any, limit: int) -> str:
    """``raw`` on one line (whitespace runs collapsed), shortened to ``limit``."""
    return shorten(" ".join(str(raw or "").split()), limit)


def summarize_cause(cause: str | None, limit: int = 240) -> str:
    """One readable line for an error cause (a Lambda's cause is JSON with ``errorMessage``)."""
    if not cause:
        return ""
    text = cause
    try:
        parsed = json.loads(cause)
    except (ValueError, TypeError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("errorMessage"), str):
        text = parsed["errorMessage"]
    text = " ".join(text.split())
    return clean(shorten(text, limit))


def _truncate_json(value: Any, max_string: int) -> Any:
    if isinstance(value, str) and len(value) > max_string:
        return value[:max_string] + f"… (+{len(value) - max_string} chars)"
    if isinstance(value, dict):
        return {k: _truncate_json(v, max_string) for k, v in value.items()}
    if isinstance(value, list):
        return [_truncate_json(v, max_string) for v in value]
    return value


def pretty_json(raw: str | None, *, max_string: int = 160, max_lines: int = 40) -> str:
    """``raw`` pretty-printed when it is JSON; long strings and long documents cut, and said so."""
    if raw is None:
        return ""
    try:
        text = json.dumps(_truncate_json(json.loads(raw), max_string), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        text = raw if len(raw) <= max_string * 4 else raw[: max_string * 4] + f"… (+{len(raw)} chars)"
    lines = text.splitlines()
    if len(lines) > max_lines:
        lines = [*lines[:max_lines], f"… ({len(lines) - max_lines} more lines)"]
    return clean("\n".join(lines), keep_newlines=True)


def seconds(value: float | None) -> str:
    """A duration as people read it: ``840 ms``, ``2.31 s``; empty when unknown."""
    if value is None:
        return ""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def stamp(value: Any) -> str:
    """A history timestamp in UTC to the millisecond (``2025-01-31 12:00:00.123Z``); empty if none."""
    moment = when(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z" if moment else ""


def runs(errors: Iterable[tuple[str, str]]) -> str:
    """``A, A, B`` -> ``A x2, B``."""
    out: list[tuple[str, int]] = []
    for error, _ in errors:
        if out and out[-1][0] == error:
            out[-1] = (error, out[-1][1] + 1)
        else:
            out.append((error, 1))
    return ", ".join(clean(e) + (f" x{n}" if n > 1 else "") for e, n in out)
